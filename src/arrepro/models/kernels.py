"""The one home of the kernel-or-portable choice: which CUDA/Triton kernel a mixer may call, and why not.

``KERNELS`` names every kernel function the mixers can use, with its pip distribution, its module
and its limits as the pinned package's own C++/Triton code states them (versions: the GPU env's
pins, envs/train.post-deploy.sh for causal-conv1d 1.6.0, mamba-ssm 2.3.1 and flash-attn 2.8.3,
envs/train.yaml for fla-core / flash-linear-attention 0.6.0 and triton 3.4.0; envs/kernels-cpu.txt
has the same versions). A mixer (a ``KernelMixer``) asks with its actual call::

    fn, record = choose("flash_attn_func", x, head_dim=512)

and gets the kernel function, or None and the reason the portable path runs instead ("CPU
tensor", "ARREPRO_KERNELS=0", "flash-attn not installed", "head dim 512 > flash-attn's limit 256:
SDPA", "fp32 run: chunk_delta_rule needs bf16/fp16: ..."). Every module records what it chose on
its calls; ``paths_used(model)`` lists the records, one per distinct (op, path).

Precision: a kernel that refuses fp32 runs only when its inputs are half precision, i.e. the
tensor is fp16/bf16 or autocast to a half dtype is active on its device (``compute_dtype``); an
fp32 run (the default precision) never silently drops to bf16.

Loud failures: on CUDA, a kernel package that is installed (its distribution is found by
``importlib.metadata``) but fails to import raises ``KernelImportError`` quoting the import
error; ``ARREPRO_KERNELS=0`` (or false, no, off) opts out of every kernel (``kernels_enabled``).
mamba-ssm's kernel submodules are imported without running the package ``__init__`` (which in
2.3.1 imports the Mamba and Mamba2 modules and MambaLMHeadModel, and with them huggingface_hub and
transformers); a later ``import mamba_ssm`` in the same process then sees that bare package.

Tests: ``override({name: fn})`` (a context manager) is the one injection point: inside it the
named kernels are those functions, and tensors on any device (CPU too) count as kernel-capable;
limits and precision rules still apply.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import types
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

ENV = "ARREPRO_KERNELS"
ENV_OFF = ("0", "false", "no", "off")
ENV_ON = ("1", "true", "yes", "on")


def kernels_enabled() -> bool:
    """Whether ``ARREPRO_KERNELS`` lets the kernels run: unset, empty or a yes (1, true, yes, on:
    any case) lets them; a no (0, false, no, off) opts out; anything else is a ValueError naming
    the variable (a typo must not silently keep the kernels on)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ENV_ON or value == "":
        return True
    if value in ENV_OFF:
        return False
    raise ValueError(f"{ENV}={os.environ[ENV]!r}: not a yes ({', '.join(ENV_ON)}) or a no ({', '.join(ENV_OFF)}); "
                     "a no runs the portable paths instead of the CUDA kernels")
HALF = (torch.float16, torch.bfloat16)
DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


def _at_most(key: str, limit: int, what: str, owner: str):
    """A limit ``call[key] <= limit``; the reason names the value and the package's limit."""
    def check(call: dict) -> str | None:
        v = call[key]
        return f"{what} {v} > {owner}'s limit {limit}" if v > limit else None
    return check


def _flash_head_dim(call: dict) -> str | None:
    # flash-attn 2.8.3 flash_attn_interface.py (FlashAttnFunc.forward) pads the head dim to a multiple
    # of 8 before the C++ check (csrc/flash_attn/flash_api.cpp: head_size <= 256, mha_fwd 393, mha_bwd 830)
    d = call["head_dim"]
    return f"head dim {d} > flash-attn's limit 256" if -(-d // 8) * 8 > 256 else None


def _conv_width(call: dict) -> str | None:
    # causal-conv1d 1.6.0 csrc/causal_conv1d.cpp: 2 <= width <= 4 (causal_conv1d_fwd 182, _bwd 289)
    w = call["width"]
    return None if 2 <= w <= 4 else f"conv width {w} outside causal-conv1d's 2..4"


@dataclass(frozen=True)
class Kernel:
    """One kernel function: where it lives and what it accepts (see each entry's source lines)."""
    dists: tuple[str, ...]  # pip distributions that provide ``module`` (the first installed one counts)
    module: str
    attr: str
    fallback: str  # what runs instead, named in the reason
    half_only: bool = False  # refuses fp32 inputs (runs only in a bf16/fp16 run)
    # each: the call's facts -> why not, or None. A fused CPU kernel states its limits in its own
    # module instead (``outside_limits(call)``): only the cells that run it count that code
    limits: tuple[Callable[[dict], str | None], ...] = ()
    min_capability: tuple[int, int] | None = None  # CUDA compute capability it needs
    bare_package: str | None = None  # import ``module`` without running this package's __init__
    call_keys: tuple[str, ...] = ()  # the facts ``limits`` read from the call
    device: str = "cuda"  # "cpu": a fused CPU kernel (arrepro.models.cpu_kernels), for CPU tensors, fp32/fp64


KERNELS: dict[str, Kernel] = {
    # causal-conv1d 1.6.0 csrc/causal_conv1d.cpp, causal_conv1d_fwd (160-190) / causal_conv1d_bwd
    # (275-311): x, weight fp32/fp16/bf16 (each), width 2..4, bias dtype == weight dtype; x (B, D, L)
    # with stride(2) == 1 or, channel-last, stride(1) == 1 with D and stride(0), stride(2) multiples
    # of 8 (causal_conv1d_interface.py CausalConv1dFn.forward makes any other x contiguous)
    "causal_conv1d_fn": Kernel(("causal-conv1d",), "causal_conv1d", "causal_conv1d_fn",
                               "nn.Conv1d", limits=(_conv_width,), call_keys=("width",)),
    # flash-attn 2.8.3 csrc/flash_attn/flash_api.cpp, mha_fwd (369-418) / mha_bwd (797-830): fp16/bf16
    # only, head_size <= 256 (after the wrapper's padding to a multiple of 8), sm80+
    "flash_attn_func": Kernel(("flash-attn",), "flash_attn", "flash_attn_func", "SDPA", half_only=True,
                              limits=(_flash_head_dim,), min_capability=(8, 0), call_keys=("head_dim",)),
    # fla-core 0.6.0 fla/ops/based/parallel.py, parallel_based: feature dim (q.shape[-1]) <= 128 (430;
    # ParallelBasedFunction asserts NK == 1, 355 and 395); any float dtype
    "parallel_based": Kernel(("fla-core", "flash-linear-attention"), "fla.ops.based", "parallel_based",
                             "the portable quadratic/chunked form",
                             limits=(_at_most("feature_dim", 128, "feature dim", "parallel_based"),),
                             call_keys=("feature_dim",)),
    # mamba-ssm 2.3.1 csrc/selective_scan/selective_scan.cpp, selective_scan_fwd (235-302) /
    # selective_scan_bwd (352-423): u fp32/fp16/bf16, A/D/delta_bias fp32, dstate <= 256 (262, 382).
    # 2.3.1's selective_scan.h 27 still has index_t = uint32_t (uint64_t from 2.3.2, issue 880):
    # strides and batch offsets of 2^32 elements or more wrap; B * E * L here stays far below
    "selective_scan_fn": Kernel(("mamba-ssm",), "mamba_ssm.ops.selective_scan_interface", "selective_scan_fn",
                                "the portable chunked scan",
                                limits=(_at_most("d_state", 256, "d_state", "selective_scan"),),
                                bare_package="mamba_ssm", call_keys=("d_state",)),
    # mamba-ssm 2.3.1 mamba_ssm/ops/triton/ssd_combined.py, _mamba_chunk_scan_combined_fwd (343-367)
    # and _mamba_chunk_scan_combined_bwd (405-432): shape asserts only (nheads % ngroups == 0); no
    # dtype, headdim or dstate limit
    "mamba_chunk_scan_combined": Kernel(("mamba-ssm",), "mamba_ssm.ops.triton.ssd_combined",
                                        "mamba_chunk_scan_combined", "the portable chunked SSD",
                                        bare_package="mamba_ssm"),
    # fla-core 0.6.0 fla/ops/delta_rule/chunk.py, chunk_delta_rule: q.dtype != float32 (asserted, 303);
    # fla/ops/common/chunk_delta_h.py: K <= 256 (chunk_gated_delta_rule_fwd_h 716, _bwd_dhu 772)
    "chunk_delta_rule": Kernel(("fla-core", "flash-linear-attention"), "fla.ops.delta_rule", "chunk_delta_rule",
                               "the portable chunked delta rule", half_only=True,
                               limits=(_at_most("head_dim", 256, "head dim", "fla's chunk_delta_rule"),),
                               call_keys=("head_dim",)),
    # fla-core 0.6.0 fla/ops/gated_delta_rule/chunk.py, chunk_gated_delta_rule (no dtype assert, 510-567);
    # fla/ops/common/chunk_delta_h.py: K <= 256 (716, 772). Not a limit here but a device one: its
    # backward's chunk_bwd_dqkwg (fla/ops/common/chunk_o.py 727-732) raises on Hopper (sm90) with
    # triton >= 3.4.0 and < 3.7.1, the pinned 3.4.0 included, unless tilelang is installed (it is not)
    "chunk_gated_delta_rule": Kernel(("fla-core", "flash-linear-attention"), "fla.ops.gated_delta_rule",
                                     "chunk_gated_delta_rule", "the portable chunked gated delta rule",
                                     limits=(_at_most("head_dim", 256, "head dim", "fla's chunk_gated_delta_rule"),),
                                     call_keys=("head_dim",)),
    # Fused CPU kernels (numba; arrepro/models/cpu_kernels/<name>.py): every one compiles and checks
    # itself against a step-by-step recurrence on first use (its module's ``self_check``); where that
    # fails (numba missing or broken, a wrong result) the portable path runs and the record says why;
    # then at a module's first call, against that module's portable path at the call's shape
    # (``CHECK_MODULE``). Their limits are their modules' (``outside_limits``), read only where a cell
    # asks for the kernel
    "mamba_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.mamba_cpu", "mamba",
                        "the portable chunked scan", device="cpu"),
    # the short depthwise causal conv (ops.ShortConv: Hyena, H3, Based, DeltaNet, attention + conv)
    "short_conv_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.short_conv_cpu", "short_conv",
                             "the portable shifted multiply-adds", device="cpu"),
    # the whole DeltaNet mixer (its projections, convs, norms and the delta rule step by step)
    "deltanet_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.deltanet_cpu", "deltanet",
                           "the portable chunked delta rule", device="cpu"),
    # the whole Mamba2 mixer (in_proj, conv, the SSD scan chunk by chunk, the gated RMSNorm, out_proj)
    "mamba2_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.mamba2_cpu", "mamba2",
                         "the portable chunked SSD scan", device="cpu"),
    # the Hyena operator up to the long filters (in_proj, short conv, gates, a direct long conv,
    # out_proj); beyond the length its module sets (hyena_cpu.MAX_LEN), the FFT convolution costs less
    "hyena_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.hyena_cpu", "hyena",
                        "its parts' own paths with the FFT convolution", call_keys=("length",), device="cpu"),
    # a block's MLP (ops.MLP: fc1, GELU, out_proj) where its block is not compiled whole; fp32
    "mlp_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.mlp_cpu", "mlp", "its layers and ATen's GELU",
                      device="cpu"),
    # causal softmax attention without dropout (the attention mixer's CPU path; SDPA with dropout)
    "attention_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.attention_cpu", "attention", "SDPA",
                            call_keys=("dropout",), device="cpu"),
    # every linear layer of a model and its tied head (ops.Linear, ops.TiedHead): a matrix product
    # whose bits do not depend on the CPU, at ~3x the speed of MKL's pinned COMPATIBLE branch
    "linear_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.linear_cpu", "linear", "F.linear (MKL)", device="cpu"),
    # a pre-norm attention block with its MLP, compiled whole (backbone.Block where its mixer names
    # it: attention, its convolutions and rotary positions); fp32. It computes x1 = x + attn(LN1 x),
    # then x1 + mlp(LN2 x1) (sequential), rotary on every channel of a head, no dropout: a parallel
    # residual (GPT-NeoX's x + attn(LN1 x) + mlp(LN2 x)), partial rotary or dropout run the block's
    # own modules (each with its own kernels: attention_cpu, mlp_cpu, linear_cpu), recorded
    "block_cpu": Kernel(("numba",), "arrepro.models.cpu_kernels.block_cpu", "block", "the block's own modules",
                        call_keys=("dropout", "residual", "rotary_fraction"), device="cpu"),
}
CPU_DTYPES = (torch.float32, torch.float64)


class KernelImportError(ImportError):
    """A kernel package is installed but cannot be imported (a broken build): never a silent fallback."""


_functions: dict[str, Callable] = {}  # imported kernels
_cpu_checked: dict[tuple, str | Exception] = {}  # (CPU kernel, dtype) -> its self-check's description, or its failure
_overrides: dict[str, Callable] = {}  # test stand-ins (``override``)
_decisions: dict[tuple, tuple[Callable | None, dict]] = {}  # (name, device, dtype, call, env, overrides)
# inside ``portable()``: every module on its portable path; inside a module's check (``CHECK_MODULE``)
_state = {"portable": False, "checking": False}
# a fused CPU kernel checked against its module's portable path at the shapes a cell runs, at its first call
CHECK_MODULE = "arrepro.models.cpu_kernels.check"


def installed(name: str) -> str | None:
    """'dist version' of the distribution that provides kernel ``name``, or None."""
    for dist in KERNELS[name].dists:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _import_bare(module: str, package: str):
    """Import ``module`` with ``package`` registered as a bare package (its __init__ not run)."""
    if package not in sys.modules:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.submodule_search_locations is None:
            raise ModuleNotFoundError(f"no package {package!r}", name=package)
        bare = types.ModuleType(package)
        bare.__path__, bare.__spec__, bare.__file__ = list(spec.submodule_search_locations), spec, spec.origin
        bare.__package__ = package
        sys.modules[package] = bare
    return importlib.import_module(module)


def function(name: str) -> Callable:
    """The kernel function ``name`` (an override inside ``override``), imported on first use.
    Raises KernelImportError, quoting the import error, when its package is installed but broken."""
    if name in _overrides:
        return _overrides[name]
    if name not in _functions:
        k = KERNELS[name]
        try:
            mod = _import_bare(k.module, k.bare_package) if k.bare_package else importlib.import_module(k.module)
            _functions[name] = getattr(mod, k.attr)
        except Exception as err:  # noqa: BLE001 - any failure of an installed package is reported
            raise KernelImportError(
                f"{installed(name) or '/'.join(k.dists)} is installed but `from {k.module} import {k.attr}` "
                f"failed: {type(err).__name__}: {err} (set {ENV}=0 to run the portable paths instead)") from err
    return _functions[name]


def _cpu_kernel(name: str, dtype: torch.dtype) -> tuple[Callable | None, str]:
    """A fused CPU kernel after its module's ``self_check`` for ``dtype`` (once per process), or
    None and why not. The check takes gradients, so it runs with autograd on whatever mode the
    first call comes in (an evaluation under ``torch.no_grad`` or ``inference_mode``)."""
    k = KERNELS[name]
    if (name, dtype) not in _cpu_checked:
        try:
            mod = importlib.import_module(k.module)
            with torch.inference_mode(False), torch.enable_grad():
                _cpu_checked[name, dtype] = mod.self_check(dtype)
            _functions[name] = getattr(mod, k.attr)
        except Exception as err:  # noqa: BLE001 - any failure means the portable path, recorded
            _cpu_checked[name, dtype] = err
    done = _cpu_checked[name, dtype]
    if isinstance(done, Exception):
        return None, f"{type(done).__name__}: {done}: {k.fallback}"
    return _functions[name], done


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a kernel call computes in: x's if half, else autocast's half dtype where autocast is
    active on x's device, else x's (an fp32 run stays fp32)."""
    if x.dtype in HALF:
        return x.dtype
    dev = x.device.type
    if torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) in HALF:
        return torch.get_autocast_dtype(dev)
    return x.dtype


def _outside_limits(k: Kernel, call: dict) -> str | None:
    """Why the call is outside the kernel's limits (the first that says so, with what runs instead), or None."""
    for limit in k.limits:
        why = limit(call)
        if why:
            return f"{why}: {k.fallback}"
    return None


def _cpu_limits(k: Kernel, call: dict) -> str | None:
    """Why the call is outside a fused CPU kernel's limits as its module states them (its
    ``outside_limits(call)``, if it has one), with what runs instead; or None. A module that does not
    import states none here: its self-check imports it next and records why it failed."""
    try:
        module = importlib.import_module(k.module)
    except Exception:  # noqa: BLE001 - recorded by _cpu_kernel
        return None
    check = getattr(module, "outside_limits", None)
    why = check(call) if check is not None else None
    return f"{why}: {k.fallback}" if why else None


def _decide(name: str, x: torch.Tensor, call: dict) -> tuple[Callable | None, str | None, str]:
    k = KERNELS[name]
    if not kernels_enabled():
        return None, None, f"{ENV}={os.environ[ENV]}"
    package = installed(name)
    if name in _overrides:
        fn = _overrides[name]
        package = f"{package or k.dists[0]} (override: {fn.__module__}.{fn.__qualname__})"
    elif k.device == "cpu":
        if x.device.type != "cpu":
            return None, None, f"{x.device.type} tensor: {name} is a CPU kernel"
        if package is None:
            return None, None, f"{k.dists[0]} not installed: {k.fallback}"
        dtype = compute_dtype(x)
        if dtype not in CPU_DTYPES:
            return None, package, f"{DTYPE_NAMES.get(dtype, dtype)} run: {name} computes in fp32/fp64: {k.fallback}"
        why = _cpu_limits(k, call)  # before the self-check: a call outside the limits never needs the kernel
        if why:
            return None, package, why
        fn, why = _cpu_kernel(name, dtype)
        return fn, package, f"cpu {DTYPE_NAMES.get(dtype, dtype)}: " + (why if fn is None else f"self-checked, {why}")
    elif not x.is_cuda:
        return None, None, f"{'CPU' if x.device.type == 'cpu' else x.device.type} tensor"
    elif package is None:
        return None, None, f"{k.dists[0]} not installed"
    else:  # installed: a failing import is an error, even where the limits below rule the kernel out
        fn = function(name)
    dtype = compute_dtype(x)
    if k.half_only and dtype not in HALF:
        return None, package, f"{DTYPE_NAMES.get(dtype, dtype)} run: {name} needs bf16/fp16: {k.fallback}"
    why = _outside_limits(k, call)
    if why:
        return None, package, why
    if k.min_capability and x.is_cuda:
        cap = torch.cuda.get_device_capability(x.device)
        if cap < k.min_capability:
            need = "sm%d%d" % k.min_capability
            return None, package, f"GPU sm{cap[0]}{cap[1]}: {k.dists[0]} needs {need}+: {k.fallback}"
    limits = ", ".join(f"{key} {call[key]}" for key in k.call_keys)
    return fn, package, f"{x.device.type} {DTYPE_NAMES.get(dtype, dtype)}" + (f", {limits}" if limits else "") \
        + ": within its limits"


def choose(name: str, x: torch.Tensor, **call) -> tuple[Callable | None, dict]:
    """The kernel ``name`` for this call (None: run the portable path) and the record saying why.
    ``call`` holds the facts the kernel's limits read (``KERNELS[name].call_keys``)."""
    key = (name, x.device, compute_dtype(x), tuple(sorted(call.items())), os.environ.get(ENV),
           tuple((n, id(f)) for n, f in sorted(_overrides.items())))
    if key not in _decisions:
        fn, package, reason = _decide(name, x, call)
        _decisions[key] = fn, {"path": "portable" if fn is None else "kernel", "package": package, "reason": reason}
    return _decisions[key]


def overridden(name: str) -> bool:
    """Whether a test stands in for the kernel ``name`` (``override``)."""
    return name in _overrides


@contextlib.contextmanager
def override(functions: dict[str, Callable]):
    """Tests only: use ``functions`` as the named kernels and treat tensors on any device as
    kernel-capable (limits and precision rules still apply). Restores the previous state on exit."""
    unknown = set(functions) - set(KERNELS)
    if unknown:
        raise KeyError(f"override: unknown kernels {sorted(unknown)}; known: {sorted(KERNELS)}")
    saved = dict(_overrides)
    _overrides.update(functions)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def fla_layout_kwargs(fn: Callable) -> dict:
    """Keyword that makes an fla op read [B, T, H, d]: releases with a ``head_first`` argument
    (some defaulted to True, i.e. [B, H, T, d]) get head_first=False; the current ones (0.5, 0.6)
    have no such argument and refuse it."""
    try:
        return {"head_first": False} if "head_first" in inspect.signature(fn).parameters else {}
    except (TypeError, ValueError):
        return {}


class KernelMixer(nn.Module):
    """A module with a kernel path: ``forward`` asks ``choose(self.kernel_name, x,
    **self.kernel_call(x))``, records the answer, and runs ``forward_kernel`` or
    ``forward_portable``. A subclass sets ``kernel_name`` and, where the kernel has limits, returns
    the facts they read from ``kernel_call``; ``forward_kernel`` gets the function from
    ``self.kernel_function()``. A subclass with a fused CPU kernel also sets ``cpu_kernel_name``:
    on CPU tensors that one is asked instead (unless a test overrides ``kernel_name``), and
    ``forward_cpu_kernel`` runs it (``self.kernel_function(self.cpu_kernel_name)``), once it matches
    the module's own ``forward_portable`` at the call's shape (``CHECK_MODULE``: checked at the
    module's first call with that shape; a boolean argument, a block's kept rows, goes with x's
    batch). Inside ``portable()`` every module runs ``forward_portable``."""
    kernel_name: str
    cpu_kernel_name: str | None = None

    @property
    def op_name(self) -> str:
        return getattr(type(self), "registry_name", type(self).__name__.lower())

    def kernel_call(self, x: torch.Tensor) -> dict:
        """The facts of this call that the kernel's limits read (``x``: the input)."""
        return {}

    def kernel_function(self, name: str | None = None) -> Callable:
        return function(name or self.kernel_name)

    def forward(self, x: torch.Tensor, *args) -> torch.Tensor:
        """``args`` (none for a mixer) go to the path that runs, after ``x``."""
        if _state["portable"]:
            return self.forward_portable(x, *args)
        name = self.kernel_name
        if self.cpu_kernel_name and x.device.type == "cpu" and name not in _overrides:
            name = self.cpu_kernel_name
        if KERNELS[name].device == "cpu" and x.device.type != "cpu" and name not in _overrides:
            return self.forward_fallback(x, *args)  # a module with a CPU kernel only (ops.Linear) off the CPU: nothing to record
        fn, record = choose(name, x, **self.kernel_call(x))
        if fn is not None and KERNELS[name].device == "cpu" and name not in _overrides and not _state["checking"]:
            fn, record = importlib.import_module(CHECK_MODULE).checked(self, name, x, args, fn, record)
        op = f"{self.op_name}.{name}"
        self.__dict__.setdefault("_kernel_paths", {})[op, record["path"]] = record
        if fn is None:
            return self.forward_fallback(x, *args)
        return self.forward_cpu_kernel(x, *args) if name == self.cpu_kernel_name else self.forward_kernel(x, *args)

    def forward_fallback(self, x: torch.Tensor, *args) -> torch.Tensor:
        """What runs where the kernel does not: the portable path; a mixer whose parts choose their
        own kernels (Hyena's short conv and linear layers) runs those parts' choices instead."""
        return self.forward_portable(x, *args)


@contextlib.contextmanager
def portable():
    """Every ``KernelMixer`` runs its portable path inside (a fused kernel's check's reference)."""
    saved, _state["portable"] = _state["portable"], True
    try:
        yield
    finally:
        _state["portable"] = saved


def paths_used(model: nn.Module, earlier: list[dict] = ()) -> list[dict]:
    """The paths the model's kernel-capable modules took on the calls that ran, one dict per
    distinct (op, path): {"op", "path": "kernel" | "portable", "package": "name version" | None, "reason"},
    after ``earlier`` ones (a resumed run's, from its checkpoint). A mixer's portable path is pure
    PyTorch throughout (its short convs included), so a short conv appears only where it was asked
    itself."""
    seen = {(p["op"], p["path"]): p for p in earlier}
    for module in model.modules():
        for (op, path), record in module.__dict__.get("_kernel_paths", {}).items():
            seen.setdefault((op, path), {"op": op, **record})
    return list(seen.values())


def describe_paths(paths: list[dict]) -> str:
    """One line per entry of ``paths_used``, for logs."""
    if not paths:
        return "kernel paths: none (no mixer with a kernel path ran)"
    return "kernel paths:" + "".join(
        f"\n  {p['op']}: {p['path']}" + (f" [{p['package']}]" if p["package"] else "") + f" ({p['reason']})"
        for p in paths)
