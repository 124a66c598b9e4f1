#!/usr/bin/env python
"""Benchmark of the fused CPU kernels against the portable paths (not a test), under the pinned
CPU numerics of a training cell (one thread, oneDNN off; arrepro.train.numerics).

For every mixer with a fused CPU path (``cpu_kernel_name``; built with the mixer_kwargs of the
first config.yaml model that uses it), at the CPU demo's shape (batch 32, length 32, width 32 by
default), prints in one run: the mixer's forward + backward with ``forward_portable`` and with
``forward_cpu_kernel`` and their ratio; the scan alone (portable ``selective_scan`` against the
kernel's); and one training step of the demo's 1-layer model (LanguageModel, AdamW) with the
kernels on and with ARREPRO_KERNELS=0. Rounds alternate the paths and the median of each is
reported (and the fastest round of each: the least disturbed by other work), so that a machine
shared with other work slows both alike; the load average is printed.

    .venv/bin/python bench/bench_cpu_kernels.py                 # B=32, L=32, d=32
    .venv/bin/python bench/bench_cpu_kernels.py --batch 96      # 3 seeds' worth of batch
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from arrepro.train import numerics  # noqa: E402

numerics.pin_environment()  # before torch's import, as a training cell

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import yaml  # noqa: E402

from arrepro.models import LanguageModel, available_mixers, get_mixer, kernels  # noqa: E402
from arrepro.models.backbone import model_kwargs  # noqa: E402


def median_ms(fns: dict, rounds: int, reps: int) -> dict:
    """Median (and, under key "min", the minimum) over ``rounds`` of the mean time of ``reps``
    calls, each fn timed in turn per round."""
    for fn in fns.values():
        fn()  # warm-up (compiles or loads the kernels)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[k].append((time.perf_counter() - t0) / reps * 1e3)
    return {**{k: statistics.median(v) for k, v in times.items()}, "min": {k: min(v) for k, v in times.items()}}


def line(what: str, t: dict, a: str = "portable", b: str = "fused") -> str:
    return (f"{what}: {a} {t[a]:.2f} ms, {b} {t[b]:.2f} ms: {t[a] / t[b]:.2f}x "
            f"(fastest rounds {t['min'][a]:.2f} / {t['min'][b]:.2f} ms: {t['min'][a] / t['min'][b]:.2f}x)")


def fwd_bwd(module, path, x):
    def run():
        module.zero_grad(set_to_none=True)
        getattr(module, path)(x).square().mean().backward()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    record = numerics.settle()
    B, L, d = a.batch, a.length, a.width
    print(f"{numerics.describe(record)}\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"B={B} L={L} d={d}, median of {a.rounds} alternating rounds of {a.reps}", flush=True)
    models = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]
    for mixer in available_mixers():
        cls = get_mixer(mixer)
        if not getattr(cls, "cpu_kernel_name", None):
            continue
        model, spec = next((n, s) for n, s in models.items() if s["mixer"] == mixer)
        torch.manual_seed(0)
        m = cls(d, max_len=L, **spec.get("mixer_kwargs", {}))
        x = torch.randn(B, L, d, requires_grad=True)
        fn, rec = kernels.choose(cls.cpu_kernel_name, x, **m.kernel_call(x))
        if fn is None:
            print(f"{mixer}: the fused path is unavailable here ({rec['reason']})")
            continue
        t = median_ms({"portable": fwd_bwd(m, "forward_portable", x),
                       "fused": fwd_bwd(m, "forward_cpu_kernel", x)}, a.rounds, a.reps)
        print(line(f"{mixer} ({model}) mixer forward+backward", t), flush=True)
        scans = scan_inputs(m, x)
        if scans:
            portable_scan, fused_scan, args = scans
            t = median_ms({"portable": lambda: portable_scan(*args).square().mean().backward(),
                           "fused": lambda: fused_scan(*args).square().mean().backward()}, a.rounds, a.reps)
            print(line(f"{mixer} scan alone forward+backward", t), flush=True)
        t = median_ms({"portable": train_step(spec, B, L, d, portable=True),
                       "fused": train_step(spec, B, L, d, portable=False)}, a.rounds, a.reps)
        print(line(f"{model} 1-layer training step (portable: ARREPRO_KERNELS=0)", t), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def scan_inputs(m, x):
    """(portable scan, fused scan, inputs) for a mixer whose portable path calls a module-level
    ``selective_scan`` (Mamba); None for others."""
    from arrepro.models.mixers import mamba

    if not isinstance(m, mamba.Mamba):
        return None
    with torch.no_grad():
        xs, _, r, Bm, Cm = m._ssm_inputs(x, "forward_portable")
        dt = F.softplus(m.dt_proj(r))
        A = -torch.exp(m.A_log)
    args = [t.detach().clone().requires_grad_() for t in (xs, dt, A, Bm, Cm)]
    from arrepro.models.cpu_kernels import selective_scan_cpu  # the scan inside the fused mixer (mamba_cpu)

    return mamba.selective_scan, selective_scan_cpu.selective_scan, args


def train_step(spec, B, L, d, portable: bool):
    torch.manual_seed(0)
    lm = LanguageModel(vocab_size=128, d_model=d, n_layers=1, max_len=L, **model_kwargs(spec))
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-3, fused=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (B, L), generator=g)
    y = torch.where(torch.rand(B, L, generator=g) < 0.2, torch.randint(0, 128, (B, L), generator=g), -100)

    def run():
        before = os.environ.get(kernels.ENV)
        if portable:
            os.environ[kernels.ENV] = "0"
        try:
            loss, _, _ = lm.loss(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        finally:
            if before is None:
                os.environ.pop(kernels.ENV, None)
            else:
                os.environ[kernels.ENV] = before
    return run


if __name__ == "__main__":
    main()
