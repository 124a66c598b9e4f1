"""A linear layer on the CPU with a matrix product of our own: ``linear(x, weight, bias)`` has the
signature of ``torch.nn.functional.linear``; ``arrepro.models.kernels`` decides when it runs
(kernel ``linear_cpu``: every ``ops.Linear`` of a model and its tied head) and records why not.

Why: under pinned CPU numerics (``arrepro.train.numerics``) MKL's sgemm runs its ``COMPATIBLE`` branch
(SSE2), 2-3.5x slower than its own AVX2 code at the demo's sizes, and the matrix products are a
third to a half of a demo cell's CPU time. This product is defined element by element, so that
its bits cannot depend on the CPU, the vector width or the blocking:

    y[i, j] = ((0 + x[i, 0] w[j, 0]) + x[i, 1] w[j, 1]) + ... + x[i, K-1] w[j, K-1]   (+ b[j] last)

every product and every sum rounded on its own (no FMA), the sum in order of k. The weight and
the bias gradient are the same kind of sum over the rows, in row order (rows: every dimension of x
but the last). How it gets fast: tiles of 2 rows x 32 columns (8 columns, 1 row at the edges)
whose 8-wide vector accumulators stay in registers while k runs (``_tile``, LLVM IR written here:
vector loads, one multiply and one add a lane, no fast-math flag); a vector lane does exactly
what the scalar loop of the remaining columns does, so the tiling changes no bit (the self-check
compares every path with numpy's own float32 multiplies and adds, bit for bit).
"""
from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, check_codegen

VECTOR_BYTES = 32  # an AVX2 register; LLVM splits it in two on the SSE2 build (the same bits)


def _make_tile(rows: int, cols: int):
    """An intrinsic ``tile(A, B, C, bias, use_bias, i0, j0)``: C[i0:i0+rows, j0:j0+cols] = A[i0:, :] @
    B[:, j0:] (+ bias[j0:]), the sum over k in order, for A with any strides and B, C, bias with unit
    stride in their last dimension; fp32 or fp64 (``cols`` elements in vectors of 32 bytes)."""

    @intrinsic
    def tile(typingctx, A, B, C, bias, use_bias, i0, j0):
        if not all(isinstance(t, types.Array) for t in (A, B, C, bias)) or len({A.dtype, B.dtype, C.dtype, bias.dtype}) != 1:
            return None
        sig = types.void(A, B, C, bias, types.boolean, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            aty, bty, cty, biasty = signature.args[:4]
            a, b, c, bv = (context.make_array(t)(context, builder, v) for t, v in zip((aty, bty, cty, biasty), args[:4]))
            use_bias, i0, j0 = args[4:]
            fty = context.get_value_type(aty.dtype)
            lanes = VECTOR_BYTES // context.get_abi_sizeof(fty)
            nv = cols // lanes
            vec = ir.VectorType(fty, lanes)
            intp = context.get_value_type(types.intp)
            size = intp(context.get_abi_sizeof(fty))
            bytep = ir.IntType(8).as_pointer()
            a_st, b_st, c_st = (cgutils.unpack_tuple(builder, t.strides, 2) for t in (a, b, c))
            K = cgutils.unpack_tuple(builder, a.shape, 2)[1]
            base = {n: builder.bitcast(t.data, bytep) for n, t in (("a", a), ("b", b), ("c", c), ("bias", bv))}

            def vec_at(name, offset):
                return builder.bitcast(builder.gep(base[name], [offset]), vec.as_pointer())

            zero = ir.Constant(vec, [0.0] * lanes)
            acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(nv)] for _ in range(rows)]
            splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            col = [builder.mul(builder.add(j0, intp(v * lanes)), size) for v in range(nv)]
            with cgutils.for_range(builder, K) as loop:
                k = loop.index
                brow = builder.mul(k, b_st[0])
                bk = [builder.load(vec_at("b", builder.add(brow, col[v])), align=1) for v in range(nv)]
                for r in range(rows):
                    off = builder.add(builder.mul(builder.add(i0, intp(r)), a_st[0]), builder.mul(k, a_st[1]))
                    x = builder.load(builder.bitcast(builder.gep(base["a"], [off]), fty.as_pointer()), align=1)
                    xs = builder.shuffle_vector(builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.IntType(32)(0)),
                                                ir.Constant(vec, ir.Undefined), splat)
                    for v in range(nv):
                        builder.store(builder.fadd(builder.load(acc[r][v]), builder.fmul(xs, bk[v])), acc[r][v])
            with builder.if_then(use_bias):
                for v in range(nv):
                    bias_v = builder.load(vec_at("bias", col[v]), align=1)
                    for r in range(rows):
                        builder.store(builder.fadd(builder.load(acc[r][v]), bias_v), acc[r][v])
            for r in range(rows):
                crow = builder.mul(builder.add(i0, intp(r)), c_st[0])
                for v in range(nv):
                    builder.store(builder.load(acc[r][v]), vec_at("c", builder.add(crow, col[v])), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_tile_2x32, _tile_2x8, _tile_1x32, _tile_1x8 = (_make_tile(r, c) for r, c in ((2, 32), (2, 8), (1, 32), (1, 8)))


@njit(cache=True)
def _gemm(A, B, C, bias, use_bias):
    """C = A @ B (+ bias), each element the ordered sum of the module docstring. A (M, K) with any
    strides; B (K, N), C (M, N) and bias (N,) with unit stride in their last dimension."""
    M, K = A.shape
    N = B.shape[1]
    if B.shape[0] != K or C.shape[0] != M or C.shape[1] != N or (use_bias and bias.shape[0] != N):
        raise ValueError("linear_cpu: operand shapes do not match")  # the tiles do not check bounds
    if B.strides[1] != B.itemsize or C.strides[1] != C.itemsize or (use_bias and bias.strides[0] != bias.itemsize):
        raise ValueError("linear_cpu: B, C and bias need unit stride in their last dimension")
    M2, N32, N8 = M - M % 2, N - N % 32, N - N % 8
    for i0 in range(0, M2, 2):
        for j0 in range(0, N32, 32):
            _tile_2x32(A, B, C, bias, use_bias, i0, j0)
        for j0 in range(N32, N8, 8):
            _tile_2x8(A, B, C, bias, use_bias, i0, j0)
    if M2 < M:
        for j0 in range(0, N32, 32):
            _tile_1x32(A, B, C, bias, use_bias, M2, j0)
        for j0 in range(N32, N8, 8):
            _tile_1x8(A, B, C, bias, use_bias, M2, j0)
    if N8 < N:
        zero = np.zeros(1, dtype=C.dtype)[0]
        for i in range(M):
            for j in range(N8, N):
                s = zero
                for k in range(K):
                    s = s + A[i, k] * B[k, j]
                if use_bias:
                    s = s + bias[j]
                C[i, j] = s


@njit(cache=True)
def _linear_forward(x, w, bias, use_bias, y):
    """y = x @ w.T (+ bias): w (N, K) is transposed here, into the (K, N) layout the tiles read."""
    _gemm(x, np.ascontiguousarray(w.T), y, bias, use_bias)


@njit(cache=True)
def _weight_grad(gy, x, gw):
    """gw = gy^T @ x, each element a sum over the rows in order (x: unit stride in its last
    dimension). With few columns in x, the vector lanes run over gy's columns instead (gw^T =
    x^T @ gy: the same products, a*b == b*a, in the same order: the same bits)."""
    if x.shape[1] < 8 <= gy.shape[1]:
        gwt = np.empty((x.shape[1], gy.shape[1]), dtype=gw.dtype)
        _gemm(x.T, np.ascontiguousarray(gy), gwt, gwt[0, :0], False)
        gw[:, :] = gwt.T
    else:
        _gemm(gy.T, x, gw, gw[0, :0], False)


@njit(cache=True)
def _column_sums(g, out):
    """out[j] = the sum of g[:, j] over the rows in order."""
    out[:] = 0
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            out[j] = out[j] + g[i, j]


@njit(cache=True)
def _linear_backward(gy, x, w, gx, gw, gb, need_x, need_w, need_b):
    """gx = gy @ w, gw = gy^T @ x (a sum over the rows in order), gb = the column sums of gy (rows
    in order): those asked for. gy may have any strides; x and w unit stride in their last dimension."""
    none = gb[:0]
    if need_x:
        _gemm(gy, w, gx, none, False)
    if need_w:
        _weight_grad(gy, x, gw)
    if need_b:
        _column_sums(gy, gb)


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where its last dimension has unit stride (as the tiles read B and C), else a copy."""
    return t if t.stride(-1) == 1 else t.contiguous()


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.empty(x2.shape[0], weight.shape[0], dtype=x.dtype)
        b = bias if bias is not None else weight
        _linear_forward(x2.detach().numpy(), weight.detach().numpy(), b.detach().numpy().reshape(-1), bias is not None,
                        y.numpy())
        ctx.save_for_backward(x2, weight)
        ctx.has_bias, ctx.x_shape = bias is not None, x.shape
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x2, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        need_b = need_b and ctx.has_bias
        gx = torch.empty(x2.shape, dtype=x2.dtype) if need_x else x2
        gw = torch.empty(weight.shape, dtype=weight.dtype) if need_w else weight
        gb = torch.empty(weight.shape[0], dtype=weight.dtype) if need_b else weight[0]
        _linear_backward(gy.reshape(-1, weight.shape[0]).numpy(), _unit_last(x2).detach().numpy(),
                         _unit_last(weight).detach().numpy(), gx.detach().numpy(), gw.detach().numpy(),
                         gb.detach().numpy(), need_x, need_w, need_b)
        return (gx.view(ctx.x_shape) if need_x else None, gw if need_w else None, gb if need_b else None)


MIN_ROWS = 128  # fewer rows: F.linear (MKL), whose call costs less than this one's at that size


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` by the ordered product of the module docstring, for CPU tensors of
    one dtype, fp32 or fp64, with at least ``MIN_ROWS`` rows (every dimension of x but the last);
    anything else: F.linear. Both the rule and the products depend on the shapes only, not on the
    machine."""
    if (x.dtype not in _DTYPES or weight.dtype != x.dtype or x.device.type != "cpu" or weight.device.type != "cpu"
            or (bias is not None and (bias.dtype != x.dtype or bias.device.type != "cpu"))
            or x.numel() < MIN_ROWS * x.shape[-1]):
        return torch.nn.functional.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)


_DTYPES = (torch.float32, torch.float64)


def reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The product of the module docstring in numpy's own arithmetic (each multiply and add rounded
    in the arrays' dtype; no BLAS): what every path of the kernel must equal bit for bit."""
    x2 = x.reshape(-1, x.shape[-1])
    y = np.zeros((x2.shape[0], weight.shape[0]), dtype=x.dtype)
    for k in range(x2.shape[1]):
        y = y + x2[:, k : k + 1] * weight[:, k][None, :]
    if bias is not None:
        y = y + bias[None, :]
    return y.reshape(*x.shape[:-1], weight.shape[0])


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the product for ``dtype`` and check it, its input, weight
    and bias gradients, on shapes that reach every tile and the scalar edge (odd rows, 37 columns:
    32 + 0 x 8 + 5; 45: 32 + 8 + 5), bit for bit against ``reference``. Raises if anything is off."""
    check_codegen()
    g = torch.Generator().manual_seed(0)
    for M, K, N in ((7, 5, 37), (4, 3, 45), (3, 33, 8)):
        x = torch.randn(M, K, generator=g, dtype=dtype).requires_grad_()
        w = torch.randn(N, K, generator=g, dtype=dtype).requires_grad_()
        b = torch.randn(N, generator=g, dtype=dtype).requires_grad_()
        gy = torch.randn(M, N, generator=g, dtype=dtype)
        y = _Linear.apply(x, w, b)  # the kernel itself, below MIN_ROWS too
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
        X, Wn, Bn, G = (t.detach().numpy() for t in (x, w, b, gy))
        want = {"y": reference(X, Wn, Bn), "dx": reference(G, np.ascontiguousarray(Wn.T)),
                "dweight": reference(np.ascontiguousarray(G.T), np.ascontiguousarray(X.T)),
                "dbias": reference(np.ones((1, M), dtype=G.dtype), np.ascontiguousarray(G.T))[0]}
        for name, got in (("y", y), ("dx", gx), ("dweight", gw), ("dbias", gb)):
            if not np.array_equal(got.detach().numpy(), want[name]):
                raise RuntimeError(f"fused CPU linear self-check: {name} ({dtype}, {M}x{K} @ {K}x{N}) is not the "
                                   "ordered product bit for bit")
    return f"{CODEGEN}; products of fewer than {MIN_ROWS} rows: F.linear"
