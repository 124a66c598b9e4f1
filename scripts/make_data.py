#!/usr/bin/env python
"""Write a task's train.npz and test.npz: make_data.py --task-json '{...}' --out DIR"""
import argparse
import json
import time

from arrepro.data import save_task

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task-json", required=True, help="the task's definition from config.yaml, as JSON")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t = time.perf_counter()
    save_task(json.loads(a.task_json), a.out)
    print(f"wrote {a.out}/train.npz and test.npz in {time.perf_counter() - t:.2f}s")
