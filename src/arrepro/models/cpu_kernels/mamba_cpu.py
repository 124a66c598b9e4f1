"""The whole Mamba mixer on the CPU, fused: ``mamba(u, ...)`` computes what ``Mamba.forward_portable``
computes (in_proj, the depthwise causal conv and SiLU, x_proj, dt_proj and softplus, the selective
scan with its D skip, the SiLU gate, out_proj; ``conv=False`` and ``gate=False`` as the ablations
have them) in one call forward and one backward, instead of some 30 ATen calls and autograd nodes
each way: at the demo's sizes the calls cost as much as the arithmetic. ``arrepro.models.kernels``
decides when it runs (kernel ``mamba_cpu``) and records why not.

Numerics, in the input dtype: the matrix products are ``linear_cpu``'s (each element an ordered
chain of fused multiply-adds); the scan is ``selective_scan_cpu``'s; exp, SiLU's sigmoid and softplus's
log(1 + exp) are ``common``'s own; every other sum (the conv's taps in order, the parameter
gradients over the rows in order) has a fixed order. So the same bits on every x86-64 CPU.
The conv is ``short_conv_cpu``'s (the portable ``ShortConv``'s arithmetic order: tap k-1
multiplies the current step, zeros before the sequence, the bias added last).
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, TWENTY, K, check_codegen, exp, fma, sigmoid, softplus
from arrepro.models.cpu_kernels.linear_cpu import _column_sums, _gemm, _weight_grad
from arrepro.models.cpu_kernels.selective_scan_cpu import _s6_backward, _s6_forward
from arrepro.models.cpu_kernels.short_conv_cpu import _conv, _conv_backward, silu_grad

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True, error_model="numpy")
def _scan_inputs(A_log, xdbl, nb, L, R):
    """The scan's A^T = -exp(A_log)^T (N, E), and B, C (nb, L, N) from xdbl = [r, B, C]: the
    forward pass computes them, the backward pass again (the same bits)."""
    E, N = A_log.shape
    A_t = np.empty((N, E), dtype=A_log.dtype)
    for e in range(E):
        for n in range(N):
            A_t[n, e] = -exp(A_log[e, n])
    Bm = np.ascontiguousarray(xdbl[:, R:R + N]).reshape(nb, L, N)
    Cm = np.ascontiguousarray(xdbl[:, R + N:]).reshape(nb, L, N)
    return A_t, Bm, Cm


@njit(cache=True)
def _saved(ws, M, E, E2, X):
    """The forward pass's saved arrays, views of one flat workspace of M (E2 + 6 E + X) values:
    xz (M, E2), xc, s (M, E), xdbl (M, X), dt_raw, dt, y, yg (M, E)."""
    sizes = (M * E2, M * E, M * E, M * X, M * E, M * E, M * E)
    o = np.cumsum(np.array((0,) + sizes))
    v = lambda i, w: ws[o[i]:o[i] + M * w].reshape(M, w)  # noqa: E731
    return v(0, E2), v(1, E), v(2, E), v(3, X), v(4, E), v(5, E), v(6, E), ws[o[7]:o[7] + M * E].reshape(M, E)


@njit(cache=True, error_model="numpy")
def _mamba_forward(u, W_in, conv_w3, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out, nb, L, use_conv, use_gate, ws, out, K):
    """The forward pass (module docstring); fills the saved arrays (``_saved``: xz, xc the conv
    output or x, s = silu(xc), xdbl, dt_raw, dt = softplus(dt_raw), y the scan + D skip, yg gated)
    and out. Rows: nb L; conv_w3 (E, 1, k) as nn.Conv1d holds it."""
    E, N = A_log.shape
    R = W_dt.shape[1]
    M = u.shape[0]
    xz, xc, s, xdbl, dt_raw, dt, y, yg = _saved(ws, M, E, W_in.shape[0], W_x.shape[0])
    conv_w = conv_w3.reshape(E, conv_w3.shape[2])
    none = u[0, :0]
    _gemm(u, np.ascontiguousarray(W_in.T), xz, none, False)
    x = xz[:, :E]
    if use_conv:
        _conv(x, conv_w, conv_b, True, nb, L, xc)
    else:
        xc[:, :] = x
    for i in range(M):
        for e in range(E):
            v = xc[i, e]
            s[i, e] = v * sigmoid(v, K)
    _gemm(s, np.ascontiguousarray(W_x.T), xdbl, none, False)
    _gemm(xdbl[:, :R], np.ascontiguousarray(W_dt.T), dt_raw, b_dt, True)
    for i in range(M):
        for e in range(E):
            dt[i, e] = softplus(dt_raw[i, e], K)
    A_t, Bm, Cm = _scan_inputs(A_log, xdbl, nb, L, R)
    ys = np.empty((nb, L, E), dtype=u.dtype)
    _s6_forward(dt.reshape(nb, L, E), A_t, s.reshape(nb, L, E), Bm, Cm, ys)
    y2 = ys.reshape(M, E)
    for i in range(M):
        for e in range(E):
            y[i, e] = fma(s[i, e], Dp[e], y2[i, e])
    if use_gate:
        for i in range(M):
            for e in range(E):
                z = xz[i, E + e]
                yg[i, e] = y[i, e] * (z * sigmoid(z, K))
    else:
        yg[:, :] = y
    _gemm(yg, np.ascontiguousarray(W_out.T), out, none, False)


@njit(cache=True, error_model="numpy")
def _mamba_backward(gout, u, W_in, conv_w3, W_x, W_dt, A_log, Dp, W_out, nb, L, use_conv, use_gate, ws,
                    g_u, g_W_in, g_conv_w3, g_conv_b, g_W_x, g_W_dt, g_b_dt, g_A_log, g_Dp, g_W_out, K):
    """The gradients of ``_mamba_forward`` with respect to u and every parameter."""
    E, N = A_log.shape
    R = W_dt.shape[1]
    M = u.shape[0]
    E2 = W_in.shape[0]
    xz, xc, s, xdbl, dt_raw, dt, y, yg = _saved(ws, M, E, E2, W_x.shape[0])
    conv_w = conv_w3.reshape(E, conv_w3.shape[2])
    g_conv_w = g_conv_w3.reshape(E, conv_w3.shape[2])
    none = u[0, :0]
    # out = yg W_out^T
    g_yg = np.empty((M, E), dtype=u.dtype)
    _gemm(gout, W_out, g_yg, none, False)
    _weight_grad(gout, yg, g_W_out)
    # the gate: yg = y silu(z)
    g_xz = np.empty((M, E2), dtype=u.dtype)
    gy = np.empty((M, E), dtype=u.dtype)
    if use_gate:
        for i in range(M):
            for e in range(E):
                z = xz[i, E + e]
                gy[i, e] = g_yg[i, e] * (z * sigmoid(z, K))
                g_xz[i, E + e] = silu_grad(g_yg[i, e] * y[i, e], z, K)
    else:
        gy[:, :] = g_yg
    # y = scan(s, dt, A, B, C) + s D
    g_Dp[:] = 0
    for i in range(M):
        for e in range(E):
            g_Dp[e] = fma(gy[i, e], s[i, e], g_Dp[e])
    A_t, Bm, Cm = _scan_inputs(A_log, xdbl, nb, L, R)
    d_dt = np.empty((nb, L, E), dtype=u.dtype)
    dA_t = np.zeros((N, E), dtype=u.dtype)
    ds = np.empty((nb, L, E), dtype=u.dtype)
    g_xdbl = np.empty((M, R + 2 * N), dtype=u.dtype)
    dB = np.empty((nb, L, N), dtype=u.dtype)
    dC = np.empty((nb, L, N), dtype=u.dtype)
    _s6_backward(dt.reshape(nb, L, E), A_t, s.reshape(nb, L, E), Bm, Cm, gy.reshape(nb, L, E), d_dt, dA_t, ds, dB, dC)
    g_xdbl[:, R:R + N] = dB.reshape(M, N)
    g_xdbl[:, R + N:] = dC.reshape(M, N)
    for e in range(E):  # A = -exp(A_log): dA / dA_log = A
        for n in range(N):
            g_A_log[e, n] = dA_t[n, e] * A_t[n, e]
    gs = ds.reshape(M, E)
    for i in range(M):
        for e in range(E):
            gs[i, e] = fma(gy[i, e], Dp[e], gs[i, e])
    # dt = softplus(dt_raw), dt_raw = r W_dt^T + b_dt
    g_dt_raw = d_dt.reshape(M, E)
    for i in range(M):
        for e in range(E):
            v = dt_raw[i, e]
            if v <= K[TWENTY]:  # softplus is the identity above 20
                g_dt_raw[i, e] = g_dt_raw[i, e] * sigmoid(v, K)
    g_r = np.empty((M, R), dtype=u.dtype)
    _gemm(g_dt_raw, W_dt, g_r, none, False)
    g_xdbl[:, :R] = g_r
    _weight_grad(g_dt_raw, np.ascontiguousarray(xdbl[:, :R]), g_W_dt)
    _column_sums(g_dt_raw, g_b_dt)
    # xdbl = s W_x^T
    gs_x = np.empty((M, E), dtype=u.dtype)
    _gemm(g_xdbl, W_x, gs_x, none, False)
    _weight_grad(g_xdbl, s, g_W_x)
    for i in range(M):
        for e in range(E):
            gs[i, e] = gs[i, e] + gs_x[i, e]
    # s = silu(xc); xc = conv(x) or x
    g_xc = np.empty((M, E), dtype=u.dtype)
    for i in range(M):
        for e in range(E):
            g_xc[i, e] = silu_grad(gs[i, e], xc[i, e], K)
    if use_conv:
        _conv_backward(g_xc, xz[:, :E], conv_w, nb, L, g_xz[:, :E], g_conv_w, g_conv_b, True)
    else:
        g_xz[:, :E] = g_xc
    # xz = u W_in^T
    _gemm(g_xz, W_in, g_u, none, False)
    _weight_grad(g_xz, u, g_W_in)


class _Mamba(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W_in, conv_w, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out, use_conv, use_gate):
        nb, L, D = u.shape
        E, N = A_log.shape
        M, dtype = nb * L, u.dtype
        u2 = u.detach().reshape(M, D).contiguous()
        ws = torch.empty(M * (W_in.shape[0] + 6 * E + W_x.shape[0]), dtype=dtype)  # the saved arrays (_saved)
        out = torch.empty(M, W_out.shape[0], dtype=dtype)
        params = [t.detach().contiguous() for t in (W_in, conv_w, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out)]
        _mamba_forward(u2.numpy(), *(p.numpy() for p in params), nb, L, use_conv, use_gate, ws.numpy(), out.numpy(),
                       _K[dtype])
        ctx.save_for_backward(u2, *params, ws)
        ctx.meta = (nb, L, use_conv, use_gate)
        return out.view(nb, L, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gout):
        u2, W_in, conv_w, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out, ws = ctx.saved_tensors
        nb, L, use_conv, use_gate = ctx.meta
        grads = [torch.empty_like(t) for t in (u2, W_in, conv_w, conv_b, W_x, W_dt, b_dt, A_log, Dp, W_out)]
        _mamba_backward(gout.reshape(u2.shape[0], -1).contiguous().numpy(), u2.numpy(), W_in.numpy(), conv_w.numpy(),
                        W_x.numpy(), W_dt.numpy(), A_log.numpy(), Dp.numpy(), W_out.numpy(), nb, L, use_conv, use_gate,
                        ws.numpy(), *(g.numpy() for g in grads), _K[u2.dtype])
        g_u = grads[0].view(nb, L, -1)
        needs = ctx.needs_input_grad
        return (g_u, *(g if need else None for g, need in zip(grads[1:], needs[1:10])), None, None)


def mamba(u: torch.Tensor, in_proj: torch.Tensor, conv_weight: torch.Tensor | None, conv_bias: torch.Tensor | None,
          x_proj: torch.Tensor, dt_proj: torch.Tensor, dt_bias: torch.Tensor, A_log: torch.Tensor, D: torch.Tensor,
          out_proj: torch.Tensor) -> torch.Tensor:
    """The Mamba mixer of u (B, L, d_model) from its parameters (weights as nn.Linear and nn.Conv1d
    hold them: ``conv_weight`` (E, 1, k), tap k-1 the current step, or None for no conv; a gate when
    ``in_proj`` has 2E rows), on the CPU in one dtype, fp32 or fp64."""
    E = A_log.shape[0]
    use_conv, use_gate = conv_weight is not None, in_proj.shape[0] == 2 * E
    if not use_conv:
        conv_weight, conv_bias = A_log.new_zeros(E, 1, 1), A_log.new_zeros(E)
    ts = (u, in_proj, conv_weight, conv_bias, x_proj, dt_proj, dt_bias, A_log, D, out_proj)
    if u.dtype not in _K or any(t.dtype != u.dtype or t.device.type != "cpu" for t in ts):
        raise ValueError(f"mamba_cpu: CPU tensors of one dtype, fp32 or fp64, got {sorted({str(t.dtype) for t in ts})}")
    return _Mamba.apply(*ts, use_conv, use_gate)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it, with and without
    its conv and its gate, against the portable Mamba mixer in fp64 (output and every gradient),
    on a length that is not a multiple of 8; raises if anything is off."""
    from arrepro.models.mixers.mamba import Mamba

    check_codegen()
    g = torch.Generator().manual_seed(0)
    tol = 1e-11 if dtype == torch.float64 else 2e-4
    for conv, gate in ((True, True), (False, True), (True, False)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            m = Mamba(12, max_len=16, d_state=4, d_conv=3, expand=2, conv=conv, gate=gate).double()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
        u = torch.randn(2, 11, 12, generator=g, dtype=torch.float64)
        gy = torch.randn(2, 11, 12, generator=g, dtype=torch.float64)
        ref_in = u.clone().requires_grad_()
        ref = m.forward_portable(ref_in)
        params = list(m.parameters())
        ref_grads = torch.autograd.grad(ref, [ref_in, *params], gy)
        mc = m.to(dtype)
        x = u.to(dtype).requires_grad_()
        y = mamba(x, *mc.cpu_kernel_arguments())
        grads = torch.autograd.grad(y, [x, *mc.parameters()], gy.to(dtype))
        names = ["y", "du"] + [n for n, _ in mc.named_parameters()]
        for name, a, r in zip(names, [y, *grads], [ref, *ref_grads]):
            err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1e-30)
            if not err <= tol:
                raise RuntimeError(f"fused CPU Mamba self-check (conv {conv}, gate {gate}): {name} ({dtype}) off by "
                                   f"{err:.2e} (tolerance {tol})")
        m.double()
    return CODEGEN
