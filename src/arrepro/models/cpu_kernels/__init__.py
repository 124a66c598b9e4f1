"""Fused CPU kernels (numba), one module per kernel of ``arrepro.models.kernels`` (named after it);
shared set-up and numerics in ``common``.

Importing the package fixes numba's code generation before numba is imported (numba reads it once):
the generic x86-64 target with the features of one of three builds (``ISA``), the widest this CPU
runs: ``avx512`` (AVX-512F and FMA, 16 fp32 lanes), ``avx2`` (AVX2 and FMA3, 8 lanes), else
``sse2`` (plain x86-64, 4 lanes, no FMA instruction). The kernels' arithmetic is defined element by
element: no reassociation or any other fast-math licence, every sum in a fixed order, and every
multiply-add that is fused written as one (``common.fma``: LLVM's ``llvm.fma``, exactly rounded
by definition; the FMA instruction on the first two builds, the C library's ``fmaf``/``fma``, also
exactly rounded, on the third). So vector width and build change no bit: all three builds give the
same bits (tests/test_numerics.py compares them); the SSE2 one is the slowest by far (each fused
multiply-add a library call), the AVX-512 one the fastest. ``ARREPRO_CPU_KERNEL_ISA=sse2`` (or
``avx2``, ``avx512``) forces a build. ``common.check_codegen`` refuses to run where numba was set up
otherwise (imported before this).
"""
import os
import sys
import warnings

# numba's internal "variable ... is not in scope" check trips over the inlined polynomials of
# common.exp and common.log1p_pos when they compile (harmless: its own text says so)
warnings.filterwarnings("ignore", message=r"variable '.*' is not in scope", module=r"numba\.core\.ssa")

ISA_ENV = "ARREPRO_CPU_KERNEL_ISA"
_AVX2 = "+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,-fma4"
ISA = {"sse2": "", "avx2": _AVX2 + ",-avx512f", "avx512": _AVX2 + ",+avx512f,+avx512dq,+avx512vl,+avx512bw,+avx512cd"}
VECTOR_BYTES = {"sse2": 16, "avx2": 32, "avx512": 64}  # one vector register of each build


def _isa() -> str:
    asked = os.environ.get(ISA_ENV)
    if asked in ISA:
        return asked
    try:
        import llvmlite.binding as llvm  # numba's own LLVM binding: not numba, so its config is not read yet

        has = llvm.get_host_cpu_features()
    except Exception:  # noqa: BLE001 - no llvmlite: numba cannot run either (the kernels' self-check says so)
        return "sse2"
    if all(has.get(f) for f in ("avx512f", "avx512dq", "avx512vl", "avx512bw", "avx512cd", "fma")):
        return "avx512"
    return "avx2" if has.get("avx2") and has.get("fma") else "sse2"


if "numba" not in sys.modules:
    os.environ["NUMBA_CPU_NAME"] = "generic"
    os.environ["NUMBA_CPU_FEATURES"] = ISA[_isa()]
