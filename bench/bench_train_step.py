#!/usr/bin/env python
"""Benchmark: this project's trainer vs a plain loop with full-vocabulary logits everywhere.

Trains the same cell (2-layer attention, d=64, L=64, K=4, V=8192, batch 256) for the same
number of steps both ways, in one run, and prints tokens/s of each and their ratio. The
project's trainer computes logits only at labelled positions (same loss and gradients)."""
import argparse
import tempfile
import time

import torch
import torch.nn.functional as F

from arrepro.data import save_task
from arrepro.train.loop import train_cell
from arrepro.train.prepare import build_model, load_task

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, L = 256, 64
    task = {"kind": "mqar", "vocab_size": 8192, "seq_len": L, "num_kv_pairs": 4,
            "n_train": B * a.steps, "n_test": 256, "seed": 0}
    spec = {"task": "bench", "task_name": "L64", "task_def": task, "model": "attention",
            "model_def": {"mixer": "attention", "position": "learned", "mlp": True, "mixer_kwargs": {"num_heads": 1}},
            "width": 64, "layers": 2, "recipe": "bench",
            "recipe_def": {"epochs": 1, "batch_size": B, "warmup_frac": 0.1, "schedule": "cosine", "weight_decay": 0.1},
            "batch_size": B, "lr": 1e-3, "seed": 0, "device": "cpu", "scale": "bench"}
    with tempfile.TemporaryDirectory() as tmp:
        save_task(task, f"{tmp}/data")
        ours = train_cell(spec, f"{tmp}/data", f"{tmp}/cell", threads=a.threads, log=lambda s: None)
        xtr, ytr, *_ = load_task(f"{tmp}/data")

    torch.manual_seed(0)
    model = build_model(spec, 8192, L)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    t0 = time.perf_counter()
    for s in range(a.steps):
        x, y = xtr[s * B : (s + 1) * B], ytr[s * B : (s + 1) * B]
        logits = model(x)  # (B, L, V): the full head at every position
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    plain = a.steps * B * L / (time.perf_counter() - t0)
    print(f"cell: 2-layer attention d=64 L=64 K=4 V=8192 batch {B}, {a.steps} steps, {a.threads} threads")
    print(f"plain loop (full-vocabulary logits everywhere): {plain:12,.0f} tokens/s")
    print(f"this project's trainer (labelled logits only): {ours['tokens_per_second']:12,.0f} tokens/s")
    print(f"ratio: {ours['tokens_per_second'] / plain:.2f}x")
