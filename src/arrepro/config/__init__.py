"""The config stage: config.yaml read into a grid of training cells and checked before any job,
the defaults, the mixers' requirements, the code catalogue (which files make which cell), what
each cell costs, where its files and a dataset's files live.
"""
