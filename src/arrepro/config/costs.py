"""What a training cell asks a cluster for: wall time, memory, GPUs, its job group and its disk:
the cost model, from the cell's spec (``Grid.cell_spec``).

Pure Python (no torch): the Snakefile calls these for every cell when it plans the grid, the
config checks refuse a cell no machine can hold (``memory_problem``), the learning-rate search
groups its rounds by cost tier (``group``), and ``python -m arrepro.cluster.budget [SCALE]``
prints what a scale asks for in all.

Wall time (minutes) of a cell::

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
about a factor of two either way (the effective fraction of the peak, the mixers' factors). A model card's
``cost`` scales the arithmetic of mixers slower than attention (scans, FFT convolutions); these factors are
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

A shared cell's time (``cells_per_gpu`` = N > 1 small cells on one GPU:
arrepro.cluster.packs): its fixed per-step cost (launches, optimiser: the host) overlaps with its
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

import math
from dataclasses import dataclass

from arrepro.config import defaults
from arrepro.data import task_seq_len

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
# A100's 19.5 on CUDA cores. ``python -m arrepro.cluster.budget`` prints the calibration.
CUDA_TFLOPS = {"tf32": 40.0, "bf16": 40.0, "fp32": 13.0}
DEVICES = {
    "cuda": Device(startup_s=120, step_fixed_s=0.002, step_per_layer_s=0.0025, peak_flops=CUDA_TFLOPS["tf32"] * 1e12,
                   full_width=1024, min_flops=1e12, safety=1.5, floor_min=10, base_mem_mb=6000),
    "cpu": Device(startup_s=20, step_fixed_s=0.0015, step_per_layer_s=0.003, peak_flops=5e9,
                  full_width=1, min_flops=5e9, safety=2.0, floor_min=5, base_mem_mb=1500),
}


# A mixer's arithmetic relative to softmax attention's is its model's card's ``cost``
# (config.yaml models.NAME.card.cost: estimates, attention = 1), bounded by the paper's longest
# run (18 h): its biggest cells (L512, width 2048) take ~11.5 h with attention, so no mixer can
# be more than ~1.5 times slower there. The cell spec carries it as ``cost_factor``.


def cost_factor(spec: dict) -> float:
    """The cell's model's arithmetic factor (its card's ``cost``); a spec without one is refused."""
    factor = spec.get("cost_factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise ValueError(f"cell spec of model {spec.get('model')!r}: no cost factor ({factor!r}); config.yaml "
                         f"models.{spec.get('model')}.card.cost gives it")
    return float(factor)


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
    weights = 6 * 12 * d * d * n
    mixing = 6 * 2 * T * d * n
    logits = 6 * V * d * K / max(T, 1)
    return (weights + mixing) * cost_factor(spec) + logits


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
    """The model's parameter count, estimated (mixer and MLP weights, embeddings, positions, an
    LM head of its own where the model does not tie it to the embeddings)."""
    T, _, _, V, _ = _task_shape(spec)
    d, n = int(spec["width"]), int(spec["layers"])
    head = 0 if defaults.model(spec["model_def"])["tied_head"] else V * d
    return 12 * d * d * n + V * d + T * d + head


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
                f"(arrepro.config.costs.MAX_MEM_MB: {_size(MAX_MEM_MB)})")
    state = parameters(spec) * 16 / 1e6
    if defaults.scale(spec, "device") != "cpu" and state > MAX_DEVICE_MEM_MB:
        return (f"its {parameters(spec):.3g} parameters and their AdamW state alone need ~{_size(state)} of GPU "
                f"memory, more than any GPU has (arrepro.config.costs.MAX_DEVICE_MEM_MB: {_size(MAX_DEVICE_MEM_MB)})")
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


# ------------------------------------------------------------------------------ disk
# A cell's files besides its model: result.json, train.lock and the finished cell's record
# (checkpoint.pt once sealed), and per epoch a line of metrics.jsonl, of train.log and job.log and
# of the record: measured on the tiny scale (5.2 KB and 520 B), rounded up. A retry's log lines
# come on top.
CELL_FILE_BYTES = 8_000
EPOCH_FILE_BYTES = 600
CHECKPOINT_BYTES_PER_PARAMETER = 12  # fp32 weights and AdamW's two moments
WEIGHTS_BYTES_PER_PARAMETER = 4  # weights.pt: the fp32 weights (keep_weights)


def setting_spec(grid, setting) -> dict:
    """The spec the cost model reads for every cell of a setting (``arrepro.config.grid.Setting``): a
    cell's cost does not depend on its learning rate or seed."""
    return grid.spec_of(setting.cell(1e-3, 0))
