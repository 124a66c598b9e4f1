"""Mamba's selective scan (S6), fused on the CPU: ``selective_scan`` has the signature of the
portable ``arrepro.models.mixers.mamba.selective_scan``; ``arrepro.models.kernels`` decides when
it runs (kernel ``selective_scan_cpu``) and records why not. Numerics: see ``common``.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from .common import CODEGEN, K, S, arrays, check_codegen, exp, striped_sum

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True)
def _s6_forward(dt, A_t, x, Bm, Cm, y, D, H, K):
    """y[b,t,e] = sum_n C[b,t,n] h[b,t,n,e],  h_t = exp(dt_t A[e]) * h_{t-1} + dt_t x_t B_t, with
    A_t = A transposed (N, E); the decays and states are kept for the backward pass in D (B, L, N, E)
    and H (B, L + 1, N, E): H[:, t + 1] = h_t, H[:, 0] = h_{-1} = 0 (set by the caller). Innermost
    loops run over channels (contiguous, independent); each y[b,t,e] sums over n in order."""
    nb, L, E = x.shape
    N = A_t.shape[0]
    u = np.zeros(E, dtype=x.dtype)
    acc = np.zeros(E, dtype=x.dtype)
    for b in range(nb):
        for t in range(L):
            for e in range(E):
                u[e] = dt[b, t, e] * x[b, t, e]
                acc[e] = K[5]
            for n in range(N):
                Bn = Bm[b, t, n]
                Cn = Cm[b, t, n]
                for e in range(E):
                    a = exp(dt[b, t, e] * A_t[n, e], K)
                    hv = a * H[b, t, n, e] + u[e] * Bn
                    D[b, t, n, e] = a
                    H[b, t + 1, n, e] = hv
                    acc[e] += hv * Cn
            for e in range(E):
                y[b, t, e] = acc[e]


@njit(cache=True)
def _s6_backward(dt, A_t, x, Bm, Cm, D, H, gy, d_dt, dA_t, dx, dB, dC, K):
    """Gradients of ``_s6_forward`` from its decays D and states H: the adjoint
    g_t = C_t gy_t + a_{t+1} g_{t+1}, right to left. dA_t is accumulated (zeroed by the caller) over
    b, then t from the end; dB and dC sum over channels through ``S`` stripes (channel e into
    partial sum e % S, the S sums added in order); dx and d_dt sum over n in order."""
    nb, L, E = x.shape
    N = A_t.shape[0]
    g = np.zeros((N, E), dtype=x.dtype)
    u = np.zeros(E, dtype=x.dtype)
    du = np.zeros(E, dtype=x.dtype)
    dd = np.zeros(E, dtype=x.dtype)
    PB = np.zeros(S, dtype=x.dtype)
    PC = np.zeros(S, dtype=x.dtype)
    E8 = E - E % S
    for b in range(nb):
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
                    gn = g[n, e] + gy[b, t, e] * Cn  # dL/dh_t
                    du[e] += gn * Bn
                    a = D[b, t, n, e]
                    q = gn * a * H[b, t, n, e]  # dL/d(dt_t A[e, n]); H[b, t] = h_{t-1}
                    dA_t[n, e] += q * dt[b, t, e]
                    dd[e] += q * A_t[n, e]
                    g[n, e] = gn
                for j in range(S):
                    PB[j] = K[5]
                    PC[j] = K[5]
                for e0 in range(0, E8, S):
                    for j in range(S):
                        PC[j] += gy[b, t, e0 + j] * H[b, t + 1, n, e0 + j]
                        PB[j] += g[n, e0 + j] * u[e0 + j]
                for e in range(E8, E):
                    PC[e - E8] += gy[b, t, e] * H[b, t + 1, n, e]
                    PB[e - E8] += g[n, e] * u[e]
                dC[b, t, n] = striped_sum(PC, K)
                dB[b, t, n] = striped_sum(PB, K)
                for e in range(E):
                    g[n, e] *= D[b, t, n, e]  # carried to h_{t-1}
            for e in range(E):
                d_dt[b, t, e] = dd[e] + du[e] * x[b, t, e]
                dx[b, t, e] = du[e] * dt[b, t, e]


class _S6(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dt, A, x, Bm, Cm):
        dt, A_t, x, Bm, Cm = (t.contiguous() for t in (dt, A.t(), x, Bm, Cm))
        nb, L, E = x.shape
        y = torch.empty_like(x)
        D, H = x.new_empty(nb, L, A.shape[1], E), x.new_empty(nb, L + 1, A.shape[1], E)
        H[:, 0] = 0  # h_{-1}
        _s6_forward(*arrays(dt, A_t, x, Bm, Cm), y.numpy(), D.numpy(), H.numpy(), _K[x.dtype])
        ctx.save_for_backward(dt, A_t, x, Bm, Cm, D, H)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        dt, A_t, x, Bm, Cm, D, H = ctx.saved_tensors
        d_dt, dx, dB, dC = torch.empty_like(dt), torch.empty_like(x), torch.empty_like(Bm), torch.empty_like(Cm)
        dA_t = torch.zeros_like(A_t)
        _s6_backward(*arrays(dt, A_t, x, Bm, Cm, D, H, gy), d_dt.numpy(), dA_t.numpy(), dx.numpy(), dB.numpy(),
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
