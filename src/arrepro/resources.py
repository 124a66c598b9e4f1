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

GPU constants are for one A100/H100-class GPU running this package's eager PyTorch model, at
the throughput its precision allows (``CUDA_TFLOPS``; the paper scale trains in ``tf32``: fp32
weights and activations, TF32 tensor-core matmuls): 40 TFLOP/s effective for d >= 1024 (less
for narrower models, whose matrices are too small to fill the GPU), 2 ms + 2.5 ms per layer of
fixed cost per optimiser step, two minutes of start-up (Snakemake, conda env, CUDA context,
data load) and a safety factor of 1.5. Calibration against the paper (A.2: an A100 80GB, "10
minutes to 18 hours" per run, about 20,000 GPU-hours for over 3,000 runs): its smallest cell
(L64, width 64, 2 layers, 50 epochs, 9,800 steps) comes out at ~8 min and is requested at the
10-minute floor; its largest (L512, width 2048, 2 layers, batch 128: 39,100 steps, 2.6e9
tokens, 1.6e18 FLOPs) at ~11.5 h of compute, requested at ~17.5 h. In plain fp32 (CUDA cores,
19.5 TFLOP/s peak on an A100) the same cell would take ~35 h: the paper's own times say it
used tensor cores (TF32 or bf16; it does not say which), hence ``tf32``. The uncertainty is
about a factor of two either way (the effective fraction of the peak, the mixers' factors). ``MIXER_FACTOR`` scales
the arithmetic of mixers slower than attention (scans, FFT convolutions); these factors are
estimates, not measurements, kept at most 1.5 so that the slowest cell of the grid (Hyena, H3
or RWKV at L512, width 2048) comes out at ~17 h, the paper's longest run. CPU constants (the demo and tiny scales) were measured on a
2-core machine: ~7.5 ms per step for a 2-layer width-32 model; 5 GFLOP/s per thread.

An underestimate costs little: training checkpoints every epoch and on SIGTERM (which Slurm
sends at the time limit), and the retry resumes with twice the time.

Memory (host RAM, MB): the task's int64 arrays twice (numpy load + torch copy) plus a fixed
base (6 GB with CUDA, 1.5 GB on CPU); on CPU also parameters with AdamW state and activations.
A cell that no machine can hold (``memory_problem``: host memory above ``MAX_MEM_MB``, or on a GPU
its parameters and AdamW state alone above ``MAX_DEVICE_MEM_MB``) makes the config refused before
any job (``Grid``), instead of a dry run requesting 192 EB.

Groups: a cell requesting at most ``GROUP_TIERS[-1].max_minutes`` minutes joins the job group
of its tier; Snakemake bundles that many components of a tier into one Slurm job (the
profile's ``group-components``), so one Slurm job holds about ``GROUP_TARGET_MIN`` minutes of
work instead of two dozen ten-minute jobs each paying the scheduler's queueing and start-up
cost. If a job of a group fails, Snakemake deletes the outputs of every cell of that Slurm job,
finished ones included; their checkpoints stay, and the retry rebuilds those cells' files from
them without training (tests/test_resume.py).

How Snakemake 9 runs a group job on Slurm (snakemake 9.27, executor plugin slurm 2.8.0,
jobstep 0.6.1; read in their source): the submitting process computes the group's resources
layer by layer (``GroupResources.basic_layered``): jobs of one DAG level are packed into layers
that fit the constraints of its ``--resources`` (here ``train_slot``); within a layer resources
add up, ``runtime`` takes the maximum; over layers ``runtime`` adds up and the rest takes the
maximum; a string resource must be the same for every job of the group and is taken as is. The
Slurm job then runs ``snakemake --executor slurm-jobstep --jobs 1`` without the profile's
``--resources`` or ``--group-components``: each connected component of the group becomes an
``srun`` step of its own, one after another (the plugin's open issue "Group jobs run
sequentially on Slurm"), and inside a step a local Snakemake (``--cores all``: the CPUs the
step may use) runs the component's jobs, in parallel where they are independent.

Cells per GPU (``cells_per_gpu`` = N, the profile's ``CELLS_PER_GPU``; 1 = the above, unchanged).
Because of ``--jobs 1`` a group's cells can only share a GPU if they form one component: N cells
of one setting (same task, model, width, layers and recipe, hence the same estimate; ordered by
lr and seed) make a *pack*, whose marker (rule ``gpu_pack``, in the cells' group) takes the N
results as input. A pack is one ``srun`` step that runs its N cells at once, each its own
process, all seeing the job's one GPU (the step gets every GRES of the job; CUDA_VISIBLE_DEVICES
is the same). So that the Slurm job asks for one GPU and not N, a shared cell requests no
``gpu`` but the string resource ``gres="gpu:1"`` (not summed over a layer), and the profile sets
``train_slot`` to N: the submitting process then layers N cells side by side, requesting N CPUs,
N cells' memory and per layer the longest cell's time. Only grouped (small) cells share; big
cells keep a GPU each. A pack's cells have one estimate, so the submitting process's sum over
layers is exactly the packs' times when packs are full; a pack left short (the last of a
setting, or cells already done) can make the request short by up to one pack's time, which the
safety factor and the retry (twice the time, resuming from checkpoints) absorb.

A shared cell's time: its fixed per-step cost (launches, optimiser: the host) overlaps with its
neighbours', each process having its own CPU core; its device arithmetic is serialised with
theirs when the GPU time-slices processes (its default), or runs beside theirs up to the
device's peak under NVIDIA MPS (which this workflow does not start); times ``SHARE_SLOWDOWN``::

    shared = startup + max(overhead + arithmetic, busy) * SHARE_SLOWDOWN
    busy   = N * arithmetic  (time slicing; what the requested time assumes)
           = N * flops / peak_flops  (MPS)

The narrow models' low throughput counts as arithmetic here, so time slicing wins back little;
whether their kernels really keep the GPU busy, and ``SHARE_SLOWDOWN``, are guesses, not
measurements (no GPU here): measure one pack, with and without MPS, when a GPU is lent.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

from . import defaults
from .data import task_seq_len
from .grid import CELL_PATTERN

# ------------------------------------------------------------------------------ constants
MAX_RUNTIME_MIN = 24 * 60  # a retry never asks for more than this; raise it if your partition allows
# a cell needing more than these cannot run anywhere this workflow targets; the config is refused
# before any job (Grid checks every setting): raise them if your nodes have more
MAX_MEM_MB = 2 * 1024 * 1024  # host memory of the largest node (2 TiB)
MAX_DEVICE_MEM_MB = 192 * 1024  # memory of the largest GPU (192 GiB)
GROUP_TARGET_MIN = 240  # about this much requested time per grouped Slurm job
# a shared cell's slowdown beyond the arithmetic its neighbours take (GPU context switches, memory
# bandwidth): an estimate, not a measurement
SHARE_SLOWDOWN = 1.25
# a pack's marker (and its log), in the folder its cells share: npack cells per GPU, the kpack-th
PACK_PATTERN = CELL_PATTERN.rsplit("/", 1)[0] + "/gpu-pack{npack}-{kpack}.done"
PACK_LOG = PACK_PATTERN.removesuffix(".done") + ".log"


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


# The GPU's effective throughput (TFLOP/s at full width) by the cell's precision, one A100-class
# GPU: tf32 calibrated to the paper's longest run (above: ~38 TFLOP/s for its largest cell, a
# quarter of TF32's 156 peak); bf16 the same (not calibrated: models this small are bound by
# memory traffic and launches more than by arithmetic); fp32 without TF32 two thirds of the
# A100's 19.5 on CUDA cores. ``python -m arrepro.resources`` prints the calibration.
CUDA_TFLOPS = {"tf32": 40.0, "bf16": 40.0, "fp32": 13.0}

DEVICES = {
    "cuda": Device(startup_s=120, step_fixed_s=0.002, step_per_layer_s=0.0025, peak_flops=CUDA_TFLOPS["tf32"] * 1e12,
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


def peak_flops(spec: dict) -> float:
    """The cell's device's effective FLOP/s at full width (on CUDA: by its precision)."""
    if spec.get("device") == "cuda":
        return CUDA_TFLOPS[defaults.scale(spec, "precision")] * 1e12
    return _device(spec).peak_flops


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


def estimate_seconds(spec: dict, share: int = 1, mps: bool = False) -> float:
    """Expected wall time of a full, uninterrupted run of the cell (no safety factor), alone on
    its device or with ``share - 1`` other cells of the same size at once (the module's
    docstring): their kernels take turns (time slicing, ``mps=False``), or run side by side up
    to the device's peak (NVIDIA MPS, ``mps=True``)."""
    dev = _device(spec)
    T, n_train, n_test, _, _ = _task_shape(spec)
    epochs = int(spec["recipe_def"]["epochs"])
    bs = int(spec["batch_size"])
    d, n = int(spec["width"]), int(spec["layers"])
    steps = math.ceil(n_train / bs) * epochs
    peak = peak_flops(spec)
    throughput = max(dev.min_flops, peak * min(1.0, d / dev.full_width))
    flops = (n_train + n_test / 3) * T * epochs * flops_per_token(spec)  # eval: a forward pass
    overhead = steps * (dev.step_fixed_s + dev.step_per_layer_s * n)
    compute = overhead + flops / throughput
    if share > 1:
        busy = share * flops / (peak if mps else throughput)  # the device, for all of them
        compute = max(compute, busy) * SHARE_SLOWDOWN
    return dev.startup_s + compute


def runtime_min(spec: dict, attempt: int = 1, cells_per_gpu: int = 1) -> int:
    """Minutes to request (Slurm ``--time``): the estimate with a safety margin, doubled on
    each retry, never above MAX_RUNTIME_MIN; a shared cell's estimate when it shares."""
    dev = _device(spec)
    est = estimate_seconds(spec, sharing(spec, cells_per_gpu))
    base = max(dev.floor_min, 5 * math.ceil(est * dev.safety / 60 / 5))
    return int(min(MAX_RUNTIME_MIN, base * 2 ** (max(1, int(attempt)) - 1)))


def parameters(spec: dict) -> int:
    """The model's parameter count, estimated (mixer and MLP weights, embeddings, positions)."""
    T, _, _, V, _ = _task_shape(spec)
    d, n = int(spec["width"]), int(spec["layers"])
    return 12 * d * d * n + V * d + T * d


def mem_mb(spec: dict) -> int:
    """Host memory to request (MB), rounded up to a whole GB."""
    dev = _device(spec)
    T, n_train, n_test, V, _ = _task_shape(spec)
    data = 2 * (n_train + n_test) * T * 8 * 2 / 1e6  # inputs + labels, int64, twice
    total = dev.base_mem_mb + data
    if dev is DEVICES["cpu"]:
        d, n, bs = int(spec["width"]), int(spec["layers"]), int(spec["batch_size"])
        total += parameters(spec) * 16 / 1e6 + bs * T * d * n * 40 * 4 / 1e6
    return int(1024 * math.ceil(total / 1024))


def _size(mb: float) -> str:
    for unit, scale in (("EB", 1e12), ("PB", 1e9), ("TB", 1e6), ("GB", 1e3)):
        if mb >= scale:
            return f"{mb / scale:,.0f} {unit}"
    return f"{mb:,.0f} MB"


def memory_problem(spec: dict) -> str | None:
    """Why no machine can train this cell (None if one can): its host memory estimate above
    MAX_MEM_MB, or, on a GPU (device cuda or auto), its weights, gradients and AdamW state alone
    (16 bytes a parameter, a lower bound) above MAX_DEVICE_MEM_MB."""
    host = mem_mb(spec)
    if host > MAX_MEM_MB:
        return (f"needs ~{_size(host)} of memory ({parameters(spec):.3g} parameters), more than any node has "
                f"(arrepro.resources.MAX_MEM_MB: {_size(MAX_MEM_MB)})")
    state = parameters(spec) * 16 / 1e6
    if defaults.scale(spec, "device") != "cpu" and state > MAX_DEVICE_MEM_MB:
        return (f"its {parameters(spec):.3g} parameters and their AdamW state alone need ~{_size(state)} of GPU "
                f"memory, more than any GPU has (arrepro.resources.MAX_DEVICE_MEM_MB: {_size(MAX_DEVICE_MEM_MB)})")
    return None


def gpus(spec: dict, cells_per_gpu: int = 1) -> int:
    """The ``gpu`` resource: 1 for a CUDA cell alone on its GPU; 0 for a shared one (``gres``)."""
    return 1 if spec.get("device") == "cuda" and sharing(spec, cells_per_gpu) == 1 else 0


def gres(spec: dict, cells_per_gpu: int = 1) -> str:
    """The ``gres`` resource of a shared CUDA cell, "gpu:1": a string, so a group job takes it
    as is instead of adding it up over the cells that run side by side ("" otherwise)."""
    return "gpu:1" if spec.get("device") == "cuda" and sharing(spec, cells_per_gpu) > 1 else ""


def group(spec: dict) -> str | None:
    """The job group of a small cell (None: a big cell is a Slurm job of its own)."""
    minutes = runtime_min(spec, 1)
    for tier in GROUP_TIERS:
        if minutes <= tier.max_minutes:
            return tier.name
    return None


# ------------------------------------------------------------------------------ cells per GPU
def cells_per_gpu_of(config: dict) -> int:
    """The config's ``cells_per_gpu`` (set by the Slurm profile; 1 when absent), checked."""
    n = config.get("cells_per_gpu", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"config key cells_per_gpu: {n!r} is not a whole number >= 1")
    return n


def sharing(spec: dict, cells_per_gpu: int = 1) -> int:
    """How many cells run at once on this cell's device: ``cells_per_gpu`` for a grouped (small)
    cell, 1 for a big one."""
    return cells_per_gpu if cells_per_gpu > 1 and group(spec) is not None else 1


def packs(grid, cells_per_gpu: int, cells=None) -> dict[str, list]:
    """Marker path -> the cells of that pack: the grouped cells of each setting (a folder of
    cells differing only in lr and seed), ordered by (lr, seed), in chunks of ``cells_per_gpu``.
    Empty when ``cells_per_gpu`` is 1."""
    if cells_per_gpu <= 1:
        return {}
    cells = grid.all_cells() if cells is None else list(cells)
    by_setting: dict[str, list] = {}
    for c in cells:
        by_setting.setdefault(c.path.rsplit("/", 1)[0], []).append(c)
    out = {}
    for setting, members in by_setting.items():
        if sharing(_spec(grid, members[0]), cells_per_gpu) == 1:
            continue
        members = sorted(members, key=lambda c: (float(c.lr), c.seed))
        for k in range(0, len(members), cells_per_gpu):
            marker = PACK_PATTERN.format(**vars(members[0]), npack=cells_per_gpu, kpack=k // cells_per_gpu)
            out[marker] = members[k:k + cells_per_gpu]
    return out


class Packs:
    """The packs of some cells of a grid, computed on first use (only workflows with
    cells_per_gpu > 1 do). ``cells``: a function giving the cells to pack (the learning-rate
    searches' round 0: cells of later rounds, planned as the searches go, run unpacked)."""

    def __init__(self, grid, cells_per_gpu: int, cells=None):
        self.grid, self.cells_per_gpu, self._cells = grid, cells_per_gpu, cells

    @functools.cached_property
    def by_marker(self) -> dict[str, list]:
        return packs(self.grid, self.cells_per_gpu, None if self._cells is None else self._cells())

    def cells(self, marker: str) -> list:
        if marker not in self.by_marker:
            raise ValueError(f"{marker}: not a pack of cells_per_gpu={self.cells_per_gpu} "
                             f"at scale {self.grid.scale_name}")
        return self.by_marker[marker]

    def spec(self, marker: str) -> dict:
        """The cell spec of the pack's first cell (all of them have the same size)."""
        return _spec(self.grid, self.cells(marker)[0])

    def targets(self, wildcards=None) -> list[str]:
        """The markers ``all`` asks for: every pack with a cell still to train, and those already
        made (a finished pack whose marker is missing is left alone rather than spending a
        Slurm job on a marker)."""
        return [m for m, cells in self.by_marker.items()
                if os.path.exists(m) or not all(os.path.exists(f"{c.path}/result.json") for c in cells)]


def _spec(grid, c) -> dict:
    return grid.cell_spec(c.task, c.model, c.width, c.layers, c.recipe, c.lr, c.seed)


# ------------------------------------------------------------------------------ the plan
def plan(grid, cells=None, cells_per_gpu: int = 1) -> dict:
    """Cells, Slurm jobs of the train rule, and hours for an ``arrepro.grid.Grid`` (all its
    cells, or the given ones), with ``cells_per_gpu`` cells sharing a GPU in grouped jobs.

    ``requested_hours``: the wall time Slurm is asked for, summed over cells as they run (a pack
    of shared cells counts once, at its longest cell); ``gpu_hours``: the same for CUDA cells;
    ``estimated_gpu_hours``: the estimates without safety factor, a shared cell counting for
    1/N of its GPU's time (``_mps``: if the shared cells' kernels run side by side, under MPS)."""
    cells = grid.all_cells() if cells is None else list(cells)
    pack_list = list(packs(grid, cells_per_gpu, cells).values())
    in_pack = {c: members for members in pack_list for c in members}
    per_group: dict[str | None, int] = {}
    minutes = gpu_minutes = estimated = estimated_mps = grouped = grouped_mps = 0.0
    for c in cells:
        spec = _spec(grid, c)
        n = sharing(spec, cells_per_gpu)
        members = in_pack.get(c, [c])
        g = group(spec)
        per_group[g] = per_group.get(g, 0) + 1
        # a pack's time is its longest cell's, counted once: each member adds its 1/len share
        m = max(runtime_min(_spec(grid, x), 1, cells_per_gpu) for x in members) / len(members)
        minutes += m
        if spec.get("device") == "cuda":
            gpu_minutes += m
            estimated += estimate_seconds(spec, n) / 60 / n
            estimated_mps += estimate_seconds(spec, n, mps=True) / 60 / n
            if g is not None:
                grouped += estimate_seconds(spec, n) / 60 / n
                grouped_mps += estimate_seconds(spec, n, mps=True) / 60 / n
    bundles = group_components()
    packs_per_group: dict[str, int] = {}
    for members in pack_list:
        g = group(_spec(grid, members[0]))
        packs_per_group[g] = packs_per_group.get(g, 0) + 1
    components = {g: packs_per_group.get(g, n) if cells_per_gpu > 1 else n for g, n in per_group.items() if g}
    jobs = per_group.get(None, 0) + sum(math.ceil(n / bundles[g]) for g, n in components.items())
    return {"cells": len(cells), "train_jobs": jobs, "cells_by_group": per_group, "cells_per_gpu": cells_per_gpu,
            "requested_hours": minutes / 60, "gpu_hours": gpu_minutes / 60, "estimated_gpu_hours": estimated / 60,
            "estimated_gpu_hours_mps": estimated_mps / 60, "grouped_gpu_hours": grouped / 60,
            "grouped_gpu_hours_mps": grouped_mps / 60}


def search_kind(spec) -> str:
    """A search's kind for the plan's breakdown (how many seeds search, window or not, rounds)."""
    if not spec.rounds:
        return f"fixed grid, {'every seed' if spec.search_seeds == spec.seeds else f'{len(spec.search_seeds)} seed(s)'}"
    seeds = "every seed" if spec.search_seeds == spec.seeds else f"{len(spec.search_seeds)} seed(s)"
    return f"search on {seeds}{', window' if spec.window else ''}"


def protocol_plan(grid, cells_per_gpu: int = 1, protocol: str | None = None) -> dict:
    """The learning-rate protocol's cost (arrepro.rounds): round 0 (its cells are known: the
    train jobs and hours of ``plan``) and the most the searches' round budgets allow (every
    search spends its whole budget; a cell's estimate does not depend on its learning rate or
    seed), with a breakdown by search kind; and the fixed grid's (lr_protocol: grid) for
    comparison. Hours as in ``plan``: requested (with the safety factor) and estimated."""
    from .rounds import Searches

    searches = Searches(grid, protocol)
    r0 = plan(grid, searches.round0_cells(), cells_per_gpu)
    fixed = plan(grid, grid.all_cells(), cells_per_gpu)
    r0_cells = {s.key: len(set(c for c in searches_cells_round0(s))) for s in searches.searches.values()}
    kinds: dict[str, dict] = {}
    max_cells = est_max = req_max = 0.0
    for s in searches.searches.values():
        st = s.setting
        spec = grid.cell_spec(st.task, st.model, st.width, st.layers, st.recipe, "1e-3", 0)
        n = s.spec.max_cells()
        est, req = estimate_seconds(spec) / 3600, runtime_min(spec, 1, cells_per_gpu) / 60
        k = kinds.setdefault(search_kind(s.spec), {"settings": 0, "cells_round0": 0, "cells_max": 0,
                                                     "gpu_hours_estimated_max": 0.0})
        k["settings"] += 1
        k["cells_round0"] += r0_cells[s.key]
        k["cells_max"] += n
        k["gpu_hours_estimated_max"] += est * n
        max_cells += n
        est_max += est * n
        req_max += req * n
    shared = sum(r0_cells.values()) - r0["cells"]  # round-0 cells two searches share, counted once
    return {"scale": grid.scale_name, "protocol": searches.protocol, "searches": len(searches.searches),
            "groups": {g: len(v) for g, v in sorted(searches.groups.items())},
            "cells_round0": r0["cells"], "train_jobs_round0": r0["train_jobs"],
            "gpu_hours_estimated_round0": r0["estimated_gpu_hours"], "gpu_hours_requested_round0": r0["gpu_hours"],
            "cells_max": int(max_cells - shared), "gpu_hours_estimated_max": est_max,
            "gpu_hours_requested_max": req_max, "by_kind": kinds,
            "cells_fixed_grid": fixed["cells"], "gpu_hours_estimated_fixed_grid": fixed["estimated_gpu_hours"],
            "gpu_hours_requested_fixed_grid": fixed["gpu_hours"], "cells_per_gpu": cells_per_gpu,
            "ratio_cells_to_fixed_grid": (max_cells - shared) / max(fixed["cells"], 1),
            "ratio_gpu_hours_to_fixed_grid": est_max / max(fixed["estimated_gpu_hours"], 1e-9)}


# ------------------------------------------------------------------------------ disk
# A cell's files besides its model: result.json, train.lock and the finished cell's record
# (checkpoint.pt once sealed), and per epoch a line of metrics.jsonl, of train.log and job.log and
# of the record: measured on the tiny scale (5.2 KB and 520 B), rounded up. A retry's log lines
# come on top.
CELL_FILE_BYTES = 8_000
EPOCH_FILE_BYTES = 600
CHECKPOINT_BYTES_PER_PARAMETER = 12  # fp32 weights and AdamW's two moments
WEIGHTS_BYTES_PER_PARAMETER = 4  # weights.pt: the fp32 weights (keep_weights)


def disk_plan(grid, in_flight: int, protocol: str | None = None) -> dict:
    """The most disk the learning-rate protocol's cells take, in bytes, when every search spends
    its whole round budget: their files (``files``); the checkpoints of the ``in_flight`` largest
    cells training at once, each twice while it is rewritten (``checkpoints``: a cell's model
    and optimiser state is replaced by a record of a few KB once its result is sealed); every
    cell's final weights (``weights``: only with the config's keep_weights)."""
    from .rounds import Searches

    files = weights = 0
    sizes = []
    for s in Searches(grid, protocol).searches.values():
        st = s.setting
        spec = grid.cell_spec(st.task, st.model, st.width, st.layers, st.recipe, "1e-3", 0)
        n, p = s.spec.max_cells(), parameters(spec)
        files += n * (CELL_FILE_BYTES + EPOCH_FILE_BYTES * int(spec["recipe_def"]["epochs"]))
        weights += n * p * WEIGHTS_BYTES_PER_PARAMETER
        sizes += [2 * p * CHECKPOINT_BYTES_PER_PARAMETER] * min(n, in_flight)
    checkpoints = sum(sorted(sizes, reverse=True)[:in_flight])
    return {"files": files, "checkpoints": checkpoints, "weights": weights, "in_flight": in_flight}


def searches_cells_round0(search) -> list:
    from .rounds import search_cells, start_round

    return search_cells(search, [start_round(search)])


def _at_least_one(text: str) -> int:
    """argparse type of --cells-per-gpu: the same rule as the config key (``cells_per_gpu_of``)."""
    import argparse

    try:
        return cells_per_gpu_of({"cells_per_gpu": int(text)})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1") from None


def disk_line(d: dict, keep_weights: bool) -> str:
    """``disk_plan``'s report line: the most disk the plan needs, with its parts."""
    total = d["files"] + d["checkpoints"] + (d["weights"] if keep_weights else 0)
    kept = "kept" if keep_weights else "not kept (keep_weights: false)"
    return (f"disk at most (every round budget spent): {_size(total / 1e6)} = the cells' files {_size(d['files'] / 1e6)}"
            f" + the checkpoints of the {d['in_flight']} largest cells training at once {_size(d['checkpoints'] / 1e6)}"
            f" + final weights {_size(d['weights'] / 1e6)}, {kept}")


def _main(argv=None) -> None:  # pragma: no cover - a report for people
    import argparse
    import json
    from pathlib import Path

    import yaml

    from .checks import load_grid

    ap = argparse.ArgumentParser(prog="python -m arrepro.resources",
                                 description="Print what a scale of config.yaml asks a cluster for: the learning-rate "
                                             "protocol's cells and GPU-hours (round 0, and the most its round budgets "
                                             "allow), and the fixed grid's for comparison.")
    ap.add_argument("scale", nargs="?", default="paper")
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "config.yaml"))
    ap.add_argument("--protocol", choices=("search", "grid"), help="override the config's lr_protocol")
    ap.add_argument("--cells", action="store_true", help="one line per distinct cell shape")
    ap.add_argument("--json", action="store_true", help="the protocol's plan as one JSON object (1 cell per GPU)")
    ap.add_argument("--cells-per-gpu", type=_at_least_one, default=4, metavar="N",
                    help="also plan N grouped cells sharing a GPU (the profile's CELLS_PER_GPU; default 4)")
    ap.add_argument("--in-flight", type=_at_least_one, default=200, metavar="N",
                    help="cells training at once, for the disk their checkpoints take (default 200: the Slurm "
                         "profile's jobs)")
    ap.add_argument("--keep-weights", action="store_true", help="count every cell's final weights (config keep_weights)")
    a = ap.parse_args(argv)
    cfg = yaml.safe_load(Path(a.config).read_text())
    grid = load_grid(cfg, a.scale)
    if a.json:
        print(json.dumps(protocol_plan(grid, 1, a.protocol), indent=1))
        return
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
    pp = protocol_plan(grid, 1, a.protocol)
    print(f"scale {a.scale}, lr_protocol {pp['protocol']}: {pp['searches']} settings searched in groups {pp['groups']}")
    print(f"  round 0: {pp['cells_round0']} cells ({pp['train_jobs_round0']} Slurm jobs), "
          f"{pp['gpu_hours_estimated_round0']:.0f} GPU-hours estimated ({pp['gpu_hours_requested_round0']:.0f} requested)")
    print(f"  at most (every round budget spent): {pp['cells_max']} cells, {pp['gpu_hours_estimated_max']:.0f} GPU-hours "
          f"estimated ({pp['gpu_hours_requested_max']:.0f} requested)")
    for kind, k in pp["by_kind"].items():
        print(f"    {kind:>32}: {k['settings']:4d} settings, round 0 {k['cells_round0']:5d} cells, at most "
              f"{k['cells_max']:5d} cells, {k['gpu_hours_estimated_max']:6.0f} GPU-hours")
    print(f"  the fixed grid (lr_protocol: grid, every lr on every seed): {pp['cells_fixed_grid']} cells, "
          f"{pp['gpu_hours_estimated_fixed_grid']:.0f} GPU-hours estimated ({pp['gpu_hours_requested_fixed_grid']:.0f} requested)")
    if pp["gpu_hours_estimated_fixed_grid"] > 0:  # (a CPU scale's cells use no GPU)
        print(f"  the protocol at most, against the fixed grid: {pp['ratio_cells_to_fixed_grid']:.2f} of its cells, "
              f"{pp['ratio_gpu_hours_to_fixed_grid']:.2f} of its GPU-hours")
    searches_r0 = None
    for n in dict.fromkeys((1, a.cells_per_gpu)):
        from .rounds import Searches

        searches_r0 = searches_r0 or Searches(grid, a.protocol).round0_cells()
        p = plan(grid, searches_r0, cells_per_gpu=n)
        mps = f", {p['estimated_gpu_hours_mps']:.0f} if their kernels overlap (MPS)" if n > 1 else ""
        mps_small = f", {p['grouped_gpu_hours_mps']:.0f} with MPS" if n > 1 else ""
        print(f"round 0, {n} cell(s) per GPU: {p['cells']} cells -> {p['train_jobs']} Slurm jobs for training "
              f"({p['cells_by_group']}); {p['requested_hours']:.0f} hours requested ({p['gpu_hours']:.0f} GPU-hours); "
              f"estimated use {p['estimated_gpu_hours']:.0f} GPU-hours{mps}; of these, the grouped (small) cells "
              f"{p['grouped_gpu_hours']:.0f}{mps_small}")
    print(disk_line(disk_plan(grid, a.in_flight, a.protocol), a.keep_weights or cfg.get("keep_weights", False)))
    print("All estimates, none measured (no GPU here): the wall-time model of src/arrepro/resources.py (GPU constants "
          "for one A100/H100-class GPU, calibrated to the paper's '10 minutes to 18 hours' per run; requests add its "
          f"safety factor); with N > 1 also its sharing model (time slicing, or MPS; SHARE_SLOWDOWN = {SHARE_SLOWDOWN}).")


if __name__ == "__main__":  # pragma: no cover
    _main()
