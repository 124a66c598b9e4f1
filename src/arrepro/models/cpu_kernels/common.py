"""What the fused CPU kernels (numba) share: the numba set-up that makes their code the same on
every x86-64 CPU, and an exp of their own.

The portable paths (pure PyTorch) of the recurrent mixers materialise (batch, length, channels,
state) tensors and run ~3 sqrt(L) batched torch ops over them, forward and backward. The kernels
in this package instead walk the sequence one batch element at a time, each step's states updated
in cache in one pass (decay, input, output together), and recompute in the backward pass, per
batch element, what the forward pass did not store (cheaper here than writing and reading it).

Numerics, chosen so that a kernel's result is the same bits on every x86-64 CPU:
* code generated for the generic x86-64 target, with AVX-512 or AVX2 and FMA where the CPU has
  them, else plain SSE2 (set by the package's ``__init__`` before numba is imported), numba's
  default IEEE semantics (no fastmath: no reassociation, no contraction of a multiply and an add
  that the code does not fuse itself), and a fixed order for every sum (each kernel's docstring
  says which): the same bits from every build;
* fused multiply-adds only where written (``fma``: one rounding, by definition the same on every
  IEEE machine; the FMA instruction where the build has it, the C library's exactly rounded
  ``fmaf``/``fma`` where it does not);
* an exp of our own (``exp``: Cody-Waite reduction by ln 2, a Taylor polynomial of degree 13 in
  fp64 and 7 in fp32 by Horner's rule in fused multiply-adds, exact scaling by 2^k; ~1 ulp), not
  libm's, whose variant depends on the CPU and the C library; branch-free so that the loops around
  it vectorise. Its argument is clamped to [-87, 88] (fp32) or [-708, 709] (fp64): a decay
  exp(-87) ~ 2e-38 is zero for every purpose;
* arithmetic in the input dtype (fp32 or fp64), constants passed in that dtype (``constants``),
  since numba promotes float32 with a Python float to float64.
One thread (no ``parallel``): a cell runs on one core. Kernels that divide compile with
``error_model="numpy"`` (IEEE results, no ZeroDivisionError check): the check is a branch that
keeps LLVM from vectorising the loop; the results are the same.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from arrepro.models.cpu_kernels import ISA, VECTOR_BYTES
from arrepro.models.cpu_kernels.check import compare

_NAMES = {"sse2": "x86-64 (SSE2, FMA by the C library)", "avx2": "x86-64 + AVX2 + FMA",
          "avx512": "x86-64 + AVX-512 + FMA"}
BUILD = next((name for name, features in ISA.items()  # None: numba was set up before this package
              if numba.config.CPU_NAME == "generic" and features == numba.config.CPU_FEATURES), None)
CODEGEN = (f"numba {numba.__version__}, {numba.config.CPU_NAME or 'host'} "
           + (_NAMES[BUILD] if BUILD else f"(features {numba.config.CPU_FEATURES!r})"))
LANES32 = VECTOR_BYTES.get(BUILD, 32) // 4  # fp32 lanes of this build's vector registers


def check_codegen() -> None:
    """Raise unless numba generates code for the generic x86-64 target with one of the ``ISA``
    feature sets (numba was imported before this package, or told otherwise)."""
    if numba.config.CPU_NAME != "generic" or numba.config.CPU_FEATURES not in ISA.values():
        raise RuntimeError(f"numba was configured before arrepro.models.cpu_kernels was imported (CPU_NAME "
                           f"{numba.config.CPU_NAME!r}, features {numba.config.CPU_FEATURES!r}): its code "
                           "would depend on this CPU")


def llvm_fma(builder, ty):
    """LLVM's ``llvm.fma`` for the float or float-vector IR type ``ty``, declared in the builder's module."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    name = "f32" if isinstance(elem, ir.FloatType) else "f64"
    if isinstance(ty, ir.VectorType):
        name = f"v{ty.count}{name}"
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty] * 3), f"llvm.fma.{name}")


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (LLVM's llvm.fma), in the type of its three arguments: fp32, fp64, or
    a vector of them (``simd.Vec``: every lane)."""
    if not (a == b == c and (a in (types.float32, types.float64) or getattr(a, "float_vector", False))):
        return None

    def codegen(context, builder, sig, args):
        return builder.call(llvm_fma(builder, args[0].type), args)

    return a(a, b, c), codegen


_LN2 = 0.6931471805599453
_LN2_HI = 0.6931471803691238  # ln 2 to 32 bits: k * _LN2_HI is exact for |k| < 2^21
_LOG2E = 1.4426950408889634
_DEGREE = 13  # Taylor degree of exp on |r| <= ln(2)/2: error 4e-18 (fp64); fp32 uses degree 7 (5e-9)


def constants(dtype) -> np.ndarray:
    """The kernels' constants in the input dtype (so that fp32 arithmetic stays fp32): log2 e,
    ln 2 split in two, the clamp of exp's argument, zero, the rounding constant, one, the
    Taylor coefficients 1/13! ... 1/0! (fp32 uses those from 1/7! on); then 20 and the
    coefficients 1/(2i + 1) of log1p_pos's series (``TWENTY``, ``LOG``)."""
    fp32 = np.dtype(dtype) == np.float32
    coef = [1.0 / float(np.prod(np.arange(1, i + 1, dtype=np.float64))) for i in range(_DEGREE, -1, -1)]
    hi = 0.693359375 if fp32 else _LN2_HI  # fp32: ln 2 to 9 bits, k * hi exact for |k| < 2^15
    lo_clamp, hi_clamp = (-87.0, 88.0) if fp32 else (-708.0, 709.0)
    magic = 1.5 * 2.0 ** (23 if fp32 else 52)  # x + magic - magic: x rounded to an integer
    log_coef = [1.0 / (2 * i + 1) for i in range(13)]  # the series of atanh(s) / s in s^2 (log1p_pos)
    return np.array([_LOG2E, hi, _LN2 - hi, lo_clamp, hi_clamp, 0.0, magic, 1.0] + coef + [20.0] + log_coef,
                    dtype=dtype)


TWENTY, LOG = 9 + _DEGREE, 10 + _DEGREE  # indices into constants()


def exp_ir(builder, z):
    """The LLVM IR of ``exp`` on z: a float, a double, or a vector of either (every lane the same
    arithmetic; ``simd.vexp``). Cody-Waite: k = round(z log2 e) (by adding and removing 1.5 *
    2^(mantissa bits)), r = z - k ln 2 in two fused steps (|r| <= ln(2) / 2), a Taylor polynomial
    by Horner's rule in fused multiply-adds (degree 13 in fp64, 7 in fp32), times 2^k by its
    exponent bits; z clamped first (``constants``)."""
    ty = z.type
    vector = isinstance(ty, ir.VectorType)
    elem = ty.element if vector else ty
    fp32 = isinstance(elem, ir.FloatType)
    K = constants(np.float32 if fp32 else np.float64)

    def c(v):
        return ir.Constant(ty, [float(v)] * ty.count) if vector else ir.Constant(ty, float(v))

    def ints(bits):
        it = ir.IntType(bits)
        return (ir.VectorType(it, ty.count) if vector else it), (lambda v: ir.Constant(ir.VectorType(it, ty.count), [v] * ty.count)
                                                                 if vector else ir.Constant(it, v))

    fma = llvm_fma(builder, ty)
    z = builder.select(builder.fcmp_ordered("<", z, c(K[3])), c(K[3]), z)
    z = builder.select(builder.fcmp_ordered(">", z, c(K[4])), c(K[4]), z)
    kr = builder.fsub(builder.call(fma, [z, c(K[0]), c(K[6])]), c(K[6]))
    i32, _ = ints(32)
    k = builder.fptosi(kr, i32)
    nkr = builder.fneg(kr)
    r = builder.call(fma, [nkr, c(K[2]), builder.call(fma, [nkr, c(K[1]), z])])
    first = 8 + _DEGREE - 7 if fp32 else 8
    p = c(K[first])
    for i in range(first + 1, 8 + _DEGREE + 1):
        p = builder.call(fma, [p, r, c(K[i])])
    ity, const = ints(32 if fp32 else 64)
    bias, shift = (127, 23) if fp32 else (1023, 52)
    e = builder.add(k if fp32 else builder.sext(k, ity), const(bias))
    return builder.fmul(p, builder.bitcast(builder.shl(e, const(shift)), ty))


@intrinsic
def exp(typingctx, z):
    """exp(z) to ~1 ulp in z's dtype (fp32 or fp64), the same bits on every IEEE machine
    (``exp_ir``); z clamped to [-87, 88] (fp32) or [-708, 709] (fp64). Branch-free, so that the
    loop around it vectorises."""
    if z not in (types.float32, types.float64):
        return None

    def codegen(context, builder, sig, args):
        return exp_ir(builder, args[0])

    return z(z), codegen


@intrinsic
def _split(typingctx, x):
    """(m, e) with x = m 2^e and m in [sqrt(1/2), sqrt(2)), e a whole number in x's float type,
    for a positive normal x: the exponent bits read, the mantissa bits given the exponent of 1, or
    of 1/2 where they exceed sqrt(2)'s (LLVM bitcasts and selects: exact, and no branch)."""
    if x == types.float32:
        ity, bias, shift = types.int32, 127, 23
        sqrt2 = int(np.float32(2.0 ** 0.5).view(np.int32)) & ((1 << 23) - 1)
    elif x == types.float64:
        ity, bias, shift = types.int64, 1023, 52
        sqrt2 = int(np.float64(2.0 ** 0.5).view(np.int64)) & ((1 << 52) - 1)
    else:
        return None
    mant = (1 << shift) - 1

    def codegen(context, builder, sig, args):
        lty, fty = context.get_value_type(ity), context.get_value_type(x)
        bits = builder.bitcast(args[0], lty)
        frac = builder.and_(bits, lty(mant))
        big = builder.icmp_unsigned(">", frac, lty(sqrt2))
        e = builder.sub(builder.lshr(bits, lty(shift)), lty(bias))
        e = builder.select(big, builder.add(e, lty(1)), e)
        top = builder.select(big, lty((bias - 1) << shift), lty(bias << shift))
        m = builder.bitcast(builder.or_(frac, top), fty)
        return context.make_tuple(builder, sig.return_type, [m, builder.sitofp(e, fty)])

    return types.UniTuple(x, 2)(x), codegen


def _log_series(s2, K):
    """1 + s2/3 + s2^2/5 + ... by Horner in s2's dtype: to s2^6 (fp32), s2^12 (fp64)."""


@overload(_log_series, jit_options={"cache": True}, inline="always")
def _log_series_impl(s2, K):
    terms = 6 if s2 == types.float32 else 12

    def horner(s2, K):
        p = K[LOG + terms]
        for i in range(terms - 1, -1, -1):
            p = fma(p, s2, K[LOG + i])
        return p
    return horner


@njit(cache=True, inline="always")
def log1p_pos(y, K):
    """log(1 + y) for finite y >= 0, to ~2 ulp, the same bits on every IEEE machine: w = 1 + y =
    m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1)/(m + 1), by its series;
    e ln 2 in two parts; the rounding of 1 + y corrected by (y - (w - 1)) / w."""
    w = K[7] + y
    m, e = _split(w)
    s = (m - K[7]) / (m + K[7])
    t = s + s
    return e * K[1] + (t * _log_series(s * s, K) + e * K[2]) + (y - (w - K[7])) / w


@njit(cache=True, inline="always")
def sigmoid(x, K):
    """1 / (1 + exp(-x)), with ``exp``."""
    return K[7] / (K[7] + exp(-x))


@njit(cache=True, inline="always")
def softplus(x, K):
    """torch's softplus (beta 1, threshold 20): x above 20, else log(1 + exp(x)) by ``log1p_pos``."""
    v = log1p_pos(exp(x if x < K[TWENTY] else K[TWENTY]), K)  # computed either way: a select, not a branch
    return x if x > K[TWENTY] else v


K = {np.dtype(np.float32): constants(np.float32), np.dtype(np.float64): constants(np.float64)}
@njit(cache=True, error_model="numpy")
def unit(a, c0, H, dh, div, eps, y, r, K):
    """y (M, H dh) = the columns c0.. of a, each head's block of dh divided by sqrt(the sum of its
    squares / div + eps); r (M, H) the factor. The L2 norm (div 1: exact) and the RMSNorm (div dh)."""
    for m in range(a.shape[0]):
        for h in range(H):
            c = h * dh
            ss = a[m, c0 + c] * a[m, c0 + c]
            for j in range(1, dh):
                ss = fma(a[m, c0 + c + j], a[m, c0 + c + j], ss)
            f = K[7] / np.sqrt(ss / div + eps)
            r[m, h] = f
            for j in range(dh):
                y[m, c + j] = a[m, c0 + c + j] * f


@njit(cache=True, error_model="numpy")
def unit_backward(g, y, r, H, dh, w, div, ga, c0):
    """The gradient through ``unit`` and a per-feature scale w (dh,) of its output: for
    g = dL/d(y w), gy = g w, ga[:, c0 + block] = r (gy - y (gy . y) / div), the dot product a chain
    over the block in order."""
    for m in range(g.shape[0]):
        for h in range(H):
            c = h * dh
            dot = (g[m, c] * w[0]) * y[m, c]
            for j in range(1, dh):
                dot = fma(g[m, c + j] * w[j], y[m, c + j], dot)
            for j in range(dh):
                ga[m, c0 + c + j] = r[m, h] * (g[m, c + j] * w[j] - y[m, c + j] * (dot / div))


def fma_exact(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once, elementwise, computed apart from the kernels (what ``fma`` must give,
    for self-checks): fp32 by fp64 arithmetic (the product is exact there; the sum's rounding error
    is recovered exactly by Knuth's TwoSum and decides a halfway case of the rounding to fp32);
    fp64 with exact rationals (slow: small arrays)."""
    if a.dtype == np.float64:
        from fractions import Fraction

        flat = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a.ravel(), b.ravel(), c.ravel())]
        return np.array(flat, dtype=np.float64).reshape(np.broadcast(a, b, c).shape)
    p = a.astype(np.float64) * b.astype(np.float64)  # exact: 24 + 24 bits
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)  # p + c = s + err exactly
    r = s.astype(np.float32)  # correct unless s lies exactly halfway between two fp32 and err is not 0
    r64 = r.astype(np.float64)
    other = np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)))
    halfway = (s != r64) & (s - r64 == other.astype(np.float64) - s) & (err != 0)
    toward_other = np.sign(err) == np.sign(other.astype(np.float64) - s)
    return np.where(halfway & toward_other, other, r).astype(np.float32)


def check_mixer(m, d: int, L: int, fused, dtype, g, tol: float, what: str, loose=lambda name, ref: False) -> None:
    """A fused mixer's self-check: ``m`` (an fp64 mixer of width d) with its parameters moved by 0.3
    N(0, 1) from ``g``, two sequences of length L and an output gradient from ``g``; its portable path in fp64
    against ``fused(x, m)`` in ``dtype`` (m moved to dtype), output and every gradient (``compare``:
    ``tol``, 25 tol where ``loose(name, reference)``); raises Mismatch naming ``what`` and the tensor
    otherwise."""
    import torch

    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    u = torch.randn(2, L, d, generator=g, dtype=torch.float64)
    gy = torch.randn(2, L, d, generator=g, dtype=torch.float64)
    ref_in = u.clone().requires_grad_()
    ref = m.forward_portable(ref_in)
    ref_grads = torch.autograd.grad(ref, [ref_in, *m.parameters()], gy)
    mc = m.to(dtype)
    x = u.to(dtype).requires_grad_()
    y = fused(x, mc)
    grads = torch.autograd.grad(y, [x, *mc.parameters()], gy.to(dtype))
    names = ["y", "dx"] + [n for n, _ in mc.named_parameters()]
    compare(zip(names, [y, *grads], [ref, *ref_grads]), tol, what, loose)


def arrays(*ts):
    """numpy views of contiguous CPU tensors (no copy when already contiguous)."""
    return [t.detach().contiguous().numpy() for t in ts]
