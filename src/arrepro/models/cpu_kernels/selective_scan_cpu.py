"""Mamba's selective scan (S6), fused on the CPU: ``selective_scan`` has the signature of the
portable ``arrepro.models.mixers.mamba.selective_scan``; ``arrepro.models.kernels`` decides when
it runs (kernel ``selective_scan_cpu``) and records why not. Numerics: see ``common``.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, arrays, check_codegen, fma
from arrepro.models.cpu_kernels.simd import LANES, vexp, vload, vsplat, vstore, vsum



@njit(cache=True)
def _s6_forward(dt, A_t, x, Bm, Cm, y):
    """y[b,t,e] = sum_n C[b,t,n] h[b,t,n,e],  h_t = exp(dt_t A[e]) * h_{t-1} + dt_t x_t B_t, with
    A_t = A transposed (N, E). In fused multiply-adds: h_t = fma(a_t, h_{t-1}, (dt_t x_t) B_t), and
    y[b,t,e] the chain fma(h[n], C[n], .) over n in order. One batch element and one block of
    ``LANES`` channels at a time (``simd``), its states in cache; channels padded with zeros to a
    multiple of LANES (the padding changes no output). Nothing is stored for the backward pass."""
    nb, L, E = x.shape
    if E % LANES:
        Ep = E + LANES - E % LANES
        yp = np.zeros((nb, L, Ep), dtype=x.dtype)
        _forward_blocks(_pad(dt, Ep), _pad(A_t, Ep), _pad(x, Ep), Bm, Cm, yp)
        y[:, :, :] = yp[:, :, :E]
    else:
        _forward_blocks(dt, A_t, x, Bm, Cm, y)


@njit(cache=True)
def _pad(a, Ep):
    """``a`` (..., E) with zeros after its last dimension's E entries, to Ep (a new array)."""
    E = a.shape[-1]
    flat = a.reshape(-1, E)
    out = np.zeros((flat.shape[0], Ep), dtype=a.dtype)
    out[:, :E] = flat
    return out.reshape(a.shape[:-1] + (Ep,))


@njit(cache=True)
def _forward_blocks(dt, A_t, x, Bm, Cm, y):
    nb, L, E = x.shape
    N = A_t.shape[0]
    h = np.zeros((N, LANES), dtype=x.dtype)
    zero = vsplat(np.zeros(1, dtype=x.dtype)[0])
    for b in range(nb):
        for e0 in range(0, E, LANES):
            for n in range(N):
                vstore(h[n], 0, zero)
            for t in range(L):
                dtv = vload(dt[b, t], e0)
                u = dtv * vload(x[b, t], e0)
                acc = zero
                for n in range(N):
                    hv = fma(vexp(dtv * vload(A_t[n], e0)), vload(h[n], 0), u * vsplat(Bm[b, t, n]))
                    vstore(h[n], 0, hv)
                    acc = fma(hv, vsplat(Cm[b, t, n]), acc)
                vstore(y[b, t], e0, acc)


@njit(cache=True)
def _s6_backward(dt, A_t, x, Bm, Cm, gy, d_dt, dA_t, dx, dB, dC):
    """Gradients of ``_s6_forward``. Per batch element and block of LANES channels, its decays and
    states are recomputed (the same bits) into (L + 1) x N x LANES buffers (in cache), then the
    adjoint g_t = fma(gy_t, C_t, a_{t+1} g_{t+1}) runs right to left. dA_t is accumulated (zeroed
    by the caller) over b, then t from the end; dx and d_dt sum over n in order; dB and dC sum over
    channels in LANES stripes (channel e into partial sum e % LANES, in order of e: block by
    block), the stripes then added as ``simd.vsum`` adds lanes. Every accumulation a fused
    multiply-add; channels padded with zeros to a multiple of LANES (they add zeros)."""
    nb, L, E = x.shape
    if E % LANES:
        Ep = E + LANES - E % LANES
        outs = [np.zeros((nb, L, Ep), dtype=x.dtype) for _ in range(2)]
        dA_p = _pad(dA_t, Ep)
        _backward_blocks(_pad(dt, Ep), _pad(A_t, Ep), _pad(x, Ep), Bm, Cm, _pad(gy, Ep), outs[0], dA_p, outs[1], dB, dC)
        d_dt[:, :, :] = outs[0][:, :, :E]
        dx[:, :, :] = outs[1][:, :, :E]
        dA_t[:, :] = dA_p[:, :E]
    else:
        _backward_blocks(dt, A_t, x, Bm, Cm, gy, d_dt, dA_t, dx, dB, dC)


@njit(cache=True)
def _backward_blocks(dt, A_t, x, Bm, Cm, gy, d_dt, dA_t, dx, dB, dC):
    nb, L, E = x.shape
    N = A_t.shape[0]
    H = np.zeros((L + 1, N, LANES), dtype=x.dtype)  # H[t + 1] = h_t; H[0] = h_{-1} = 0
    D = np.zeros((L, N, LANES), dtype=x.dtype)  # the decays a_t
    g = np.zeros((N, LANES), dtype=x.dtype)
    PB = np.zeros((L, N, LANES), dtype=x.dtype)  # the stripes of dB and dC
    PC = np.zeros((L, N, LANES), dtype=x.dtype)
    zero = vsplat(np.zeros(1, dtype=x.dtype)[0])
    for b in range(nb):
        PB[:, :, :] = 0
        PC[:, :, :] = 0
        for e0 in range(0, E, LANES):
            for t in range(L):
                dtv = vload(dt[b, t], e0)
                u = dtv * vload(x[b, t], e0)
                for n in range(N):
                    a = vexp(dtv * vload(A_t[n], e0))
                    vstore(D[t, n], 0, a)
                    vstore(H[t + 1, n], 0, fma(a, vload(H[t, n], 0), u * vsplat(Bm[b, t, n])))
            for n in range(N):
                vstore(g[n], 0, zero)
            for t in range(L - 1, -1, -1):
                dtv = vload(dt[b, t], e0)
                xv = vload(x[b, t], e0)
                gyv = vload(gy[b, t], e0)
                u = dtv * xv
                du = zero
                dd = zero
                for n in range(N):
                    gn = fma(gyv, vsplat(Cm[b, t, n]), vload(g[n], 0))  # dL/dh_t
                    du = fma(gn, vsplat(Bm[b, t, n]), du)
                    a = vload(D[t, n], 0)
                    q = gn * a * vload(H[t, n], 0)  # dL/d(dt_t A[e, n])
                    vstore(dA_t[n], e0, fma(q, dtv, vload(dA_t[n], e0)))
                    dd = fma(q, vload(A_t[n], e0), dd)
                    vstore(PC[t, n], 0, fma(gyv, vload(H[t + 1, n], 0), vload(PC[t, n], 0)))
                    vstore(PB[t, n], 0, fma(gn, u, vload(PB[t, n], 0)))
                    vstore(g[n], 0, gn * a)  # carried to h_{t-1}
                vstore(d_dt[b, t], e0, fma(du, xv, dd))
                vstore(dx[b, t], e0, du * dtv)
        for t in range(L):
            for n in range(N):
                dC[b, t, n] = vsum(vload(PC[t, n], 0))
                dB[b, t, n] = vsum(vload(PB[t, n], 0))


class _S6(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dt, A, x, Bm, Cm):
        dt, A_t, x, Bm, Cm = (t.contiguous() for t in (dt, A.t(), x, Bm, Cm))
        y = torch.empty_like(x)
        _s6_forward(*arrays(dt, A_t, x, Bm, Cm), y.numpy())
        ctx.save_for_backward(dt, A_t, x, Bm, Cm)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        dt, A_t, x, Bm, Cm = ctx.saved_tensors
        d_dt, dx, dB, dC = torch.empty_like(dt), torch.empty_like(x), torch.empty_like(Bm), torch.empty_like(Cm)
        dA_t = torch.zeros_like(A_t)
        _s6_backward(*arrays(dt, A_t, x, Bm, Cm, gy), d_dt.numpy(), dA_t.numpy(), dx.numpy(), dB.numpy(),
                     dC.numpy())
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
