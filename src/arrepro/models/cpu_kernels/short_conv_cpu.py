"""The short depthwise causal convolution (``ops.ShortConv``) on the CPU, fused: ``short_conv(x,
weight, bias, silu)`` computes what ``ShortConv.forward_portable`` does in one call forward and one
backward, instead of some 25 ATen calls and autograd nodes (a pad, k multiplies and adds, the
bias, the activation, and their backward). ``arrepro.models.kernels`` decides when it runs
(kernel ``short_conv_cpu``) and records why not. The fused Mamba mixer (``mamba_cpu``) uses the
same loops.

    y[b, t, e] = fma(x[b, t, e], w[e, k-1], ... fma(x[b, t-k+2, e], w[e, 1], x[b, t-k+1, e] w[e, 0]) ...) + bias[e]

zeros before the sequence (tap k-1 multiplies the current step, as in the portable path), then
SiLU if asked (``common.sigmoid``). The input gradient sums the taps in order, the weight and
bias gradients the rows (b, t) in order, each term a fused multiply-add. Numerics: see ``common``.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, fma, sigmoid
from arrepro.models.cpu_kernels.linear_cpu import _column_sums
from arrepro.models.cpu_kernels.simd import LANES, vload, vsplat, vstore

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True, error_model="numpy")
def _conv(x, w, bias, use_bias, nb, L, out):
    """out = the convolution of the module docstring (no activation); x, out (nb L, E) with unit
    stride in their last dimension. Channels in blocks of ``simd.LANES``, the rest one by one
    (the same arithmetic)."""
    E, k = w.shape
    if x.strides[1] != x.itemsize or out.strides[1] != out.itemsize:
        raise ValueError("short_conv_cpu: x and out need unit stride in their last dimension")
    wt = np.ascontiguousarray(w.T)  # (k, E)
    zero = np.zeros(1, dtype=x.dtype)[0]
    zv = vsplat(zero)
    EB = E - E % LANES
    for b in range(nb):
        for t in range(L):
            row = b * L + t
            for e0 in range(0, EB, LANES):
                src = t - k + 1
                acc = (vload(x[row - k + 1], e0) if src >= 0 else zv) * vload(wt[0], e0)
                for j in range(1, k):
                    src = t - k + 1 + j
                    acc = fma(vload(x[b * L + src], e0) if src >= 0 else zv, vload(wt[j], e0), acc)
                if use_bias:
                    acc = acc + vload(bias, e0)
                vstore(out[row], e0, acc)
            for e in range(EB, E):
                v = (x[row - k + 1, e] if t - k + 1 >= 0 else zero) * wt[0, e]
                for j in range(1, k):
                    src = t - k + 1 + j
                    v = fma(x[b * L + src, e] if src >= 0 else zero, wt[j, e], v)
                out[row, e] = v + bias[e] if use_bias else v


@njit(cache=True, error_model="numpy")
def _conv_backward(g, x, w, nb, L, gx, gw, gb, use_bias):
    """The gradients of ``_conv`` for g = dL/dout (before any activation): gx[t] = the chain over
    taps j in order of fma(w[j], g[t + k-1-j], .); gw[e, j] and gb[e] sums over the rows in order.
    g, x, gx with unit stride in their last dimension."""
    E, k = w.shape
    if g.strides[1] != g.itemsize or x.strides[1] != x.itemsize or gx.strides[1] != gx.itemsize:
        raise ValueError("short_conv_cpu: g, x and gx need unit stride in their last dimension")
    wt = np.ascontiguousarray(w.T)  # (k, E)
    zero = np.zeros(1, dtype=x.dtype)[0]
    zv = vsplat(zero)
    EB = E - E % LANES
    for b in range(nb):
        for t in range(L):
            row = b * L + t
            for e0 in range(0, EB, LANES):
                acc = zv
                for j in range(k):
                    dst = t + k - 1 - j
                    if dst < L:
                        acc = fma(vload(wt[j], e0), vload(g[b * L + dst], e0), acc)
                vstore(gx[row], e0, acc)
            for e in range(EB, E):
                v = zero
                for j in range(k):
                    dst = t + k - 1 - j
                    if dst < L:
                        v = fma(wt[j, e], g[b * L + dst, e], v)
                gx[row, e] = v
    gwt = np.zeros((k, E), dtype=x.dtype)  # gw transposed
    for e0 in range(0, EB, LANES):
        for b in range(nb):
            for t in range(L):
                row = b * L + t
                gv = vload(g[row], e0)
                for j in range(k):
                    src = t - k + 1 + j
                    if src >= 0:
                        vstore(gwt[j], e0, fma(gv, vload(x[b * L + src], e0), vload(gwt[j], e0)))
    for e in range(EB, E):
        for b in range(nb):
            for t in range(L):
                row = b * L + t
                for j in range(k):
                    src = t - k + 1 + j
                    if src >= 0:
                        gwt[j, e] = fma(g[row, e], x[b * L + src, e], gwt[j, e])
    gw[:, :] = gwt.T
    if use_bias:
        _column_sums(g, gb)


@njit(cache=True)
def _padded(h, nb, L, s):
    """Each sequence of h (nb L, D) with s zero rows after it: (nb (L + s), D)."""
    Ls = L + s
    hp = np.zeros((nb * Ls, h.shape[1]), h.dtype)
    for b in range(nb):
        hp[b * Ls:b * Ls + L] = h[b * L:(b + 1) * L]
    return hp


@njit(cache=True, error_model="numpy")
def _conv_ahead(h, w, bias, nb, L, s, out):
    """out = the short convolution of each sequence of h with w (D, k) and bias, looking s steps
    ahead: the causal one (``_conv``) of the sequence with s zeros after it, shifted
    back s steps."""
    Ls = L + s
    op = np.empty((nb * Ls, h.shape[1]), h.dtype)
    _conv(_padded(h, nb, L, s), w, bias, True, nb, Ls, op)
    for b in range(nb):
        out[b * L:(b + 1) * L] = op[b * Ls + s:b * Ls + s + L]


@njit(cache=True, error_model="numpy")
def _conv_ahead_backward(g, h, w, nb, L, s, gh, gw, gb):
    """gh = the gradient of ``_conv_ahead``'s input for g, the gradient of its output; gw, gb its
    weight's and bias's (``_conv_backward``: rows in order)."""
    Ls = L + s
    gp = np.zeros((nb * Ls, h.shape[1]), h.dtype)
    for b in range(nb):
        gp[b * Ls + s:b * Ls + s + L] = g[b * L:(b + 1) * L]
    ghp = np.empty_like(gp)
    _conv_backward(gp, _padded(h, nb, L, s), w, nb, Ls, ghp, gw, gb, True)
    for b in range(nb):
        gh[b * L:(b + 1) * L] = ghp[b * Ls:b * Ls + L]


@njit(cache=True, inline="always", error_model="numpy")
def silu_grad(g, v, K):
    """g times d silu(v) / dv = g sigmoid(v) (1 + v (1 - sigmoid(v)))."""
    sg = sigmoid(v, K)
    return g * (sg * (K[7] + v * (K[7] - sg)))


@njit(cache=True, error_model="numpy")
def _short_conv_forward(x, w, bias, use_bias, silu, nb, L, pre, out, K):
    _conv(x, w, bias, use_bias, nb, L, pre)
    if silu:
        for i in range(pre.shape[0]):
            for e in range(pre.shape[1]):
                v = pre[i, e]
                out[i, e] = v * sigmoid(v, K)
    else:
        out[:, :] = pre


@njit(cache=True, error_model="numpy")
def _short_conv_backward(gout, x, w, pre, use_bias, silu, nb, L, gx, gw, gb, K):
    if silu:
        g = np.empty_like(pre)
        for i in range(pre.shape[0]):
            for e in range(pre.shape[1]):
                g[i, e] = silu_grad(gout[i, e], pre[i, e], K)
    else:
        g = gout
    _conv_backward(g, x, w, nb, L, gx, gw, gb, use_bias)


class _ShortConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, silu):
        nb, L, E = x.shape
        x2 = x.detach().reshape(nb * L, E)
        pre = torch.empty(nb * L, E, dtype=x.dtype)
        out = torch.empty(nb * L, E, dtype=x.dtype) if silu else pre
        b = bias if bias is not None else weight[:, 0]
        _short_conv_forward(x2.numpy(), weight.detach().numpy(), b.detach().numpy(), bias is not None, silu, nb, L,
                            pre.numpy(), out.numpy(), _K[x.dtype])
        ctx.save_for_backward(x2, weight, pre)
        ctx.meta = (nb, L, bias is not None, silu)
        return out.view(nb, L, E)

    @staticmethod
    @once_differentiable
    def backward(ctx, gout):
        x2, weight, pre = ctx.saved_tensors
        nb, L, has_bias, silu = ctx.meta
        gx, gw = torch.empty(x2.shape, dtype=x2.dtype), torch.empty(weight.shape, dtype=weight.dtype)
        gb = torch.empty(weight.shape[0], dtype=weight.dtype)
        _short_conv_backward(gout.reshape(x2.shape).numpy(), x2.numpy(), weight.detach().numpy(), pre.numpy(),
                             has_bias, silu, nb, L, gx.numpy(), gw.numpy(), gb.numpy(), _K[x2.dtype])
        return gx.view(nb, L, -1), gw, gb if has_bias else None, None


def short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    """The convolution of x (B, L, E) with ``weight`` (E, k) (tap k-1 the current step) and ``bias``,
    then SiLU if ``silu``: CPU tensors of one dtype, fp32 or fp64."""
    ts = (x, weight) if bias is None else (x, weight, bias)
    if x.dtype not in _K or any(t.dtype != x.dtype or t.device.type != "cpu" for t in ts):
        raise ValueError(f"short_conv_cpu: CPU tensors of one dtype, fp32 or fp64, got {sorted({str(t.dtype) for t in ts})}")
    return _ShortConv.apply(x, weight, bias, silu)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it, with and without
    SiLU and bias, against the portable ShortConv in fp64 (output and gradients), on a length
    shorter than the kernel and one longer; raises if anything is off."""
    from arrepro.models.ops import ShortConv

    check_codegen()
    g = torch.Generator().manual_seed(0)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for L, silu, bias in ((2, True, True), (9, False, True), (9, True, False)):
        m = ShortConv(5, 4, bias=bias, activation="silu" if silu else None).double()
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
        x = torch.randn(3, L, 5, generator=g, dtype=torch.float64)
        gy = torch.randn(3, L, 5, generator=g, dtype=torch.float64)
        ref_in = x.clone().requires_grad_()
        ref = m.forward_portable(ref_in)
        ref_grads = torch.autograd.grad(ref, [ref_in, *m.parameters()], gy)
        m = m.to(dtype)
        xin = x.to(dtype).requires_grad_()
        y = short_conv(xin, m.conv.weight[:, 0], m.conv.bias, silu)
        grads = torch.autograd.grad(y, [xin, *m.parameters()], gy.to(dtype))
        for name, a, r in zip(("y", "dx", "dweight", "dbias"), [y, *grads], [ref, *ref_grads]):
            err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1e-30)
            if not err <= tol:
                raise RuntimeError(f"fused CPU short conv self-check (L {L}, silu {silu}, bias {bias}): {name} ({dtype}) "
                                   f"off by {err:.2e} (tolerance {tol})")
    return CODEGEN
