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

The precision is bf16 on CUDA (every kernel runs; some need half precision) and fp32 on the CPU
(the training loop refuses bf16 there) unless ``--precision`` says otherwise; a precision the
training loop refuses on the device is refused before any cell, naming the option.

The kernel verification (`make gpu-verify`, ``python scripts/gpu_check.py verify``) is
arrepro.cluster.gpuverify.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from arrepro.config.costs import flops_per_token

# Dense (no sparsity) peak throughput, TFLOP/s, from NVIDIA's data sheets: bf16 and tf32 on tensor
# cores; fp32 on the CUDA cores (what PyTorch runs when TF32 is off, arrepro.train.prepare.autocast_for).
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


def default_precision(device: str) -> str:
    """bf16 on CUDA (every kernel runs), fp32 on the CPU (no bf16 there: arrepro.train.prepare.autocast_for)."""
    return "bf16" if device == "cuda" else "fp32"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--precision", choices=("bf16", "tf32", "fp32"),
                    help="default bf16 on cuda (it runs every kernel: some need half precision), fp32 on cpu; tf32 is "
                         "the paper scale's (fp32 with TF32 matmuls)")
    ap.add_argument("--scale", default="paper", help="the config scale whose first task and recipe are used")
    ap.add_argument("--only", nargs="*", help="mixers to check (default: every family)")
    ap.add_argument("--require-kernels", action="store_true",
                    help="fail when a family with a kernel package ran any op on its portable path")
    ap.add_argument("--out", help="folder for the check's data, cells and table.json (default: a temporary one)")
    a = ap.parse_args(argv)
    if a.precision is None:
        a.precision = default_precision(a.device)
    import torch

    from arrepro.train.prepare import TrainError, autocast_for

    try:  # the training loop's own rule (bf16 on CUDA only), before any cell: one line naming the option
        autocast_for(a.precision, torch.device(a.device), where=f"--precision {a.precision} with --device {a.device}")
    except TrainError as err:
        ap.error(str(err))
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
