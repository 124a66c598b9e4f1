"""Vectors of ``LANES`` floats in numba code: what the recurrent kernels' inner loops are written in,
so that their states stay in registers and no loop of a few iterations pays LLVM's checks for
overlapping arrays (a vectorised loop over 64 channels spent more time in them than in its
arithmetic).

``Vec(dtype)`` is a numba type held as an LLVM vector of ``LANES`` fp32 or fp64 values, which LLVM
splits into the registers of the build (one AVX-512 register of fp32, two of AVX2, four of SSE2).
Every operation is per lane and rounded as its scalar would be: + - * (``operator``), ``fma``
(``common.fma``, which takes vectors too), ``vexp`` (``common.exp``'s arithmetic), so a lane
computes exactly what scalar code computes, on every build. ``vsum`` adds the lanes in one fixed
order (halves: lane j + lane j + 8, then j + 4, j + 2, j + 1). ``vload(a, i)`` and
``vstore(a, i, v)`` read and write ``LANES`` consecutive elements of a 1-D array (a row of a
bigger one) from its index i, unchecked: the caller keeps them inside the array and, for an array
not known to be contiguous, checks that its last dimension has unit stride; ``vsplat(x)`` repeats
a scalar.
"""
from __future__ import annotations

import operator

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, models, overload, register_model

from arrepro.models.cpu_kernels.common import exp_ir

LANES = 16
FLOATS = (types.float32, types.float64)


class Vec(types.Type):
    """``LANES`` values of ``dtype`` (float32 or float64) in one LLVM vector."""
    float_vector = True  # common.fma takes it

    def __init__(self, dtype):
        self.dtype = dtype
        super().__init__(name=f"Vec{LANES}({dtype})")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elem = ir.FloatType() if fe_type.dtype == types.float32 else ir.DoubleType()
        super().__init__(dmm, fe_type, ir.VectorType(elem, LANES))


def _vec_ir(context, dtype) -> ir.VectorType:
    return ir.VectorType(context.get_value_type(dtype), LANES)


def _pointer(context, builder, arrty, arr, i):
    """A pointer to ``LANES`` elements of the 1-D array ``arr`` from its index ``i`` (unit stride assumed)."""
    a = context.make_array(arrty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [i]), _vec_ir(context, arrty.dtype).as_pointer())


@intrinsic
def vload(typingctx, arr, i):
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype in FLOATS and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1]), align=1)

    return Vec(arr.dtype)(arr, types.intp), codegen


@intrinsic
def vstore(typingctx, arr, i, v):
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(v, Vec) and v.dtype == arr.dtype
            and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _pointer(context, builder, sig.args[0], args[0], args[1]), align=1)
        return context.get_dummy_value()

    return types.void(arr, types.intp, v), codegen


@intrinsic
def vsplat(typingctx, x):
    if x not in FLOATS:
        return None

    def codegen(context, builder, sig, args):
        vec = _vec_ir(context, sig.args[0])
        one = builder.insert_element(ir.Constant(vec, ir.Undefined), args[0], ir.IntType(32)(0))
        return builder.shuffle_vector(one, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                                                                     [0] * LANES))

    return Vec(x)(x), codegen


def _binary(op):
    @intrinsic
    def vop(typingctx, a, b):
        if not (isinstance(a, Vec) and a == b):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(*args)

        return a(a, b), codegen
    return vop


_vadd, _vsub, _vmul = _binary("fadd"), _binary("fsub"), _binary("fmul")


@overload(operator.add)
def _add(a, b):
    if isinstance(a, Vec) and a == b:
        return lambda a, b: _vadd(a, b)


@overload(operator.sub)
def _sub(a, b):
    if isinstance(a, Vec) and a == b:
        return lambda a, b: _vsub(a, b)


@overload(operator.mul)
def _mul(a, b):
    if isinstance(a, Vec) and a == b:
        return lambda a, b: _vmul(a, b)


@intrinsic
def vexp(typingctx, v):
    """``common.exp`` of every lane."""
    if not isinstance(v, Vec):
        return None

    def codegen(context, builder, sig, args):
        return exp_ir(builder, args[0])

    return v(v), codegen


@intrinsic
def vsum(typingctx, v):
    """The lanes' sum in the fixed order of the module docstring."""
    if not isinstance(v, Vec):
        return None

    def codegen(context, builder, sig, args):
        x, width = args[0], LANES
        while width > 1:
            width //= 2
            lo = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width))))
            hi = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(ir.IntType(32), width),
                                                          list(range(width, 2 * width))))
            x = builder.fadd(lo, hi)
        return builder.extract_element(x, ir.IntType(32)(0))

    return v.dtype(v), codegen

