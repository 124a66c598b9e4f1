"""Fused CPU kernels (numba), one module per kernel of ``arrepro.models.kernels`` (named after it);
shared set-up and numerics in ``common``.

Importing the package fixes numba's code generation before numba is imported (numba reads it once):
the generic x86-64 target with AVX2 and without FMA where the CPU has AVX2 (``ISA["avx2"]``), else
plain x86-64 (SSE2). Without FMA, reassociation or any other fast-math licence, vector width does
not change a single rounding: both builds give the same bits (tests/test_numerics.py compares
them), the AVX2 one ~3x faster. ``ARREPRO_CPU_KERNEL_ISA=sse2`` forces the baseline build.
``common.check_codegen`` refuses to run where numba was set up otherwise (imported before this).
"""
import os
import sys
import warnings

# numba's internal "variable ... is not in scope" check trips over the inlined polynomials of
# common.exp and common.log1p_pos when they compile (harmless: its own text says so)
warnings.filterwarnings("ignore", message=r"variable '.*' is not in scope", module=r"numba\.core\.ssa")

ISA_ENV = "ARREPRO_CPU_KERNEL_ISA"
ISA = {"sse2": "", "avx2": "+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,-fma,-fma4,-avx512f"}


def _isa() -> str:
    asked = os.environ.get(ISA_ENV)
    if asked in ISA:
        return asked
    try:
        import llvmlite.binding as llvm  # numba's own LLVM binding: not numba, so its config is not read yet

        return "avx2" if llvm.get_host_cpu_features().get("avx2") else "sse2"
    except Exception:  # noqa: BLE001 - no llvmlite: numba cannot run either (the kernels' self-check says so)
        return "sse2"


if "numba" not in sys.modules:
    os.environ["NUMBA_CPU_NAME"] = "generic"
    os.environ["NUMBA_CPU_FEATURES"] = ISA[_isa()]
