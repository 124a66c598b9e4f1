"""A block's MLP on the CPU, fused: ``mlp(x, fc1_weight, fc1_bias, out_weight, out_bias)`` is
``ops.MLP`` (fc2(gelu(fc1(x)))) in one numba call forward and one backward, instead of two fused
linear layers and ATen's GELU with their autograd nodes; the compiled attention block
(``block_cpu``) runs the same code for its MLP. ``arrepro.models.kernels`` decides when it runs
(kernel ``mlp_cpu``) and records why not.

Numerics, fp32 (the same bits on every x86-64 CPU, see ``common``): the products
``linear_cpu._gemm``'s ordered chains, the bias added last; GELU x/2 (1 + erf(x / sqrt 2)) with the
erf of Abramowitz and Stegun's 7.1.26 on ``common.exp`` (absolute error below 1.5e-7, about one
fp32 unit of 1 + erf), its derivative Phi(x) + x phi(x); weight and bias gradients sums over the
rows in order.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, K, check_codegen, exp, fma
from arrepro.models.cpu_kernels.linear_cpu import _column_sums, _gemm, _weight_grad

_K = K[np.dtype(np.float32)]
# GELU's constants in fp32: 1/2, 1/sqrt 2, 1/sqrt(2 pi), 7.1.26's p and a1..a5, 1
_G = np.array([0.5, 0.7071067811865476, 0.3989422804014327, 0.3275911, 0.254829592, -0.284496736,
               1.421413741, -1.453152027, 1.061405429, 1.0], dtype=np.float32)


@njit(cache=True, inline="always", error_model="numpy")
def _phi(x):
    """The normal CDF, (1 + erf(x / sqrt 2)) / 2, erf by 7.1.26 (branch-free: the loops vectorise)."""
    z = x * _G[1]
    az = abs(z)
    t = _G[9] / fma(_G[3], az, _G[9])
    p = fma(fma(fma(fma(_G[8], t, _G[7]), t, _G[6]), t, _G[5]), t, _G[4])
    e = _G[9] - p * t * exp(-(z * z))
    return _G[0] * (_G[9] + (e if z >= _K[5] else -e))


@njit(cache=True, error_model="numpy")
def _gelu(a, out):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = a[i, j] * _phi(a[i, j])


@njit(cache=True, error_model="numpy")
def _gelu_backward(g, a, ga):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            x = a[i, j]
            ga[i, j] = g[i, j] * (_phi(x) + x * (_G[2] * exp(-(_G[0] * x * x))))


@njit(cache=True, error_model="numpy")
def _mlp_forward(h, W1, c1, W2, c2):
    """y = fc2(gelu(fc1(h))) and what the backward pass reads (fc1's output, the GELU's)."""
    a = np.empty((h.shape[0], W1.shape[0]), h.dtype)
    _gemm(h, np.ascontiguousarray(W1.T), a, c1, True)
    ge = np.empty_like(a)
    _gelu(a, ge)
    y = np.empty((h.shape[0], W2.shape[0]), h.dtype)
    _gemm(ge, np.ascontiguousarray(W2.T), y, c2, True)
    return y, a, ge


@njit(cache=True, error_model="numpy")
def _mlp_backward(gy, h, W1, W2, a, ge, gW1, gc1, gW2, gc2, gh):
    """The gradients of ``_mlp_forward`` for gy = dL/dy: the parameters' and the input's (gh)."""
    none = gc1[:0]
    _weight_grad(gy, ge, gW2)
    _column_sums(gy, gc2)
    gge = np.empty_like(ge)
    _gemm(gy, W2, gge, none, False)
    ga = np.empty_like(a)
    _gelu_backward(gge, a, ga)
    _weight_grad(ga, h, gW1)
    _column_sums(ga, gc1)
    _gemm(ga, W1, gh, none, False)


class _MLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, W1, c1, W2, c2):
        shape = x.shape
        h = x.detach().reshape(-1, shape[-1]).contiguous().numpy()
        p = [t.detach().contiguous().numpy() for t in (W1, c1, W2, c2)]
        y, a, ge = _mlp_forward(h, *p)
        ctx.keep = h, p, a, ge, shape
        return torch.from_numpy(y).view(*shape[:-1], -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        h, (W1, c1, W2, c2), a, ge, shape = ctx.keep
        g = [np.empty_like(t) for t in (W1, c1, W2, c2)]
        gh = np.empty_like(h)
        _mlp_backward(gy.reshape(h.shape[0], -1).contiguous().numpy(), h, W1, W2, a, ge, *g, gh)
        return (torch.from_numpy(gh).view(shape), *(torch.from_numpy(t) for t in g))


def mlp(x: torch.Tensor, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor, out_weight: torch.Tensor,
        out_bias: torch.Tensor) -> torch.Tensor:
    """fc2(gelu(fc1(x))) over the last dimension of x, fp32 CPU tensors (the layers' weights as
    ``nn.Linear`` holds them)."""
    ts = (x, fc1_weight, fc1_bias, out_weight, out_bias)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in ts):
        raise ValueError(f"mlp_cpu: fp32 CPU tensors, got {sorted({str(t.dtype) for t in ts})}")
    return _MLP.apply(x, fc1_weight, fc1_bias, out_weight, out_bias)


def reference(x: torch.Tensor, W1: torch.Tensor, c1: torch.Tensor, W2: torch.Tensor, c2: torch.Tensor) -> torch.Tensor:
    """The MLP in plain PyTorch (exact erf), for checks."""
    import torch.nn.functional as F
    return F.linear(F.gelu(F.linear(x, W1, c1)), W2, c2)


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the kernel and check its output and every gradient
    against ``reference`` in fp64, width 20 (a vector and 4 more), 23 rows; raises if anything is off."""
    check_codegen()
    if dtype != torch.float32:
        raise ValueError(f"mlp_cpu computes in fp32, not {dtype}")
    g = torch.Generator().manual_seed(0)
    D = 20
    args = [torch.randn(s, generator=g) * (0.5 if len(s) == 2 else 0.1) for s in ((2, 23, D), (4 * D, D), (4 * D,),
                                                                                   (D, 4 * D), (D,))]
    args[0] = args[0] * 4  # inputs of order 1 to the GELU
    args = [t.requires_grad_() for t in args]
    y = mlp(*args)
    gy = torch.randn(y.shape, generator=g)
    grads = torch.autograd.grad(y, args, gy)
    ref_args = [t.detach().double().requires_grad_() for t in args]
    ref = reference(*ref_args)
    ref_grads = torch.autograd.grad(ref, ref_args, gy.double())
    for name, a, r in zip(("y", "dx", "fc1.weight", "fc1.bias", "out_proj.weight", "out_proj.bias"),
                          (y, *grads), (ref, *ref_grads)):
        err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), 1.0)
        if not err <= 1e-5:
            raise RuntimeError(f"fused CPU MLP self-check: {name} off by {err:.2e} (tolerance 1e-5)")
    return CODEGEN
