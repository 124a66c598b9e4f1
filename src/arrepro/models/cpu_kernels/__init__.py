"""Fused CPU kernels (numba), one module per kernel of ``arrepro.models.kernels`` (named after it);
shared set-up and numerics in ``common``. Importing the package makes numba generate code for the
generic x86-64 target (``common.check_codegen`` refuses to run where numba was set up before)."""
import os
import sys

if "numba" not in sys.modules:
    os.environ["NUMBA_CPU_NAME"] = "generic"  # read by numba once, when it is imported
