#!/usr/bin/env python
"""The fused CPU paths of whole blocks and mixers against what ran before them, side by side in one
process: the attention block compiled whole (cpu_kernels/block_cpu.py) against the block's own
modules (each with its own fused kernels: linear_cpu, attention_cpu, short_conv_cpu); the DeltaNet,
Mamba2 and Hyena mixers fused (deltanet_cpu, mamba2_cpu, hyena_cpu) with their blocks' MLP
(mlp_cpu) against their fallbacks (the portable chunked paths; Hyena's FFT convolution with its
short conv's and linear layers' own kernels; the MLP's linear layers and ATen's GELU); the demo's
models at their shapes, one training step as the trainer takes it (labelled logits and loss,
zero_grad, backward, fused AdamW), pinned numerics, one thread, interleaved rounds. Prints each
model's median ms a step both ways and their ratio, and the loss of the last step of each (the two
paths' bits differ: the compiled block's layer norm and GELU are not ATen's; the fused mixers sum
in orders of their own).

    .venv/bin/python bench/bench_block_cpu.py [--rounds 5] [--steps 40] [--only DeltaNet,Mamba2,Hyena]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

ARGS, sys.argv = sys.argv[1:], [sys.argv[0], "pinned"]  # cpu_steps reads its mode from argv[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_steps  # noqa: E402  (pins the numerics, one thread)

from arrepro.train import numerics  # noqa: E402

# (label, cell): every attention block of the demo (config.yaml, scales.demo)
CELLS = [
    ("attention 4x32 (Fig. 13)", dict(model="attention", width=32, layers=4, task="L32", batch=32)),
    ("attention 1x48", dict(model="attention", width=48, layers=1, task="L32", batch=32)),
    ("attention + conv QKV 1x48", dict(model="attention_conv_qkv", width=48, layers=1, task="L32", batch=32)),
    ("attention + conv V 1x48", dict(model="attention_conv_v", width=48, layers=1, task="L32", batch=32)),
    ("attention + centred conv Q 1x48", dict(model="attention_conv_q_centred", width=48, layers=1, task="L32",
                                             batch=32)),
    ("copy: Transformer 2x32 (rotary)", dict(model="transformer_rope", width=32, layers=2, task="copy", batch=32)),
    ("copy: Transformer 4x32 (rotary)", dict(model="transformer_rope", width=32, layers=4, task="copy", batch=32)),
    ("DeltaNet 1x32 (Fig. 7)", dict(model="deltanet", width=32, layers=1, task="L32", batch=32)),
    ("Mamba2 1x32 (Fig. 7)", dict(model="mamba2", width=32, layers=1, task="L32", batch=32)),
    ("Hyena 2x32", dict(model="hyena", width=32, layers=2, task="L32", batch=32)),
    ("Hyena 1x48", dict(model="hyena", width=48, layers=1, task="L32", batch=32)),
]


def _unfused(model):
    """A copy of ``model`` as it ran before its fused paths: each compiled block's modules; each
    fused mixer's and fused MLP's fallback (the portable path, or its parts' own kernels: Hyena's
    short conv and linear layers, the MLP's linear layers with ATen's GELU)."""
    model = copy.deepcopy(model)
    for b in model.layers:
        if b.fused is not None:
            b.fused = None
            continue
        for m in (b.mixer, b.mlp):
            if getattr(m, "cpu_kernel_name", None):
                m.forward = m.forward_fallback
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--only", default="", help="the models whose label contains one of these comma-separated texts "
                    "(default: all)")
    args = ap.parse_args(ARGS)
    numerics.settle()
    runs = []
    for label, cell in CELLS:
        if args.only and not any(text in label for text in args.only.split(",")):
            continue
        fused, _, batches = cpu_steps._build(cell)
        if not all(b.fused is not None or getattr(b.mixer, "cpu_kernel_name", None) for b in fused.layers):
            sys.exit(f"{label}: neither its blocks nor its mixers are fused (block_kernel, cpu_kernel_name)")
        pair = {}
        for name, model in (("unfused", _unfused(fused)), ("fused", fused)):
            opt = model.configure_optimizer(lr=1e-3, weight_decay=0.1, fused=True)
            cpu_steps._step(model, opt, batches[0])  # compiles or loads what it runs, untimed
            pair[name] = model, opt
        runs.append((label, pair, batches))
    times = {(label, name): [] for label, pair, _ in runs for name in pair}
    losses = {}
    for r in range(args.rounds):
        for label, pair, batches in runs:
            for name, (model, opt) in pair.items():
                t = time.perf_counter()
                for i in range(args.steps):
                    loss, _, _ = model.loss(*batches[i % len(batches)])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                losses[label, name] = loss.item()
                times[label, name].append((time.perf_counter() - t) / args.steps * 1e3)
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
    print(f"median ms a step over {args.rounds} interleaved rounds of {args.steps} steps (pinned, one thread)\n")
    print("| model | unfused | fused | fused / unfused | last loss: unfused, fused |")
    print("| --- | ---: | ---: | ---: | --- |")
    for label, _, _ in runs:
        m, c = (statistics.median(times[label, n]) for n in ("unfused", "fused"))
        print(f"| {label} | {m:.2f} | {c:.2f} | {c / m:.3f} | {losses[label, 'unfused']:.4f}, "
              f"{losses[label, 'fused']:.4f} |")


if __name__ == "__main__":
    main()
