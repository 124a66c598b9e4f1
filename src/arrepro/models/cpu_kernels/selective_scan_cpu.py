"""Mamba's selective scan (S6), fused on the CPU: ``selective_scan`` has the signature of the
portable ``arrepro.models.mixers.mamba.selective_scan``; ``arrepro.models.kernels`` decides when
it runs (kernel ``selective_scan_cpu``) and records why not. Numerics: see ``common``.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, S, arrays, check_codegen, exp, fma, striped_sum

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True)
def _s6_forward(dt, A_t, x, Bm, Cm, y, K):
    """y[b,t,e] = sum_n C[b,t,n] h[b,t,n,e],  h_t = exp(dt_t A[e]) * h_{t-1} + dt_t x_t B_t, with
    A_t = A transposed (N, E). One batch element at a time, its states (N x E) in cache; innermost
    loops run over channels (contiguous, independent). In fused multiply-adds: h_t = fma(a_t,
    h_{t-1}, (dt_t x_t) B_t), and y[b,t,e] the chain fma(h[n], C[n], .) over n in order. Nothing
    is stored for the backward pass."""
    nb, L, E = x.shape
    N = A_t.shape[0]
    h = np.zeros((N, E), dtype=x.dtype)
    u = np.zeros(E, dtype=x.dtype)
    acc = np.zeros(E, dtype=x.dtype)
    for b in range(nb):
        h[:, :] = K[5]
        for t in range(L):
            for e in range(E):
                u[e] = dt[b, t, e] * x[b, t, e]
                acc[e] = K[5]
            for n in range(N):
                Bn = Bm[b, t, n]
                Cn = Cm[b, t, n]
                for e in range(E):
                    hv = fma(exp(dt[b, t, e] * A_t[n, e], K), h[n, e], u[e] * Bn)
                    h[n, e] = hv
                    acc[e] = fma(hv, Cn, acc[e])
            for e in range(E):
                y[b, t, e] = acc[e]


@njit(cache=True)
def _s6_backward(dt, A_t, x, Bm, Cm, gy, d_dt, dA_t, dx, dB, dC, K):
    """Gradients of ``_s6_forward``. Per batch element, its decays and states are recomputed (the
    same bits) into (L + 1) x N x E buffers (in cache at the demo's sizes), then the adjoint
    g_t = fma(gy_t, C_t, a_{t+1} g_{t+1}) runs right to left. dA_t is accumulated (zeroed by the
    caller) over b, then t from the end; dB and dC sum over channels through ``S`` stripes
    (channel e of each run of S into partial sum e % S, in order of e; the S sums then added in
    order); dx and d_dt sum over n in order; every accumulation a fused multiply-add."""
    nb, L, E = x.shape
    N = A_t.shape[0]
    H = np.zeros((L + 1, N, E), dtype=x.dtype)  # H[t + 1] = h_t; H[0] = h_{-1} = 0
    D = np.zeros((L, N, E), dtype=x.dtype)  # the decays a_t
    g = np.zeros((N, E), dtype=x.dtype)
    u = np.zeros(E, dtype=x.dtype)
    du = np.zeros(E, dtype=x.dtype)
    dd = np.zeros(E, dtype=x.dtype)
    PB = np.zeros(S, dtype=x.dtype)
    PC = np.zeros(S, dtype=x.dtype)
    ES = E - E % S
    for b in range(nb):
        for t in range(L):
            for e in range(E):
                u[e] = dt[b, t, e] * x[b, t, e]
            for n in range(N):
                Bn = Bm[b, t, n]
                for e in range(E):
                    a = exp(dt[b, t, e] * A_t[n, e], K)
                    D[t, n, e] = a
                    H[t + 1, n, e] = fma(a, H[t, n, e], u[e] * Bn)
        g[:, :] = K[5]
        for t in range(L - 1, -1, -1):
            for e in range(E):
                u[e] = dt[b, t, e] * x[b, t, e]
                du[e] = K[5]
                dd[e] = K[5]
            for n in range(N):
                Bn = Bm[b, t, n]
                Cn = Cm[b, t, n]
                for e in range(E):
                    gn = fma(gy[b, t, e], Cn, g[n, e])  # dL/dh_t
                    du[e] = fma(gn, Bn, du[e])
                    q = gn * D[t, n, e] * H[t, n, e]  # dL/d(dt_t A[e, n])
                    dA_t[n, e] = fma(q, dt[b, t, e], dA_t[n, e])
                    dd[e] = fma(q, A_t[n, e], dd[e])
                    g[n, e] = gn
                for j in range(S):
                    PB[j] = K[5]
                    PC[j] = K[5]
                for e0 in range(0, ES, S):
                    for j in range(S):
                        PC[j] = fma(gy[b, t, e0 + j], H[t + 1, n, e0 + j], PC[j])
                        PB[j] = fma(g[n, e0 + j], u[e0 + j], PB[j])
                for e in range(ES, E):
                    PC[e - ES] = fma(gy[b, t, e], H[t + 1, n, e], PC[e - ES])
                    PB[e - ES] = fma(g[n, e], u[e], PB[e - ES])
                dC[b, t, n] = striped_sum(PC, K)
                dB[b, t, n] = striped_sum(PB, K)
                for e in range(E):
                    g[n, e] *= D[t, n, e]  # carried to h_{t-1}
            for e in range(E):
                d_dt[b, t, e] = fma(du[e], x[b, t, e], dd[e])
                dx[b, t, e] = du[e] * dt[b, t, e]


class _S6(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dt, A, x, Bm, Cm):
        dt, A_t, x, Bm, Cm = (t.contiguous() for t in (dt, A.t(), x, Bm, Cm))
        y = torch.empty_like(x)
        _s6_forward(*arrays(dt, A_t, x, Bm, Cm), y.numpy(), _K[x.dtype])
        ctx.save_for_backward(dt, A_t, x, Bm, Cm)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        dt, A_t, x, Bm, Cm = ctx.saved_tensors
        d_dt, dx, dB, dC = torch.empty_like(dt), torch.empty_like(x), torch.empty_like(Bm), torch.empty_like(Cm)
        dA_t = torch.zeros_like(A_t)
        _s6_backward(*arrays(dt, A_t, x, Bm, Cm, gy), d_dt.numpy(), dA_t.numpy(), dx.numpy(), dB.numpy(),
                     dC.numpy(), _K[x.dtype])
        return d_dt, dA_t.t(), dx, dB, dC


def selective_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
                   chunk: int | None = None) -> torch.Tensor:
    """Mamba's S6 scan without the D skip, fused: x, dt (B, L, E); A (E, N); Bm, Cm (B, L, N) ->
    y (B, L, E), fp32 or fp64 on the CPU (``chunk`` is the portable path's and is ignored)."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    args = [t.to(dtype) for t in (dt, A, x, Bm, Cm)]
    with torch.autocast("cpu", enabled=False):
        return _S6.apply(*args).to(x.dtype)


def _s6_reference(dt, A, x, Bm, Cm):
    h = torch.zeros(x.shape[0], x.shape[2], A.shape[1], dtype=x.dtype)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * x[:, t])[..., None] * Bm[:, t, None, :]
        ys.append((h * Cm[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernels for ``dtype`` (fp32 or fp64) and check them
    on a tiny case against a step-by-step recurrence in fp64, outputs and gradients; raises if
    anything is off. Returns a description of the code generation."""
    check_codegen()
    g = torch.Generator().manual_seed(0)
    B, L, E, N = 2, 5, 3, 4
    ts = [torch.rand(B, L, E, generator=g, dtype=torch.float64) * 0.5, -torch.rand(E, N, generator=g,
          dtype=torch.float64) * 2, torch.randn(B, L, E, generator=g, dtype=torch.float64),
          torch.randn(B, L, N, generator=g, dtype=torch.float64), torch.randn(B, L, N, generator=g, dtype=torch.float64)]
    gy = torch.randn(B, L, E, generator=g, dtype=torch.float64)
    for dtype in [dtype]:
        args = [t.to(dtype).requires_grad_() for t in ts]
        y = selective_scan(args[2], args[0], *args[1:2], *args[3:])
        grads = torch.autograd.grad(y, args, gy.to(dtype))
        ref_args = [t.detach().to(torch.float64).requires_grad_() for t in args]
        ref = _s6_reference(*ref_args)
        ref_grads = torch.autograd.grad(ref, ref_args, gy)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        for name, a, r in [("y", y, ref)] + list(zip(("d_dt", "dA", "dx", "dB", "dC"), grads, ref_grads)):
            err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1e-30)
            if not err <= tol:
                raise RuntimeError(f"fused S6 scan self-check: {name} ({dtype}) off by {err:.2e} (tolerance {tol})")
    return CODEGEN
