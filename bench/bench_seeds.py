#!/usr/bin/env python
"""Several seeds of one setting in one process: faster per cell than one model at a time? (A
benchmark, not wired into the workflow.)

Under pinned CPU numerics, at the demo's shape (task L32: vocabulary 128, length 32; batch 32),
for each model: S models (seeds 0..S-1) trained one step each in turn, against the same S models
stacked (torch.func.stack_module_state) and stepped together by torch.func.vmap over the
seeds (forward, backward through torch.func.grad, then one fused AdamW over the stacked
parameters). Prints ms per seed-step of each and their ratio. A model whose ops have no vmap
rule (a custom autograd.Function without one: Mamba's scans) says so.

    .venv/bin/python bench/bench_seeds.py --seeds 3
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from arrepro.train import numerics  # noqa: E402

numerics.pin_environment()

import torch  # noqa: E402
import yaml  # noqa: E402
from torch.func import functional_call, grad, stack_module_state, vmap  # noqa: E402

from arrepro.train.prepare import build_model  # noqa: E402


def batches(S, n=8):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x = torch.randint(0, 128, (S, 32, 32), generator=g)
        y = torch.where(torch.rand(S, 32, 32, generator=g) < 0.25, torch.randint(0, 128, (S, 32, 32), generator=g), -100)
        out.append((x, y))
    return out


def median_ms(fn, steps, rounds=5):
    fn(0)
    fn(1)
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        for i in range(steps):
            fn(i)
        times.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", nargs="+", default=["attention:32:2", "hyena:32:2", "mamba:32:1", "deltanet:32:1"])
    a = ap.parse_args()
    print(numerics.describe(numerics.settle()))
    print(f"load average {os.getloadavg()[0]:.2f}; {a.seeds} seeds, batch 32, length 32", flush=True)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]
    S = a.seeds
    data = batches(S)
    for spec_s in a.models:
        name, width, layers = spec_s.split(":")
        spec = {"width": int(width), "layers": int(layers), "model_def": config[name], "recipe_def": {}}
        models = []
        for s in range(S):
            torch.manual_seed(s)
            models.append(build_model(spec, 128, 32))
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True) for m in models]

        def one_at_a_time(i):
            x, y = data[i % len(data)]
            for s, (m, opt) in enumerate(zip(models, opts)):
                loss, _, _ = m.loss(x[s], y[s])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        sequential = median_ms(one_at_a_time, a.steps) / S
        base = copy.deepcopy(models[0]).to("meta")
        params, buffers = stack_module_state([copy.deepcopy(m) for m in models])
        params = {k: v.detach().requires_grad_() for k, v in params.items()}
        vopt = torch.optim.AdamW(list(params.values()), lr=1e-3, fused=True)

        def _loss(p, b, x, y):  # full-vocabulary logits: vmap has no data-dependent shapes (labelled_logits)
            logits = functional_call(base, (p, b), (x,))
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=-100)

        def stacked(i):
            x, y = data[i % len(data)]
            g = vmap(grad(_loss), in_dims=(0, 0, 0, 0))(params, buffers, x, y)
            for k, v in params.items():
                v.grad = g[k]
            vopt.step()

        try:
            together = median_ms(stacked, a.steps) / S
            print(f"{spec_s}: one model at a time {sequential:.2f} ms per seed-step, {S} stacked under vmap "
                  f"{together:.2f} ms: {sequential / together:.2f}x", flush=True)
        except Exception as err:  # noqa: BLE001 - a model vmap cannot batch: say which and why
            print(f"{spec_s}: one model at a time {sequential:.2f} ms per seed-step; vmap over seeds fails: "
                  f"{type(err).__name__}: {str(err).splitlines()[0][:200]}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
