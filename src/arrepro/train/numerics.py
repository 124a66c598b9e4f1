"""Pinned CPU numerics: one home for what decides the code paths of a CPU training run.

The same cell trained on two x86-64 CPUs (AVX2 or AVX-512, Intel or AMD) gives different weights
unless every library picks the same code path: the vector width changes the rounding of every
vectorised loop and reduction, and training amplifies it (issue 17: 50 steps of a 1-layer Mamba
differ when only ``ATEN_CPU_CAPABILITY`` or ``MKL_CBWR`` changes). What decides, and the pin:

* ATen's CPU kernels (elementwise, reductions, Sleef's exp/log, fused AdamW's vectorised
  path, SDPA's CPU kernel) are compiled once per capability and picked at the first dispatch from
  ``ATEN_CPU_CAPABILITY`` or the CPU: pinned to ``avx2``, which every x86-64 server of the last
  decade has (Haswell, 2013; Zen, 2017), so an AVX-512 machine runs the AVX2 kernels.
* MKL (sgemm behind every nn.Linear and bmm, and the FFTs of Hyena and H3) picks a branch per CPU
  and blocks by its cache sizes unless conditional numerical reproducibility (``MKL_CBWR``) is
  set. Only ``COMPATIBLE`` (SSE2 without rcpps/rsqrtps) is honoured on non-Intel CPUs: MKL's
  documentation says the other branches (``AVX2``, and with them ``,STRICT``) are "available only
  for Intel processors", and MKL silently uses AUTO where a branch is not available. Measured
  here (AMD EPYC): ``MKL_CBWR=AVX2`` and ``SSE4_2`` give exactly the unset (AUTO) result,
  ``COMPATIBLE`` a different one. So ``COMPATIBLE``: the one branch that is the same code on Intel
  and AMD. (``STRICT`` only adds thread-count independence for AVX2+ branches; one thread here.)
* oneDNN (torch's ``mkldnn``: depthwise conv1d, GELU, conv weight gradients in fp32 training) JITs
  code for the CPU it finds and blocks by its cache sizes: switched off
  (``torch.backends.mkldnn``), so ATen's native kernels run; ``ONEDNN_MAX_CPU_ISA=AVX2`` caps
  whatever might still reach it. NNPACK (its own CPU detection) is switched off too.
* Threads: one per cell (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``torch.set_num_threads``):
  ATen's parallel reductions split their work by thread count.
* Subnormal floats (the scale's ``subnormals``, default ``flush``): flushed to zero, as results
  (FTZ) and as inputs (DAZ), two bits of the thread's MXCSR that every SSE and AVX instruction on
  every x86-64 CPU obeys the same way (``torch.set_flush_denormal``; the fused CPU kernels run in
  the same thread, so they obey them too: tests/test_numerics.py checks every build on inputs
  that underflow). Why: an operation on a subnormal takes a slow microcode path, and a cell
  whose numbers underflow (a high learning rate, its loss far above chance) trained 2.6-2.9x
  slower for it (docs/reference/numerics.md, "Subnormal numbers: flushed"). ``keep`` is IEEE gradual underflow.

``pin_environment()`` sets the variables (overriding the caller's: the record's ``overridden`` names
what the caller had set, and train.log says so) and must run before torch's
first import in the process that trains (scripts/train_cell.py calls it first). ``settle()`` runs
after the import, where a cell starts: it sets the runtime switches and checks what torch really
runs at. It returns the record written to result.json's ``numerics`` (and printed once in
train.log): ``pinned`` is true only if the variables were set before torch was imported, ATen
runs at AVX2 and one thread; otherwise ``problems`` says why (a caller that imported torch first,
a CPU without AVX2: there the cell still trains, at ATen's DEFAULT capability, and says so).

What this does not pin: other architectures (ARM, POWER), GPUs (CUDA kernels and cuBLAS choose
their algorithms per device: a CUDA cell's record describes its CPU libraries only), and the software itself (torch, MKL and oneDNN versions; the
pinned torch is in pyproject.toml). Within one torch build on x86-64 CPUs with AVX2 the pinned
paths are the same code.
"""
from __future__ import annotations

import os
import platform
import sys

# The environment of a pinned CPU run (values as the libraries spell them).
PINS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",  # oneDNN's older name for the same cap
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() must say
THREADS = 1

_pinned_before_torch: bool | None = None  # None: pin_environment() has not run in this process
_caller_env: dict[str, str | None] = {}


def pin_environment(job_env: dict[str, str] | None = None) -> None:
    """Set ``PINS`` in ``os.environ`` (the caller's values are overridden and remembered). Call
    before torch's first import: the libraries read these variables once, when they load.

    ``job_env``: the environment of the job this process trains for now, where that is not the
    environment the process started with: a child of the training server (arrepro.train.server),
    whose libraries were loaded, pinned, when the server started for an earlier job. What the job
    asked for (``overridden``) is then read from ``job_env``, not from that earlier job's."""
    global _pinned_before_torch
    if _pinned_before_torch is None or job_env is not None:
        caller = os.environ if job_env is None else job_env
        _caller_env.clear()
        _caller_env.update({k: caller.get(k) for k in PINS})
    if _pinned_before_torch is None:
        _pinned_before_torch = "torch" not in sys.modules
    os.environ.update(PINS)


def cpu_description() -> dict:
    """The CPU this process runs on: model name and the vector extensions that matter here."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return {"model": name, "machine": platform.machine(),
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags}


SUBNORMALS = {"flush": "flushed", "keep": "kept"}  # the scale's value -> how train.log says it


def flushes_subnormals() -> bool:
    """Whether this thread flushes subnormal floats now (a subnormal input reads as zero)."""
    import torch

    return bool((torch.tensor(1e-40, dtype=torch.float32) * 1.0).item() == 0.0)


def settle(threads: int | None = None, subnormals: str = "flush") -> dict:
    """Where a cell starts, after torch's import: one thread (or ``threads``), oneDNN and NNPACK
    off, subnormal floats flushed or kept (``subnormals``); then the record of what really runs
    (see the module docstring)."""
    import torch

    if subnormals not in SUBNORMALS:
        raise ValueError(f"subnormals (the scale's, in config.yaml): {subnormals!r} is not one of {sorted(SUBNORMALS)}")
    n = threads or THREADS
    torch.set_num_threads(n)
    torch.backends.mkldnn.enabled = False
    torch.backends.nnpack.set_flags(False)
    torch.set_flush_denormal(subnormals == "flush")
    keep_freed_memory()
    flushed = flushes_subnormals()
    cap = torch.backends.cpu.get_cpu_capability()
    cpu = cpu_description()
    problems = []
    if _pinned_before_torch is None:
        problems.append("pin_environment() was not called in this process: the caller's environment decides")
    elif not _pinned_before_torch:
        caller = ", ".join(f"{k}={v}" for k, v in _caller_env.items() if v is not None) or "none of the pins set"
        problems.append(f"torch was imported before pin_environment(): the libraries may have read the caller's "
                        f"environment ({caller})")
    env = {k: os.environ.get(k) for k in PINS}
    problems += [f"{k}={v!r}, not {PINS[k]!r}" for k, v in env.items() if v != PINS[k]]
    if cap != CAPABILITY:
        why = "this CPU has no AVX2" if not cpu["avx2"] else "ATEN_CPU_CAPABILITY was read before the pin"
        problems.append(f"ATen runs at {cap}, not {CAPABILITY} ({why}): results are not comparable with "
                        "pinned runs")
    if n != THREADS:
        problems.append(f"{n} threads, not {THREADS}: ATen's parallel reductions depend on the thread count")
    if flushed != (subnormals == "flush"):
        problems.append(f"subnormals {'flushed' if flushed else 'kept'}, not {SUBNORMALS[subnormals]} as the scale asks: "
                        "this CPU cannot switch flush-to-zero")
    return {"pinned": not problems, "cpu_capability": cap, "threads": torch.get_num_threads(),
            "subnormals": "flush" if flushed else "keep",
            "mkldnn": torch.backends.mkldnn.enabled, "nnpack": torch._C._get_nnpack_enabled(),
            "env": env, "torch": torch.__version__, "cpu": cpu, "problems": problems, "overridden": overridden()}


def keep_freed_memory() -> bool:
    """Speed, not numerics: ask glibc's malloc to keep freed memory for the next allocation rather
    than hand it back to the system (blocks up to 32 MiB from the heap, no trimming below 1 GiB
    free). A training step allocates and frees the same buffers of ~0.1-2 MB every step; by default
    glibc maps the larger ones afresh or trims them away, and every first touch of a fresh page is a
    page fault (measured side by side: a Mamba2 step 0.64 of its time, the others unchanged;
    docs/reference/benchmarks.md). Where the buffers lie changes no result (the
    kernels' arithmetic does not depend on alignment). False where the C library is not glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def overridden() -> dict[str, str]:
    """The caller's values of the pinned variables that ``pin_environment`` replaced (what the
    environment asked for and did not get): recorded in the cell, so that an override is never
    silent."""
    return {k: v for k, v in _caller_env.items() if v is not None and v != PINS[k]}


def merge(earlier: dict | None, now: dict) -> dict:
    """The record of a cell that may have been resumed: ``now``, unless an earlier attempt ran with
    other settings (the CPU's model aside: pinned runs on two CPUs are the same code); then the
    earlier record is kept under ``earlier`` and the cell is not pinned."""
    same = lambda r: {k: v for k, v in r.items() if k not in ("cpu", "overridden")}  # noqa: E731
    if not earlier or same(earlier) == same(now):
        return now
    return {**now, "pinned": False, "earlier": earlier,
            "problems": now["problems"] + ["an earlier attempt of this cell ran with other numerics (see earlier)"]}


def describe(record: dict) -> str:
    """One line for train.log."""
    env = " ".join(f"{k}={v}" for k, v in record["env"].items())
    head = "pinned" if record["pinned"] else "NOT pinned"
    line = (f"CPU numerics {head}: ATen {record['cpu_capability']}, {record['threads']} thread(s), "
            f"subnormals {SUBNORMALS[record.get('subnormals', 'keep')]}, "
            f"oneDNN {'on' if record['mkldnn'] else 'off'}, NNPACK {'on' if record['nnpack'] else 'off'}, "
            f"{env}; torch {record['torch']} on {record['cpu']['model']}")
    line += "".join(f"\n  the caller's {k}={v} was replaced by the pin" for k, v in record.get("overridden", {}).items())
    return line + "".join(f"\n  problem: {p}" for p in record["problems"])
