"""Causal softmax attention on the CPU, fused: ``attention(q, k, v)`` is
``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` for q, k, v (B, H, L, dh) without
dropout; ``arrepro.models.kernels`` decides when it runs (kernel ``attention_cpu``) and records why
not. At the demo's sizes ATen's CPU flash-attention kernel takes a third of a 2-layer attention
model's training step; this one a fraction of that.

Per batch element and head, with s = 1/sqrt(dh), in the input dtype:

    S = Q K^T  (ordered products: ``linear_cpu``)      m_i = max_{j<=i} s S_ij
    P_ij = exp(s S_ij - m_i) / l_i  for j <= i, else 0,  l_i = sum_{j<=i} exp(s S_ij - m_i) in order of j
    Y = P V    (ordered over every j: the zeros above the diagonal add nothing)

``exp`` is ``common.exp`` (the same bits on every machine). The backward pass recomputes P the same
way (so from the same bits), then dP = dY V^T, dV = P^T dY, D_i = sum_{j<=i} P_ij dP_ij in order (fused multiply-adds),
dS_ij = P_ij (dP_ij - D_i) s (0 above the diagonal), dQ = dS K, dK = dS^T Q: every product an
ordered sum (``linear_cpu._gemm``), every other step elementwise. Numerics: see ``common``.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, exp, fma
from arrepro.models.cpu_kernels.linear_cpu import _gemm

_K = {torch.float32: K[np.dtype(np.float32)], torch.float64: K[np.dtype(np.float64)]}


def outside_limits(call: dict) -> str | None:
    """Why a call is beyond this kernel (``arrepro.models.kernels`` asks; SDPA runs), or None: dropout."""
    return f"dropout {call['dropout']} (the fused CPU attention has none)" if call["dropout"] else None


@njit(cache=True, inline="always", error_model="numpy")
def _load(src, b, h, Qc, transpose):
    """src[b, h] (L, dh) into the contiguous Qc: as it is, or transposed (dh, L)."""
    L, dh = src.shape[2], src.shape[3]
    for j in range(L):
        for d in range(dh):
            if transpose:
                Qc[d, j] = src[b, h, j, d]
            else:
                Qc[j, d] = src[b, h, j, d]


@njit(cache=True, error_model="numpy")
def _probabilities(Qc, Kt, scale, S, P, K):
    """P of the module docstring from Q (L, dh) and K^T (dh, L); S is scratch (L, L)."""
    L = Qc.shape[0]
    _gemm(Qc, Kt, S, S[0, :0], False)
    for i in range(L):
        n = i + 1
        m = S[i, 0] * scale
        for j in range(n):
            S[i, j] = S[i, j] * scale
            m = max(m, S[i, j])
        for j in range(n):
            S[i, j] = exp(S[i, j] - m)
        total = K[5]
        for j in range(n):
            total += S[i, j]
        for j in range(n):
            P[i, j] = S[i, j] / total
        for j in range(n, L):
            P[i, j] = K[5]


@njit(cache=True, error_model="numpy")
def _attention_forward(q, k, v, scale, y, K):
    """y[b, :, h] = P V for every batch element b and head h (y laid out (B, L, H, dh))."""
    nb, nh, L, dh = q.shape
    Qc, Kt, Vc = np.empty((L, dh), q.dtype), np.empty((dh, L), q.dtype), np.empty((L, dh), q.dtype)
    S, P, Y = np.empty((L, L), q.dtype), np.empty((L, L), q.dtype), np.empty((L, dh), q.dtype)
    for b in range(nb):
        for h in range(nh):
            _load(q, b, h, Qc, False)
            _load(k, b, h, Kt, True)
            _load(v, b, h, Vc, False)
            _probabilities(Qc, Kt, scale, S, P, K)
            _gemm(P, Vc, Y, S[0, :0], False)
            y[b, :, h, :] = Y


@njit(cache=True, error_model="numpy")
def _attention_backward(q, k, v, gy, scale, gq, gk, gv, K):
    """The gradients of ``_attention_forward`` (gy, gq, gk, gv laid out (B, L, H, dh))."""
    nb, nh, L, dh = q.shape
    Qc, Kt, Kc = np.empty((L, dh), q.dtype), np.empty((dh, L), q.dtype), np.empty((L, dh), q.dtype)
    Vt, G = np.empty((dh, L), q.dtype), np.empty((L, dh), q.dtype)
    S, P, dP = np.empty((L, L), q.dtype), np.empty((L, L), q.dtype), np.empty((L, L), q.dtype)
    dQ, dK, dV = np.empty((L, dh), q.dtype), np.empty((L, dh), q.dtype), np.empty((L, dh), q.dtype)
    none = S[0, :0]
    for b in range(nb):
        for h in range(nh):
            _load(q, b, h, Qc, False)
            _load(k, b, h, Kt, True)
            _load(k, b, h, Kc, False)
            _load(v, b, h, Vt, True)
            G[:, :] = gy[b, :, h, :]
            _probabilities(Qc, Kt, scale, S, P, K)
            _gemm(G, Vt, dP, none, False)
            _gemm(P.T, G, dV, none, False)
            for i in range(L):
                n = i + 1
                D = K[5]
                for j in range(n):
                    D = fma(P[i, j], dP[i, j], D)
                for j in range(n):
                    dP[i, j] = P[i, j] * (dP[i, j] - D) * scale
                for j in range(n, L):
                    dP[i, j] = K[5]
            _gemm(dP, Kc, dQ, none, False)
            _gemm(dP.T, Qc, dK, none, False)
            gq[b, :, h, :] = dQ
            gk[b, :, h, :] = dK
            gv[b, :, h, :] = dV


def _blh(shape, dtype) -> torch.Tensor:
    """A (B, L, H, dh) buffer seen as (B, H, L, dh): what ``Attention._out`` flattens for free."""
    B, H, L, dh = shape
    return torch.empty(B, L, H, dh, dtype=dtype).transpose(1, 2)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        y = _blh(q.shape, q.dtype)
        scale = q.new_tensor(q.shape[-1] ** -0.5).item()
        kk = _K[q.dtype]
        _attention_forward(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), kk.dtype.type(scale),
                           y.transpose(1, 2).numpy(), kk)
        ctx.save_for_backward(q, k, v)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        q, k, v = ctx.saved_tensors
        gq, gk, gv = (_blh(q.shape, q.dtype) for _ in range(3))
        scale = q.new_tensor(q.shape[-1] ** -0.5).item()
        kk = _K[q.dtype]
        _attention_backward(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), gy.transpose(1, 2).numpy(),
                            kk.dtype.type(scale), gq.transpose(1, 2).numpy(), gk.transpose(1, 2).numpy(),
                            gv.transpose(1, 2).numpy(), kk)
        return gq, gk, gv


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention, q, k, v (B, H, L, dh) on the CPU in one dtype (fp32 or fp64) ->
    (B, H, L, dh), a view of a (B, L, H, dh) tensor."""
    if not (q.dtype == k.dtype == v.dtype and q.dtype in _K) or q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"attention_cpu: q, k, v must be one shape and dtype (fp32 or fp64), got "
                         f"{tuple(q.shape)} {q.dtype}, {tuple(k.shape)} {k.dtype}, {tuple(v.shape)} {v.dtype}")
    return _Attention.apply(q, k, v)


def _reference(q, k, v):
    L = q.shape[2]
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel for ``dtype`` and check it and its gradients
    against the explicit masked softmax in fp64, on a case with two heads, a length that is not a
    multiple of 8 and strided inputs; raises if anything is off."""
    check_codegen()
    g = torch.Generator().manual_seed(0)
    B, H, L, dh = 2, 2, 11, 5
    ts = [torch.randn(B, L, H, dh, generator=g, dtype=torch.float64).transpose(1, 2) for _ in range(3)]
    gy = torch.randn(B, H, L, dh, generator=g, dtype=torch.float64)
    args = [t.to(dtype).requires_grad_() for t in ts]
    y = attention(*args)
    grads = torch.autograd.grad(y, args, gy.to(dtype))
    ref_args = [t.detach().to(torch.float64).requires_grad_() for t in args]
    ref = _reference(*ref_args)
    ref_grads = torch.autograd.grad(ref, ref_args, gy)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for name, a, r in [("y", y, ref)] + list(zip(("dq", "dk", "dv"), grads, ref_grads)):
        err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1e-30)
        if not err <= tol:
            raise RuntimeError(f"fused CPU attention self-check: {name} ({dtype}) off by {err:.2e} (tolerance {tol})")
    return CODEGEN


@njit(cache=True, error_model="numpy")
def _rotate(a, c0, D, cos, sin, nb, L, H, inverse):
    """Rotary positions on the columns c0 .. c0 + D of a (nb L, .), H heads: each head's channel
    pairs (i, i + half) turned by the position's angles (cos, sin: (L, half); half 0: nothing), or
    with ``inverse`` back by them (the gradient of the turn)."""
    half, dh = cos.shape[1], D // H
    for b in range(nb):
        for t in range(L):
            row = b * L + t
            for hd in range(H):
                c = c0 + hd * dh
                for i in range(half):
                    x1, x2, co, si = a[row, c + i], a[row, c + half + i], cos[t, i], sin[t, i]
                    if inverse:
                        a[row, c + i], a[row, c + half + i] = x1 * co + x2 * si, x2 * co - x1 * si
                    else:
                        a[row, c + i], a[row, c + half + i] = x1 * co - x2 * si, x1 * si + x2 * co
