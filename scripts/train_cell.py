#!/usr/bin/env python
"""Train one cell: train_cell.py --cell-json '{...}' --data DIR --out DIR [--threads N]
[--train-log FILE] [--die-with-parent] (arrepro.train.job: logs, errors, the parent's death)"""
from arrepro.train.job import main

if __name__ == "__main__":
    main()
