"""The config stage: a config checked before any job, and what each of its cells costs.

The grid itself (arrepro.config.grid), the defaults (arrepro.config.defaults), the mixers' requirements
(arrepro.config.constraints) and the code catalogue (arrepro.config.catalogue) are config modules too; they stay
at the package's top level among the sources a cell's code digest covers (docs/layout.md).
"""
