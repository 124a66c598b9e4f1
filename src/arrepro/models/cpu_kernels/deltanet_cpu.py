"""The whole DeltaNet mixer on the CPU, fused: ``deltanet(x, ...)`` computes what
``DeltaNet.forward_portable`` computes (the q, k, v and beta projections, the three short convs with
SiLU, the L2 norms and q's scale, beta = sigmoid, the delta rule, the per-head RMSNorm, out_proj) in
one call forward and one backward, instead of some 60 ATen calls and autograd nodes each way (the
chunked form's products, masks and triangular solve among them): at the demo's sizes the calls
cost more than the arithmetic. ``arrepro.models.kernels`` decides when it runs (kernel
``deltanet_cpu``) and records why not.

The delta rule runs step by step, per batch element and head, on H = S^T (d_k x d_v, S_0 = 0):

    e_t = H_{t-1}^T k_t - v_t,   H_t = H_{t-1} - k_t (beta_t e_t)^T,   o_t = H_t^T q_t

and its backward from right to left with G = dL/dH_t: G += q_t do_t^T; dq_t = H_t do_t;
g = G^T k_t; dbeta_t = -e_t . g; dv_t = beta_t g; dk_t = -beta_t (G e_t + H_{t-1} g); then
G -= k_t (beta_t g)^T. The states are recomputed in the backward pass, per batch element and head,
into an (L + 1) d_k d_v buffer (in cache), as the forward made them.

Numerics, in the input dtype (the portable path's bits are not kept: it solves a triangular system
where this walks the steps): the products are ``linear_cpu``'s and the convs ``short_conv_cpu``'s;
every sum here is a chain of fused multiply-adds in a fixed order (over the head's features, then
over the rows for a weight); 1/sqrt(x) is IEEE's correctly rounded sqrt and division, the sigmoid
``common``'s. So the same bits on every x86-64 CPU.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, check_mixer, fma, sigmoid, unit, unit_backward
from arrepro.models.cpu_kernels.linear_cpu import _gemm, _side_by_side, _weight_grad
from arrepro.models.cpu_kernels.short_conv_cpu import _short_conv_backward, _short_conv_forward

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


@njit(cache=True, error_model="numpy")
def _states(qn, kn, s, beta, b, h, L, D, dh, Hs, es, w, o):
    """The delta rule of one batch element and head (module docstring): Hs[t + 1] = H_t (Hs[0] = 0),
    es[t] = e_t (w: dh of scratch); with ``o`` of nonzero size, o[b L + t, head's block] = H_t^T q_t."""
    c = h * dh
    Hs[0] = 0
    for t in range(L):
        m = b * L + t
        for i in range(dh):
            es[t, i] = Hs[t, 0, i] * kn[m, c]
        for j in range(1, dh):
            kj = kn[m, c + j]
            for i in range(dh):
                es[t, i] = fma(Hs[t, j, i], kj, es[t, i])
        bt = beta[m, h]
        for i in range(dh):
            es[t, i] = es[t, i] - s[m, 2 * D + c + i]
            w[i] = -(bt * es[t, i])
        for j in range(dh):
            kj = kn[m, c + j]
            for i in range(dh):
                Hs[t + 1, j, i] = fma(w[i], kj, Hs[t, j, i])
        if o.shape[0]:
            for i in range(dh):
                o[m, c + i] = Hs[t + 1, 0, i] * qn[m, c]
            for j in range(1, dh):
                qj = qn[m, c + j]
                for i in range(dh):
                    o[m, c + i] = fma(Hs[t + 1, j, i], qj, o[m, c + i])


@njit(cache=True, error_model="numpy")
def _delta_backward(go, qn, kn, s, beta, nb, L, H, dh, gq, gk, gv, gbeta):
    """The gradients of the delta rule (module docstring) for go = dL/do: gq, gk into the head blocks
    of their (M, D) arrays, gv into columns 2D.. of an (M, 3D) one, gbeta (M, H)."""
    D = H * dh
    Hs = np.empty((L + 1, dh, dh), qn.dtype)
    es = np.empty((L, dh), qn.dtype)
    G = np.empty((dh, dh), qn.dtype)
    gk_ = np.empty(dh, qn.dtype)
    none = qn[:0]
    for b in range(nb):
        for h in range(H):
            c = h * dh
            _states(qn, kn, s, beta, b, h, L, D, dh, Hs, es, G[0], none)
            G[:, :] = 0
            for t in range(L - 1, -1, -1):
                m = b * L + t
                bt = beta[m, h]
                for j in range(dh):  # dq = H_t do; G += q do^T
                    acc = Hs[t + 1, j, 0] * go[m, c]
                    for i in range(1, dh):
                        acc = fma(Hs[t + 1, j, i], go[m, c + i], acc)
                    gq[m, c + j] = acc
                    qj = qn[m, c + j]
                    for i in range(dh):
                        G[j, i] = fma(qj, go[m, c + i], G[j, i])
                for i in range(dh):  # g = G^T k
                    gk_[i] = G[0, i] * kn[m, c]
                for j in range(1, dh):
                    kj = kn[m, c + j]
                    for i in range(dh):
                        gk_[i] = fma(G[j, i], kj, gk_[i])
                acc = es[t, 0] * gk_[0]
                for i in range(1, dh):
                    acc = fma(es[t, i], gk_[i], acc)
                gbeta[m, h] = -acc
                for i in range(dh):
                    gv[m, 2 * D + c + i] = bt * gk_[i]
                for j in range(dh):  # dk = -beta (G e + H_{t-1} g), G before its update
                    a = G[j, 0] * es[t, 0]
                    p = Hs[t, j, 0] * gk_[0]
                    for i in range(1, dh):
                        a = fma(G[j, i], es[t, i], a)
                        p = fma(Hs[t, j, i], gk_[i], p)
                    gk[m, c + j] = -(bt * (a + p))
                for j in range(dh):  # G -= k (beta g)^T
                    kj = kn[m, c + j]
                    for i in range(dh):
                        G[j, i] = fma(-(bt * gk_[i]), kj, G[j, i])


@njit(cache=True, error_model="numpy")
def _forward(x, Wq, Wk, Wv, Wb, cw, nw, Wout, nb, L, H, l2eps, neps, scale, fdh, K):
    """The mixer's output and what the backward pass reads (module docstring). cw (3D, k): the three
    convs' weights, q's first; every scalar in the input dtype (fdh: the head dimension)."""
    M, D = x.shape
    dh = D // H
    none = x[0, :0]
    a = np.empty((M, 3 * D), x.dtype)
    _gemm(x, np.ascontiguousarray(_side_by_side(Wq, Wk, Wv).T), a, none, False)
    braw = np.empty((M, H), x.dtype)
    _gemm(x, np.ascontiguousarray(Wb.T), braw, none, False)
    pre, s = np.empty((M, 3 * D), x.dtype), np.empty((M, 3 * D), x.dtype)
    _short_conv_forward(a, cw, cw[:, 0], False, True, nb, L, pre, s, K)
    yq, kn = np.empty((M, D), x.dtype), np.empty((M, D), x.dtype)
    rq, rk = np.empty((M, H), x.dtype), np.empty((M, H), x.dtype)
    unit(s, 0, H, dh, K[7], l2eps, yq, rq, K)
    unit(s, D, H, dh, K[7], l2eps, kn, rk, K)
    qn = np.empty((M, D), x.dtype)
    for m in range(M):
        for d in range(D):
            qn[m, d] = yq[m, d] * scale
    beta = np.empty((M, H), x.dtype)
    for m in range(M):
        for h in range(H):
            beta[m, h] = sigmoid(braw[m, h], K)
    o = np.empty((M, D), x.dtype)
    Hs, es, w = np.empty((L + 1, dh, dh), x.dtype), np.empty((L, dh), x.dtype), np.empty(dh, x.dtype)
    for b in range(nb):
        for h in range(H):
            _states(qn, kn, s, beta, b, h, L, D, dh, Hs, es, w, o)
    yo, rn, on = np.empty((M, D), x.dtype), np.empty((M, H), x.dtype), np.empty((M, D), x.dtype)
    unit(o, 0, H, dh, fdh, neps, yo, rn, K)  # the RMSNorm over each head's block, then its weight
    for m in range(M):
        for d in range(D):
            on[m, d] = yo[m, d] * nw[d % dh]
    out = np.empty((M, Wout.shape[0]), x.dtype)
    _gemm(on, np.ascontiguousarray(Wout.T), out, none, False)
    return out, (a, braw, pre, s, yq, rq, kn, rk, qn, beta, yo, rn, on)


@njit(cache=True, error_model="numpy")
def _backward(gout, x, Wq, Wk, Wv, Wb, cw, nw, Wout, saved, nb, L, H, scale, fdh, K):
    """The gradients of ``_forward``: (x, Wq, Wk, Wv, Wb, cw (3D, k), nw, Wout)."""
    a, braw, pre, s, yq, rq, kn, rk, qn, beta, yo, rn, on = saved
    M, D = x.shape
    dh = D // H
    none = x[0, :0]
    g_Wout = np.empty_like(Wout)
    _weight_grad(gout, on, g_Wout)
    g_on = np.empty((M, D), x.dtype)
    _gemm(gout, Wout, g_on, none, False)
    g_nw = np.zeros_like(nw)
    for m in range(M):
        for d in range(D):
            g_nw[d % dh] = fma(g_on[m, d], yo[m, d], g_nw[d % dh])
    g_o = np.empty((M, D), x.dtype)
    unit_backward(g_on, yo, rn, H, dh, nw, fdh, g_o, 0)
    g_qn, g_kn = np.empty((M, D), x.dtype), np.empty((M, D), x.dtype)
    g_s = np.empty((M, 3 * D), x.dtype)
    g_beta = np.empty((M, H), x.dtype)
    _delta_backward(g_o, qn, kn, s, beta, nb, L, H, dh, g_qn, g_kn, g_s, g_beta)
    ws = np.empty(dh, x.dtype)
    ws[:] = scale
    unit_backward(g_qn, yq, rq, H, dh, ws, K[7], g_s, 0)
    ws[:] = K[7]
    unit_backward(g_kn, kn, rk, H, dh, ws, K[7], g_s, D)
    g_braw = np.empty((M, H), x.dtype)
    for m in range(M):
        for h in range(H):
            bt = beta[m, h]
            g_braw[m, h] = g_beta[m, h] * (bt * (K[7] - bt))
    g_a, g_cw, g_cb = np.empty((M, 3 * D), x.dtype), np.empty_like(cw), np.empty(3 * D, x.dtype)
    _short_conv_backward(g_s, a, cw, pre, False, True, nb, L, g_a, g_cw, g_cb, K)
    g_x, g_xb = np.empty((M, D), x.dtype), np.empty((M, D), x.dtype)
    _gemm(g_a, _side_by_side(Wq, Wk, Wv), g_x, none, False)
    _gemm(g_braw, Wb, g_xb, none, False)
    for m in range(M):
        for d in range(D):
            g_x[m, d] = g_x[m, d] + g_xb[m, d]
    g_W = np.empty((3 * D, D), x.dtype)
    _weight_grad(g_a, x, g_W)
    g_Wb = np.empty_like(Wb)
    _weight_grad(g_braw, x, g_Wb)
    return g_x, g_W[:D].copy(), g_W[D:2 * D].copy(), g_W[2 * D:].copy(), g_Wb, g_cw, g_nw, g_Wout


class _DeltaNet(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, num_heads, l2eps, neps, Wq, Wk, Wv, Wb, cq, ck, cv, nw, Wout):
        nb, L, D = x.shape
        dtype = x.dtype
        x2 = x.detach().reshape(nb * L, D).contiguous().numpy()
        p = [t.detach().contiguous().numpy() for t in (Wq, Wk, Wv, Wb)]
        cw = torch.cat([c.detach().reshape(D, -1) for c in (cq, ck, cv)]).contiguous().numpy()
        nw_, Wout_ = nw.detach().contiguous().numpy(), Wout.detach().contiguous().numpy()
        f = np.dtype(x2.dtype).type
        scale = f((D // num_heads) ** -0.5)  # as the portable path's q * dh**-0.5
        fdh = f(D // num_heads)
        out, saved = _forward(x2, *p, cw, nw_, Wout_, nb, L, num_heads, f(l2eps), f(neps), scale, fdh, _K[dtype])
        ctx.keep = x2, p, cw, nw_, Wout_, saved, nb, L, num_heads, scale, fdh, dtype, cq.shape
        return torch.from_numpy(out).view(nb, L, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gout):
        x2, p, cw, nw, Wout, saved, nb, L, H, scale, fdh, dtype, cshape = ctx.keep
        g = _backward(gout.reshape(x2.shape[0], -1).contiguous().numpy(), x2, *p, cw, nw, Wout, saved, nb, L, H, scale,
                      fdh, _K[dtype])
        g_x, g_Wq, g_Wk, g_Wv, g_Wb, g_cw, g_nw, g_Wout = (torch.from_numpy(a) for a in g)
        D = x2.shape[1]
        g_c = [g_cw[i * D:(i + 1) * D].reshape(cshape) for i in range(3)]
        return (g_x.view(nb, L, D), None, None, None, g_Wq, g_Wk, g_Wv, g_Wb, *g_c, g_nw, g_Wout)


def deltanet(x: torch.Tensor, q_proj: torch.Tensor, k_proj: torch.Tensor, v_proj: torch.Tensor, b_proj: torch.Tensor,
             q_conv: torch.Tensor, k_conv: torch.Tensor, v_conv: torch.Tensor, norm_weight: torch.Tensor,
             out_proj: torch.Tensor, num_heads: int, l2_eps: float, norm_eps: float) -> torch.Tensor:
    """The DeltaNet mixer of x (B, L, d_model) from its parameters as its modules hold them (the
    convs' weights (d_model, 1, k), tap k-1 the current step, no bias; the RMSNorm's weight (d_h,)),
    on the CPU in one dtype, fp32 or fp64."""
    ts = (x, q_proj, k_proj, v_proj, b_proj, q_conv, k_conv, v_conv, norm_weight, out_proj)
    if x.dtype not in _K or any(t.dtype != x.dtype or t.device.type != "cpu" for t in ts):
        raise ValueError(f"deltanet_cpu: CPU tensors of one dtype, fp32 or fp64, got {sorted({str(t.dtype) for t in ts})}")
    D = x.shape[-1]
    if D % num_heads or norm_weight.shape != (D // num_heads,) or b_proj.shape != (num_heads, D):
        raise ValueError(f"deltanet_cpu: width {D} in {num_heads} heads, norm weight {tuple(norm_weight.shape)}, "
                         f"beta projection {tuple(b_proj.shape)}")
    return _DeltaNet.apply(x, num_heads, l2_eps, norm_eps, q_proj, k_proj, v_proj, b_proj, q_conv, k_conv, v_conv,
                           norm_weight, out_proj)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it against the
    portable DeltaNet mixer in fp64 (output and every gradient), with two heads of 6 and a
    length that is not a multiple of 8, and one head; raises if anything is off."""
    from arrepro.models.mixers.deltanet import DeltaNet

    check_codegen()
    g = torch.Generator().manual_seed(0)
    tol = 1e-5 if dtype == torch.float64 else 2e-4  # the portable path computes its core in fp32 even in fp64
    for d, heads, L in ((12, 2, 11), (8, 1, 5)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            m = DeltaNet(d, max_len=16, num_heads=heads, conv_size=3).double()
        check_mixer(m, d, L, lambda x, mc: deltanet(x, *mc.cpu_kernel_arguments()), dtype, g, tol,
                    f"fused CPU DeltaNet self-check (width {d}, {heads} heads, length {L})")
    return CODEGEN
