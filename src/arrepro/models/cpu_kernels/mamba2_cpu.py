"""The whole Mamba2 mixer on the CPU, fused: ``mamba2(u, ...)`` computes what
``Mamba2.forward_portable`` computes (in_proj, the depthwise conv with SiLU over x, B and C,
dt = softplus(dt + dt_bias), the SSD scan with its D skip, the gated RMSNorm, out_proj) in one call
forward and one backward, instead of some 70 ATen calls and autograd nodes each way (the chunked
form's masks, exps and batched products among them). ``arrepro.models.kernels`` decides when it
runs (kernel ``mamba2_cpu``) and records why not.

The scan, per batch element and head, chunk by chunk as the portable path cuts it (T steps; the
last chunk shorter), with a_t = dt_t A, cum_t the running sum of a from the chunk's start, xd_t =
dt_t x_t (P) and S the state entering the chunk (N x P, kept transposed; zero for the first):

    G_ts = (C_t . B_s) exp(cum_t - cum_s)                   s <= t in the chunk
    y_t  = sum_{s<=t} G_ts xd_s + exp(cum_t) S^T C_t + D x_t
    S'   = exp(cum_last) S + sum_s exp(cum_last - cum_s) B_s xd_s^T     (the next chunk's S)

and its backward from the last chunk to the first, with dS the gradient of the state leaving the
chunk: dG_ts = dy_t . xd_s; dxd_s = sum_{t>=s} G_ts dy_t (+ the state's); d(C_t . B_s) = dG_ts
exp(cum_t - cum_s); dcum_t += sum_s dG_ts G_ts, dcum_s -= the same; the state's terms likewise;
then da_r = sum_{t>=r} dcum_t. The first chunk computes no entering state's terms, the last no
leaving state (a run shorter than a chunk, as the demo's, has neither): these are rules of the
code, so a cell's bits stay a function of the cell.

Numerics, in the input dtype (the portable path's bits are not kept: it sums its products in
ATen's order): the conv is ``short_conv_cpu``'s and every product ``linear_cpu``'s (in_proj,
out_proj, and within a chunk C B^T, G xd, dy xd^T, G^T dy, dCB B and dCB^T C: each element a chain
over its sum in order, G and dCB lower triangular with exact zeros above, so an element sums
exactly its terms s <= t); every other sum a chain of fused multiply-adds in a fixed order; exp,
sigmoid and softplus ``common``'s, 1/sqrt IEEE's. So the same bits on every x86-64 CPU.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import (CODEGEN, K, check_codegen, check_mixer, exp, fma, sigmoid, softplus, unit,
                                                unit_backward)
from arrepro.models.cpu_kernels.linear_cpu import _gemm, _weight_grad
from arrepro.models.cpu_kernels.short_conv_cpu import _short_conv_backward, _short_conv_forward, silu_grad

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True, error_model="numpy")
def _chunk(s, dt, Ah, m0, Tc, c0, E, N, P, xd, xdT, Bc, Cc, cum, Em, G):
    """One chunk of one batch element and head (rows m0.., the head's x in columns c0..): xd, its
    transpose, B, C, cum, exp(cum_t - cum_s) and G (module docstring) into the scratch arrays."""
    for t in range(Tc):
        m = m0 + t
        d = dt[m]
        at = d * Ah
        cum[t] = at if t == 0 else cum[t - 1] + at
        for p in range(P):
            xd[t, p] = d * s[m, c0 + p]
            xdT[p, t] = xd[t, p]
        for n in range(N):
            Bc[n, t] = s[m, E + n]
            Cc[t, n] = s[m, E + N + n]
    # C_t . B_s for every s (those after t computed and not read): linear_cpu's product, a chain over n
    _gemm(Cc[:Tc], Bc[:, :Tc], G[:Tc, :Tc], cum[:0], False)
    for t in range(Tc):  # the decays; zeros after t (G lower triangular: the products below sum over all s)
        for j in range(t + 1):
            Em[t, j] = exp(cum[t] - cum[j])
            G[t, j] = G[t, j] * Em[t, j]
        for j in range(t + 1, Tc):
            G[t, j] = 0.0


@njit(cache=True, error_model="numpy")
def _read_state(S, Cc, t, u):
    """u (P,) = S^T C_t for a state S (N x P): a chain over n in order."""
    for p in range(S.shape[1]):
        u[p] = S[0, p] * Cc[t, 0]
    for n in range(1, S.shape[0]):
        cn = Cc[t, n]
        for p in range(S.shape[1]):
            u[p] = fma(S[n, p], cn, u[p])


@njit(cache=True, error_model="numpy")
def _scan_forward(s, dt, A, Dv, nb, L, H, P, N, T, y, states, K):
    """y (M, E) = the scan's output with the D skip; states[b, h, c] the state (N x P) entering
    chunk c (chunks after the first)."""
    E = H * P
    nc = (L + T - 1) // T
    xd, xdT, Bc = np.empty((T, P), s.dtype), np.empty((P, T), s.dtype), np.empty((N, T), s.dtype)
    Cc, cum = np.empty((T, N), s.dtype), np.empty(T, s.dtype)
    Em, G = np.empty((T, T), s.dtype), np.empty((T, T), s.dtype)
    u, wl = np.empty(P, s.dtype), np.empty(T, s.dtype)
    for b in range(nb):
        for h in range(H):
            c0 = h * P
            for c in range(nc):
                m0, Tc = b * L + c * T, min(T, L - c * T)
                _chunk(s, dt[:, h], A[h], m0, Tc, c0, E, N, P, xd, xdT, Bc, Cc, cum, Em, G)
                S = states[b, h, c]
                _gemm(G[:Tc, :Tc], xd[:Tc], y[m0:m0 + Tc, c0:c0 + P], cum[:0], False)  # sum_s G_ts xd_s, s in order
                for t in range(Tc):
                    m = m0 + t
                    if c > 0:  # the entering state: exp(cum_t) S^T C_t
                        _read_state(S, Cc, t, u)
                        q = exp(cum[t])
                        for p in range(P):
                            y[m, c0 + p] = fma(q, u[p], y[m, c0 + p])
                    for p in range(P):
                        y[m, c0 + p] = fma(Dv[h], s[m, c0 + p], y[m, c0 + p])
                if c + 1 < nc:  # the state leaving the chunk
                    S2 = states[b, h, c + 1]
                    eL = exp(cum[Tc - 1])
                    for j in range(Tc):
                        wl[j] = exp(cum[Tc - 1] - cum[j])
                    for n in range(N):
                        if c > 0:
                            for p in range(P):
                                S2[n, p] = eL * S[n, p]
                        for j in range(Tc):
                            w = wl[j] * Bc[n, j]
                            if c == 0 and j == 0:
                                for p in range(P):
                                    S2[n, p] = w * xd[j, p]
                            else:
                                for p in range(P):
                                    S2[n, p] = fma(w, xd[j, p], S2[n, p])


@njit(cache=True, error_model="numpy")
def _scan_backward(gy, s, dt, A, Dv, nb, L, H, P, N, T, states, gs, gdt, gA, gD, K):
    """The gradients of ``_scan_forward`` for gy = dL/dy: into gs (columns 0.. for x, E.. for B,
    E + N.. for C), gdt (M, H) (the gradient of dt after the softplus), gA (H,), gD (H,)."""
    E = H * P
    nc = (L + T - 1) // T
    dtp = s.dtype
    xd, xdT, Bc = np.empty((T, P), dtp), np.empty((P, T), dtp), np.empty((N, T), dtp)
    Cc, cum = np.empty((T, N), dtp), np.empty(T, dtp)
    Em, G, dG = np.empty((T, T), dtp), np.empty((T, T), dtp), np.empty((T, T), dtp)
    dxd, dcum = np.empty((T, P), dtp), np.empty(T, dtp)
    dS, dSin, St = np.empty((N, P), dtp), np.empty((N, P), dtp), np.empty((P, N), dtp)
    u, Z, dDv, tN = np.empty(P, dtp), np.empty((T, P), dtp), np.empty(P, dtp), np.empty((T, N), dtp)
    zero = K[5]
    for h in range(H):
        c0 = h * P
        gAh = zero
        dDv[:] = zero
        for b in range(nb):
            for c in range(nc - 1, -1, -1):
                m0, Tc = b * L + c * T, min(T, L - c * T)
                _chunk(s, dt[:, h], A[h], m0, Tc, c0, E, N, P, xd, xdT, Bc, Cc, cum, Em, G)
                S = states[b, h, c]
                for t in range(Tc):  # the D skip
                    m = m0 + t
                    for p in range(P):
                        dDv[p] = fma(gy[m, c0 + p], s[m, c0 + p], dDv[p])
                # dG_ts = dy_t . xd_s for every s (a chain over p; those after t computed and not read)
                _gemm(gy[m0:m0 + Tc, c0:c0 + P], xdT[:, :Tc], dG[:Tc, :Tc], cum[:0], False)
                _gemm(G[:Tc, :Tc].T, gy[m0:m0 + Tc, c0:c0 + P], dxd[:Tc], cum[:0], False)  # dxd_s = sum_t G_ts dy_t
                for t in range(Tc):  # dcum from the decays (off the diagonal), then dG becomes d(C_t . B_s)
                    acc = zero
                    for j in range(t):
                        acc = fma(dG[t, j], G[t, j], acc)
                    dcum[t] = acc
                for j in range(Tc):
                    acc = zero
                    for t in range(j + 1, Tc):
                        acc = fma(dG[t, j], G[t, j], acc)
                    dcum[j] = dcum[j] - acc
                for t in range(Tc):  # d(C_t . B_s), lower triangular
                    for j in range(t + 1):
                        dG[t, j] = dG[t, j] * Em[t, j]
                    for j in range(t + 1, Tc):
                        dG[t, j] = zero
                # dC_t = sum_s dCB_ts B_s, dB_s = sum_t dCB_ts C_t; B and C serve every head: the heads' sums added in order
                for which in range(2):
                    if which == 0:
                        _gemm(dG[:Tc, :Tc], s[m0:m0 + Tc, E:E + N], tN[:Tc], cum[:0], False)
                    else:
                        _gemm(dG[:Tc, :Tc].T, s[m0:m0 + Tc, E + N:E + 2 * N], tN[:Tc], cum[:0], False)
                    col = E + N if which == 0 else E
                    for t in range(Tc):
                        for n in range(N):
                            gs[m0 + t, col + n] = tN[t, n] if h == 0 else gs[m0 + t, col + n] + tN[t, n]
                if c > 0:  # the entering state's terms: y_t += exp(cum_t) S^T C_t
                    for n in range(N):
                        for p in range(P):
                            St[p, n] = S[n, p]
                    dSin[:, :] = zero
                    for t in range(Tc):
                        m = m0 + t
                        q = exp(cum[t])
                        _read_state(S, Cc, t, u)
                        acc = gy[m, c0] * u[0]
                        for p in range(1, P):
                            acc = fma(gy[m, c0 + p], u[p], acc)
                        dcum[t] = fma(q, acc, dcum[t])
                        for p in range(P):
                            gp = q * gy[m, c0 + p]
                            for n in range(N):
                                gs[m, E + N + n] = fma(gp, St[p, n], gs[m, E + N + n])
                        for n in range(N):
                            cn = q * Cc[t, n]
                            for p in range(P):
                                dSin[n, p] = fma(cn, gy[m, c0 + p], dSin[n, p])
                if c + 1 < nc:  # the leaving state's terms, dS its gradient (from the next chunk)
                    eL = exp(cum[Tc - 1])
                    accL = zero
                    if c > 0:
                        for n in range(N):
                            for p in range(P):
                                accL = fma(dS[n, p], S[n, p], accL)
                                dSin[n, p] = fma(eL, dS[n, p], dSin[n, p])
                        accL = eL * accL
                    for n in range(N):
                        for p in range(P):
                            St[p, n] = dS[n, p]
                    for j in range(Tc):
                        m = m0 + j
                        w = exp(cum[Tc - 1] - cum[j])
                        for p in range(P):  # Z_s = dS^T B_s
                            Z[j, p] = Bc[0, j] * dS[0, p]
                        for n in range(1, N):
                            bn = Bc[n, j]
                            for p in range(P):
                                Z[j, p] = fma(bn, dS[n, p], Z[j, p])
                        ks = xd[j, 0] * Z[j, 0]
                        for p in range(1, P):
                            ks = fma(xd[j, p], Z[j, p], ks)
                        ks = w * ks
                        accL = accL + ks
                        dcum[j] = dcum[j] - ks
                        for p in range(P):
                            dxd[j, p] = fma(w, Z[j, p], dxd[j, p])
                        for p in range(P):  # dB_s += w_s dS xd_s
                            gp = w * xd[j, p]
                            for n in range(N):
                                gs[m, E + n] = fma(gp, St[p, n], gs[m, E + n])
                    dcum[Tc - 1] = dcum[Tc - 1] + accL
                if c > 0:
                    dS[:, :] = dSin
                acc = zero  # da_r = sum_{t>=r} dcum_t; then dt, A and x
                for t in range(Tc - 1, -1, -1):
                    m = m0 + t
                    acc = acc + dcum[t]
                    d = dt[m, h]
                    gAh = fma(acc, d, gAh)
                    g = acc * A[h]
                    for p in range(P):
                        g = fma(dxd[t, p], s[m, c0 + p], g)
                        gs[m, c0 + p] = fma(d, dxd[t, p], Dv[h] * gy[m, c0 + p])
                    gdt[m, h] = g
        gA[h] = gAh
        acc = dDv[0]
        for p in range(1, P):
            acc = acc + dDv[p]
        gD[h] = acc


@njit(cache=True, error_model="numpy")
def _forward(u, Win, cw, cb, dt_bias, A_log, Dv, nw, Wout, nb, L, H, P, N, T, eps, fE, K):
    """The mixer's output and what the backward pass reads (module docstring)."""
    M = u.shape[0]
    E = H * P
    C = E + 2 * N
    none = u[0, :0]
    a = np.empty((M, Win.shape[0]), u.dtype)  # [z, xBC, dt]
    _gemm(u, np.ascontiguousarray(Win.T), a, none, False)
    xbc = np.ascontiguousarray(a[:, E:E + C])
    pre, s = np.empty((M, C), u.dtype), np.empty((M, C), u.dtype)
    _short_conv_forward(xbc, cw, cb, True, True, nb, L, pre, s, K)
    A = np.empty(H, u.dtype)
    for h in range(H):
        A[h] = -exp(A_log[h])
    dt = np.empty((M, H), u.dtype)
    for m in range(M):
        for h in range(H):
            dt[m, h] = softplus(a[m, E + C + h] + dt_bias[h], K)
    nc = (L + T - 1) // T
    states = np.zeros((nb, H, nc, N, P), u.dtype)
    y = np.empty((M, E), u.dtype)
    _scan_forward(s, dt, A, Dv, nb, L, H, P, N, T, y, states, K)
    gated = np.empty((M, E), u.dtype)
    for m in range(M):
        for e in range(E):
            z = a[m, e]
            gated[m, e] = y[m, e] * (z * sigmoid(z, K))
    yo, r, on = np.empty((M, E), u.dtype), np.empty((M, 1), u.dtype), np.empty((M, E), u.dtype)
    unit(gated, 0, 1, E, fE, eps, yo, r, K)
    for m in range(M):
        for e in range(E):
            on[m, e] = yo[m, e] * nw[e]
    out = np.empty((M, Wout.shape[0]), u.dtype)
    _gemm(on, np.ascontiguousarray(Wout.T), out, none, False)
    return out, (a, xbc, pre, s, A, dt, states, y, yo, r, on)


@njit(cache=True, error_model="numpy")
def _backward(gout, u, Win, cw, dt_bias, Dv, nw, Wout, saved, nb, L, H, P, N, T, fE, K):
    """The gradients of ``_forward``: (u, Win, cw, cb, dt_bias, A_log, D, nw, Wout)."""
    a, xbc, pre, s, A, dt, states, y, yo, r, on = saved
    M = u.shape[0]
    E = H * P
    C = E + 2 * N
    none = u[0, :0]
    g_Wout = np.empty_like(Wout)
    _weight_grad(gout, on, g_Wout)
    g_on = np.empty((M, E), u.dtype)
    _gemm(gout, Wout, g_on, none, False)
    g_nw = np.zeros_like(nw)
    for m in range(M):
        for e in range(E):
            g_nw[e] = fma(g_on[m, e], yo[m, e], g_nw[e])
    g_gated = np.empty((M, E), u.dtype)
    unit_backward(g_on, yo, r, 1, E, nw, fE, g_gated, 0)
    g_a = np.empty((M, Win.shape[0]), u.dtype)
    g_y = np.empty((M, E), u.dtype)
    for m in range(M):
        for e in range(E):
            z = a[m, e]
            g = g_gated[m, e]
            g_y[m, e] = g * (z * sigmoid(z, K))
            g_a[m, e] = silu_grad(g * y[m, e], z, K)
    g_s, g_dt = np.empty((M, C), u.dtype), np.empty((M, H), u.dtype)
    g_A, g_D = np.empty(H, u.dtype), np.empty(H, u.dtype)
    _scan_backward(g_y, s, dt, A, Dv, nb, L, H, P, N, T, states, g_s, g_dt, g_A, g_D, K)
    g_dtb = np.zeros(H, u.dtype)
    for m in range(M):
        for h in range(H):
            g = g_dt[m, h] * sigmoid(a[m, E + C + h] + dt_bias[h], K)  # softplus' = sigmoid
            g_a[m, E + C + h] = g
            g_dtb[h] = g_dtb[h] + g
    g_Alog = np.empty(H, u.dtype)
    for h in range(H):
        g_Alog[h] = g_A[h] * A[h]  # A = -exp(A_log)
    g_xbc, g_cw, g_cb = np.empty((M, C), u.dtype), np.empty_like(cw), np.empty(C, u.dtype)
    _short_conv_backward(g_s, xbc, cw, pre, True, True, nb, L, g_xbc, g_cw, g_cb, K)
    for m in range(M):
        for c in range(C):
            g_a[m, E + c] = g_xbc[m, c]
    g_u = np.empty((M, u.shape[1]), u.dtype)
    _gemm(g_a, Win, g_u, none, False)
    g_Win = np.empty_like(Win)
    _weight_grad(g_a, u, g_Win)
    return g_u, g_Win, g_cw, g_cb, g_dtb, g_Alog, g_D, g_nw, g_Wout


class _Mamba2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, headdim, d_state, chunk, eps, Win, cw, cb, dt_bias, A_log, D, nw, Wout):
        nb, L, d = u.shape
        u2 = u.detach().reshape(nb * L, d).contiguous().numpy()
        ps = [t.detach().contiguous().numpy() for t in (Win, cw.reshape(cw.shape[0], -1), cb, dt_bias, A_log, D, nw,
                                                         Wout)]
        f = np.dtype(u2.dtype).type
        H = A_log.shape[0]
        K_ = _K[u.dtype]
        out, saved = _forward(u2, *ps, nb, L, H, headdim, d_state, min(chunk, L), f(eps), f(H * headdim), K_)
        ctx.keep = u2, ps, saved, nb, L, H, headdim, d_state, min(chunk, L), f(H * headdim), K_, cw.shape
        return torch.from_numpy(out).view(nb, L, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gout):
        u2, ps, saved, nb, L, H, P, N, T, fE, K_, cshape = ctx.keep
        Win, cw, _, dt_bias, _, D, nw, Wout = ps
        g = _backward(gout.reshape(u2.shape[0], -1).contiguous().numpy(), u2, Win, cw, dt_bias, D, nw, Wout, saved, nb,
                      L, H, P, N, T, fE, K_)
        g_u, g_Win, g_cw, *rest = (torch.from_numpy(a) for a in g)
        return (g_u.view(nb, L, -1), None, None, None, None, g_Win, g_cw.reshape(cshape), *rest)


def mamba2(u: torch.Tensor, in_proj: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor,
           dt_bias: torch.Tensor, A_log: torch.Tensor, D: torch.Tensor, norm_weight: torch.Tensor,
           out_proj: torch.Tensor, headdim: int, d_state: int, chunk_size: int, norm_eps: float) -> torch.Tensor:
    """The Mamba2 mixer of u (B, L, d_model) from its parameters as its modules hold them (in_proj's
    rows z, x, B, C, dt; the conv's weight (E + 2N, 1, k), tap k-1 the current step), on the CPU in
    one dtype, fp32 or fp64."""
    ts = (u, in_proj, conv_weight, conv_bias, dt_bias, A_log, D, norm_weight, out_proj)
    if u.dtype not in _K or any(t.dtype != u.dtype or t.device.type != "cpu" for t in ts):
        raise ValueError(f"mamba2_cpu: CPU tensors of one dtype, fp32 or fp64, got {sorted({str(t.dtype) for t in ts})}")
    H = A_log.shape[0]
    E = H * headdim
    if in_proj.shape[0] != 2 * E + 2 * d_state + H or conv_weight.shape[0] != E + 2 * d_state or norm_weight.shape != (E,):
        raise ValueError(f"mamba2_cpu: {H} heads of {headdim} and d_state {d_state} do not match in_proj "
                         f"{tuple(in_proj.shape)}, conv {tuple(conv_weight.shape)}, norm {tuple(norm_weight.shape)}")
    return _Mamba2.apply(u, headdim, d_state, chunk_size, norm_eps, in_proj, conv_weight, conv_bias, dt_bias, A_log, D,
                         norm_weight, out_proj)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it against the
    portable Mamba2 mixer in fp64 (output and every gradient): three heads and chunks of 4 over a
    length of 11 (entering and leaving states, a short last chunk), and one chunk; raises if
    anything is off."""
    from arrepro.models.mixers.mamba2 import Mamba2

    check_codegen()
    g = torch.Generator().manual_seed(0)
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    for d, kw, L in ((12, dict(d_state=5, headdim=8, chunk_size=4), 11), (8, dict(d_state=6, headdim=16), 5)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            m = Mamba2(d, max_len=16, d_conv=3, **kw).double()
        # a per-head scalar's gradient (dt_bias, A_log, D) sums every row and channel, with cancellation:
        # its fp32 error is relative to the terms, not to the sum
        check_mixer(m, d, L, lambda x, mc: mamba2(x, *mc.cpu_kernel_arguments()), dtype, g, tol,
                    f"fused CPU Mamba2 self-check (width {d}, {kw}, length {L})",
                    lambda name, r, nh=m.nheads: dtype == torch.float32 and r.dim() == 1 and r.numel() == nh)
    return CODEGEN
