#!/usr/bin/env python
"""Where a demo cell's training step goes, pinned as a cell trains (issue 37), a benchmark, not a test.

For each cell (default: Fig. 13's attention and Mamba at 4x32, the demo's costliest cells, and the
2-layer attention of Figs. 1-4), the trainer's step (labelled logits and loss, zero_grad, backward,
fused AdamW: ``bench/cpu_steps.py``) split into its phases, forward, backward and the optimiser,
and the time spent inside the fused CPU kernels' autograd Functions (every ``forward`` and
``backward`` of a ``torch.autograd.Function`` in ``arrepro.models.cpu_kernels``: the numba call
and the tensors it fills), by kernel; what is left is ATen's own operations (layer norms, GELU,
the residual adds, the loss), autograd's bookkeeping and Python. Rounds interleave the cells; the
median milliseconds a step of each. The timers add about a microsecond a call.

    .venv/bin/python bench/bench_step_parts.py              # ~2 minutes
    .venv/bin/python bench/bench_step_parts.py --cells attention:4 --rounds 3
"""
from __future__ import annotations

import argparse
import collections
import importlib
import pkgutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
_argv, sys.argv = sys.argv, [sys.argv[0], "pinned"]  # cpu_steps reads its mode from argv[1]: pinned
import cpu_steps  # noqa: E402 - pins the numerics and builds the kernels before numba is set up
sys.argv = _argv

import torch  # noqa: E402

from arrepro.models import cpu_kernels  # noqa: E402
from arrepro.train import numerics  # noqa: E402

DEFAULT = ("attention:4", "mamba:4", "attention:2")
_spent: collections.Counter = collections.Counter()


def _timed(name: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[name] += time.perf_counter() - t0
    return staticmethod(wrapper)


def time_the_kernels() -> list[str]:
    """Wrap every fused CPU kernel's autograd Function (forward, backward) in a timer; their names."""
    names = []
    for info in pkgutil.iter_modules(cpu_kernels.__path__):
        mod = importlib.import_module(f"{cpu_kernels.__name__}.{info.name}")
        for attr, obj in vars(mod).items():
            if isinstance(obj, type) and issubclass(obj, torch.autograd.Function) and obj.__module__ == mod.__name__:
                for phase in ("forward", "backward"):
                    setattr(obj, phase, _timed(f"{info.name}.{phase}", getattr(obj, phase)))
                names.append(f"{info.name}.{attr}")
    return names


def one_round(cell: dict, steps: int) -> dict:
    model, opt, batches = cpu_steps._build(cell)
    out = collections.defaultdict(float)
    _spent.clear()
    for i in range(steps):
        batch = batches[i % len(batches)]
        t0 = time.perf_counter()
        loss, _, _ = model.loss(*batch)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        loss.item()
        t3 = time.perf_counter()
        out["forward"] += t1 - t0
        out["backward"] += t2 - t1
        out["optimiser"] += t3 - t2
        out["step"] += t3 - t0
    for name, s in _spent.items():
        out["kernel " + name] += s
    return {k: v / steps * 1e3 for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=list(DEFAULT), help="model:layers at the demo's width 32 on L32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    numerics.settle()
    cells = {}
    for spec in args.cells:
        model, layers = spec.split(":")
        cells[spec] = {"model": model, "width": 32, "layers": int(layers), "task": "L32", "batch": 32}
        cpu_steps.time_steps(cells[spec], 5, True)  # built, compiled, warmed, every kernel checked to run
    time_the_kernels()
    rounds = {spec: [] for spec in cells}
    for _ in range(args.rounds):
        for spec, cell in cells.items():
            rounds[spec].append(one_round(cell, args.steps))
    print(f"ms a step, median of {args.rounds} interleaved rounds of {args.steps} steps, pinned, one thread")
    for spec, rs in rounds.items():
        keys = sorted({k for r in rs for k in r})
        med = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in keys}
        kernels = sum(v for k, v in med.items() if k.startswith("kernel "))
        print(f"\n{spec} (width 32): step {med['step']:.2f}: forward {med['forward']:.2f}, backward "
              f"{med['backward']:.2f}, optimiser {med['optimiser']:.2f}")
        for k in keys:
            if k.startswith("kernel "):
                print(f"  {k[7:]:28s} {med[k]:6.2f}  ({med[k] / med['step']:.0%})")
        print(f"  {'fused kernels, all':28s} {kernels:6.2f}  ({kernels / med['step']:.0%})")
        rest = med["step"] - kernels
        print(f"  {'the rest (ATen, autograd, Python)':28s} {rest:6.2f}  ({rest / med['step']:.0%})")


if __name__ == "__main__":
    main()
