#!/usr/bin/env python
"""Where the demo's CPU time goes, by model (a benchmark, not a test), under pinned CPU numerics.

For every distinct (task, model, width, layers, recipe) of a scale's grid (config.yaml; default
the demo), times a few training steps (forward, backward, fused AdamW) of that model at the
recipe's batch size on random tokens, with the kernels on (the fused CPU paths) and with
ARREPRO_KERNELS=0 (the portable paths), and multiplies by the cells' steps (epochs x steps per
epoch x learning rates x seeds). Early stopping and evaluation are not modelled: the totals are
the training's upper bound, for comparing models and paths, not a forecast of `make demo`.

    .venv/bin/python bench/profile_demo.py                 # the demo grid
    .venv/bin/python bench/profile_demo.py --steps 10 --scale tiny
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from arrepro.train import numerics  # noqa: E402

numerics.pin_environment()

import torch  # noqa: E402
import yaml  # noqa: E402

from arrepro.config.checks import load_grid  # noqa: E402
from arrepro.data import task_seq_len  # noqa: E402
from arrepro.models import kernels  # noqa: E402
from arrepro.train.prepare import build_model  # noqa: E402


def step_seconds(spec: dict, vocab: int, L: int, steps: int, portable: bool) -> float:
    """Seconds per training step of the cell's model (median of ``steps`` after two warm-ups)."""
    before = os.environ.get(kernels.ENV)
    if portable:
        os.environ[kernels.ENV] = "0"
    try:
        torch.manual_seed(0)
        model = build_model(spec, vocab, L)
        opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], fused=True)
        g = torch.Generator().manual_seed(0)
        B = spec["batch_size"]
        times = []
        for i in range(steps + 2):
            x = torch.randint(0, vocab, (B, L), generator=g)
            y = torch.where(torch.rand(B, L, generator=g) < 0.25, torch.randint(0, vocab, (B, L), generator=g), -100)
            t0 = time.perf_counter()
            loss, _, _ = model.loss(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]
    finally:
        if before is None:
            os.environ.pop(kernels.ENV, None)
        else:
            os.environ[kernels.ENV] = before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    print(numerics.describe(numerics.settle()))
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    grid = load_grid(yaml.safe_load((ROOT / "config.yaml").read_text()), a.scale)
    groups = collections.defaultdict(list)
    for cell in grid.all_cells():
        spec = grid.cell_spec(cell.task, cell.model, cell.width, cell.layers, cell.recipe, cell.lr, cell.seed)
        groups[(cell.task, cell.model, cell.width, cell.layers, cell.recipe)].append(spec)
    by_model = collections.defaultdict(lambda: [0, 0.0, 0.0])  # cells, portable s, fused s
    print(f"{'task':6} {'model':22} {'w':>3} {'l':>2} {'recipe':7} {'cells':>5} {'steps':>6} "
          f"{'portable ms':>11} {'fused ms':>9} {'ratio':>5}")
    for (task, model, width, layers, recipe), specs in sorted(groups.items()):
        spec = specs[0]
        task_def = spec["task_def"]
        L = task_seq_len(task_def)
        n_train = task_def["n_train"]
        steps = math.ceil(n_train / spec["batch_size"]) * spec["recipe_def"]["epochs"]
        p = step_seconds(spec, task_def["vocab_size"], L, a.steps, portable=True)
        f = step_seconds(spec, task_def["vocab_size"], L, a.steps, portable=False)
        row = by_model[spec["model"]]
        row[0] += len(specs)
        row[1] += p * steps * len(specs)
        row[2] += f * steps * len(specs)
        print(f"{task:6} {model:22} {width:>3} {layers:>2} {recipe:7} {len(specs):>5} {steps:>6} "
              f"{1e3 * p:>11.1f} {1e3 * f:>9.1f} {p / f:>5.2f}", flush=True)
    total_p = sum(r[1] for r in by_model.values())
    total_f = sum(r[2] for r in by_model.values())
    print(f"\nTraining CPU-minutes by model (upper bound: every epoch run, no evaluation), {a.scale} grid:")
    print(f"{'model':24} {'cells':>5} {'portable':>9} {'share':>6} {'fused':>7} {'share':>6}")
    for model, (n, p, f) in sorted(by_model.items(), key=lambda kv: -kv[1][1]):
        print(f"{model:24} {n:>5} {p / 60:>9.1f} {p / total_p:>6.1%} {f / 60:>7.1f} {f / total_f:>6.1%}")
    print(f"{'total':24} {sum(r[0] for r in by_model.values()):>5} {total_p / 60:>9.1f} {'':>6} "
          f"{total_f / 60:>7.1f}   ({total_p / total_f:.2f}x)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
