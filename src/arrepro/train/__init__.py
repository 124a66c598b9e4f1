"""The training stage: a cell trained (loop), its checkpoints, its job and the training server,
the pinned numerics, and the record of forced runs."""
