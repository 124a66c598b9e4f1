"""The first thing to run on a GPU (`make gpu-check`): one short training cell of every model
family, and a table of what ran and how fast.

For each mixer of config.yaml (its first model), one cell of the paper scale's first MQAR task
and recipe at a small width, shortened to ``steps`` optimiser steps (the training set is cut to
``steps`` batches, one epoch; the test set to one batch), trained by ``train_cell`` as a grid cell
would be. The table has, per family: the path each of its ops ran (``kernel_paths`` of the cell's
result.json: kernel package and version, or portable and why), tokens/s, the model FLOP
utilisation (``arrepro.config.costs.flops_per_token`` without its cost factor, times tokens/s, over
the GPU's peak for the precision, ``PEAK_TFLOPS``) and the peak CUDA memory.

The kernels' own vs-portable comparisons run before (pytest, in `make gpu-check`); this module
fails (exit 1) when a cell diverges, or when ``--require-kernels`` is given and a family whose
mixer has a kernel package ran an op on the portable path.

``verify`` (`make gpu-verify`, ``python scripts/gpu_check.py verify``; the second half of this
module): on a GPU machine without network, the kernel packages installed and built from the carried
folder (`make gpu-carry`), every kernel path the paper scale uses compared with its portable path
at a paper shape, forward and every gradient, one training step per family timed with and without
the kernels, optionally the first paper cell trained through the train rule; a report under
``--out``. With ``--standins`` the same flow runs on the CPU (tests/test_gpucheck.py).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from arrepro.config.costs import flops_per_token

# Dense (no sparsity) peak throughput, TFLOP/s, from NVIDIA's data sheets: bf16 and tf32 on tensor
# cores; fp32 on the CUDA cores (what PyTorch runs when TF32 is off, arrepro.train.loop.autocast_for).
# Keys are matched as substrings of torch.cuda.get_device_name(), first match wins (so "H100 PCIe"
# before "H100").
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "tf32": 494.7, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "tf32": 494.7, "fp32": 67.0},  # SXM
    "A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "tf32": 183.0, "fp32": 91.6},
    "A40": {"bf16": 149.7, "tf32": 74.8, "fp32": 37.4},
    "A10": {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "L4": {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "RTX 4090": {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6},
    "RTX 3090": {"bf16": 71.0, "tf32": 35.6, "fp32": 35.6},
}


def peak_tflops(device_name: str, precision: str) -> float | None:
    for key, peaks in PEAK_TFLOPS.items():
        if key in device_name:
            return peaks[precision]
    return None


def families(config: dict) -> dict[str, str]:
    """One model per mixer (the first config.yaml names), in config order: mixer -> model."""
    out: dict[str, str] = {}
    for model, spec in config["models"].items():
        out.setdefault(spec["mixer"], model)
    return out


def check_spec(config: dict, model: str, *, width: int, layers: int, steps: int, device: str,
               precision: str, scale: str = "paper") -> dict:
    """The cell spec of one check cell: the scale's first MQAR task and the recipe of its first
    experiment grid, shortened to ``steps`` steps of one epoch."""
    from arrepro.config.checks import load_grid

    grid = load_grid(config, scale)
    first = next(iter(grid.experiments.values()))["grids"][0]
    task = next(t for t in grid.task_names.values() if grid.tasks[t].get("kind", "mqar") == "mqar")
    spec = dict(grid.cell_spec(task, model, width, layers, grid.recipe_names[first["recipe"]],
                               grid.lrs(first)[0], 0))
    bs = spec["batch_size"]
    spec["task_def"] = {**spec["task_def"], "n_train": steps * bs, "n_test": bs}
    spec["recipe_def"] = {**spec["recipe_def"], "epochs": 1, "early_stop_accuracy": None}
    spec.update(device=device, precision=precision, scale=f"{scale}-gpucheck")
    return spec


def model_flops_per_token(spec: dict) -> float:
    """arrepro.config.costs.flops_per_token without the card's cost factor (a speed estimate, not
    arithmetic): the same formula evaluated as for attention, whose factor is 1."""
    return flops_per_token({**spec, "cost_factor": 1.0})


def describe_paths(paths: list[dict] | None) -> str:
    """One cell of the table from result.json's kernel_paths."""
    if paths is None:
        return "(not recorded)"
    if not paths:
        return "portable (no kernel op)"
    parts = []
    for p in paths:
        where = p.get("package") or "portable"
        parts.append(f"{p['op']}: {where}" + ("" if p["path"] == "kernel" else f" ({p.get('reason', '')})"))
    return "; ".join(parts)


def row(family: str, spec: dict, result: dict, peak_mem_mb: float | None, peak: float | None) -> dict:
    tps = float(result["tokens_per_second"])
    if not math.isfinite(tps) or tps <= 0:
        raise ValueError(f"{family}: tokens/s {tps!r} in result.json")
    flops = model_flops_per_token(spec) * tps
    return {
        "family": family, "model": spec["model"], "paths": result.get("kernel_paths"),
        "tokens_per_s": tps, "model_tflops": flops / 1e12,
        "mfu": None if peak is None else flops / (peak * 1e12),
        "peak_mem_mb": peak_mem_mb, "steps": result["steps"], "diverged": bool(result["diverged"]),
        "final_test_loss": result.get("final_test_loss"),
    }


def format_table(rows: list[dict]) -> str:
    head = ["family", "model", "tokens/s", "TFLOP/s", "MFU", "peak mem", "path"]
    lines = [head]
    for r in rows:
        lines.append([
            r["family"], r["model"], f"{r['tokens_per_s']:,.0f}", f"{r['model_tflops']:.3g}",
            "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%",
            "n/a" if r["peak_mem_mb"] is None else f"{r['peak_mem_mb']:,.0f} MB",
            ("DIVERGED " if r["diverged"] else "") + describe_paths(r["paths"]),
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1] for line in lines)


def problems(rows: list[dict], kernel_mixers: set[str], require_kernels: bool) -> list[str]:
    out = [f"{r['family']}: diverged" for r in rows if r["diverged"]]
    if require_kernels:
        for r in rows:
            portable = [p for p in (r["paths"] or []) if p["path"] != "kernel"]
            if r["family"] in kernel_mixers and (r["paths"] is None or portable):
                out.append(f"{r['family']}: ran portable ops with --require-kernels: {describe_paths(r['paths'])}")
    return out


def run(config: dict, *, device: str, steps: int, width: int, layers: int, precision: str, scale: str,
        only: list[str] | None, out_dir: Path, log=print) -> tuple[list[dict], set[str]]:
    """Train the check cells; the table's rows and the mixers that have a kernel package."""
    import torch

    from arrepro.data import save_task
    from arrepro.models import get_mixer
    from arrepro.train.loop import train_cell

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu-check: CUDA is not available to torch "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); run it on a GPU node")
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = peak_tflops(name, precision) if device == "cuda" else None
    log(f"gpu-check on {name}: precision {precision}, {steps} steps, width {width}, {layers} layers"
        + ("" if peak or device != "cuda" else f" (no peak for {name!r} in PEAK_TFLOPS: MFU n/a)"))
    rows = []
    for family, model in families(config).items():
        if only and family not in only:
            continue
        spec = check_spec(config, model, width=width, layers=layers, steps=steps, device=device,
                          precision=precision, scale=scale)
        data = out_dir / "data" / f"{spec['task']}-{steps}x{spec['batch_size']}"
        if not (data / "train.npz").exists():
            save_task(spec["task_def"], data)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        result = train_cell(spec, data, out_dir / "cells" / family, log=lambda *_: None)
        mem = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
        rows.append(row(family, spec, result, mem, peak))
        r = rows[-1]
        log(f"  {family:15s} {r['tokens_per_s']:>12,.0f} tok/s  {describe_paths(r['paths'])}")
    kernel_mixers = {f for f in families(config) if getattr(get_mixer(f), "kernel_package", None)}
    return rows, kernel_mixers


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["verify"]:
        return verify_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--precision", choices=("bf16", "tf32", "fp32"), default="bf16",
                    help="bf16 runs every kernel (some need half precision); tf32 is the paper scale's (fp32 with TF32 matmuls)")
    ap.add_argument("--scale", default="paper", help="the config scale whose first task and recipe are used")
    ap.add_argument("--only", nargs="*", help="mixers to check (default: every family)")
    ap.add_argument("--require-kernels", action="store_true",
                    help="fail when a family with a kernel package ran any op on its portable path")
    ap.add_argument("--out", help="folder for the check's data, cells and table.json (default: a temporary one)")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.width < 1 or a.layers < 1:
        ap.error("--steps, --width and --layers must be positive")
    import yaml

    config = yaml.safe_load(Path(a.config).read_text())
    if a.scale not in config["scales"]:
        ap.error(f"--scale {a.scale!r}: not one of {sorted(config['scales'])} in {a.config}")
    unknown = set(a.only or ()) - set(families(config))
    if unknown:
        ap.error(f"--only: unknown mixers {sorted(unknown)}; known: {sorted(families(config))}")
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as tmp:
        out = Path(a.out) if a.out else Path(tmp)
        rows, kernel_mixers = run(config, device=a.device, steps=a.steps, width=a.width, layers=a.layers,
                                  precision=a.precision, scale=a.scale, only=a.only, out_dir=out)
        print(format_table(rows))
        if a.out:
            (out / "table.json").write_text(json.dumps(rows, indent=1))
    bad = problems(rows, kernel_mixers, a.require_kernels)
    for p in bad:
        print(f"gpu-check FAILED: {p}", file=sys.stderr)
    return 1 if bad else 0


# =====================================================================================================
# `make gpu-verify` (`python scripts/gpu_check.py verify`): the kernel packages installed from the
# carried folder, every kernel path the paper scale uses compared with its portable path at a paper
# shape, forward and every gradient, and one paper-shaped training step per family timed both ways.
#
# The carried folder (`make gpu-carry`, git-ignored, ``CARRY``) holds fla-core and
# flash-linear-attention 0.6.0 (wheels: pure Python on Triton) and the source archives of
# causal-conv1d 1.6.0 and mamba-ssm 2.3.1 (envs/gpu-carry-src.txt); workflow/ the wheels the
# optional paper cell needs to run Snakemake on a machine without it (envs/gpu-carry.txt).
#
# The install (``install_kernels``), into a folder put first on sys.path and PYTHONPATH (nothing
# of the machine's own Python environment changes):
# * the wheels, and mamba-ssm's Python code without its CUDA extension (``MAMBA_SKIP_CUDA_BUILD``):
#   its Triton kernels (Mamba2's chunked scan) run whatever happens to the builds;
# * in the background meanwhile, causal-conv1d's and mamba-ssm's CUDA extensions built from their
#   source archives for this one GPU's architecture (the packages' setup.py hard-code nine
#   architectures for CUDA 13 and pass them as -gencode flags, which make torch ignore
#   TORCH_CUDA_ARCH_LIST: they build through an nvcc that replaces every target by the device's,
#   ``filtering_cuda_home``, as envs/train.post-deploy.sh does), ``MAX_JOBS`` compile jobs each,
#   stopped at ``--build-timeout`` seconds from the start; a package whose build did not finish
#   (or failed) is reported and its CUDA kernels are not compared (causal-conv1d stays
#   uninstalled: the mixers then run its portable conv, and say so).
# The Triton cases are compared while the builds run; the CUDA ones after; the speed table last,
# once the compilers have stopped.
#
# The comparison (``compare_case``): the mixer's portable path in fp32 (TF32 off: the reference)
# against its dispatch (``forward``: the kernel the paper scale would call) in the precision the
# paper scale runs that kernel at: its ``precision`` (tf32) where the kernel takes fp32, bf16
# autocast where it needs half precision (``kernels.KERNELS[...].half_only``; the paper scale's
# fp32 runs use the portable path there). Max relative error per tensor (largest absolute
# difference over the reference's largest magnitude; a gradient over at least GRAD_FLOOR of the
# largest reference gradient, as tests/test_mixers.py measures: one that vanishes in exact
# arithmetic is rounding noise), output and every gradient (input and each parameter) against
# ``TOLERANCES``. A case whose core kernel cannot run here is reported, not compared; one that
# raises is a failure, as is a mismatch.
# =====================================================================================================
CARRY = ".gpu-carry"
SOURCE_PACKAGES = {  # distribution -> (the prefix of its build variables, the CUDA extension module)
    "causal-conv1d": ("CAUSAL_CONV1D", "causal_conv1d_cuda"),
    "mamba-ssm": ("MAMBA", "selective_scan_cuda"),
}
# which distribution provides a kernel, and whether it needs that distribution's CUDA extension
KERNEL_SOURCE = {
    "causal_conv1d_fn": ("causal-conv1d", True),
    "selective_scan_fn": ("mamba-ssm", True),
    "mamba_chunk_scan_combined": ("mamba-ssm", False),
    "chunk_delta_rule": ("fla-core", False),
    "chunk_gated_delta_rule": ("fla-core", False),
    "parallel_based": ("fla-core", False),
}
# precision -> (output, gradient) tolerance, relative. fp32: the interpreter tests' FP32_TOL
# (tests/test_kernels_interpret.py); tf32: their fp16 tolerances FWD_TOL_FP16, GRAD_TOL_FP16 (TF32
# keeps fp16's 10 mantissa bits); bf16: tests/test_mixers.py's KERNEL_TOL and 5 KERNEL_TOL
# (test_kernel_matches_portable). tests/test_gpucheck.py checks that they are those tests' numbers.
TOLERANCES = {"fp32": (1e-4, 1e-4), "tf32": (2e-2, 5e-2), "bf16": (3e-2, 1.5e-1)}
GRAD_FLOOR = 1e-2
IMPORT_FAILED = "installed but its import failed"  # a kernel that cannot run for that: an error, not a skip


@dataclass(frozen=True)
class Case:
    name: str  # the kernel path, as the tables name it
    model: str  # the config.yaml model whose mixer calls it ("short_conv": ops.ShortConv alone)
    kernels: tuple[str, ...]  # the kernel functions its forward calls; the first is the one checked


# every kernel path of the paper scale: the mixers of its models that have a kernel package
VERIFY_CASES = (
    Case("selective scan", "mamba_noconv", ("selective_scan_fn",)),
    Case("causal-conv1d", "short_conv", ("causal_conv1d_fn",)),
    Case("Mamba block", "mamba", ("selective_scan_fn", "causal_conv1d_fn")),
    Case("Mamba2 chunked scan", "mamba2", ("mamba_chunk_scan_combined", "causal_conv1d_fn")),
    Case("delta rule", "deltanet", ("chunk_delta_rule", "causal_conv1d_fn")),
    Case("gated delta rule", "gated_deltanet", ("chunk_gated_delta_rule", "causal_conv1d_fn")),
    Case("Based", "based", ("parallel_based", "causal_conv1d_fn")),
)
# one training step per family: attention (no kernel package carried: flash-attn is not built
# here, SDPA runs) is the baseline of the cost model's factors
SPEED_FAMILIES = ("attention", "based", "mamba", "mamba2", "deltanet", "gated_deltanet")


# ------------------------------------------------------------------------------ the install
def run_logged(cmd: list[str], log_path: Path, env: dict | None = None, timeout: float | None = None,
               cwd: Path | None = None, grace: float = 0.0) -> tuple[int | None, float]:
    """Run ``cmd`` with its output in ``log_path``: (exit status, or None if it was stopped at
    ``timeout`` seconds, with its whole process group: SIGTERM, then after ``grace`` seconds
    SIGKILL; seconds it ran)."""
    import os
    import signal
    import subprocess
    import time

    t0 = time.monotonic()
    with open(log_path, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            return p.wait(timeout=timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            if grace > 0:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=grace)
                    return None, time.monotonic() - t0
                except subprocess.TimeoutExpired:
                    pass
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return None, time.monotonic() - t0


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def filtering_cuda_home(real: Path, arch: str, where: Path) -> Path:
    """A CUDA_HOME that is ``real`` but for bin/nvcc, which compiles for ``arch`` ("90": sm_90)
    only: every -gencode / --generate-code target a build passes is replaced by this one. Adds the
    ``lib64/libcudart.so`` link that torch's CUDAExtension links against where the toolkit has
    only ``libcudart.so.N`` (a pip-installed toolkit)."""
    if not arch.isdigit():
        raise ValueError(f"arch {arch!r}: a compute capability without the dot, e.g. 90")
    home = where / f"cuda-home-sm{arch}"
    if home.exists():
        import shutil

        shutil.rmtree(home)
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"""#!/usr/bin/env bash
# nvcc for sm_{arch} only (arrepro.cluster.gpucheck.filtering_cuda_home): the build's targets replaced
args=()
targets=0
while [ $# -gt 0 ]; do
    case "$1" in
        -gencode|--generate-code) targets=1; shift 2 ;;
        -gencode=*|--generate-code=*) targets=1; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
[ $targets = 1 ] && args+=(-gencode arch=compute_{arch},code=sm_{arch})
exec "{real}/bin/nvcc" "${{args[@]}}"
""")
    nvcc.chmod(0o755)
    if not any((real / lib / "libcudart.so").exists() for lib in ("lib64", "lib")):
        found = sorted(real.glob("lib*/libcudart.so.*"))
        if found:
            if (home / "lib64").is_symlink():
                (home / "lib64").unlink()  # the link to real/lib64, replaced by a folder of links
            (home / "lib64").mkdir()
            for lib in ("lib64", "lib"):
                for f in (real / lib).glob("*") if (real / lib).is_dir() else ():
                    if not (home / "lib64" / f.name).exists():
                        (home / "lib64" / f.name).symlink_to(f)
            (home / "lib64" / "libcudart.so").symlink_to(found[0])
    return home


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-index", "--no-deps",
            "--no-build-isolation", "--no-compile", "--no-cache-dir", *args]


def source_archive(carry: Path, dist: str) -> Path | None:
    found = sorted((carry / "src").glob(dist.replace("-", "_") + "-*.tar.gz"))
    return found[-1] if found else None


def use_site(site: Path) -> None:
    """Put ``site`` first on this process's path and its children's PYTHONPATH."""
    import importlib
    import os

    site.mkdir(parents=True, exist_ok=True)
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(site)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *parts])
    importlib.invalidate_caches()


class Install:
    """The kernel packages' install (module comment above): ``start`` installs the wheels and the
    packages' Python code and starts the CUDA builds; ``finish`` waits for them until the time
    limit and installs what was built. ``status[dist]`` says what is there: "installed",
    "built", "Python only (...)" or "not installed (...)"."""

    def __init__(self, carry: Path, site: Path, work: Path, *, arch: str | None, cuda_home: Path | None,
                 build_timeout: float, jobs: int, log=print):
        self.carry, self.site, self.work, self.log = carry, site, work, log
        self.arch, self.cuda_home, self.build_timeout, self.jobs = arch, cuda_home, build_timeout, jobs
        self.status: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.builds: dict[str, tuple] = {}
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        import os
        import subprocess
        import time

        self.work.mkdir(parents=True, exist_ok=True)
        use_site(self.site)
        self.t0 = time.monotonic()
        wheels = sorted((self.carry / "wheels").glob("*.whl"))
        if not wheels:
            raise SystemExit(f"gpu-verify: no wheels under {self.carry / 'wheels'}: run `make gpu-carry` where the "
                             f"package registry is reachable, and carry {self.carry}")
        log_path = self.work / "install.log"
        code, secs = run_logged(_pip("--target", str(self.site), "--upgrade", *map(str, wheels)), log_path)
        if code != 0:
            raise SystemExit(f"gpu-verify: installing the carried wheels failed:\n{tail(log_path)}")
        for w in wheels:
            self.status[w.name.split("-")[0].replace("_", "-")] = "installed"
        self.log(f"installed {len(wheels)} wheels in {secs:.0f} s: {', '.join(w.name for w in wheels)}")
        for dist, (var, _) in SOURCE_PACKAGES.items():
            sdist = source_archive(self.carry, dist)
            if sdist is None:
                self.status[dist] = f"not installed (no source archive under {self.carry / 'src'})"
                continue
            self.logs[dist] = self.work / f"build-{dist}.log"
            if self.cuda_home is None or self.arch is None:
                self.status[dist] = "not installed (no CUDA toolkit: no build)"
            else:
                # PATH: this interpreter's folder first, for its ninja (torch builds in parallel, MAX_JOBS,
                # only with ninja)
                env = dict(os.environ, **{f"{var}_FORCE_BUILD": "TRUE", "CUDA_HOME": str(self.cuda_home),
                                          "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                                   os.environ.get("PATH", "")]),
                                          "MAX_JOBS": str(self.jobs),
                                          "TORCH_CUDA_ARCH_LIST": f"{self.arch[:-1]}.{self.arch[-1]}"})
                out = self.work / f"wheel-{dist}"
                if out.exists():  # an earlier run's wheel is no evidence of this build
                    import shutil

                    shutil.rmtree(out)
                cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-index", "--no-deps",
                       "--no-build-isolation", "--no-cache-dir", "-w", str(out), str(sdist)]
                with open(self.logs[dist], "ab") as f:
                    f.write(("$ " + " ".join(cmd) + "\n").encode())
                    f.flush()
                    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                self.builds[dist] = (p, out)
                self.status[dist] = "not installed (its CUDA build is running)"
                self.log(f"building {dist}'s CUDA extension for sm_{self.arch} in the background "
                         f"(MAX_JOBS={self.jobs}, at most {self.build_timeout:.0f} s): {self.logs[dist]}")
        # mamba-ssm's Python code (its Triton kernels), whatever its CUDA build does
        sdist = source_archive(self.carry, "mamba-ssm")
        if sdist is not None:
            env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE")
            code, secs = run_logged(_pip("--target", str(self.site), "--upgrade", str(sdist)), log_path, env=env)
            if code != 0:
                raise SystemExit(f"gpu-verify: installing mamba-ssm's Python code failed:\n{tail(log_path)}")
            self.status["mamba-ssm"] = f"Python only ({self.status['mamba-ssm'][len('not installed ('):-1]})"
            self.log(f"installed mamba-ssm's Python code (Triton kernels) in {secs:.0f} s")

    def finish(self) -> None:
        import os
        import signal
        import subprocess
        import time

        for dist, (p, out) in self.builds.items():
            left = self.build_timeout - (time.monotonic() - self.t0)
            try:
                code = p.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                code = None
            self.seconds[dist] = time.monotonic() - self.t0
            wheel = sorted(out.glob("*.whl"))
            if code == 0 and wheel:
                rc, _ = run_logged(_pip("--target", str(self.site), "--upgrade", str(wheel[0])), self.logs[dist])
                if rc == 0:
                    self.status[dist] = f"built for sm_{self.arch} in {self.seconds[dist]:.0f} s"
                    continue
                why = f"the built wheel did not install: {tail(self.logs[dist], 3)}"
            elif code is None:
                why = f"build stopped at the {self.build_timeout:.0f} s limit"
            else:
                why = f"build failed (exit {code}): {tail(self.logs[dist], 5)}"
            self.status[dist] = (f"Python only ({why})" if dist == "mamba-ssm" else f"not installed ({why})")
            self.log(f"{dist}: {self.status[dist]}")
        use_site(self.site)

    def usable(self, name: str) -> str | None:
        """Why kernel ``name`` cannot run from what was installed (None: it can)."""
        dist, needs_cuda = KERNEL_SOURCE[name]
        state = self.status.get(dist, "not installed (not carried)")
        if state.startswith("not installed"):
            return f"{dist} {state}"
        if needs_cuda and not state.startswith("built"):
            return f"{dist}'s CUDA extension: {state}"
        return None


# ------------------------------------------------------------------------------ the comparison
def precision_context(precision: str, device):
    """A fresh context for one forward pass at ``precision``, with TF32 set as the training loop
    sets it (arrepro.train.loop.autocast_for: tf32 only on CUDA; bf16 autocast, here on the CPU too,
    which the stand-in run uses)."""
    import contextlib

    import torch

    tf32 = precision == "tf32" and device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def effective_precision(precision: str, device) -> str:
    """What a run at ``precision`` computes in on ``device``: the CPU has no TF32."""
    return "fp32" if precision == "tf32" and device.type != "cuda" else precision


def case_precision(case: Case, paper_precision: str) -> str:
    """The paper scale's precision where its kernel takes fp32, bf16 where it needs half precision."""
    from arrepro.models import kernels

    return "bf16" if kernels.KERNELS[case.kernels[0]].half_only else paper_precision


def build_case_module(case: Case, config: dict, width: int, seq_len: int):
    """(the module whose paths are compared, its input width): the config model's mixer, or for
    "short_conv" the short conv of the Mamba block (expand x width channels, d_conv taps, SiLU)."""
    from arrepro.config import defaults
    from arrepro.models import get_mixer
    from arrepro.models.backbone import constructor_kwargs

    if case.model == "short_conv":
        from arrepro.models.ops import ShortConv

        k = defaults.model(config["models"]["mamba"])["mixer_kwargs"]
        channels = k.get("expand", 2) * width
        return ShortConv(channels, k.get("d_conv", 4), bias=True, activation="silu"), channels
    spec = defaults.model(config["models"][case.model])
    kwargs = constructor_kwargs(spec["mixer"], spec["mixer_kwargs"], spec["position"])
    return get_mixer(spec["mixer"])(width, max_len=seq_len, **kwargs), width


def rel_errors(outs, refs, names) -> dict[str, float]:
    """Max relative error of each tensor: output over its own largest magnitude, gradients over at
    least GRAD_FLOOR of the largest reference gradient (module comment)."""
    out = {}
    grads = [b for b in refs[1:] if b is not None]
    floor = GRAD_FLOOR * max((float(b.abs().max()) for b in grads), default=0.0)
    for i, (name, a, b) in enumerate(zip(names, outs, refs)):
        if (a is None) != (b is None):
            raise AssertionError(f"{name}: computed on one path only")
        if a is None:
            continue
        scale = float(b.abs().max())
        if i > 0:
            scale = max(scale, floor)
        out[name] = float((a.float() - b.float()).abs().max()) / max(scale, 1e-30)
    return out


def compare_case(case: Case, config: dict, *, batch: int, seq_len: int, width: int, device, paper_precision: str,
                 why_not: dict[str, str | None], overrides: dict | None, log=print) -> dict:
    """One row of the agreement table (module comment): the kernel path against the portable path."""
    import contextlib
    import copy

    import torch

    from arrepro.models import kernels

    precision = case_precision(case, paper_precision)
    label = effective_precision(precision, device)
    fwd_tol, grad_tol = TOLERANCES[label]
    row = {"case": case.name, "model": case.model, "kernels": list(case.kernels), "precision": label,
           "shape": f"{batch}x{seq_len}x{width}", "tolerance": [fwd_tol, grad_tol], "errors": {}, "paths": []}
    core = why_not.get(case.kernels[0])
    if core:
        status = "error" if core.startswith(IMPORT_FAILED) else "not run"
        log(f"  {case.name}: {status} ({core})")
        return {**row, "status": status, "reason": core}
    torch.manual_seed(0)
    ref, d_in = build_case_module(case, config, width, seq_len)
    ref = ref.to(device).float()
    ker = copy.deepcopy(ref)
    torch.manual_seed(1)
    x = torch.randn(batch, seq_len, d_in, device=device)
    names = ["output", "d input", *(f"d {n}" for n, _ in ref.named_parameters())]
    try:
        xr = x.clone().requires_grad_()
        with precision_context("fp32", device):
            yr = ref.forward_portable(xr)
            w = torch.randn_like(yr)  # a random cotangent: every output element counts
            gr = torch.autograd.grad((yr * w).sum(), [xr, *ref.parameters()], allow_unused=True)
        refs = [yr.detach(), *gr]
        del yr, gr
        xk = x.clone().requires_grad_()
        with kernels.override(overrides) if overrides else contextlib.nullcontext():
            with precision_context(precision, device):
                y = ker(xk)
            gk = torch.autograd.grad((y.float() * w).sum(), [xk, *ker.parameters()], allow_unused=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
        row["paths"] = kernels.paths_used(ker)
        errors = rel_errors([y.detach(), *gk], refs, names)
    except Exception as err:  # noqa: BLE001 - a kernel that raises is a failing row, with its message
        msg = f"{type(err).__name__}: {err}"
        log(f"  {case.name}: ERROR {msg[:300]}")
        return {**row, "paths": row["paths"], "status": "error", "reason": msg[:2000]}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ran = {p["op"].rsplit(".", 1)[-1]: p for p in row["paths"] if p["path"] == "kernel"}
    if case.kernels[0] not in ran:
        why = "; ".join(f"{p['op']}: {p['reason']}" for p in row["paths"] if p["path"] != "kernel") or "no record"
        log(f"  {case.name}: not run (the portable path ran: {why})")
        return {**row, "status": "not run", "reason": f"the portable path ran: {why}"}
    worst_grad = max((v for k, v in errors.items() if k != "output"), default=0.0)
    ok = errors["output"] <= fwd_tol and worst_grad <= grad_tol
    row.update(errors=errors, max_forward=errors["output"], max_gradient=worst_grad,
               status="pass" if ok else "FAIL", reason="" if ok else "outside the tolerance")
    log(f"  {case.name} ({label}, {row['shape']}): output {errors['output']:.1e}, worst gradient {worst_grad:.1e} "
        f"-> {row['status']}")
    return row


# ------------------------------------------------------------------------------ the speed table
def cost_model_tflops(spec: dict) -> float:
    """The effective rate, in the FLOPs of ``model_flops_per_token``, at which the cost model
    (arrepro.config.costs.estimate_seconds) has this cell's arithmetic run: its throughput at the
    cell's width and precision over its model card's cost factor."""
    from arrepro.config import costs

    dev = costs.DEVICES["cuda" if spec.get("device") == "cuda" else "cpu"]
    throughput = max(dev.min_flops, costs.peak_flops(spec) * min(1.0, int(spec["width"]) / dev.full_width))
    return throughput / costs.cost_factor(spec) / 1e12


def time_step(config: dict, family: str, *, scale: str, width: int, layers: int, device, precision: str,
              use_kernels: bool, overrides: dict | None, steps: int, warmup: int) -> dict:
    """Tokens/s of one paper-shaped training step (the scale's first MQAR task and recipe batch:
    forward, backward, fused AdamW), the mean of ``steps`` after ``warmup``; peak CUDA memory."""
    import contextlib
    import os
    import time

    import numpy as np
    import torch

    from arrepro.data import make_task
    from arrepro.models import kernels
    from arrepro.train.loop import build_model

    spec = check_spec(config, family, width=width, layers=layers, steps=1, device=device.type, precision=precision,
                      scale=scale)
    data = make_task({**spec["task_def"], "n_train": spec["batch_size"], "n_test": 1})["train"]
    x = torch.from_numpy(data["inputs"].astype(np.int64)).to(device)
    y = torch.from_numpy(data["labels"].astype(np.int64)).to(device)
    torch.manual_seed(0)
    model = build_model(spec, int(data["vocab_size"]), x.shape[1]).to(device)
    opt = model.configure_optimizer(lr=1e-3, weight_decay=0.1, fused=device.type in ("cpu", "cuda"))
    saved = os.environ.get(kernels.ENV)
    os.environ[kernels.ENV] = "1" if use_kernels else "0"

    def step():
        with precision_context(precision, device):
            loss, _, _ = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    try:
        with kernels.override(overrides) if overrides and use_kernels else contextlib.nullcontext():
            for _ in range(warmup):
                step()
            sync()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            sync()
            seconds = time.perf_counter() - t0
    finally:
        if saved is None:
            os.environ.pop(kernels.ENV, None)
        else:
            os.environ[kernels.ENV] = saved
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    tps = steps * x.numel() / seconds
    mem = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    paths = kernels.paths_used(model)
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"family": family, "model": spec["model"], "run": "kernels" if use_kernels else "portable",
            "precision": effective_precision(precision, device), "shape": f"{x.shape[0]}x{x.shape[1]}x{width}, {layers} layers",
            "tokens_per_s": tps, "model_tflops": model_flops_per_token(spec) * tps / 1e12,
            "cost_model_tflops": cost_model_tflops(spec), "peak_mem_mb": mem, "paths": paths}


def family_kernel(config: dict, family: str) -> str | None:
    from arrepro.config import defaults
    from arrepro.models import get_mixer

    return getattr(get_mixer(defaults.model(config["models"][family])["mixer"]), "kernel_name", None)


def speed_rows(config: dict, *, scale: str, width: int, layers: int, device, paper_precision: str,
               why_not: dict[str, str | None], overrides: dict | None, steps: int, warmup: int,
               families=SPEED_FAMILIES, stop_at: float | None = None, log=print) -> list[dict]:
    """Per family: its kernels at their precision and the portable path at the same; where that is
    bf16, also the portable path at the paper's precision (what the paper scale trains)."""
    import time

    from arrepro.models import kernels

    rows = []
    for family in families:
        name = family_kernel(config, family)
        why = why_not.get(name, f"{name}: not carried") if name else "no kernel path"
        runs = []
        if why is None:
            kp = "bf16" if kernels.KERNELS[name].half_only else paper_precision
            runs = [(True, kp), (False, kp)] + ([(False, paper_precision)] if kp != paper_precision else [])
        else:
            runs = [(False, paper_precision)]
            if why.startswith(IMPORT_FAILED):
                rows.append({"family": family, "run": "kernels", "precision": paper_precision, "error": why, "paths": []})
        for use, prec in runs:
            if stop_at is not None and time.monotonic() > stop_at:
                rows.append({"family": family, "run": "kernels" if use else "portable", "precision": prec,
                             "skipped": "past --deadline", "paths": []})
                continue
            try:
                r = time_step(config, family, scale=scale, width=width, layers=layers, device=device, precision=prec,
                              use_kernels=use, overrides=overrides, steps=steps, warmup=warmup)
            except Exception as err:  # noqa: BLE001 - reported in the table, and failing
                msg = f"{type(err).__name__}: {err}"[:2000]
                log(f"  {family} {'kernels' if use else 'portable'} {prec}: ERROR {msg[:300]}")
                rows.append({"family": family, "run": "kernels" if use else "portable", "precision": prec,
                             "error": msg, "paths": []})
                continue
            r["note"] = "" if why is None else f"kernels not run: {why}"
            rows.append(r)
            log(f"  {family:15s} {r['run']:8s} {r['precision']}: {r['tokens_per_s']:>12,.0f} tok/s, "
                f"{r['model_tflops']:.3g} TFLOP/s (cost model {r['cost_model_tflops']:.3g})")
    return rows


# ------------------------------------------------------------------------------ the first paper cell
def first_cell(grid, experiment: str = "fig2", lr: float = 1e-3):
    """The smallest cell of an experiment's first grid: its first task, model and layer count,
    its smallest width, its recipe and first seed, at learning rate ``lr``."""
    g = grid.experiments[experiment]["grids"][0]
    return grid.cell(g["tasks"][0], g["models"][0], min(g["widths"]), g["layers"][0], g["recipe"], lr, g["seeds"][0])


def train_first_cell(config: dict, *, scale: str, site: Path | None, cores: int, timeout: float, work: Path,
                     lr: float = 1e-3, log=print) -> dict:
    """Train ``first_cell`` through the workflow's own train rule (Snakemake, one target) and put
    its accuracy and wall time beside the paper's and the cost model's estimate."""
    import csv
    import os

    from arrepro.config import costs
    from arrepro.config.cellfiles import RESULT
    from arrepro.config.checks import load_grid

    repo = Path(__file__).resolve().parents[3]
    grid = load_grid(config, scale)
    cell = first_cell(grid, lr=lr)
    spec = grid.spec_of(cell)
    target = f"{cell.path}/{RESULT}"
    shim = work / "bin"  # the rules' `python` is this interpreter
    shim.mkdir(parents=True, exist_ok=True)
    if not (shim / "python").exists():
        (shim / "python").symlink_to(sys.executable)
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([*([str(site)] if site else []), str(repo / "src"),
                                           os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--rerun-incomplete", "--config", f"scale={scale}",
           "--", target]
    log(f"training the first {scale} cell through the train rule: {target}")
    code, seconds = run_logged(cmd, work / "cell.log", env=env, timeout=timeout, cwd=repo, grace=30.0)
    out = {"target": target, "command": " ".join(cmd), "exit": code, "wall_seconds": seconds,
           "estimate_seconds": costs.estimate_seconds(spec), "requested_minutes": costs.runtime_min(spec),
           "log_tail": tail(work / "cell.log", 25)}
    result = repo / target
    if code == 0 and result.is_file():
        r = json.loads(result.read_text())
        out.update({k: r.get(k) for k in ("final_accuracy", "best_accuracy", "train_seconds", "steps", "epochs_run",
                                          "tokens_per_second", "precision", "device", "kernel_paths")})
    paper = repo / "paper" / "zoology_fig2_readoffs.csv"
    if paper.is_file():
        T = spec["task_def"].get("seq_len")
        for r in csv.DictReader(paper.open()):
            if r["model"] == spec["model"] and int(r["seq_len"]) == T and int(r["width"]) == spec["width"]:
                out["paper_accuracy"], out["paper_source"] = float(r["accuracy"]), r["source"]
    out["status"] = "done" if "final_accuracy" in out else (
        f"stopped at the time limit ({timeout:.0f} s): checkpointed, a later run resumes it" if code is None
        else f"failed (exit {code})")
    return out


# ------------------------------------------------------------------------------ tables and the run
def _fmt(v, spec=".1e") -> str:
    return "n/a" if v is None else format(v, spec)


def _paths_cell(paths: list[dict]) -> str:
    return "; ".join(f"{p['op']}: " + (p.get("package") or "") if p["path"] == "kernel"
                     else f"{p['op']}: portable ({p.get('reason', '')})" for p in paths) or "-"


def markdown(report: dict) -> str:
    """The report as markdown: the environment, the install, the agreement and speed tables and,
    when it ran, the first paper cell."""
    env = report["environment"]
    lines = [f"# gpu-verify: {env['device']}", "",
             f"{env['date']}; torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, Python {env['python']}; "
             f"mode: {env['mode']}; {report['seconds']:.0f} s in all.", "", "## Install", "", "| package | state |",
             "|---|---|"]
    lines += [f"| {d} | {s} |" for d, s in report["install"].items()]
    if report["agreement"]:
        lines += agreement_lines(report["agreement"])
    if report["speed"]:
        lines += speed_lines(report["speed"])
    cell = report.get("first_cell")
    if cell:
        lines += cell_lines(cell)
    if report["problems"]:
        lines += ["", "## FAILED", ""] + [f"- {p}" for p in report["problems"]]
    return "\n".join(lines) + "\n"


def agreement_lines(rows: list[dict]) -> list[str]:
    lines = ["", "## Agreement: kernel path vs portable path (fp32 reference), forward and every gradient", "",
             "| kernel path | model | precision | shape B x L x D | output | worst gradient | tolerance | result | ran |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['model']} | {r['precision']} | {r['shape']} | {_fmt(r.get('max_forward'))} | "
                     f"{_fmt(r.get('max_gradient'))} | {r['tolerance'][0]:.0e} / {r['tolerance'][1]:.0e} | "
                     f"**{r['status']}**{(': ' + r['reason'][:300]) if r.get('reason') else ''} | {_paths_cell(r['paths'])} |")
    lines += ["", "Every gradient (max relative error):", ""]
    for r in rows:
        if r["errors"]:
            lines.append(f"- {r['case']}: " + ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items()))
    return lines


def speed_lines(rows: list[dict]) -> list[str]:
    lines = ["", "## Speed: one training step per family", "",
             "| family | run | precision | shape | tokens/s | TFLOP/s | cost model's TFLOP/s | peak memory | paths |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "skipped" in r:
            what = f"**ERROR**: {r['error'][:300]}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"| {r['family']} | {r['run']} | {r['precision']} | | {what} | | | | |")
            continue
        lines.append(f"| {r['family']} | {r['run']} | {r['precision']} | {r['shape']} | {r['tokens_per_s']:,.0f} | "
                     f"{r['model_tflops']:.3g} | {r['cost_model_tflops']:.3g} | "
                     f"{'n/a' if r['peak_mem_mb'] is None else format(r['peak_mem_mb'], ',.0f') + ' MB'} | "
                     f"{_paths_cell(r['paths'])}{(' ' + r['note']) if r.get('note') else ''} |")
    lines += ["", "TFLOP/s: `model_flops_per_token` (costs.flops_per_token without the mixer factor) times tokens/s; "
              "cost model's: the rate at which arrepro.config.costs has this cell's arithmetic run (its throughput "
              "at this width and precision over the mixer's factor)."]
    return lines


def cell_lines(cell: dict) -> list[str]:
    paper = ("none" if cell.get("paper_accuracy") is None
             else f"{cell['paper_accuracy']:.2f}, {cell.get('paper_source', '')}")
    lines = ["", "## The first paper cell, through the train rule", "", f"`{cell['command']}`", "",
             f"- status: {cell['status']}",
             f"- final accuracy: {_fmt(cell.get('final_accuracy'), '.4f')} (paper: {paper})",
             f"- wall time through Snakemake: {cell['wall_seconds']:.0f} s; training {_fmt(cell.get('train_seconds'), '.0f')} s; "
                 f"cost model: {cell['estimate_seconds']:.0f} s estimated, {cell['requested_minutes']} min requested",
             f"- paths: {_paths_cell(cell.get('kernel_paths') or [])}"]
    if cell["status"] != "done":
        lines += ["", "```", cell["log_tail"], "```"]
    return lines


def verify_problems(report: dict, require_builds: bool) -> list[str]:
    out = [f"{r['case']}: {r['status']} ({r.get('reason', '')[:300]})" for r in report["agreement"]
           if r["status"] in ("FAIL", "error")]
    out += [f"speed, {r['family']} {r['run']} {r['precision']}: {r['error'][:300]}" for r in report["speed"] if "error" in r]
    cell = report.get("first_cell")
    if cell and cell["status"].startswith("failed"):  # one stopped at the time limit is reported, not failed
        out.append(f"first paper cell: {cell['status']}")
    if require_builds:
        out += [f"{d}: its CUDA extension did not build ({s})" for d, s in report["install"].items()
                if d in SOURCE_PACKAGES and not s.startswith("built")]
    return out


def load_standins(path: Path) -> dict:
    """The ``STANDINS`` of a Python file (tests/kernel_standins.py: CPU stand-ins that enforce each
    kernel's checks and compute with the portable math)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.STANDINS)


def _environment(device, mode: str) -> dict:
    import datetime
    import platform

    import torch

    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    return {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "mode": mode,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": tv, "python": platform.python_version()}


def install_workflow(carry: Path, site: Path, log_path: Path) -> None:
    """Snakemake and what it needs beyond the GPU machine's own packages (``carry``/workflow: wheels
    and connection-pool's source archive, envs/gpu-carry.txt), into ``site``."""
    found = sorted((carry / "workflow").glob("*.whl")) + sorted((carry / "workflow").glob("*.tar.gz"))
    if not found:
        raise SystemExit(f"gpu-verify --train-cell: nothing under {carry / 'workflow'}: `make gpu-carry` first")
    code, _ = run_logged(_pip("--target", str(site), "--upgrade", *map(str, found)), log_path)
    if code != 0:
        raise SystemExit(f"gpu-verify: installing Snakemake from {carry / 'workflow'} failed:\n{tail(log_path)}")
    use_site(site)


def verify(a) -> int:
    import time

    import torch
    import yaml

    from arrepro.models import kernels

    t0 = time.monotonic()
    config = yaml.safe_load(Path(a.config).read_text())
    paper_precision = config["scales"][a.scale].get("precision", "fp32")
    cpu = a.standins is not None
    if not cpu and not torch.cuda.is_available():
        raise SystemExit("gpu-verify: CUDA is not available to torch "
                         f"(torch {torch.__version__}); on a CPU, --standins tests/kernel_standins.py runs the same flow")
    device = torch.device("cpu" if cpu else "cuda")
    mode = "cpu stand-ins" if cpu else "gpu"
    standins = load_standins(Path(a.standins)) if cpu else None
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work or tempfile.mkdtemp(prefix="gpu-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    site = Path(a.site) if a.site else work / "site"
    log = print
    log(f"gpu-verify on {_environment(device, mode)['device']} ({mode})")
    arch = a.arch
    if arch is None and not cpu:
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
    cuda_home = Path(a.cuda_home) if a.cuda_home else None
    if cuda_home is None and not cpu:
        from torch.utils.cpp_extension import CUDA_HOME

        cuda_home = Path(CUDA_HOME) if CUDA_HOME else None
    install = None
    if not a.no_install and not a.cell_only:
        filtered = filtering_cuda_home(cuda_home, arch, work) if cuda_home and arch else None
        install = Install(Path(a.carry), site, work / "install", arch=arch, cuda_home=filtered,
                          build_timeout=a.build_timeout, jobs=a.jobs, log=log)
        install.start()

    def why_not() -> dict[str, str | None]:
        found = {}
        for name in KERNEL_SOURCE:
            why = install.usable(name) if install else None
            if why is None and cpu and name not in standins:
                why = "no stand-in"
            if why is None and not cpu and kernels.installed(name) is None:
                why = f"{KERNEL_SOURCE[name][0]} not installed"
            elif why is None and not cpu:
                try:
                    kernels.function(name)
                except kernels.KernelImportError as err:
                    why = f"{IMPORT_FAILED}: {err}"
            found[name] = why
        return found

    def overrides(why: dict) -> dict | None:
        return {n: f for n, f in standins.items() if why.get(n, "not a checked kernel") is None} if cpu else None

    B, L, D = a.shape
    cases = [] if a.cell_only else [c for c in VERIFY_CASES if not a.cases or c.model in a.cases]
    rows = {}
    if cases:
        log("the Triton kernels against the portable paths")
        why = why_not()
        for c in cases:
            if not KERNEL_SOURCE[c.kernels[0]][1]:
                rows[c.name] = compare_case(c, config, batch=B, seq_len=L, width=D, device=device,
                                            paper_precision=paper_precision, why_not=why, overrides=overrides(why), log=log)
    if install:
        install.finish()
        kernels._decisions.clear()  # kernels.choose's cache: what is installed has changed
    why = why_not()
    if cases:
        log("the CUDA kernels against the portable paths")
        for c in cases:
            if c.name not in rows:
                rows[c.name] = compare_case(c, config, batch=B, seq_len=L, width=D, device=device,
                                            paper_precision=paper_precision, why_not=why, overrides=overrides(why), log=log)
    speed = []
    if a.speed_steps and not a.cell_only:
        log("one training step per family, kernels and portable")
        speed = speed_rows(config, scale=a.scale, width=a.speed_width, layers=a.speed_layers, device=device,
                           paper_precision=paper_precision, why_not=why, overrides=overrides(why), steps=a.speed_steps,
                           warmup=a.speed_warmup, families=a.families or SPEED_FAMILIES,
                           stop_at=t0 + a.deadline - 60, log=log)
    report = {"environment": _environment(device, mode),
              "install": dict(install.status) if install else {"(none)": "not installed by this run"},
              "agreement": [rows[c.name] for c in cases], "speed": speed}
    if a.train_cell:
        if not a.no_install:
            install_workflow(Path(a.carry), site, work / "install-workflow.log")
        left = a.deadline - (time.monotonic() - t0) - 30
        cell = train_first_cell(config, scale=a.scale, site=site if not a.no_install else None, cores=a.cores,
                                timeout=max(10.0, min(a.cell_timeout, left)), work=work, lr=a.cell_lr, log=log)
        report["first_cell"] = cell
        log(f"first cell: {cell['status']}, accuracy {cell.get('final_accuracy')}, {cell['wall_seconds']:.0f} s "
            f"(cost model: {cell['estimate_seconds']:.0f} s)")
    report["seconds"] = time.monotonic() - t0
    report["problems"] = verify_problems(report, a.require_cuda_builds)
    text = markdown(report)
    (out / "verify.md").write_text(text)
    (out / "verify.json").write_text(json.dumps(report, indent=1, default=str))
    for f in [*sorted((work / "install").glob("*.log")), work / "cell.log"]:
        if f.is_file():  # the end of each log (at most 2 MB), beside the tables
            (out / f.name).write_bytes(f.read_bytes()[-2_000_000:])
    print(text)
    for p in report["problems"]:
        print(f"gpu-verify FAILED: {p}", file=sys.stderr)
    return 1 if report["problems"] else 0


def _shape(text: str) -> tuple[int, int, int]:
    try:
        b, l, d = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: batch,length,width, e.g. 128,512,256") from None
    return b, l, d


def verify_main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py verify", description="The kernel packages on a GPU: installed from "
                                 "the carried folder, compared with the portable paths, timed (`make gpu-verify`).")
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--scale", default="paper", help="whose precision, tasks and recipes (default paper)")
    ap.add_argument("--out", default="results/gpu-verify", help="folder for verify.md, verify.json and the logs")
    ap.add_argument("--work", help="folder for the install and builds (default: a new temporary one)")
    ap.add_argument("--carry", default=CARRY, help=f"the carried folder (`make gpu-carry`; default {CARRY})")
    ap.add_argument("--site", help="where the packages are installed (default WORK/site)")
    ap.add_argument("--no-install", action="store_true", help="use what is importable already")
    ap.add_argument("--standins", help="CPU mode: these stand-ins (a file with STANDINS) are the kernels, on the CPU")
    ap.add_argument("--cuda-home", help="the CUDA toolkit to build with (default: torch's CUDA_HOME)")
    ap.add_argument("--arch", help="compute capability to build for, e.g. 90 (default: the GPU's)")
    ap.add_argument("--build-timeout", type=float, default=300.0,
                    help="seconds from the start after which the CUDA builds are stopped (default 300)")
    ap.add_argument("--jobs", type=int, default=16, help="MAX_JOBS of each build (default 16)")
    ap.add_argument("--require-cuda-builds", action="store_true", help="fail when a CUDA extension did not build")
    ap.add_argument("--shape", type=_shape, default=(128, 512, 256),
                    help="batch,length,width of the comparisons (default 128,512,256: the paper's L512 batch, the "
                         "widest Fig. 7 width)")
    ap.add_argument("--cases", nargs="*", help="models of the comparisons (default: all of VERIFY_CASES)")
    ap.add_argument("--families", nargs="*", help="families of the speed table (default: all)")
    ap.add_argument("--speed-width", type=int, default=1024)
    ap.add_argument("--speed-layers", type=int, default=2)
    ap.add_argument("--speed-steps", type=int, default=10, help="timed steps per row (0: no speed table)")
    ap.add_argument("--speed-warmup", type=int, default=3)
    ap.add_argument("--train-cell", action="store_true",
                    help="then train the scale's first Fig. 2 cell through the train rule (Snakemake)")
    ap.add_argument("--cell-only", action="store_true",
                    help="with --train-cell: only the cell (no kernel install, comparisons or speed table)")
    ap.add_argument("--cell-lr", type=float, default=1e-3)
    ap.add_argument("--cell-timeout", type=float, default=540.0,
                    help="seconds the cell may train (less where --deadline leaves less); then SIGTERM: it "
                         "checkpoints, and a later run resumes it")
    ap.add_argument("--deadline", type=float, default=560.0,
                    help="seconds from the start by which the run ends its cell (default 560: a 10-minute call)")
    ap.add_argument("--cores", type=int, default=16)
    a = ap.parse_args(argv)
    if a.cell_only and not a.train_cell:
        ap.error("--cell-only goes with --train-cell")
    if a.speed_steps < 0 or a.speed_warmup < 0 or a.jobs < 1 or min(a.shape) < 1:
        ap.error("--speed-steps, --speed-warmup must be >= 0; --jobs and --shape positive")
    known = {c.model for c in VERIFY_CASES}
    if set(a.cases or ()) - known:
        ap.error(f"--cases: unknown {sorted(set(a.cases) - known)}; known: {sorted(known)}")
    if set(a.families or ()) - set(SPEED_FAMILIES):
        ap.error(f"--families: unknown {sorted(set(a.families) - set(SPEED_FAMILIES))}; known: {list(SPEED_FAMILIES)}")
    return verify(a)
