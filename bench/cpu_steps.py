#!/usr/bin/env python
"""Training-step times of one cell's model, for bench/bench_cpu_throughput.py (a benchmark helper,
not a test): run as a worker that answers one JSON request a line on its standard input.

    python bench/cpu_steps.py pinned   # pinned CPU numerics (as a cell trains), kernels on or off
    python bench/cpu_steps.py plain    # this machine's own libraries unpinned, ARREPRO_KERNELS=0

A request {"cell": CELL, "steps": n, "kernels": bool} times n training steps of the cell's model
(the trainer's step: labelled logits and loss, zero_grad, backward, fused AdamW) on its task's
own batches, after two untimed ones; the reply gives the median seconds a step. A cell is
(model, width, layers, task, batch) with the task and model as config.yaml defines them; the
model, its optimiser and its batches are built once and kept. {"flops": CELL} counts one step's
floating-point operations (``step_flops``); {"peak": true} measures this core's peak (``peak``).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MODE = sys.argv[1] if len(sys.argv) > 1 else "pinned"
from arrepro.train import numerics  # noqa: E402

if MODE == "pinned":
    numerics.pin_environment()
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import arrepro.models.cpu_kernels  # noqa: E402,F401 - before numba: the kernels' build, also peak()'s
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from arrepro.data import make_task  # noqa: E402
from arrepro.models import kernels  # noqa: E402
from arrepro.train.loop import build_model  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
_built: dict[str, tuple] = {}


def _task(name: str) -> dict:
    for scale in ("demo", "paper"):
        tasks = CONFIG["scales"][scale]["tasks"]
        if name in tasks:
            return {k: v for k, v in tasks[name].items()}
    raise KeyError(f"no task {name!r} in config.yaml's demo or paper scale")


def _build(cell: dict):
    key = json.dumps(cell, sort_keys=True)
    if key not in _built:
        task = {**_task(cell["task"]), "n_train": 16 * cell["batch"], "n_test": 8}
        splits = make_task(task)["train"]
        x, y = (torch.from_numpy(splits[k].astype(np.int64)) for k in ("inputs", "labels"))
        spec = {"width": cell["width"], "layers": cell["layers"], "model_def": CONFIG["models"][cell["model"]],
                "recipe_def": {}}
        torch.manual_seed(0)
        model = build_model(spec, int(splits["vocab_size"]), x.shape[1])  # the data's (the copy task adds its specials)
        opt = model.configure_optimizer(lr=1e-3, weight_decay=0.1, fused=True)
        B = cell["batch"]
        batches = [(x[i * B:(i + 1) * B], y[i * B:(i + 1) * B]) for i in range(16)]
        _built[key] = model, opt, batches
    return _built[key]


def _step(model, opt, batch) -> None:
    loss, _, _ = model.loss(*batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loss.item()


def time_steps(cell: dict, steps: int, use_kernels: bool) -> float:
    """Median seconds of a training step, after two untimed ones."""
    if use_kernels:
        os.environ.pop(kernels.ENV, None)
    else:
        os.environ[kernels.ENV] = "0"
    model, opt, batches = _build(cell)
    for module in model.modules():  # the paths of this call's steps only (the model is kept between calls)
        module.__dict__.pop("_kernel_paths", None)
    for i in range(2):
        _step(model, opt, batches[i])
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        _step(model, opt, batches[i % len(batches)])
        times.append(time.perf_counter() - t0)
    if use_kernels:  # a fused CPU kernel must have run (a fallback would time the portable path)
        fell_back = [r for r in kernels.paths_used(model) if r["op"].endswith("_cpu") and r["path"] != "kernel"]
        if fell_back:
            raise RuntimeError(f"{cell}: not every op ran its kernel: {fell_back}")
    return statistics.median(times)


def step_flops(cell: dict) -> float:
    """One step's floating-point operations: the matrix products (every mm, bmm and attention as
    torch's FlopCounterMode counts them, on the portable path), plus what it does not count and
    the limit should: the S6 scan's elementwise recurrence (``S6_FLOPS`` an element (b, t, e, n)
    forward and backward; the products with C and the gradients' sums over n or e are among the
    counted bmms)."""
    from torch.utils.flop_counter import FlopCounterMode

    from arrepro.models.mixers.mamba import Mamba

    os.environ[kernels.ENV] = "0"
    model, opt, batches = _build(cell)
    with FlopCounterMode(display=False) as counter:
        loss, _, _ = model.loss(*batches[0])
        loss.backward()
    opt.zero_grad(set_to_none=True)
    B, L = batches[0][0].shape
    scan = sum(B * L * m.d_inner * m.d_state for m in model.modules() if isinstance(m, Mamba))
    return float(counter.get_total_flops()) + S6_FLOPS * scan


# forward: dt A, the decay's exp (one operation here), a h, (dt x) B, their sum; backward: the
# adjoint's decay and input (2), through the decay (dt A's product and its two uses: 4), dB's and
# du's products (2 each... as fused multiply-adds: 4), g a: 1
S6_FLOPS = 5 + 11


def peak() -> dict:
    """This core's peak fp32 rate with the fused kernels' build: independent chains of vector fused
    multiply-adds (``cpu_kernels``' own build: its vector width), timed; GFLOP/s."""
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from arrepro.models.cpu_kernels.common import BUILD, CODEGEN, LANES32, llvm_fma

    if BUILD is None:
        raise RuntimeError(f"numba was set up before the kernels' package ({CODEGEN}): not their build")

    chains = 12

    @intrinsic
    def _fmas(typingctx, n):
        def codegen(context, builder, sig, args):
            vec = ir.VectorType(ir.FloatType(), LANES32)
            fma = llvm_fma(builder, vec)
            m, a = ir.Constant(vec, [0.999999] * LANES32), ir.Constant(vec, [1e-7] * LANES32)
            acc = [cgutils.alloca_once_value(builder, ir.Constant(vec, [1.0 + i * 1e-3] * LANES32)) for i in range(chains)]
            with cgutils.for_range(builder, args[0]):
                for c in acc:
                    builder.store(builder.call(fma, [builder.load(c), m, a]), c)
            total = builder.load(acc[0])
            for c in acc[1:]:
                total = builder.fadd(total, builder.load(c))
            return builder.extract_element(total, ir.IntType(32)(0))
        return types.float32(types.intp), codegen

    @njit
    def run(n):
        return _fmas(n)

    n = 2_000_000
    run(10)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        run(n)
        best = min(best, time.perf_counter() - t0)
    return {"gflops": n * chains * LANES32 * 2 / best / 1e9, "build": CODEGEN, "lanes": LANES32}


def main() -> None:
    if MODE == "pinned":
        numerics.settle()
    else:
        torch.set_num_threads(1)
    print(json.dumps({"ready": MODE, "capability": torch.backends.cpu.get_cpu_capability()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if "peak" in req:
            out = peak()
        elif "flops" in req:
            out = {"flops": step_flops(req["flops"])}
        else:
            out = {"seconds": time_steps(req["cell"], req["steps"], req["kernels"])}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
