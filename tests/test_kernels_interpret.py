"""The real kernel code on CPU: each mixer's `forward_kernel` with the kernel packages' own
functions injected, against its `forward_portable`, forward and gradients.

* fla's Triton `parallel_based`, `chunk_delta_rule`, `chunk_gated_delta_rule` and mamba-ssm's
  Triton `mamba_chunk_scan_combined` run under Triton's interpreter (`TRITON_INTERPRET=1`: the
  kernel bodies execute in NumPy, program instance by program instance);
* mamba-ssm's `selective_scan_ref` and causal-conv1d's `causal_conv1d_ref` (their CUDA
  functions' pure-PyTorch twins, same signatures) stand in for `selective_scan_fn` and
  `causal_conv1d_fn`.

What this checks: the argument conventions of every `forward_kernel` (layouts, dtypes, which
operand is pre-scaled or pre-normalised, natural-log decays, bias and D handling) against the
pinned packages' source. What it cannot check: the CUDA C++ kernels themselves (only their
references run) and compiled Triton code generation (the interpreter runs the same kernel bodies
but not the compiler). `make gpu-check` runs the compiled kernels where a GPU exists.

The packages are installed without compiling CUDA code (`make kernels-cpu`: a separate venv
`.venv-kernels`); where they are absent every test here is skipped with the reason. The shims the
interpreter needs on a machine without CUDA are fixtures below (nothing in site-packages is
edited): the autotuner's timing (it would time every config on a GPU; all configs tie, so the
first runs), `torch.cuda.device` / `get_device_properties` (asked by mamba-ssm's Triton
wrappers), fla's autotune disk cache (off), and the compiled extension modules `selective_scan_cuda`
and `causal_conv1d_cuda` (empty stand-ins, so that their Python modules import; the compiled
functions are never called here).

Shapes are tiny, sequences span at least two of each kernel's chunks and end mid-chunk.
Tolerances are relative to the largest magnitude of the compared tensor:
* fla's kernels run in fp16 (the interpreter has no bf16 scalar constants; fp16 has 3 more
  mantissa bits than the bf16 a GPU run uses): inputs rounded to fp16 (relative 5e-4) and products
  accumulated over a 64-step chunk plus the carried state measured 2e-3 .. 4e-3 on outputs and up
  to 1.4e-2 on gradients (the backward recomputes in fp16 and sums over L). FWD_TOL_FP16 = 2e-2 and
  GRAD_TOL_FP16 = 5e-2 leave room for other seeds yet fail on a wrong convention: a wrong `scale`
  gives 0.36 (`test_wrong_convention_is_caught`).
* fp32 kernels and references (Mamba2's Triton path in fp32, the two references) agree to
  rounding: FP32_TOL = 1e-4, the tolerance the portable-vs-reference tests use.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import sys
import types

import pytest
import torch

from conftest import config_models

PACKAGES = {"triton": "triton", "fla": "fla-core", "mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d"}
MISSING = [pip for mod, pip in PACKAGES.items() if importlib.util.find_spec(mod) is None]
# triton decides at kernel *definition* whether a kernel is interpreted: the variable must be set
# before fla or mamba-ssm define theirs (here, unless another test module imported them first)
_LATE = [m for m in ("fla", "mamba_ssm") if m in sys.modules] and os.environ.get("TRITON_INTERPRET") != "1"
if not MISSING and not _LATE:
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["FLA_CACHE_RESULTS"] = "0"  # fla's autotune disk cache has no interpreter support

pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"kernel packages not installed ({', '.join(MISSING)}): "
                       "`make kernels-cpu` installs them in .venv-kernels and runs these tests"),
    pytest.mark.skipif(bool(_LATE), reason="fla/mamba-ssm were imported before TRITON_INTERPRET=1 was set: "
                       "run this file on its own (`make kernels-cpu`)"),
]

MODELS = config_models()
FWD_TOL_FP16, GRAD_TOL_FP16, FP32_TOL = 2e-2, 5e-2, 1e-4

@contextlib.contextmanager
def inject(**fns):
    """Make the mixers call these functions as their kernels for the duration of the block
    (arrepro.models.kernels.override: CPU tensors then count as kernel-capable)."""
    from arrepro.models import kernels

    with kernels.override(fns):
        yield


class _CompiledExtensionStandIn(types.ModuleType):
    """Stands in for a CUDA extension module that was deliberately not built."""

    def __getattr__(self, name):
        raise AttributeError(f"{self.__name__}.{name}: the CUDA extension is not built on this CPU machine")


def _index_of_one_element(self):
    """int(x) of an interpreted one-element block: `range(a, min(16, T - i_t * BT))` in fla's
    kernels; NumPy 2 refuses int() of a non-0-d array, which the interpreter's own __index__ does."""
    return int(self.handle.data.reshape(-1)[0]) if self.handle.data.size == 1 else int(self.handle.data)


def _loop_index_transformer(base):
    """The interpreter's AST rewriter (`base`), extended so that the index of a `for i in range(..)`
    or `tl.range(..)` loop is a Triton int32 scalar, as in compiled Triton, not a Python int (fla
    calls `i_t.to(tl.int64)` on such indices). `tl.static_range` indices stay Python ints (they are
    constexprs when compiled too)."""

    class LoopIndexAsTensor(base):
        def visit_For(self, node):
            self.generic_visit(node)
            f = node.iter.func if isinstance(node.iter, ast.Call) else None
            is_range = (isinstance(f, ast.Name) and f.id == "range") or (isinstance(f, ast.Attribute) and f.attr == "range")
            if is_range and isinstance(node.target, ast.Name):
                # `i = i`, which base.visit_Assign turns into `i = to_tensor(i)`
                rebind = ast.Assign(targets=[ast.Name(node.target.id, ast.Store())], value=ast.Name(node.target.id, ast.Load()))
                node.body.insert(0, self.visit(rebind))
            return node

    return LoopIndexAsTensor()


def _no_timing(kernel_call, quantiles=None, **_):
    """The autotuner's benchmark, without a GPU: every config ties (the first one then runs)."""
    return [0.0] * (len(quantiles) if quantiles else 1)


@pytest.fixture(scope="module")
def real():
    """The packages' functions, imported with the shims the interpreter needs on a CPU."""
    mp = pytest.MonkeyPatch()
    for ext in ("selective_scan_cuda", "causal_conv1d_cuda"):
        if importlib.util.find_spec(ext) is None:
            mp.setitem(sys.modules, ext, _CompiledExtensionStandIn(ext))
    if "mamba_ssm" not in sys.modules:
        # mamba_ssm/__init__ imports its model classes (and through them transformers); the ops
        # alone are tested, so the package is entered without running its __init__
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = list(importlib.util.find_spec("mamba_ssm").submodule_search_locations)
        mp.setitem(sys.modules, "mamba_ssm", pkg)
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor):  # the interpreter re-patches tl.tensor at every launch
        patch_tensor(tensor)
        tensor.__index__ = _index_of_one_element

    mp.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)
    mp.setattr(interpreter.FunctionRewriter, "ast_transformer", _loop_index_transformer(interpreter.ASTTransformer))
    mp.setattr(interpreter.InterpretedFunction, "rewritten_fn", {})

    mp.setattr(autotuner.Autotuner, "do_bench", property(lambda self: _no_timing))
    mp.setattr(torch.cuda, "device", lambda index=None: contextlib.nullcontext())
    mp.setattr(torch.cuda, "get_device_properties",
               lambda device=None: types.SimpleNamespace(multi_processor_count=1, name="cpu", gcnArchName=""))
    from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref
    from fla.ops.based import parallel_based
    from fla.ops.delta_rule import chunk_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    yield dict(causal_conv1d_fn=causal_conv1d_ref, selective_scan_fn=selective_scan_ref,
               parallel_based=parallel_based, chunk_delta_rule=chunk_delta_rule,
               chunk_gated_delta_rule=chunk_gated_delta_rule,
               mamba_chunk_scan_combined=mamba_chunk_scan_combined)
    mp.undo()


def build(model: str, d: int, max_len: int, dtype=torch.float32):
    from arrepro.models import get_mixer

    spec = MODELS[model]
    torch.manual_seed(0)
    return get_mixer(spec["mixer"])(d, max_len=max_len, **spec.get("mixer_kwargs", {})).to(dtype)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / (b.float().abs().max() + 1e-12)).item()


def compare(model: str, kernels: dict, *, d: int, L: int, kernel_dtype, fwd_tol: float, grad_tol: float):
    """forward_kernel (kernels injected; input and parameters in kernel_dtype) vs forward_portable
    (fp32): the max relative error of the output and of every gradient (input and parameters)."""
    portable = build(model, d, L)
    kernel = build(model, d, L, kernel_dtype)
    torch.manual_seed(1)
    x = torch.randn(2, L, d)
    xk = x.to(kernel_dtype).requires_grad_()
    x.requires_grad_()
    y_ref = portable.forward_portable(x)
    with inject(**kernels):
        y = kernel.forward_kernel(xk)
    assert y.shape == y_ref.shape and y.dtype == kernel_dtype
    w = torch.randn_like(y_ref)  # a random cotangent, so every output element matters
    g_ref = torch.autograd.grad((y_ref * w).sum(), [x, *portable.parameters()], allow_unused=True)
    g = torch.autograd.grad((y.float() * w).sum(), [xk, *kernel.parameters()], allow_unused=True)
    errors = {"output": rel_err(y, y_ref)}
    names = ["input", *(n for n, _ in portable.named_parameters())]
    for name, a, b in zip(names, g, g_ref):
        assert (a is None) == (b is None), f"{model}: gradient of {name} exists on one path only"
        if a is not None:
            errors[f"d {name}"] = rel_err(a, b)
    print(f"{model} L={L} {kernel_dtype}: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    bad = {k: v for k, v in errors.items() if v > (fwd_tol if k == "output" else grad_tol)}
    assert not bad, f"{model}: kernel path differs from the portable path: {bad}"
    return errors


# (model, kernels its forward_kernel calls, width, length, kernel dtype, fwd tol, grad tol)
# fla: chunk 64, L = 80 is 1.25 chunks; Mamba2: chunk_size 256 in forward_kernel, L = 272.
CASES = [
    ("based", ("parallel_based", "causal_conv1d_fn"), 32, 80, torch.float16, FWD_TOL_FP16, GRAD_TOL_FP16),
    ("deltanet", ("chunk_delta_rule", "causal_conv1d_fn"), 32, 80, torch.float16, FWD_TOL_FP16, GRAD_TOL_FP16),
    ("gated_deltanet", ("chunk_gated_delta_rule", "causal_conv1d_fn"), 32, 80, torch.float16,
     FWD_TOL_FP16, GRAD_TOL_FP16),
    ("mamba2", ("mamba_chunk_scan_combined", "causal_conv1d_fn"), 32, 272, torch.float32, FP32_TOL, FP32_TOL),
    ("mamba", ("selective_scan_fn", "causal_conv1d_fn"), 16, 24, torch.float32, FP32_TOL, FP32_TOL),
    ("mamba_noconv", ("selective_scan_fn",), 16, 24, torch.float32, FP32_TOL, FP32_TOL),
    ("mamba_nogate", ("selective_scan_fn", "causal_conv1d_fn"), 16, 24, torch.float32, FP32_TOL, FP32_TOL),
]


@pytest.mark.parametrize("model,names,d,L,dtype,fwd_tol,grad_tol", CASES, ids=[c[0] for c in CASES])
def test_real_kernel_matches_portable(real, model, names, d, L, dtype, fwd_tol, grad_tol):
    compare(model, {n: real[n] for n in names}, d=d, L=L, kernel_dtype=dtype, fwd_tol=fwd_tol, grad_tol=grad_tol)


@pytest.mark.parametrize("activation", [None, "silu"])
def test_short_conv_matches_causal_conv1d_ref(real, activation):
    """ShortConv.forward_kernel through causal-conv1d's reference, every width it accepts (2..4),
    forward and gradients, in fp32."""
    from arrepro.models.ops import ShortConv

    for k in (2, 3, 4):
        torch.manual_seed(k)
        conv = ShortConv(8, kernel_size=k, activation=activation)
        x = torch.randn(2, 13, 8, requires_grad=True)
        y_ref = conv.forward_portable(x)
        g_ref = torch.autograd.grad(y_ref.square().sum(), [x, *conv.parameters()])
        with inject(causal_conv1d_fn=real["causal_conv1d_fn"]):
            y = conv.forward_kernel(x)
        g = torch.autograd.grad(y.square().sum(), [x, *conv.parameters()])
        assert rel_err(y, y_ref) < FP32_TOL, f"width {k}"
        assert max(rel_err(a, b) for a, b in zip(g, g_ref)) < FP32_TOL, f"width {k}"


def test_wrong_convention_is_caught(real):
    """The comparison discriminates: DeltaNet's kernel called with a wrong `scale` (q scaled twice,
    the mistake the convention comment in deltanet.py guards against) fails the tolerance."""
    right = real["chunk_delta_rule"]

    def scaled_twice(q, k, v, beta, scale=1.0, **kwargs):
        return right(q, k, v, beta, scale=q.shape[-1] ** -0.5, **kwargs)

    with pytest.raises(AssertionError, match="differs from the portable path"):
        compare("deltanet", {"chunk_delta_rule": scaled_twice, "causal_conv1d_fn": real["causal_conv1d_fn"]},
                d=32, L=80, kernel_dtype=torch.float16, fwd_tol=FWD_TOL_FP16, grad_tol=GRAD_TOL_FP16)
