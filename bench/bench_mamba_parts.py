#!/usr/bin/env python
"""Where the fused CPU Mamba mixer's time goes (issue 37), a benchmark, not a test.

At the demo's Mamba 1x32 (batch 32, length 32, d_model 32: E = 64 channels, N = 16 states, dt rank
2), pinned as a cell trains, the whole fused forward and backward (``mamba_cpu``), then each of their
pieces called on its own in the kernel's order (the products of ``linear_cpu``, the short conv, the
S6 scan, the elementwise passes: SiLU, softplus, the D skip, the gate and their gradients), rounds
interleaved; the median microseconds of each. The pieces' sum exceeds the fused call by the cost of
a call from Python (a few microseconds each).

    .venv/bin/python bench/bench_mamba_parts.py            # ~1 minute
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arrepro.train import numerics  # noqa: E402

numerics.pin_environment()
import arrepro.models.cpu_kernels  # noqa: E402,F401 - before numba: the kernels' build
import numpy as np  # noqa: E402
import torch  # noqa: E402
from numba import njit  # noqa: E402

from arrepro.models.cpu_kernels import mamba_cpu as mc  # noqa: E402
from arrepro.models.cpu_kernels.common import TWENTY, fma, sigmoid, softplus  # noqa: E402
from arrepro.models.cpu_kernels.linear_cpu import _column_sums, _gemm, _weight_grad  # noqa: E402
from arrepro.models.cpu_kernels.selective_scan_cpu import _s6_backward, _s6_forward  # noqa: E402
from arrepro.models.cpu_kernels.short_conv_cpu import _conv, _conv_backward, silu_grad  # noqa: E402


# the kernel's elementwise passes, as _mamba_forward and _mamba_backward write them
@njit(error_model="numpy")
def _silu(xc, s, K):
    for i in range(xc.shape[0]):
        for e in range(xc.shape[1]):
            s[i, e] = xc[i, e] * sigmoid(xc[i, e], K)


@njit(error_model="numpy")
def _softplus(a, out, K):
    for i in range(a.shape[0]):
        for e in range(a.shape[1]):
            out[i, e] = softplus(a[i, e], K)


@njit(error_model="numpy")
def _skip(s, Dp, y2, y):
    for i in range(s.shape[0]):
        for e in range(s.shape[1]):
            y[i, e] = fma(s[i, e], Dp[e], y2[i, e])


@njit(error_model="numpy")
def _gate(xz, y, yg, E, K):
    for i in range(y.shape[0]):
        for e in range(E):
            z = xz[i, E + e]
            yg[i, e] = y[i, e] * (z * sigmoid(z, K))


@njit(error_model="numpy")
def _gate_backward(xz, g_yg, y, gy, g_xz, E, K):
    for i in range(y.shape[0]):
        for e in range(E):
            z = xz[i, E + e]
            gy[i, e] = g_yg[i, e] * (z * sigmoid(z, K))
            g_xz[i, E + e] = silu_grad(g_yg[i, e] * y[i, e], z, K)


@njit(error_model="numpy")
def _skip_backward(gy, s, Dp, gs, g_Dp):
    g_Dp[:] = 0
    for i in range(gy.shape[0]):
        for e in range(gy.shape[1]):
            g_Dp[e] = fma(gy[i, e], s[i, e], g_Dp[e])
    for i in range(gs.shape[0]):
        for e in range(gs.shape[1]):
            gs[i, e] = fma(gy[i, e], Dp[e], gs[i, e])


@njit(error_model="numpy")
def _softplus_backward(dt_raw, g, K):
    for i in range(g.shape[0]):
        for e in range(g.shape[1]):
            if dt_raw[i, e] <= K[TWENTY]:
                g[i, e] = g[i, e] * sigmoid(dt_raw[i, e], K)


@njit(error_model="numpy")
def _silu_backward(gs, xc, g_xc, K):
    for i in range(gs.shape[0]):
        for e in range(gs.shape[1]):
            g_xc[i, e] = silu_grad(gs[i, e], xc[i, e], K)


def pieces(nb: int, L: int, D: int) -> tuple[dict, dict]:
    """{name: a call} for the whole fused forward and backward, and for each piece of them."""
    E, N, R = 2 * D, 16, -(-D // 16)
    M, X = nb * L, R + 2 * N
    rng = np.random.default_rng(0)

    def f(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    u, W_in, conv_w3, conv_b, W_x, W_dt, b_dt = f(M, D), f(2 * E, D), f(E, 1, 4), f(E), f(X, E), f(E, R), f(E)
    A_log = np.log(np.tile(np.arange(1, N + 1, dtype=np.float32), (E, 1)))  # Mamba's initial A
    Dp, W_out, gout = f(E), f(D, E), f(M, D)
    K = mc._K[torch.float32]
    ws = np.empty(M * (2 * E + 6 * E + X), np.float32)
    out = np.empty((M, D), np.float32)
    grads = [np.empty_like(a) for a in (u, W_in, conv_w3, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out)]
    whole = {
        "fused forward": lambda: mc._mamba_forward(u, W_in, conv_w3, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out, nb, L,
                                                   True, True, ws, out, K),
        "fused backward": lambda: mc._mamba_backward(gout, u, W_in, conv_w3, W_x, W_dt, A_log, Dp, W_out, nb, L, True,
                                                     True, ws, *grads, K),
    }
    whole["fused forward"]()
    xz, xc, s, xdbl, dt_raw, dt, y, yg = mc._saved(ws, M, E, 2 * E, X)
    none, conv_w = u[0, :0], conv_w3.reshape(E, 4)
    A_t, Bm, Cm = mc._scan_inputs(A_log, xdbl, nb, L, R)
    ys, g_yg, gy, g_xz, gxc = (np.empty((M, E), np.float32) for _ in range(5))
    g_xz = np.empty((M, 2 * E), np.float32)
    d_dt, ds = np.empty((nb, L, E), np.float32), np.empty((nb, L, E), np.float32)
    dA_t, dB, dC = np.zeros((N, E), np.float32), np.empty((nb, L, N), np.float32), np.empty((nb, L, N), np.float32)
    g_xdbl, gs_x, g_r = f(M, X), np.empty((M, E), np.float32), np.empty((M, R), np.float32)
    gW = {k: np.empty_like(v) for k, v in (("out", W_out), ("x", W_x), ("dt", W_dt), ("in", W_in))}
    g_b_dt, g_Dp, gcw, gcb, g_u = np.empty(E, np.float32), np.empty(E, np.float32), np.empty_like(conv_w), \
        np.empty(E, np.float32), np.empty((M, D), np.float32)
    T = {k: np.ascontiguousarray(w.T) for k, w in (("in", W_in), ("x", W_x), ("dt", W_dt), ("out", W_out))}
    parts = {
        "fwd: in_proj": lambda: _gemm(u, T["in"], xz, none, False),
        "fwd: conv": lambda: _conv(xz[:, :E], conv_w, conv_b, True, nb, L, xc),
        "fwd: SiLU": lambda: _silu(xc, s, K),
        "fwd: x_proj": lambda: _gemm(s, T["x"], xdbl, none, False),
        "fwd: dt_proj": lambda: _gemm(xdbl[:, :R], T["dt"], dt_raw, b_dt, True),
        "fwd: softplus": lambda: _softplus(dt_raw, dt, K),
        "fwd: S6 scan": lambda: _s6_forward(dt.reshape(nb, L, E), A_t, s.reshape(nb, L, E), Bm, Cm,
                                            ys.reshape(nb, L, E)),
        "fwd: D skip": lambda: _skip(s, Dp, ys, y),
        "fwd: gate": lambda: _gate(xz, y, yg, E, K),
        "fwd: out_proj": lambda: _gemm(yg, T["out"], out, none, False),
        "bwd: out_proj": lambda: (_gemm(gout, W_out, g_yg, none, False), _weight_grad(gout, yg, gW["out"])),
        "bwd: gate": lambda: _gate_backward(xz, g_yg, y, gy, g_xz, E, K),
        "bwd: S6 scan": lambda: _s6_backward(dt.reshape(nb, L, E), A_t, s.reshape(nb, L, E), Bm, Cm,
                                             gy.reshape(nb, L, E), d_dt, dA_t, ds, dB, dC),
        "bwd: D skip": lambda: _skip_backward(gy, s, Dp, ds.reshape(M, E), g_Dp),
        "bwd: softplus": lambda: _softplus_backward(dt_raw, d_dt.reshape(M, E), K),
        "bwd: dt_proj": lambda: (_gemm(d_dt.reshape(M, E), W_dt, g_r, none, False),
                                 _weight_grad(d_dt.reshape(M, E), np.ascontiguousarray(xdbl[:, :R]), gW["dt"]),
                                 _column_sums(d_dt.reshape(M, E), g_b_dt)),
        "bwd: x_proj": lambda: (_gemm(g_xdbl, W_x, gs_x, none, False), _weight_grad(g_xdbl, s, gW["x"])),
        "bwd: SiLU": lambda: _silu_backward(ds.reshape(M, E), xc, gxc, K),
        "bwd: conv": lambda: _conv_backward(gxc, xz[:, :E], conv_w, nb, L, g_xz[:, :E], gcw, gcb, True),
        "bwd: in_proj": lambda: (_gemm(g_xz, W_in, g_u, none, False), _weight_grad(g_xz, u, gW["in"])),
        "both: scan inputs (A, B, C)": lambda: mc._scan_inputs(A_log, xdbl, nb, L, R),
    }
    return whole, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50, help="calls of each piece a round")
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    numerics.settle()
    whole, parts = pieces(32, 32, a.width)
    every = {**whole, **parts}
    for fn in every.values():  # compile (or load) every piece first
        fn()
    times: dict[str, list[float]] = {k: [] for k in every}
    for _ in range(a.rounds):
        for name, fn in every.items():
            t0 = time.perf_counter()
            for _ in range(a.calls):
                fn()
            times[name].append((time.perf_counter() - t0) / a.calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    fused = med["fused forward"] + med["fused backward"]
    print(f"Mamba 1x{a.width} (batch 32, length 32), pinned, {arrepro.models.cpu_kernels.common.CODEGEN}: "
          f"median us of {a.rounds} rounds of {a.calls} calls\n")
    for name in whole:
        print(f"{name:32} {med[name]:8.1f}")
    print(f"{'(both)':32} {fused:8.1f}\n")
    for name in parts:
        print(f"{name:32} {med[name]:8.1f}   {100 * med[name] / fused:5.1f}% of the fused pair")
    scan = med["fwd: S6 scan"] + med["bwd: S6 scan"]
    print(f"\nthe S6 scan, forward and backward: {scan:.1f} us, {100 * scan / fused:.1f}% of the fused pair; the "
          f"pieces add up to {sum(med[k] for k in parts) + med['both: scan inputs (A, B, C)']:.1f} us (the kernel "
          "computes the scan inputs twice)")


if __name__ == "__main__":
    main()
