"""One file per sequence mixer; see ``arrepro.models.registry`` for the interface."""
