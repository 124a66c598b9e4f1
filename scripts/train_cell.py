#!/usr/bin/env python
"""Train one cell: train_cell.py --cell-json '{...}' --data DIR --out DIR [--threads N]"""
import argparse
import json
import sys

from arrepro import numerics

numerics.pin_environment()  # before torch's first import (arrepro.train imports it)

from arrepro.train import TrainError, train_cell  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cell-json", required=True, help="the resolved cell spec (the rule's params)")
    ap.add_argument("--data", required=True, help="folder with the task's train.npz and test.npz")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    try:
        train_cell(json.loads(a.cell_json), a.data, a.out, a.threads, log=lambda s: print(s, flush=True))
    except TrainError as e:  # a clear message, exit 1 (no traceback: the message names file and key)
        sys.exit(f"train_cell.py: error: {e}")
