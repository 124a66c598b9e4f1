"""A pre-norm attention block on the CPU, compiled whole: ``block(x, params, rows, num_heads, ...)``
is ``backbone.Block`` with the ``attention`` mixer (its short convolutions and rotary positions
included; not dropout) and its MLP, in one numba call forward and one backward, instead of some
60 ATen calls, kernel calls and autograd nodes. At the demo's sizes a block's own operations are a
fraction of its step: the rest is the calls between them and their buffers leaving the cache
(docs/history/benchmarks.md).

For x (B, L, D), H heads of dh = D / H, rows M = B L:

    h1 = LN1(x)                  x1 = x + out_proj(attention(rot(q_proj(c_q(h1))), rot(k_proj(c_k(h1))), v_proj(c_v(h1))))
    h2 = LN2(x1[rows])           y  = x1[rows] + fc2(gelu(fc1(h2)))

c_p the identity, or for a path in ``conv`` its short depthwise convolution with bias
(``short_conv_cpu``'s loops), causal or looking ``lookahead`` steps ahead (the causal convolution of
the sequence with that many zeros after it, shifted back: ``Attention._conv``); rot the identity, or
with ``rope`` the rotation of each head's channel pairs (i, i + dh/2) by the position's angles
(``ops.rotary_tables``, ``ops.apply_rotary``: x1 cos - x2 sin, x1 sin + x2 cos, each product
rounded).

``rows`` (a boolean (B, L) mask, or None for all) keeps the positions the next step reads, as
``Block.forward`` does for the last block. Numerics, fp32 (the same bits on every x86-64 CPU, see
``common``): every product the ordered chain of ``linear_cpu._gemm`` (q, k and v as one product
with their weights side by side where they share their input: each element's chain is the one of
its own projection); the
attention probabilities as ``attention_cpu`` computes them, kept for the backward pass; the layer
norm's mean the ordered sum of the row over D, its variance the ordered sum of the squared
deviations (fused multiply-adds) over D, then (x - mean) / sqrt(var + eps) w + b; the MLP
``mlp_cpu``'s (its GELU by Abramowitz and Stegun's erf). Every sum over rows (weight, bias and norm
gradients) in row order; the input gradient the residual's, then the norm's added; with a
convolution, the norm's output gradient the paths' in the order q, k, v.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.backbone import BLOCK_PARAMS
from arrepro.models.cpu_kernels.attention_cpu import _probabilities, _rotate
from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, fma
from arrepro.models.cpu_kernels.linear_cpu import _column_sums, _gemm, _side_by_side, _weight_grad
from arrepro.models.cpu_kernels.mlp_cpu import _mlp_backward, _mlp_forward
from arrepro.models.cpu_kernels.short_conv_cpu import _conv_ahead, _conv_ahead_backward
from arrepro.models.ops import apply_rotary, rotary_tables

_K = K[np.dtype(np.float32)]


def outside_limits(call: dict) -> str | None:
    """Why a block is beyond this kernel (``arrepro.models.kernels`` asks; the block's own modules run),
    or None: dropout, a parallel residual, rotary positions on part of a head's channels."""
    if call["dropout"]:
        return f"dropout {call['dropout']} (the compiled block has none)"
    if call["residual"] != "sequential":
        return f"residual {call['residual']} (the compiled block adds its MLP after its mixer)"
    if call["rotary_fraction"] != 1.0:
        return f"rotary fraction {call['rotary_fraction']} (the compiled block turns every channel of a head)"
    return None


@njit(cache=True, error_model="numpy")
def _norm(x, w, b, eps, h, mean, rstd):
    """h = the layer norm of each row of x (mean, rstd kept for the backward pass)."""
    M, D = x.shape
    for i in range(M):
        s = _K[5]
        for d in range(D):
            s += x[i, d]
        mu = s / np.float32(D)
        v = _K[5]
        for d in range(D):
            v = fma(x[i, d] - mu, x[i, d] - mu, v)
        r = _K[7] / np.sqrt(v / np.float32(D) + eps)
        mean[i], rstd[i] = mu, r
        for d in range(D):
            h[i, d] = (x[i, d] - mu) * r * w[d] + b[d]


@njit(cache=True, error_model="numpy")
def _norm_backward(gh, x, w, mean, rstd, gx, gw, gb):
    """gx += the gradient through the layer norm; gw, gb += its weight's and bias's, rows in order."""
    M, D = x.shape
    for i in range(M):
        mu, r = mean[i], rstd[i]
        s1, s2 = _K[5], _K[5]
        for d in range(D):
            xh = (x[i, d] - mu) * r
            gw[d] = fma(gh[i, d], xh, gw[d])
            gb[d] += gh[i, d]
            t = gh[i, d] * w[d]
            s1 += t
            s2 = fma(t, xh, s2)
        s1, s2 = s1 / np.float32(D), s2 / np.float32(D)
        for d in range(D):
            gx[i, d] += r * (gh[i, d] * w[d] - s1 - (x[i, d] - mu) * r * s2)


@njit(cache=True, error_model="numpy")
def _forward(x, p, cw, cb, has, ahead, cos, sin, nb, L, H, idx, eps, scale):
    """The block's output on rows ``idx`` and what the backward pass reads. cw (3, D, k), cb (3, D):
    the convolutions of q, k, v where ``has`` says so; ``ahead`` their look-ahead; cos, sin (L, dh/2) the
    rotary angles (dh/2 = 0: none)."""
    g1, b1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, b2, W1, c1, W2, c2 = p
    M, D = x.shape
    dh = D // H
    h1, mean1, rstd1 = np.empty((M, D), x.dtype), np.empty(M, x.dtype), np.empty(M, x.dtype)
    _norm(x, g1, b1, eps, h1, mean1, rstd1)
    qkv = np.empty((M, 3 * D), x.dtype)
    hc = np.empty((3, M if has[0] or has[1] or has[2] else 0, D), x.dtype)  # each path's convolved input
    if hc.shape[1] == 0:
        _gemm(h1, np.ascontiguousarray(_side_by_side(Wq, Wk, Wv).T), qkv, np.concatenate((bq, bk, bv)), True)
    else:
        Ws, bs = (Wq, Wk, Wv), (bq, bk, bv)
        out = np.empty((M, D), x.dtype)
        for j in range(3):
            if has[j]:
                _conv_ahead(h1, cw[j], cb[j], nb, L, ahead, hc[j])
            _gemm(hc[j] if has[j] else h1, np.ascontiguousarray(Ws[j].T), out, bs[j], True)
            qkv[:, j * D:(j + 1) * D] = out
    _rotate(qkv, 0, D, cos, sin, nb, L, H, False)
    _rotate(qkv, D, D, cos, sin, nb, L, H, False)
    P = np.empty((nb, H, L, L), x.dtype)
    att = np.empty((M, D), x.dtype)
    Qc, Kt, Vc, Y = np.empty((L, dh), x.dtype), np.empty((dh, L), x.dtype), np.empty((L, dh), x.dtype), \
        np.empty((L, dh), x.dtype)
    S = np.empty((L, L), x.dtype)
    for b in range(nb):
        for hd in range(H):
            c = hd * dh
            Qc[:, :] = qkv[b * L:(b + 1) * L, c:c + dh]
            Kt[:, :] = qkv[b * L:(b + 1) * L, D + c:D + c + dh].T
            Vc[:, :] = qkv[b * L:(b + 1) * L, 2 * D + c:2 * D + c + dh]
            _probabilities(Qc, Kt, scale, S, P[b, hd], _K)
            _gemm(P[b, hd], Vc, Y, S[0, :0], False)
            att[b * L:(b + 1) * L, c:c + dh] = Y
    x1 = np.empty((M, D), x.dtype)
    _gemm(att, np.ascontiguousarray(Wo.T), x1, bo, True)
    for i in range(M):
        for d in range(D):
            x1[i, d] += x[i, d]
    n = idx.shape[0]
    xk = np.empty((n, D), x.dtype)
    for r in range(n):
        xk[r] = x1[idx[r]]
    h2, mean2, rstd2 = np.empty((n, D), x.dtype), np.empty(n, x.dtype), np.empty(n, x.dtype)
    _norm(xk, g2, b2, eps, h2, mean2, rstd2)
    y, a, ge = _mlp_forward(h2, W1, c1, W2, c2)
    for r in range(n):
        for d in range(D):
            y[r, d] += xk[r, d]
    return y, (h1, mean1, rstd1, qkv, P, att, xk, h2, mean2, rstd2, a, ge, hc)


@njit(cache=True, error_model="numpy")
def _backward(gy, x, p, cw, has, ahead, cos, sin, saved, nb, L, H, idx, scale, g, gcw, gcb):
    """The gradients of ``_forward`` into ``g`` (the input's first, then the parameters' in order)
    and the convolutions' into gcw, gcb."""
    g1, b1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, b2, W1, c1, W2, c2 = p
    h1, mean1, rstd1, qkv, P, att, xk, h2, mean2, rstd2, a, ge, hc = saved
    gx, gg1, gb1, gWq, gbq, gWk, gbk, gWv, gbv, gWo, gbo, gg2, gb2, gW1, gc1, gW2, gc2 = g
    M, D = x.shape
    dh = D // H
    none = gbo[:0]
    gh2 = np.empty_like(h2)
    _mlp_backward(gy, h2, W1, W2, a, ge, gW1, gc1, gW2, gc2, gh2)
    gxk = gy.copy()  # the residual's gradient, then the norm's added
    gg2[:], gb2[:] = _K[5], _K[5]
    _norm_backward(gh2, xk, g2, mean2, rstd2, gxk, gg2, gb2)
    gx1 = np.zeros((M, D), x.dtype)
    for r in range(idx.shape[0]):
        gx1[idx[r]] = gxk[r]
    _weight_grad(gx1, att, gWo)
    _column_sums(gx1, gbo)
    gatt = np.empty((M, D), x.dtype)
    _gemm(gx1, Wo, gatt, none, False)
    gqkv = np.empty((M, 3 * D), x.dtype)
    Qc, Kc, Vt, G = np.empty((L, dh), x.dtype), np.empty((L, dh), x.dtype), np.empty((dh, L), x.dtype), \
        np.empty((L, dh), x.dtype)
    dP, dQ, dK, dV = np.empty((L, L), x.dtype), np.empty((L, dh), x.dtype), np.empty((L, dh), x.dtype), \
        np.empty((L, dh), x.dtype)
    for b in range(nb):
        for hd in range(H):
            c, rows = hd * dh, slice(b * L, (b + 1) * L)
            Qc[:, :] = qkv[rows, c:c + dh]
            Kc[:, :] = qkv[rows, D + c:D + c + dh]
            Vt[:, :] = qkv[rows, 2 * D + c:2 * D + c + dh].T
            G[:, :] = gatt[rows, c:c + dh]
            Pb = P[b, hd]
            _gemm(G, Vt, dP, none, False)
            _gemm(np.ascontiguousarray(Pb.T), G, dV, none, False)
            for i in range(L):
                s = _K[5]
                for j in range(i + 1):
                    s = fma(Pb[i, j], dP[i, j], s)
                for j in range(i + 1):
                    dP[i, j] = Pb[i, j] * (dP[i, j] - s) * scale
                for j in range(i + 1, L):
                    dP[i, j] = _K[5]
            _gemm(dP, Kc, dQ, none, False)
            _gemm(np.ascontiguousarray(dP.T), Qc, dK, none, False)
            gqkv[rows, c:c + dh] = dQ
            gqkv[rows, D + c:D + c + dh] = dK
            gqkv[rows, 2 * D + c:2 * D + c + dh] = dV
    _rotate(gqkv, 0, D, cos, sin, nb, L, H, True)
    _rotate(gqkv, D, D, cos, sin, nb, L, H, True)
    gh1 = np.empty((M, D), x.dtype)
    if hc.shape[1] == 0:
        gW = np.empty((3 * D, D), x.dtype)
        _weight_grad(gqkv, h1, gW)
        gWq[:], gWk[:], gWv[:] = gW[:D], gW[D:2 * D], gW[2 * D:]
        gbqkv = np.empty(3 * D, x.dtype)
        _column_sums(gqkv, gbqkv)
        gbq[:], gbk[:], gbv[:] = gbqkv[:D], gbqkv[D:2 * D], gbqkv[2 * D:]
        _gemm(gqkv, _side_by_side(Wq, Wk, Wv), gh1, none, False)
    else:
        Ws, gWs, gbs = (Wq, Wk, Wv), (gWq, gWk, gWv), (gbq, gbk, gbv)
        gin, gc = np.empty((M, D), x.dtype), np.empty((M, D), x.dtype)
        for j in range(3):
            gp = np.ascontiguousarray(gqkv[:, j * D:(j + 1) * D])
            _weight_grad(gp, hc[j] if has[j] else h1, gWs[j])
            _column_sums(gp, gbs[j])
            _gemm(gp, Ws[j], gin, none, False)
            if has[j]:
                _conv_ahead_backward(gin, h1, cw[j], nb, L, ahead, gc, gcw[j], gcb[j])
            src = gc if has[j] else gin
            if j == 0:
                gh1[:, :] = src
            else:
                for i in range(M):
                    for d in range(D):
                        gh1[i, d] += src[i, d]
    gx[:, :] = gx1
    gg1[:], gb1[:] = _K[5], _K[5]
    _norm_backward(gh1, x, g1, mean1, rstd1, gx, gg1, gb1)


_NONE = np.zeros((1, 0), np.float32)  # no rotary angles


class _Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, rows, num_heads, eps, conv, lookahead, rope, *params):
        nb, L, D = x.shape
        idx = np.arange(nb * L) if rows is None else np.flatnonzero(rows.reshape(-1).numpy())
        p = tuple(t.detach().contiguous().numpy() for t in params)
        k = params[16].shape[-1] if conv else 1
        cw, cb = np.zeros((3, D, k), np.float32), np.zeros((3, D), np.float32)
        for path, w, b in zip(conv, p[16::2], p[17::2]):
            cw["qkv".index(path)], cb["qkv".index(path)] = w.reshape(D, k), b
        has = tuple(c in conv for c in "qkv")
        cos, sin = (t.numpy() for t in rotary_tables(L, D // num_heads)) if rope else (_NONE, _NONE)
        x2 = x.detach().reshape(nb * L, D).contiguous().numpy()
        scale = np.float32((D // num_heads) ** -0.5)  # as attention_cpu's
        y, saved = _forward(x2, p[:16], cw, cb, has, lookahead, cos, sin, nb, L, num_heads, idx, np.float32(eps), scale)
        ctx.keep = x2, p, (cw, has, lookahead, cos, sin), saved, nb, L, num_heads, idx, scale, x.shape, conv
        out = torch.from_numpy(y)
        return out.view(nb, L, D) if rows is None else out

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x2, p, (cw, has, s, cos, sin), saved, nb, L, H, idx, scale, shape, conv = ctx.keep
        g = (np.empty_like(x2),) + tuple(np.empty_like(a) for a in p[:16])
        gcw, gcb = np.zeros_like(cw), np.zeros(cw.shape[:2], np.float32)
        _backward(gy.reshape(-1, shape[-1]).contiguous().numpy(), x2, p[:16], cw, has, s, cos, sin, saved, nb, L, H,
                  idx, scale, g, gcw, gcb)
        convs = []
        for path, w in zip(conv, p[16::2]):
            convs += [torch.from_numpy(gcw["qkv".index(path)].reshape(w.shape)), torch.from_numpy(gcb["qkv".index(path)])]
        return (torch.from_numpy(g[0]).view(shape), None, None, None, None, None, None) + \
            tuple(torch.from_numpy(a) for a in g[1:]) + tuple(convs)


def block(x: torch.Tensor, params: tuple[torch.Tensor, ...], rows: torch.Tensor | None = None, num_heads: int = 1,
          eps: float = 1e-5, conv: str = "", lookahead: int = 0, rope: bool = False) -> torch.Tensor:
    """The block of the module docstring on x (B, L, D), fp32, its parameters in the order
    ``backbone.BLOCK_PARAMS`` names them in a Block, then each convolution's weight (D, 1, k) and
    bias (D,) in the order of the paths ``conv`` names ("q", "k", "v"; a subset, in any order):
    (B, L, D), or (M, D) for the M positions ``rows`` keeps."""
    if x.dtype != torch.float32 or any(t.dtype != torch.float32 for t in params) or x.shape[-1] % num_heads:
        raise ValueError(f"block_cpu: fp32 x and parameters with a width divisible by the heads, got {x.dtype}, "
                         f"width {x.shape[-1]}, {num_heads} heads")
    if len(set(conv)) != len(conv) or not set(conv) <= set("qkv") or len(params) != 16 + 2 * len(conv) or lookahead < 0:
        raise ValueError(f"block_cpu: conv names distinct paths of 'qkv', a weight and a bias each after the block's 16 "
                         f"parameters, look-ahead >= 0; got conv {conv!r}, {len(params)} parameters, look-ahead {lookahead}")
    if rope and (x.shape[-1] // num_heads) % 2:
        raise ValueError(f"block_cpu: rotary positions need an even head dimension, got {x.shape[-1] // num_heads}")
    return _Block.apply(x, rows, num_heads, eps, conv, lookahead, rope, *params)


def reference(x: torch.Tensor, params: tuple[torch.Tensor, ...], rows: torch.Tensor | None = None,
              num_heads: int = 1, eps: float = 1e-5, conv: str = "", lookahead: int = 0,
              rope: bool = False) -> torch.Tensor:
    """The block of the module docstring in plain PyTorch (exact erf), for checks."""
    import torch.nn.functional as F
    g1, b1, Wq, bq, Wk, bk, Wv, bv, Wo, bo, g2, b2, W1, c1, W2, c2 = params[:16]
    convs = dict(zip(conv, zip(params[16::2], params[17::2])))
    nb, L, D = x.shape
    h = F.layer_norm(x, (D,), g1, b1, eps)

    def path(name, W, b):
        inp = h
        if name in convs:  # tap j of k multiplies step t + lookahead - (k - 1) + j
            w, cb = convs[name]
            k = w.shape[-1]
            hp = F.pad(h, (0, 0, k - 1, lookahead))
            inp = sum(hp[:, j + lookahead:j + lookahead + L] * w[:, 0, j] for j in range(k)) + cb
        out = F.linear(inp, W, b).view(nb, L, num_heads, -1).transpose(1, 2)
        return apply_rotary(out, *rotary_tables(L, D // num_heads)) if rope and name != "v" else out

    q, k, v = path("q", Wq, bq), path("k", Wk, bk), path("v", Wv, bv)
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(nb, L, D)
    x1 = x + F.linear(att, Wo, bo)
    if rows is not None:
        x1 = x1[rows]
    return x1 + F.linear(F.gelu(F.linear(F.layer_norm(x1, (D,), g2, b2, eps), W1, c1)), W2, c2)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the block and check its output and every gradient
    against ``reference`` in fp64, with two heads and a length that is not a multiple of 8: plain
    on every row; with causal convolutions on V and Q (that order) and rotary positions on a mask
    of kept rows; with a convolution on K that looks one step ahead. Raises if anything is off."""
    check_codegen()
    if dtype != torch.float32:
        raise ValueError(f"block_cpu computes in fp32, not {dtype}")
    g = torch.Generator().manual_seed(0)
    B, L, D, H, k = 2, 11, 8, 2, 3
    shapes = [(D,), (D,)] + [(D, D), (D,)] * 4 + [(D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
    params = [(torch.randn(s, generator=g) * (0.5 if len(s) == 2 else 0.1) + (1.0 if i in (0, 10) else 0.0))
              for i, s in enumerate(shapes)]
    convs = [torch.randn(s, generator=g) * 0.5 for _ in range(3) for s in ((D, 1, k), (D,))]
    x = torch.randn(B, L, D, generator=g)
    for rows, conv, ahead, rope in ((None, "", 0, False), (torch.rand(B, L, generator=g) < 0.4, "vq", 0, True),
                                    (None, "k", 1, False)):
        opts = dict(num_heads=H, conv=conv, lookahead=ahead, rope=rope)
        args = [t.clone().requires_grad_() for t in [x] + params + convs[:2 * len(conv)]]
        y = block(args[0], tuple(args[1:]), rows, **opts)
        gy = torch.randn(y.shape, generator=g)
        grads = torch.autograd.grad(y, args, gy)
        ref_args = [t.detach().double().requires_grad_() for t in args]
        ref = reference(ref_args[0], tuple(ref_args[1:]), rows, **opts)
        ref_grads = torch.autograd.grad(ref, ref_args, gy.double())
        names = ("dx",) + BLOCK_PARAMS + tuple(f"conv {c} {w}" for c in conv for w in ("weight", "bias"))
        for name, a, r in [("y", y, ref)] + list(zip(names, grads, ref_grads)):
            # relative to 1 at least: the key bias's gradient is 0 but for rounding (a softmax does not
            # see a constant added to every key; 2e-6 here in fp32), where the others are of order 0.1 to 10
            err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1.0)
            if not err <= 1e-5:
                raise RuntimeError(f"fused CPU block self-check ({opts}): {name} off by {err:.2e} (tolerance 1e-5)")
    return CODEGEN
