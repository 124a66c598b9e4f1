"""The speed table of `make gpu-verify` (arrepro.cluster.gpuverify): one paper-shaped training step
per family timed with and without the kernels, beside the cost model's rate; and the first paper
cell trained through the workflow's own train rule, beside the paper's accuracy and the cost
model's estimate.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from arrepro.cluster.gpucheck import check_spec, model_flops_per_token
from arrepro.cluster.gpucompare import IMPORT_FAILED, effective_precision, precision_context
from arrepro.cluster.gpuinstall import run_logged, tail

# one training step per family: attention (no kernel package carried: flash-attn is not built
# here, SDPA runs) is the baseline of the cost model's factors
SPEED_FAMILIES = ("attention", "based", "mamba", "mamba2", "deltanet", "gated_deltanet")


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
    from arrepro.train.prepare import build_model

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
