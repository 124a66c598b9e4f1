"""Train one cell: a model on a task's train set, evaluated on the full test set every epoch.

Recipe (paper A.2): AdamW, weight decay, linear warmup over ``warmup_frac`` of the steps, then
the decay named by ``schedule`` (cosine to zero, linear to zero, or constant). bf16 autocast on
CUDA, fp32 on CPU. Logits only at labelled positions.

Robust on a cluster: a checkpoint (model, optimiser, RNG, metrics so far) is written atomically
after every epoch and on SIGTERM; a restarted run resumes from it and ends with the same
metrics as an uninterrupted run. A checkpoint is used only if its fingerprint (the cell spec and
the source of the code that trains it) matches, so an edited model never resumes a stale run.
``result.json`` is written last, atomically: its presence means the cell is finished.
A diverging run (non-finite loss) stops and is recorded as diverged; it is a result, not a crash.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .models import LanguageModel
from .models.kernels import describe_paths, paths_used
from .grid import train_sources

CHECKPOINT = "checkpoint.pt"


class Preempted(SystemExit):
    """Raised after a SIGTERM checkpoint: exit non-zero so the scheduler retries the job."""


def lr_at(step: int, total: int, base: float, warmup_frac: float, schedule: str) -> float:
    warm = max(1, int(round(warmup_frac * total)))
    if step < warm:
        return base * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    if schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * frac))
    if schedule == "linear":
        return base * (1.0 - frac)
    if schedule == "constant":
        return base
    raise ValueError(f"recipe.schedule: unknown schedule {schedule!r}")


def atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n"))


def load_task(data_dir: str | Path):
    """(train inputs, train labels, test inputs, test labels, vocabulary size) of a task."""
    d = Path(data_dir)
    tr, te = np.load(d / "train.npz"), np.load(d / "test.npz")
    arrays = [torch.from_numpy(a[k].astype(np.int64)) for a in (tr, te) for k in ("inputs", "labels")]
    return (*arrays, int(tr["vocab_size"]))


def build_model(spec: dict, vocab_size: int, max_len: int) -> LanguageModel:
    m = spec["model_def"]
    return LanguageModel(
        vocab_size=vocab_size, d_model=spec["width"], n_layers=spec["layers"], max_len=max_len,
        mixer=m["mixer"], mixer_kwargs=m.get("mixer_kwargs", {}), mlp=m.get("mlp", True),
        mlp_ratio=m.get("mlp_ratio", 4), position=m.get("position", "none"),
        embed_dropout=spec["recipe_def"].get("embed_dropout", 0.0),
    )


def code_fingerprint(spec: dict) -> str:
    """Hash of the cell spec and of every source file that shapes its training."""
    repo = Path(__file__).resolve().parents[2]
    h = hashlib.sha1(json.dumps(spec, sort_keys=True).encode())
    for f in train_sources(spec["model_def"]["mixer"], repo):
        h.update((repo / f).read_bytes())
    return h.hexdigest()


@torch.no_grad()
def evaluate(model, inputs, labels, batch_size, device, autocast) -> dict:
    model.eval()
    loss_sum, correct, total, exact, n = 0.0, 0, 0, 0, 0
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i : i + batch_size].to(device), labels[i : i + batch_size].to(device)
        mask = y != -100
        with autocast():
            logits, target = model.labelled_logits(x, y)
        logits = logits.float()
        loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        hit = logits.argmax(-1) == target
        correct += int(hit.sum())
        total += int(mask.sum())
        # an example is exact when every labelled position is right (copy task's string accuracy)
        per_row = torch.zeros(len(x), dtype=torch.long, device=device).index_add_(
            0, mask.nonzero()[:, 0], (~hit).long())
        exact += int((per_row == 0).sum())
        n += len(x)
    model.train()
    return {"test_loss": loss_sum / max(total, 1), "test_accuracy": correct / max(total, 1),
            "test_exact_match": exact / max(n, 1)}


def pick_device(requested: str) -> torch.device:
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def train_cell(spec: dict, data_dir: str | Path, out_dir: str | Path, threads: int | None = None,
               log=print, stop_after_steps: int | None = None) -> dict:
    """Train (or resume) one cell; write metrics.jsonl and result.json under ``out_dir``.

    ``stop_after_steps`` simulates a preemption after that many optimiser steps (tests)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    device = pick_device(spec.get("device", "auto"))
    recipe = spec["recipe_def"]
    xtr, ytr, xte, yte, vocab = load_task(data_dir)

    torch.manual_seed(spec["seed"])
    model = build_model(spec, vocab, xtr.shape[1]).to(device)
    decay, no_decay = [], []  # weight decay on matrices, not on embeddings, norms and biases
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in n else no_decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec["lr"], betas=tuple(recipe.get("betas", (0.9, 0.999))),
        fused=device.type in ("cpu", "cuda"),  # one kernel for all parameters: ~1 ms a step less on CPU
    )
    bs, epochs = spec["batch_size"], recipe["epochs"]
    steps_per_epoch = math.ceil(len(xtr) / bs)
    total = steps_per_epoch * epochs
    use_amp = device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_amp else (lambda: torch.autocast("cpu", enabled=False))

    fp = code_fingerprint(spec)
    state = {"epoch": 0, "batch": 0, "step": 0, "metrics": [], "loss_sum": 0.0, "loss_n": 0,
             "train_seconds": 0.0, "diverged": False, "done": False}
    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ck.get("fingerprint") == fp:
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            torch.set_rng_state(ck["torch_rng"])
            if use_amp and ck.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(ck["cuda_rng"])
            state = ck["state"]
            log(f"resumed from checkpoint at epoch {state['epoch']} batch {state['batch']}")
        else:
            log("checkpoint fingerprint differs from this cell and code: starting afresh")

    def save_checkpoint():
        ck = {"fingerprint": fp, "model": model.state_dict(), "optimizer": opt.state_dict(),
              "torch_rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state() if use_amp else None,
              "state": state}
        atomic_write(ckpt_path, lambda p: torch.save(ck, p))

    def write_metrics():
        atomic_write(out / "metrics.jsonl",
                     lambda p: p.write_text("".join(json.dumps(m) + "\n" for m in state["metrics"])))

    terminated = {"flag": False}
    prev = signal.signal(signal.SIGTERM, lambda *_: terminated.__setitem__("flag", True)) \
        if hasattr(signal, "SIGTERM") and _main_thread() else None
    n_params = model.num_parameters()
    L = xtr.shape[1]
    tag = f"{spec['model']} w{spec['width']} l{spec['layers']} lr{spec['lr']:.3g} s{spec['seed']}"
    log(f"[{tag}] {n_params:,} parameters, {epochs} epochs x {steps_per_epoch} steps, device {device}")
    steps_run = 0
    try:
        while state["epoch"] < epochs and not state["done"]:
            ep = state["epoch"]
            perm = torch.from_numpy(np.random.default_rng([spec["seed"], ep]).permutation(len(xtr)))
            t0 = time.perf_counter()
            while state["batch"] < steps_per_epoch:
                idx = perm[state["batch"] * bs : (state["batch"] + 1) * bs]
                x, y = xtr[idx].to(device), ytr[idx].to(device)
                for g in opt.param_groups:
                    g["lr"] = lr_at(state["step"], total, spec["lr"], recipe["warmup_frac"], recipe["schedule"])
                with autocast():
                    loss, _, _ = model.loss(x, y)
                if not torch.isfinite(loss):
                    state["diverged"] = True
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if recipe.get("grad_clip"):
                    torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["grad_clip"])
                opt.step()
                state["loss_sum"] += loss.item()
                state["loss_n"] += 1
                state["batch"] += 1
                state["step"] += 1
                steps_run += 1
                if steps_run == 1:  # which kernel or portable path each mixer took, and why
                    state["kernel_paths"] = paths_used(model, state.get("kernel_paths", []))
                    log(f"[{tag}] {describe_paths(state['kernel_paths'])}")
                if terminated["flag"] or (stop_after_steps is not None and steps_run >= stop_after_steps):
                    state["train_seconds"] += time.perf_counter() - t0
                    save_checkpoint()
                    log(f"[{tag}] stopping at step {state['step']}: checkpoint written, a restart resumes")
                    raise Preempted(3)
            state["train_seconds"] += time.perf_counter() - t0
            ev = evaluate(model, xte, yte, max(bs, 256), device, autocast)
            row = {"epoch": ep + 1, "step": state["step"], "lr": opt.param_groups[0]["lr"],
                   "train_loss": None if state["diverged"] else state["loss_sum"] / max(state["loss_n"], 1),
                   **{k: (v if math.isfinite(v) else None) for k, v in ev.items()},
                   "seconds": state["train_seconds"]}
            state["metrics"].append(row)
            state.update(epoch=ep + 1, batch=0, loss_sum=0.0, loss_n=0)
            tps = state["step"] * bs * L / max(state["train_seconds"], 1e-9)
            eta = state["train_seconds"] / (ep + 1) * (epochs - ep - 1)
            log(f"[{tag}] epoch {ep + 1}/{epochs} train_loss {row['train_loss'] or float('nan'):.4f} test_loss {ev['test_loss']:.4f} "
                f"acc {ev['test_accuracy']:.4f} | {tps:,.0f} tok/s | ETA {eta:.0f}s")
            if state["diverged"]:
                log(f"[{tag}] diverged (non-finite loss) at step {state['step']}: recorded, stopping")
                state["done"] = True
            stop_at = recipe.get("early_stop_accuracy")
            if stop_at is not None and ev["test_accuracy"] >= stop_at:
                state["done"] = True
            write_metrics()
            save_checkpoint()
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)

    write_metrics()
    accs = [m["test_accuracy"] for m in state["metrics"]]
    last = state["metrics"][-1] if state["metrics"] else {}
    result = {
        **{k: spec[k] for k in ("task", "model", "width", "layers", "recipe", "lr", "seed", "batch_size", "scale")},
        "task_name": spec.get("task_name"), "mixer": spec["model_def"]["mixer"],
        "final_accuracy": last.get("test_accuracy", 0.0), "best_accuracy": max(accs, default=0.0),
        "final_exact_match": last.get("test_exact_match", 0.0),
        "final_test_loss": last.get("test_loss"),
        "diverged": state["diverged"], "parameters": n_params, "epochs_run": len(state["metrics"]),
        "steps": state["step"], "train_seconds": state["train_seconds"],
        "tokens_per_second": state["step"] * bs * L / max(state["train_seconds"], 1e-9),
        "device": device.type, "kernel_paths": paths_used(model, state.get("kernel_paths", [])), "cell": spec,
    }
    write_json(out / "result.json", result)
    return result


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use scripts/train_cell.py")
