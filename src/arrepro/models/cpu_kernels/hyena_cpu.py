"""The Hyena operator on the CPU, fused: ``hyena(x, ..., h, ...)`` computes what
``Hyena.forward_portable`` computes from its long filters h (in_proj, the short depthwise conv,
the gates, each order's long convolution with its bias term, out_proj) in one call forward and one
backward, instead of some 40 ATen calls and autograd nodes each way (the FFTs, their pads and
products among them). The implicit filters stay in ATen (their MLP is a few small products over
the sequence's positions): h comes in as a tensor and its gradient goes back to them.
``arrepro.models.kernels`` decides when it runs (kernel ``hyena_cpu``: up to ``MAX_LEN``,
where a direct convolution costs less than the FFTs) and records why not.

For order N with u = conv(in_proj(x)) split into (g_0, ..., g_{N-1}, v), each d wide, rows
(b, t), channels e:

    w_i = v g_i,   v <- c_i = sum_{j=0..t} h_i[j] w_i[t - j] + bias_i w_i      (i = 0 .. N-2)
    y   = out_proj(v g_{N-1})

The long convolution is direct (each output a chain of fused multiply-adds over the taps j in
order, the bias term last), its backward likewise: dw_i[s] = bias_i dc[s] + sum_{j>=1} h_i[j]
dc[s + j]; dh_i[j] = the sum over the rows (b, t >= j) in order of dc[t] w_i[t - j]. Numerics, in
the input dtype (the portable path's bits are not kept: it convolves by FFT): the products are
``linear_cpu``'s and the short conv ``short_conv_cpu``'s; every sum a chain in a fixed order, the
innermost loop over the channels. So the same bits on every x86-64 CPU.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, check_mixer, fma
from arrepro.models.cpu_kernels.linear_cpu import _column_sums, _gemm, _weight_grad
from arrepro.models.cpu_kernels.short_conv_cpu import _conv, _conv_backward
from arrepro.models.cpu_kernels.simd import LANES, vload, vsplat, vstore

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}
# the longest sequence this operator takes: its direct long convolution costs L^2 / 2 multiply-adds
# a channel, the FFTs' calls a fixed cost: a Hyena layer's forward and backward, fused against the
# FFT path, width 64: 0.62 at L 64, 0.74 at 128, 0.90 at 256, 1.20 at 512 (docs/benchmarks.md)
MAX_LEN = 256


def outside_limits(call: dict) -> str | None:
    """Why a call is beyond this operator (``arrepro.models.kernels`` asks; the FFT path runs), or None."""
    L = call["length"]
    return f"length {L} > hyena_cpu's direct long convolution's limit {MAX_LEN}" if L > MAX_LEN else None


@njit(cache=True, error_model="numpy")
def _long_conv(w, h, fb, nb, L, c):
    """c (M, d) = the causal convolution of w (M, d) with h (L, d) (tap j at lag j) + fb w; channels
    in vectors of ``simd.LANES`` held in registers over the taps, the rest one by one (the same
    arithmetic). Every array with unit stride in its last dimension."""
    d = w.shape[1]
    EB = d - d % LANES
    for b in range(nb):
        for t in range(L):
            m = b * L + t
            for e0 in range(0, EB, LANES):
                acc = vload(h[0], e0) * vload(w[m], e0)
                for j in range(1, t + 1):
                    acc = fma(vload(h[j], e0), vload(w[m - j], e0), acc)
                vstore(c[m], e0, fma(vload(fb, e0), vload(w[m], e0), acc))
            for e in range(EB, d):
                v = h[0, e] * w[m, e]
                for j in range(1, t + 1):
                    v = fma(h[j, e], w[m - j, e], v)
                c[m, e] = fma(fb[e], w[m, e], v)


@njit(cache=True, error_model="numpy")
def _long_conv_backward(dc, w, h, fb, nb, L, dw, dh, dfb):
    """The gradients of ``_long_conv`` for dc = dL/dc: dw (M, d), dh (L, d), dfb (d,); vectors as there."""
    d = w.shape[1]
    EB = d - d % LANES
    zero = np.zeros(1, dtype=w.dtype)[0]
    zv = vsplat(zero)
    for b in range(nb):
        for t in range(L):
            m = b * L + t
            for e0 in range(0, EB, LANES):
                acc = vload(fb, e0) * vload(dc[m], e0)
                for j in range(L - t):
                    acc = fma(vload(h[j], e0), vload(dc[m + j], e0), acc)
                vstore(dw[m], e0, acc)
            for e in range(EB, d):
                v = fb[e] * dc[m, e]
                for j in range(L - t):
                    v = fma(h[j, e], dc[m + j, e], v)
                dw[m, e] = v
    for j in range(L):
        for e0 in range(0, EB, LANES):
            acc = zv
            for b in range(nb):
                for t in range(j, L):
                    m = b * L + t
                    acc = fma(vload(dc[m], e0), vload(w[m - j], e0), acc)
            vstore(dh[j], e0, acc)
        for e in range(EB, d):
            v = zero
            for b in range(nb):
                for t in range(j, L):
                    m = b * L + t
                    v = fma(dc[m, e], w[m - j, e], v)
            dh[j, e] = v
    for e0 in range(0, EB, LANES):
        acc = zv
        for m in range(w.shape[0]):
            acc = fma(vload(dc[m], e0), vload(w[m], e0), acc)
        vstore(dfb, e0, acc)
    for e in range(EB, d):
        v = zero
        for m in range(w.shape[0]):
            v = fma(dc[m, e], w[m, e], v)
        dfb[e] = v


@njit(cache=True, error_model="numpy")
def _forward(x, Win, bin_, cw, cb, h, fb, Wout, bout, nb, L):
    """The operator's output and what the backward pass reads; h (N-1, L, d), fb (N-1, d)."""
    M, d = x.shape
    order = h.shape[0] + 1
    a = np.empty((M, Win.shape[0]), x.dtype)
    _gemm(x, np.ascontiguousarray(Win.T), a, bin_, True)
    u = np.empty_like(a)
    _conv(a, cw, cb, True, nb, L, u)
    ws, cs = np.empty((order - 1, M, d), x.dtype), np.empty((order - 1, M, d), x.dtype)
    v = np.ascontiguousarray(u[:, order * d:])
    for i in range(order - 1):
        for m in range(M):
            for e in range(d):
                ws[i, m, e] = v[m, e] * u[m, i * d + e]
        _long_conv(ws[i], h[i], fb[i], nb, L, cs[i])
        v = cs[i]
    o = np.empty((M, d), x.dtype)
    for m in range(M):
        for e in range(d):
            o[m, e] = v[m, e] * u[m, (order - 1) * d + e]
    y = np.empty((M, Wout.shape[0]), x.dtype)
    _gemm(o, np.ascontiguousarray(Wout.T), y, bout, True)
    return y, (a, u, ws, cs, o)


@njit(cache=True, error_model="numpy")
def _backward(gy, x, Win, cw, h, fb, Wout, saved, nb, L):
    """The gradients of ``_forward``: (x, Win, bin, cw, cb, h, fb, Wout, bout)."""
    a, u, ws, cs, o = saved
    M, d = x.shape
    order = h.shape[0] + 1
    none = x[0, :0]
    g_Wout, g_bout = np.empty_like(Wout), np.empty(Wout.shape[0], x.dtype)
    _weight_grad(gy, o, g_Wout)
    _column_sums(gy, g_bout)
    g_o = np.empty((M, d), x.dtype)
    _gemm(gy, Wout, g_o, none, False)
    g_u = np.empty_like(u)
    g_v = np.empty((M, d), x.dtype)
    last = cs[order - 2]
    for m in range(M):
        for e in range(d):
            g_v[m, e] = g_o[m, e] * u[m, (order - 1) * d + e]
            g_u[m, (order - 1) * d + e] = g_o[m, e] * last[m, e]
    g_h, g_fb = np.empty_like(h), np.empty_like(fb)
    dw = np.empty((M, d), x.dtype)
    for i in range(order - 2, -1, -1):
        _long_conv_backward(g_v, ws[i], h[i], fb[i], nb, L, dw, g_h[i], g_fb[i])
        for m in range(M):
            for e in range(d):
                vin = cs[i - 1, m, e] if i > 0 else u[m, order * d + e]
                g_u[m, i * d + e] = dw[m, e] * vin
                g_v[m, e] = dw[m, e] * u[m, i * d + e]
    for m in range(M):
        for e in range(d):
            g_u[m, order * d + e] = g_v[m, e]
    g_a, g_cw, g_cb = np.empty_like(a), np.empty_like(cw), np.empty(cw.shape[0], x.dtype)
    _conv_backward(g_u, a, cw, nb, L, g_a, g_cw, g_cb, True)
    g_x = np.empty((M, d), x.dtype)
    _gemm(g_a, Win, g_x, none, False)
    g_Win, g_bin = np.empty_like(Win), np.empty(Win.shape[0], x.dtype)
    _weight_grad(g_a, x, g_Win)
    _column_sums(g_a, g_bin)
    return g_x, g_Win, g_bin, g_cw, g_cb, g_h, g_fb, g_Wout, g_bout


class _Hyena(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, Win, bin_, cw, cb, h, fb, Wout, bout):
        nb, L, d = x.shape
        x2 = x.detach().reshape(nb * L, d).contiguous().numpy()
        order1 = h.shape[0]
        ps = [t.detach().contiguous().numpy() for t in (Win, bin_, cw.reshape(cw.shape[0], -1), cb,
                                                         h[..., :L].transpose(1, 2), fb.reshape(order1, d), Wout,
                                                         bout)]
        y, saved = _forward(x2, *ps, nb, L)
        ctx.keep = x2, ps, saved, nb, L, cw.shape, h.shape, fb.shape
        return torch.from_numpy(y).view(nb, L, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x2, ps, saved, nb, L, cshape, hshape, fbshape = ctx.keep
        Win, _, cw, _, h, fb, Wout, _ = ps
        g = _backward(gy.reshape(x2.shape[0], -1).contiguous().numpy(), x2, Win, cw, h, fb, Wout, saved, nb, L)
        g_x, g_Win, g_bin, g_cw, g_cb, g_h, g_fb, g_Wout, g_bout = (torch.from_numpy(a) for a in g)
        g_hfull = g_h.new_zeros(hshape)
        g_hfull[..., :L] = g_h.transpose(1, 2)
        return (g_x.view(nb, L, -1), g_Win, g_bin, g_cw.reshape(cshape), g_cb, g_hfull, g_fb.reshape(fbshape), g_Wout,
                g_bout)


def hyena(x: torch.Tensor, in_proj_weight: torch.Tensor, in_proj_bias: torch.Tensor, conv_weight: torch.Tensor,
          conv_bias: torch.Tensor, filters: torch.Tensor, filter_bias: torch.Tensor, out_proj_weight: torch.Tensor,
          out_proj_bias: torch.Tensor) -> torch.Tensor:
    """The Hyena operator of x (B, L, d) from its parameters as its modules hold them (in_proj's rows
    g_0 .. g_{N-1}, v; the short conv's weight ((N+1) d, 1, k), tap k-1 the current step) and its
    long filters (N-1, d, >= L) with their biases ((N-1) d,), on the CPU in one dtype, fp32 or fp64."""
    ts = (x, in_proj_weight, in_proj_bias, conv_weight, conv_bias, filters, filter_bias, out_proj_weight, out_proj_bias)
    if x.dtype not in _K or any(t.dtype != x.dtype or t.device.type != "cpu" for t in ts):
        raise ValueError(f"hyena_cpu: CPU tensors of one dtype, fp32 or fp64, got {sorted({str(t.dtype) for t in ts})}")
    nb, L, d = x.shape
    n1 = filters.shape[0]
    if filters.shape[1:2] != (d,) or filters.shape[2] < L or in_proj_weight.shape != ((n1 + 2) * d, d) \
            or filter_bias.numel() != n1 * d:
        raise ValueError(f"hyena_cpu: width {d}, length {L}: filters {tuple(filters.shape)}, in_proj "
                         f"{tuple(in_proj_weight.shape)}, filter bias {tuple(filter_bias.shape)} do not match")
    return _Hyena.apply(x, in_proj_weight, in_proj_bias, conv_weight, conv_bias, filters, filter_bias, out_proj_weight,
                        out_proj_bias)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it against the
    portable Hyena operator in fp64 (output and every gradient, the filter MLP's included), at
    orders 2 and 3 and lengths 11 and 1; raises if anything is off."""
    from arrepro.models.mixers.hyena import Hyena

    check_codegen()
    g = torch.Generator().manual_seed(0)
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    for d, order, L in ((12, 2, 11), (8, 3, 11), (8, 2, 1)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            m = Hyena(d, max_len=16, order=order, filter_order=8).double()
        check_mixer(m, d, L, lambda x, mc, L=L: hyena(x, *mc.cpu_kernel_arguments(L)), dtype, g, tol,
                    f"fused CPU Hyena self-check (width {d}, order {order}, length {L})")
    return CODEGEN
