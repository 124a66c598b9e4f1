#!/usr/bin/env python
"""What flushing subnormal floats buys and changes (the scale's ``subnormals``: arrepro.train.numerics),
a benchmark (not a test).

Trains real demo cells (config.yaml's demo scale: its task, recipe and models) through
scripts/train_cell.py, pinned as the workflow trains them, once with ``subnormals: flush`` (FTZ
and DAZ, the default) and once with ``keep`` (IEEE gradual underflow), alternating --rounds times,
each for --epochs epochs; prints each cell's median wall seconds under both, their ratio, the
final accuracy under both and whether the final weights are the same bits.

    .venv/bin/python bench/bench_subnormals.py
    .venv/bin/python bench/bench_subnormals.py --cells attention_conv_q:48:1:0.1 mamba:48:1:0.01 --epochs 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def train(spec: dict, data: Path, out: Path) -> tuple[float, dict]:
    """Wall seconds of one cell trained as the workflow trains it (fresh process, pinned), and its result."""
    from arrepro.train import runfile

    run_file = out.parent / f"{out.name}-run.json"  # keep the final weights (arrepro.train.runfile)
    runfile.write(runfile.new([], [], keep_weights=True), run_file)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", json.dumps(spec),
                    "--data", str(data), "--out", str(out), "--threads", "1", "--run-file", str(run_file)],
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, json.loads((out / "result.json").read_text())


def main() -> None:
    import torch
    import yaml

    from arrepro.config.grid import Grid
    from arrepro.data import save_task

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=["attention_conv_q:48:1:0.1", "attention_conv_q:48:1:0.01"],
                    help="config model:width:layers:lr, each on the demo's MQAR task, seed 1")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    grid = Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    task = next(t for t in grid.tasks if grid.tasks[t]["kind"] == "mqar")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {a.epochs} epochs a cell, "
          f"median of {a.rounds} alternating runs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        save_task({k: v for k, v in grid.tasks[task].items() if k != "name"}, data)
        for cell in a.cells:
            model, width, layers, lr = cell.split(":")
            spec = grid.cell_spec(task, model, width, layers, grid.recipe_names["demo"], lr, 1)
            spec["recipe_def"] = {**spec["recipe_def"], "epochs": a.epochs}
            secs, res = {"flush": [], "keep": []}, {}
            for r in range(a.rounds):
                for mode in ("keep", "flush"):
                    out = Path(tmp) / f"{model}-{lr}-{mode}-{r}"
                    s, res[mode] = train({**spec, "subnormals": mode}, data, out)
                    secs[mode].append(s)
            same = all(torch.equal(x, y) for x, y in zip(
                torch.load(Path(tmp) / f"{model}-{lr}-flush-0" / "weights.pt", weights_only=True).values(),
                torch.load(Path(tmp) / f"{model}-{lr}-keep-0" / "weights.pt", weights_only=True).values()))
            f, k = statistics.median(secs["flush"]), statistics.median(secs["keep"])
            print(f"{model} {width}x{layers} lr {lr}: keep {k:.1f} s, flush {f:.1f} s: keep/flush = {k / f:.2f}; "
                  f"accuracy {res['keep']['final_accuracy']:.4f} / {res['flush']['final_accuracy']:.4f}; "
                  f"weights {'the same bits' if same else 'differ'}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
