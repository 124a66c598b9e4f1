"""What a training cell asks a cluster for: wall time, memory, GPUs, and its job group.

Pure Python (no torch): the Snakefile calls these for every cell when it plans the grid, and
``python -m arrepro.resources [SCALE]`` prints the plan (cells, Slurm jobs, GPU hours).

Wall time (minutes) of a cell, from its spec (``Grid.cell_spec``)::

    steps   = ceil(n_train / batch_size) * epochs
    tokens  = n_train * seq_len * epochs
    flops   = tokens * [ 6 * 12 * d^2 * layers            (mixer + MLP weights, fwd + bwd)
                       + 6 *  2 * T * d   * layers          (token mixing, e.g. QK^T and AV)
                       + 6 *  V * d * K / T ]               (logits at the K labelled positions)
    compute = steps * (step_fixed + step_per_layer * layers)          (launch/optimiser overhead)
            + flops * mixer_factor / throughput(d)                    (arithmetic)
            + eval on n_test every epoch (a forward pass: 1/3 of the training flops per token)
    minutes = (startup + compute) * safety, rounded up to 5 min, at least ``floor``,
              then times 2**(attempt - 1) for a retry, at most MAX_RUNTIME_MIN.

GPU constants are for one A100/H100-class GPU running this package's eager PyTorch model in
bf16: 40 TFLOP/s effective for d >= 1024 (less for narrower models, whose matrices are too
small to fill the GPU), 2 ms + 2.5 ms per layer of fixed cost per optimiser step, two minutes
of start-up (Snakemake, conda env, CUDA context, data load) and a safety factor of 1.5.
Calibration against the paper ("10 minutes to 18 hours" per run): its smallest cell (L64,
width 64, 2 layers, 50 epochs, 9,800 steps) comes out at ~8 min and is requested at the
10-minute floor; its largest (L512, width 2048, 2 layers, batch 128: 39,100 steps, 2.6e9
tokens, 1.6e18 FLOPs) at ~11.5 h of compute, requested at ~17.5 h. ``MIXER_FACTOR`` scales
the arithmetic of mixers slower than attention (scans, FFT convolutions); these factors are
estimates, not measurements, kept at most 1.5 so that the slowest cell of the grid (Hyena, H3
or RWKV at L512, width 2048) comes out at ~17 h, the paper's longest run. CPU constants (the demo and tiny scales) were measured on a
2-core machine: ~7.5 ms per step for a 2-layer width-32 model; 5 GFLOP/s per thread.

An underestimate costs little: training checkpoints every epoch and on SIGTERM (which Slurm
sends at the time limit), and the retry resumes with twice the time.

Memory (host RAM, MB): the task's int64 arrays twice (numpy load + torch copy) plus a fixed
base (6 GB with CUDA, 1.5 GB on CPU); on CPU also parameters with AdamW state and activations.

Groups: a cell requesting at most ``GROUP_TIERS[-1].max_minutes`` minutes joins the job group
of its tier; Snakemake bundles that many cells of a tier into one Slurm job (the profile's
``group-components``), run one after another (the profile's ``resources: train_slot=1``,
scope local), so one Slurm job holds about ``GROUP_TARGET_MIN`` minutes of work instead of
two dozen ten-minute jobs each paying the scheduler's queueing and start-up cost. If a job of
a group fails, Snakemake deletes the outputs of every cell of that Slurm job, finished ones
included; their checkpoints stay, and the retry rebuilds those cells' files from them without
training (tests/test_resume.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .grid import task_seq_len

# ------------------------------------------------------------------------------ constants
MAX_RUNTIME_MIN = 24 * 60  # a retry never asks for more than this; raise it if your partition allows
GROUP_TARGET_MIN = 240  # about this much requested time per grouped Slurm job


@dataclass(frozen=True)
class Device:
    startup_s: float  # process start, env activation, data load, CUDA context
    step_fixed_s: float  # fixed cost per optimiser step (kernel launches, AdamW)
    step_per_layer_s: float  # per-layer cost per step that does not scale with FLOPs
    peak_flops: float  # effective FLOP/s at width >= full_width
    full_width: int  # width from which the device runs at peak_flops
    min_flops: float  # effective FLOP/s of the narrowest models
    safety: float  # requested / estimated
    floor_min: int  # never request less (minutes)
    base_mem_mb: int  # interpreter, torch, CUDA context


DEVICES = {
    "cuda": Device(startup_s=120, step_fixed_s=0.002, step_per_layer_s=0.0025, peak_flops=40e12,
                   full_width=1024, min_flops=1e12, safety=1.5, floor_min=10, base_mem_mb=6000),
    "cpu": Device(startup_s=20, step_fixed_s=0.0015, step_per_layer_s=0.003, peak_flops=5e9,
                  full_width=1, min_flops=5e9, safety=2.0, floor_min=5, base_mem_mb=1500),
}

# arithmetic cost relative to softmax attention (estimates, attention = 1), bounded by the
# paper's longest run (18 h): its biggest cells (L512, width 2048) take ~11.5 h with attention,
# so no mixer can be more than ~1.5 times slower there
MIXER_FACTOR = {"attention": 1.0, "based": 1.3, "mamba": 1.3, "mamba2": 1.3, "deltanet": 1.3,
                "gated_deltanet": 1.3, "h3": 1.5, "hyena": 1.5, "rwkv": 1.5}
UNKNOWN_MIXER_FACTOR = 1.5


@dataclass(frozen=True)
class GroupTier:
    name: str  # the Snakemake group name (the profile's group-components key)
    max_minutes: int  # cells requesting at most this many minutes (attempt 1) join the tier

    @property
    def bundle(self) -> int:
        """Cells per Slurm job: about GROUP_TARGET_MIN minutes of requested time."""
        return max(1, GROUP_TARGET_MIN // self.max_minutes)


GROUP_TIERS = (GroupTier("cells_10min", 10), GroupTier("cells_30min", 30), GroupTier("cells_60min", 60),
               GroupTier("cells_2h", 120))


def group_components() -> dict[str, int]:
    """The profile's ``group-components`` (a test checks that slurm/profile.yaml agrees)."""
    return {t.name: t.bundle for t in GROUP_TIERS}


# ------------------------------------------------------------------------------ the estimates
def _device(spec: dict) -> Device:
    return DEVICES["cuda" if spec.get("device") == "cuda" else "cpu"]


def _task_shape(spec: dict) -> tuple[int, int, int, int, int]:
    """(sequence length, train examples, test examples, vocabulary, labelled positions)."""
    t = spec["task_def"]
    T = task_seq_len(t)
    labels = int(t["max_len"] + 1 if t.get("kind") == "copy" else t["num_kv_pairs"])  # copy: the string and EOS
    return T, int(t.get("n_train", 0)), int(t.get("n_test", 0)), int(t.get("vocab_size", 0)), labels


def flops_per_token(spec: dict) -> float:
    """Training FLOPs (forward + backward) per token of one cell's model."""
    T, _, _, V, K = _task_shape(spec)
    d, n = int(spec["width"]), int(spec["layers"])
    mixer = spec["model_def"]["mixer"]
    weights = 6 * 12 * d * d * n
    mixing = 6 * 2 * T * d * n
    logits = 6 * V * d * K / max(T, 1)
    return (weights + mixing) * MIXER_FACTOR.get(mixer, UNKNOWN_MIXER_FACTOR) + logits


def estimate_seconds(spec: dict) -> float:
    """Expected wall time of a full, uninterrupted run of the cell (no safety factor)."""
    dev = _device(spec)
    T, n_train, n_test, _, _ = _task_shape(spec)
    epochs = int(spec["recipe_def"]["epochs"])
    bs = int(spec["batch_size"])
    d, n = int(spec["width"]), int(spec["layers"])
    steps = math.ceil(n_train / bs) * epochs
    throughput = max(dev.min_flops, dev.peak_flops * min(1.0, d / dev.full_width))
    train = n_train * T * epochs * flops_per_token(spec) / throughput
    evaluate = n_test * T * epochs * flops_per_token(spec) / 3 / throughput
    overhead = steps * (dev.step_fixed_s + dev.step_per_layer_s * n)
    return dev.startup_s + overhead + train + evaluate


def runtime_min(spec: dict, attempt: int = 1) -> int:
    """Minutes to request (Slurm ``--time``): the estimate with a safety margin, doubled on
    each retry, never above MAX_RUNTIME_MIN."""
    dev = _device(spec)
    base = max(dev.floor_min, 5 * math.ceil(estimate_seconds(spec) * dev.safety / 60 / 5))
    return int(min(MAX_RUNTIME_MIN, base * 2 ** (max(1, int(attempt)) - 1)))


def mem_mb(spec: dict) -> int:
    """Host memory to request (MB), rounded up to a whole GB."""
    dev = _device(spec)
    T, n_train, n_test, V, _ = _task_shape(spec)
    data = 2 * (n_train + n_test) * T * 8 * 2 / 1e6  # inputs + labels, int64, twice
    total = dev.base_mem_mb + data
    if dev is DEVICES["cpu"]:
        d, n, bs = int(spec["width"]), int(spec["layers"]), int(spec["batch_size"])
        params = 12 * d * d * n + V * d + T * d
        total += params * 16 / 1e6 + bs * T * d * n * 40 * 4 / 1e6
    return int(1024 * math.ceil(total / 1024))


def gpus(spec: dict) -> int:
    return 1 if spec.get("device") == "cuda" else 0


def group(spec: dict) -> str | None:
    """The job group of a small cell (None: a big cell is a Slurm job of its own)."""
    minutes = runtime_min(spec, 1)
    for tier in GROUP_TIERS:
        if minutes <= tier.max_minutes:
            return tier.name
    return None


# ------------------------------------------------------------------------------ the plan
def plan(grid, cells=None) -> dict:
    """Cells, Slurm jobs of the train rule, and requested hours for an ``arrepro.grid.Grid``
    (all its cells, or the given ones)."""
    cells = grid.all_cells() if cells is None else list(cells)
    per_group: dict[str | None, int] = {}
    minutes = 0
    for c in cells:
        spec = grid.cell_spec(c.task, c.model, c.width, c.layers, c.recipe, c.lr, c.seed)
        g = group(spec)
        per_group[g] = per_group.get(g, 0) + 1
        minutes += runtime_min(spec)
    bundles = group_components()
    jobs = per_group.get(None, 0) + sum(math.ceil(n / bundles[g]) for g, n in per_group.items() if g)
    return {"cells": len(cells), "train_jobs": jobs, "cells_by_group": per_group,
            "requested_hours": minutes / 60}


def _main(argv=None) -> None:  # pragma: no cover - a report for people
    import argparse
    from pathlib import Path

    import yaml

    from .grid import Grid

    ap = argparse.ArgumentParser(description="Print what a scale of config.yaml asks a cluster for.")
    ap.add_argument("scale", nargs="?", default="paper")
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "config.yaml"))
    ap.add_argument("--cells", action="store_true", help="one line per distinct cell shape")
    a = ap.parse_args(argv)
    grid = Grid(yaml.safe_load(Path(a.config).read_text()), a.scale)
    if a.cells:
        seen = set()
        print(f"{'task':>28} {'model':>16} {'w':>5} {'l':>2} {'est min':>8} {'req min':>8} {'mem MB':>7} group")
        for c in grid.all_cells():
            spec = grid.cell_spec(c.task, c.model, c.width, c.layers, c.recipe, c.lr, c.seed)
            key = (c.task, c.model, c.width, c.layers, c.recipe)
            if key in seen:
                continue
            seen.add(key)
            print(f"{c.task:>28} {c.model:>16} {c.width:>5} {c.layers:>2} {estimate_seconds(spec) / 60:8.1f} "
                  f"{runtime_min(spec):8d} {mem_mb(spec):7d} {group(spec) or '-'}")
    p = plan(grid)
    print(f"scale {a.scale}: {p['cells']} cells -> {p['train_jobs']} Slurm jobs for training "
          f"({p['cells_by_group']}); {p['requested_hours']:.0f} hours requested")


if __name__ == "__main__":  # pragma: no cover
    _main()
