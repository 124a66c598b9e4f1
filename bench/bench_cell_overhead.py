#!/usr/bin/env python
"""Where a demo cell's CPU time goes besides its optimiser steps: the fixed cost per cell (issue 37),
a benchmark, not a test.

As the workflow trains a CPU cell: a process warmed up as the training server warms up
(``arrepro.train.server._warm_up``: torch, the kernels, a step of every mixer), which forks a child per
cell; the child runs ``train_cell.py``'s own code (``arrepro.train.job.train_here``). In the child,
the trainer's phases are timed in CPU-seconds (``time.process_time``, wrapped around the functions
the loop calls): the code check (the sources' digest against the plan), set-up (numerics, the data's
fingerprint and load, the model and optimiser), resume (the checkpoint looked for), the optimiser steps,
the evaluation after each epoch, the checkpoint after each epoch, and the finish (metrics, result,
the sealed checkpoint). The parent takes the child's whole CPU time from the operating system
(``os.wait4``): what no phase covers (fork, argument parsing, the child's exit) is "other".

The sample: the demo cells of bench/bench_cpu_throughput.py (``SAMPLE``), at lr 1e-3 and seed 0, every
epoch of the recipe (no early stop), one after the other, ``--rounds`` times (median per phase).

    .venv/bin/python bench/bench_cell_overhead.py             # ~3 minutes
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_cpu_throughput import sample_specs  # noqa: E402

from arrepro.train import server  # noqa: E402

# (label, module, function): what the child times; the steps are _train_epoch's, the rest the fixed cost
PHASES = [("code check", "arrepro.train.job", "check_code"), ("set-up", "arrepro.train.loop", "_setup"),
          ("resume", "arrepro.train.loop", "_resume"), ("steps", "arrepro.train.loop", "_train_epoch"),
          ("evaluation", "arrepro.train.loop", "evaluate"), ("checkpoint", "arrepro.train.loop", "_save"),
          ("finish", "arrepro.train.loop", "_finish")]


def _timed(spent: dict, label: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - t0
    return wrapper


def train_in_child(argv: list[str]) -> dict:
    """Fork; the child trains ``argv``'s cell with its phases timed and writes them to a pipe; the
    parent returns them with the child's whole CPU time ("total") from wait4."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            import importlib

            spent: dict = {}
            for label, module, name in PHASES:
                mod = importlib.import_module(module)
                setattr(mod, name, _timed(spent, label, getattr(mod, name)))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            from arrepro.train.job import train_here

            code = train_here(argv)
            os.write(w, json.dumps({"exit": code, **spent}).encode())
        finally:
            os._exit(code)
    os.close(w)
    _, status, usage = os.wait4(pid, 0)
    with os.fdopen(r) as f:
        text = f.read()
    if os.waitstatus_to_exitcode(status) != 0 or not text:
        sys.exit(f"the cell {argv[1]} failed (exit {os.waitstatus_to_exitcode(status)}; see {argv[-1]})")
    return {**json.loads(text), "total": usage.ru_utime + usage.ru_stime}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    t0 = time.process_time()
    server._warm_up()
    print(f"warm-up (once per training server, not per cell): {time.process_time() - t0:.1f} CPU-s", flush=True)
    labels = [label for label, _, _ in PHASES]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp:
        tmp = Path(tmp)
        runs: dict[str, list[dict]] = {}
        for r in range(a.rounds):
            for i, (label, cell) in enumerate(sample_specs(a.lr, tmp / "data")):
                out = tmp / f"r{r}-{i}"
                out.mkdir()
                argv = ["--cell-json", json.dumps(cell), "--data", str(tmp / "data" / cell["task"]), "--out", str(out),
                        "--threads", "1", "--train-log", str(out / "train.log")]
                runs.setdefault(label, []).append(train_in_child(argv))
        print(f"\nCPU-seconds of each phase (median of {a.rounds} round(s)); fixed = every phase but the steps\n")
        head = f"{'cell':34}" + "".join(f"{label:>12}" for label in labels) + f"{'other':>8}{'total':>8}{'fixed':>8}"
        print(head)
        fixed_all = total_all = 0.0
        for name, results in runs.items():
            med = {k: statistics.median(res.get(k, 0.0) for res in results) for k in labels + ["total"]}
            other = med["total"] - sum(med[k] for k in labels)
            fixed = med["total"] - med["steps"]
            fixed_all, total_all = fixed_all + fixed, total_all + med["total"]
            rows.append(name)
            print(f"{name:34}" + "".join(f"{med[k]:12.2f}" for k in labels)
                  + f"{other:8.2f}{med['total']:8.1f}{100 * fixed / med['total']:7.1f}%")
        print(f"\nall {len(rows)} cells: {total_all:.1f} CPU-s, of which outside the steps {fixed_all:.1f} "
              f"({100 * fixed_all / total_all:.1f}%)")


if __name__ == "__main__":
    main()
