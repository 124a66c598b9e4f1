"""A linear layer on the CPU with a matrix product of our own: ``linear(x, weight, bias)`` has the
signature of ``torch.nn.functional.linear``; ``arrepro.models.kernels`` decides when it runs
(kernel ``linear_cpu``: every ``ops.Linear`` of a model and its tied head) and records why not.

Why: under pinned CPU numerics (``arrepro.train.numerics``) MKL's sgemm runs its ``COMPATIBLE`` branch
(SSE2), several times slower than its own AVX2 code, and the matrix products are a third to a
half of a demo cell's CPU time. This product is defined element by element, so that its bits
cannot depend on the CPU, the vector width or the blocking:

    y[i, j] = fma(x[i, K-1], w[j, K-1], ... fma(x[i, 1], w[j, 1], fma(x[i, 0], w[j, 0], 0)) ...)   (+ b[j] last)

a chain of fused multiply-adds (``common.fma``: each rounded once) in order of k, the bias added
last. The weight and the bias gradient are the same kind of sum over the rows, in row order
(rows: every dimension of x but the last).

How it gets fast (``_gemm``): the sum over k is cut into blocks of ``KC`` (a block's partial sums
are stored in C and loaded again for the next one: a store and a load change no bit, so the
order of the chain is kept), the rows into blocks of ``MC`` whose operands stay in the L2 cache,
and each block into tiles of ``MR`` rows x 2 vectors of columns whose accumulators stay in
registers while k runs (``_tile``, LLVM IR written here: vector loads, one ``llvm.fma`` a lane);
the edges take tiles of fewer rows (4, 2, 1; 8 first on AVX-512) and one vector of columns, and the
last columns (fewer than a vector) a vector tile on copies of B and C padded with zeros. A vector
lane does exactly what the chain of the element's scalars does, so neither the tiling nor the
build changes a bit (the self-check compares every path with an
exactly rounded reference, bit for bit; tests/test_numerics.py compares the builds).
"""
from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from torch.autograd.function import once_differentiable

from arrepro.models.cpu_kernels.common import CODEGEN, LANES32, check_codegen, fma, fma_exact, llvm_fma

# the tiles: MR rows x 2 vectors of fp32 columns (the rows of the edges: powers of two below MR)
VECTOR_BYTES = LANES32 * 4
MR = 12 if LANES32 >= 16 else 6  # 2 MR accumulators: 24 of AVX-512's 32 registers, 12 of AVX2's 16
KC = 256  # the sum over k in blocks of KC: a block of B's columns (KC x 2 vectors) stays in L1
MC = 8 * MR  # rows a block: A's block (MC x KC) stays in L2


def _make_tile(rows: int, nvec: int):
    """An intrinsic ``tile(A, B, C, bias, first, last, i0, j0, k0, k1)``: for the tile of C at
    rows i0..i0+rows, columns j0.. (``nvec`` vectors of 32 or 64 bytes), the chain over k0 <= k < k1
    of fma(A[i, k], B[k, j], .), from 0 if ``first`` else from C; then + bias[j] if ``last``.
    A with any strides; B, C and bias with unit stride in their last dimension; fp32 or fp64."""

    @intrinsic
    def tile(typingctx, A, B, C, bias, first, last, i0, j0, k0, k1):
        if not all(isinstance(t, types.Array) for t in (A, B, C, bias)) or len({A.dtype, B.dtype, C.dtype, bias.dtype}) != 1:
            return None
        sig = types.void(A, B, C, bias, types.boolean, types.boolean, types.intp, types.intp, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            aty, bty, cty, biasty = signature.args[:4]
            a, b, c, bv = (context.make_array(t)(context, builder, v) for t, v in zip((aty, bty, cty, biasty), args[:4]))
            first, last, i0, j0, k0, k1 = args[4:]
            fty = context.get_value_type(aty.dtype)
            lanes = VECTOR_BYTES // context.get_abi_sizeof(fty)
            vec = ir.VectorType(fty, lanes)
            fma_v = llvm_fma(builder, vec)
            intp = context.get_value_type(types.intp)
            size = intp(context.get_abi_sizeof(fty))
            bytep = ir.IntType(8).as_pointer()
            a_st, b_st, c_st = (cgutils.unpack_tuple(builder, t.strides, 2) for t in (a, b, c))
            base = {n: builder.bitcast(t.data, bytep) for n, t in (("a", a), ("b", b), ("c", c), ("bias", bv))}

            def vec_at(name, offset):
                return builder.bitcast(builder.gep(base[name], [offset]), vec.as_pointer())

            col = [builder.mul(builder.add(j0, intp(v * lanes)), size) for v in range(nvec)]
            crow = [builder.mul(builder.add(i0, intp(r)), c_st[0]) for r in range(rows)]
            arow = [builder.mul(builder.add(i0, intp(r)), a_st[0]) for r in range(rows)]
            zero = ir.Constant(vec, [0.0] * lanes)
            acc = [[cgutils.alloca_once(builder, vec) for _ in range(nvec)] for _ in range(rows)]
            with builder.if_else(first) as (fresh, carried):
                with fresh:
                    for r in range(rows):
                        for v in range(nvec):
                            builder.store(zero, acc[r][v])
                with carried:
                    for r in range(rows):
                        for v in range(nvec):
                            builder.store(builder.load(vec_at("c", builder.add(crow[r], col[v])), align=1), acc[r][v])
            splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            with cgutils.for_range_slice(builder, k0, k1, intp(1), intp=intp) as (k, _):
                brow = builder.mul(k, b_st[0])
                bk = [builder.load(vec_at("b", builder.add(brow, col[v])), align=1) for v in range(nvec)]
                ak = builder.mul(k, a_st[1])
                for r in range(rows):
                    x = builder.load(builder.bitcast(builder.gep(base["a"], [builder.add(arow[r], ak)]), fty.as_pointer()),
                                     align=1)
                    xs = builder.shuffle_vector(builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.IntType(32)(0)),
                                                ir.Constant(vec, ir.Undefined), splat)
                    for v in range(nvec):
                        builder.store(builder.call(fma_v, [xs, bk[v], builder.load(acc[r][v])]), acc[r][v])
            with builder.if_then(last):
                for v in range(nvec):
                    bias_v = builder.load(vec_at("bias", col[v]), align=1)
                    for r in range(rows):
                        builder.store(builder.fadd(builder.load(acc[r][v]), bias_v), acc[r][v])
            for r in range(rows):
                for v in range(nvec):
                    builder.store(builder.load(acc[r][v]), vec_at("c", builder.add(crow[r], col[v])), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return tile


# the edge tiles' rows, largest first (4, 2, 1 below 6 rows: their greedy sum covers any remainder;
# a fourth of 1 row, never reached there, keeps one shape of code for both)
_EDGE = (8, 4, 2, 1) if MR > 8 else (4, 2, 1, 1)
_W2, _W2a, _W2b, _W2c, _W2d = (_make_tile(r, 2) for r in (MR, *_EDGE))
_W1, _W1a, _W1b, _W1c, _W1d = (_make_tile(r, 1) for r in (MR, *_EDGE))
_RA, _RB, _RC, _RD = _EDGE


@njit(cache=True, inline="always")
def _rows(A, B, C, bias, first, last, i0, i1, j0, k0, k1, wide):
    """The tiles of rows i0..i1 at columns j0.. (2 vectors if ``wide``, else 1): MR rows at a time,
    then the edge tiles."""
    i = i0
    if wide:
        while i + MR <= i1:
            _W2(A, B, C, bias, first, last, i, j0, k0, k1)
            i += MR
        if i + _RA <= i1:
            _W2a(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RA
        if i + _RB <= i1:
            _W2b(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RB
        if i + _RC <= i1:
            _W2c(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RC
        if i + _RD <= i1:
            _W2d(A, B, C, bias, first, last, i, j0, k0, k1)
    else:
        while i + MR <= i1:
            _W1(A, B, C, bias, first, last, i, j0, k0, k1)
            i += MR
        if i + _RA <= i1:
            _W1a(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RA
        if i + _RB <= i1:
            _W1b(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RB
        if i + _RC <= i1:
            _W1c(A, B, C, bias, first, last, i, j0, k0, k1)
            i += _RC
        if i + _RD <= i1:
            _W1d(A, B, C, bias, first, last, i, j0, k0, k1)


@njit(cache=True)
def _gemm(A, B, C, bias, use_bias):
    """C = A @ B (+ bias), each element the chain of the module docstring. A (M, K) with any
    strides; B (K, N), C (M, N) and bias (N,) with unit stride in their last dimension."""
    M, K = A.shape
    N = B.shape[1]
    if B.shape[0] != K or C.shape[0] != M or C.shape[1] != N or (use_bias and bias.shape[0] != N):
        raise ValueError("linear_cpu: operand shapes do not match")  # the tiles do not check bounds
    if B.strides[1] != B.itemsize or C.strides[1] != C.itemsize or (use_bias and bias.strides[0] != bias.itemsize):
        raise ValueError("linear_cpu: B, C and bias need unit stride in their last dimension")
    lanes = LANES32 if C.itemsize == 4 else LANES32 // 2
    NW, NV = N - N % (2 * lanes), N - N % lanes
    zero = np.zeros(1, dtype=C.dtype)[0]
    if K == 0:
        for i in range(M):
            for j in range(N):
                C[i, j] = zero + bias[j] if use_bias else zero
        return
    for k0 in range(0, K, KC):
        k1 = min(k0 + KC, K)
        first, last = k0 == 0, use_bias and k1 == K
        for i0 in range(0, M, MC):
            i1 = min(i0 + MC, M)
            for j0 in range(0, NW, 2 * lanes):
                _rows(A, B, C, bias, first, last, i0, i1, j0, k0, k1, True)
            if NW < NV:
                _rows(A, B, C, bias, first, last, i0, i1, NW, k0, k1, False)
    if NV < N:
        _last_columns(A, B, C, bias, use_bias, NV, lanes)


@njit(cache=True)
def _last_columns(A, B, C, bias, use_bias, NV, lanes):
    """Columns NV.. of C = A @ B (+ bias), fewer than a vector: a 1-vector tile on copies of B, C
    and bias padded with zeros (the lanes past N are computed and not kept)."""
    M, K = A.shape
    rest = B.shape[1] - NV
    Bp = np.zeros((K, lanes), dtype=C.dtype)
    Cp = np.empty((M, lanes), dtype=C.dtype)
    biasp = np.zeros(lanes, dtype=C.dtype)
    Bp[:, :rest] = B[:, NV:]
    if use_bias:
        biasp[:rest] = bias[NV:]
    for k0 in range(0, K, KC):
        k1 = min(k0 + KC, K)
        first, last = k0 == 0, use_bias and k1 == K
        for i0 in range(0, M, MC):
            _rows(A, Bp, Cp, biasp, first, last, i0, min(i0 + MC, M), 0, k0, k1, False)
    C[:, NV:] = Cp[:, :rest]


@njit(cache=True)
def _linear_forward(x, w, bias, use_bias, y):
    """y = x @ w.T (+ bias): w (N, K) is transposed here, into the (K, N) layout the tiles read."""
    _gemm(x, np.ascontiguousarray(w.T), y, bias, use_bias)


@njit(cache=True)
def _weight_grad(gy, x, gw):
    """gw = gy^T @ x, each element a sum over the rows in order (x: unit stride in its last
    dimension). With few columns in x, the vector lanes run over gy's columns instead (gw^T =
    x^T @ gy: the same products, a*b == b*a, in the same order: the same bits)."""
    if x.shape[1] < LANES32 <= gy.shape[1]:
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
def _side_by_side(Wq, Wk, Wv):
    """Three (D, K) weights side by side as one (3D, K), the first's rows first (the q, k and v
    projections of attention and DeltaNet: one product for the three)."""
    D = Wq.shape[0]
    W = np.empty((3 * D, Wq.shape[1]), Wq.dtype)
    W[:D], W[D:2 * D], W[2 * D:] = Wq, Wk, Wv
    return W


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
    """The product of the module docstring computed apart from the kernel (``common.fma_exact``, numpy
    and exact rationals: no BLAS, no numba): what every path of the kernel must equal bit for bit."""
    x2 = x.reshape(-1, x.shape[-1])
    y = np.zeros((x2.shape[0], weight.shape[0]), dtype=x.dtype)
    for k in range(x2.shape[1]):
        y = fma_exact(np.broadcast_to(x2[:, k : k + 1], y.shape), np.broadcast_to(weight[:, k][None, :], y.shape), y)
    if bias is not None:
        y = y + bias[None, :]
    return y.reshape(*x.shape[:-1], weight.shape[0])


def self_check(dtype: torch.dtype = torch.float32) -> str:
    """Compile (or load from numba's cache) the product for ``dtype`` and check it, its input, weight
    and bias gradients, bit for bit against ``reference``, on shapes that reach every tile, the
    padded last columns and (fp32) the blocks of the sum over k (K > ``KC``): 7 x 5 @ 5 x 37, 4 x 3 @
    3 x 45, 3 x 33 @ 33 x 8, and in fp32 27 x 300 @ 300 x 53 (27 rows: MR-row tiles and edges;
    53 columns: 2-vector, 1-vector and padded columns on every build). Raises if anything is off."""
    check_codegen()
    g = torch.Generator().manual_seed(0)
    shapes = ((7, 5, 37), (4, 3, 45), (3, 33, 8)) + (((27, KC + 44, 53),) if dtype == torch.float32 else ())
    for M, K, N in shapes:
        x = torch.randn(M, K, generator=g, dtype=dtype).requires_grad_()
        w = torch.randn(N, K, generator=g, dtype=dtype).requires_grad_()
        b = torch.randn(N, generator=g, dtype=dtype).requires_grad_()
        gy = torch.randn(M, N, generator=g, dtype=dtype)
        y = _Linear.apply(x, w, b)  # the kernel itself, below MIN_ROWS too
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
        X, Wn, Bn, G = (t.detach().numpy() for t in (x, w, b, gy))
        want = {"y": reference(X, Wn, Bn), "dx": reference(G, np.ascontiguousarray(Wn.T)),
                "dweight": reference(np.ascontiguousarray(G.T), np.ascontiguousarray(X.T)),
                "dbias": _ordered_sum(G)}
        for name, got in (("y", y), ("dx", gx), ("dweight", gw), ("dbias", gb)):
            if not np.array_equal(got.detach().numpy(), want[name]):
                raise RuntimeError(f"fused CPU linear self-check: {name} ({dtype}, {M}x{K} @ {K}x{N}) is not the "
                                   "ordered product bit for bit")
    return f"{CODEGEN}; products of fewer than {MIN_ROWS} rows: F.linear"


def _ordered_sum(g: np.ndarray) -> np.ndarray:
    """The column sums of g over the rows in order, each add rounded in g's dtype."""
    out = np.zeros(g.shape[1], dtype=g.dtype)
    for row in g:
        out = out + row
    return out
