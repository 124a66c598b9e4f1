#!/usr/bin/env python
"""The cost of pinned CPU numerics (arrepro.train.numerics), a benchmark (not a test).

Trains demo-sized models (task L32 of the demo: vocabulary 128, length 32; batch 32; 1 thread
either way) for --steps steps in fresh processes, pinned (pin_environment before torch's import,
then settle: ATen AVX2, MKL COMPATIBLE, oneDNN and NNPACK off) and not pinned (this machine's
defaults, one thread), alternating --rounds times, and prints the median steps/s of each and
their ratio, with the fused CPU kernels (the default) for both.

    .venv/bin/python bench/bench_numerics.py
    .venv/bin/python bench/bench_numerics.py --models mamba:32:1 attention:32:2 --steps 100
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
pinned, mixer, width, layers, steps = sys.argv[1] == "1", sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
from arrepro.train import numerics
if pinned:
    numerics.pin_environment()
import torch
import yaml
if pinned:
    numerics.settle()
else:
    torch.set_num_threads(1)
from arrepro.train.prepare import build_model
models = yaml.safe_load(open(os.path.join(sys.argv[6], "config.yaml")))["models"]
spec = {"width": width, "layers": layers, "model_def": models[mixer], "recipe_def": {}}
torch.manual_seed(0)
model = build_model(spec, 128, 32)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
g = torch.Generator().manual_seed(0)
batches = [(torch.randint(0, 128, (32, 32), generator=g),
            torch.where(torch.rand(32, 32, generator=g) < 0.25, torch.randint(0, 128, (32, 32), generator=g), -100))
           for _ in range(8)]
def step(i):
    x, y = batches[i % len(batches)]
    loss, _, _ = model.loss(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for i in range(3):
    step(i)
t0 = time.perf_counter()
for i in range(steps):
    step(i)
print(json.dumps({"steps_per_s": steps / (time.perf_counter() - t0), "capability": torch.backends.cpu.get_cpu_capability(),
                  "mkldnn": torch.backends.mkldnn.enabled}))
"""


def run(pinned: bool, model: str, steps: int) -> float:
    name, width, layers = model.split(":")
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA",
                                                            "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run([sys.executable, "-c", CHILD, "1" if pinned else "0", name, width, layers, str(steps), str(ROOT)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])["steps_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mamba:32:1", "attention:32:2", "hyena:32:2"],
                    help="config model:width:layers")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {a.steps} steps, batch 32, length 32, "
          f"median of {a.rounds} alternating runs", flush=True)
    for model in a.models:
        rates = {True: [], False: []}
        for _ in range(a.rounds):
            for pinned in (False, True):
                rates[pinned].append(run(pinned, model, a.steps))
        p, u = statistics.median(rates[True]), statistics.median(rates[False])
        print(f"{model}: not pinned {u:.1f} steps/s, pinned {p:.1f} steps/s: pinned/not = {p / u:.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
