"""A fused CPU kernel checked against its module's portable path at what a cell runs (issue 55).

Each kernel checks itself once per process at a few small shapes (its module's ``self_check``);
an edit of a portable path that matters only at a cell's length, width or options (Mamba's,
halving its output beyond length 16) would pass that and leave the cell training the unedited
kernel. So ``arrepro.models.kernels`` asks ``checked`` at a module's first call with a fused CPU
kernel: the module itself, with its options, at the call's shape (the batch aside), a small
batch, an fp64 reference, output and every gradient (``against_portable``); once per process for
a configuration and shape (``_configuration``: a cell's layers alike are checked once). Where they
differ the portable path runs, and the cell's record (``kernel_paths``) says so and by how much;
where they agree it says what was checked. Costs some 10 to 30 ms of CPU a model (docs/models.md).
The comparison (``compare``) is the self-checks' too (``common.check_mixer``).
"""
from __future__ import annotations

import copy
import importlib
import math
import warnings
from typing import Callable

import torch
from torch import nn

from arrepro.models import kernels


class Mismatch(RuntimeError):
    """A fused kernel's result differs from its reference beyond the tolerance (the message names
    what was checked and the tensor)."""


def compare(named, tol: float, what: str, loose=lambda name, ref: False, floor: float = 1e-30) -> None:
    """Each (name, result, reference) of ``named``: its largest error relative to the reference's
    largest value (``floor`` at least) within ``tol`` (25 tol where ``loose(name, reference)``); else
    Mismatch naming ``what`` and the tensor."""
    for name, a, r in named:
        err = (a.double() - r).abs().max().item() / max(r.abs().max().item(), floor) if r.numel() else 0.0
        t = 25 * tol if loose(name, r) else tol
        if not err <= t:
            raise Mismatch(f"{what}: {name} ({a.dtype}) off by {err:.2e} (tolerance {t})")


# the per-cell check's tolerance (``against_portable``): a fused kernel in fp32 against its module's
# portable path in fp64, each tensor's largest error relative to its reference's largest value: the
# output and the input's gradient within 1e-3, the parameters' gradients (sums over every row and
# position, some with cancellation) within 25 times that. Measured over every model of config.yaml at
# widths 32 to 128 and lengths 32 to 256: at most 1.3e-6 (output, input), 3.7e-5 (Mamba2's dt_bias)
CELL_TOL = 1e-3


def against_portable(m, x, args, rows: int = 0, tol: float = CELL_TOL) -> str:
    """A fused CPU kernel checked against its module's portable path at the shape of the call
    ``m(x, *args)`` that a cell makes (``arrepro.models.kernels``: once per module and shape): a copy
    of ``m`` with its parameters moved by 0.3 N(0, 1) times their RMS (0.1 at least), in x's dtype,
    runs ``forward_cpu_kernel`` on a small batch of random inputs of x's shape (2 of its rows, or
    enough for ``rows`` positions: a kernel that leaves smaller products to ATen), and an fp64 copy
    of it ``forward_portable``, every module inside on its own portable path (``kernels.portable``);
    output and every gradient (the input's, a float argument's, every parameter's) compared
    (``compare``: ``tol``, 25 tol for a parameter's). A boolean argument (a block's kept rows) is the call's own, for the batch taken.
    Returns what was checked; raises Mismatch where they differ. The global random state is
    untouched (private generator; ``fork_rng`` around the paths, which may draw)."""
    per = math.prod(x.shape[1:-1]) if x.dim() > 1 else 1
    b = min(x.shape[0], max(2, -(-rows // max(per, 1))))
    g = torch.Generator().manual_seed(0)
    fused = copy.deepcopy(m).to(x.dtype)

    def moved(t):
        scale = 0.3 * max(t.detach().double().square().mean().sqrt().item() if t.numel() else 0.0, 0.1)
        return t.detach() + torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) * scale

    with torch.no_grad():
        for p in fused.parameters():
            p.copy_(moved(p))
    ref = copy.deepcopy(fused).double()
    keep = torch.arange(x.shape[0])
    masks = [a for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.bool]
    if masks:  # the sequences that keep rows first: a check on rows the call has
        keep = torch.cat([keep[masks[0].flatten(1).any(1)], keep[~masks[0].flatten(1).any(1)]])
    keep = keep[:b]
    u = torch.randn(b, *x.shape[1:], generator=g, dtype=torch.float64).to(x.dtype)
    extra = [moved(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    inputs = [u] + [a for a in extra if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def call(module, dtype, path):
        xs = [t.to(dtype).requires_grad_() for t in inputs]
        it = iter(xs[1:])
        call_args = [next(it) if isinstance(a, torch.Tensor) and a.is_floating_point()
                     else a[keep] if isinstance(a, torch.Tensor) and a.dtype == torch.bool else a for a in extra]
        with torch.random.fork_rng(devices=[]):
            y = path(module)(xs[0], *call_args)
        return y, xs

    y, xs = call(fused, x.dtype, lambda mod: mod.forward_cpu_kernel)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(x.dtype)
    params = list(fused.parameters())
    got = torch.autograd.grad(y, xs + params, gy, allow_unused=True)
    with kernels.portable(), warnings.catch_warnings():  # (a path that computes a part in fp32 warns of the fp64 weights)
        warnings.simplefilter("ignore")
        r, rs = call(ref, torch.float64, lambda mod: mod.forward_portable)
        want = torch.autograd.grad(r, rs + list(ref.parameters()), gy.double(), allow_unused=True)
    names = ["y", "dx"] + [f"d(argument {i + 1})" for i in range(len(xs) - 1)] + [n for n, _ in fused.named_parameters()]
    pairs = [(n, a if a is not None else torch.zeros_like(t), w if w is not None else torch.zeros_like(t, dtype=torch.float64))
             for n, a, w, t in zip(names[1:], got, want, xs + params) if a is not None or w is not None]
    shape = " x ".join(map(str, (b, *x.shape[1:])))
    what = f"{type(m).__name__}'s fused kernel against its portable path at {shape} (fp64 reference)"
    # a gradient that is 0 but for rounding (a key bias: a softmax does not see a constant added to
    # every key) is compared relative to the largest gradient of all, 1e-3 of it at least
    floor = 1e-3 * max((w.abs().max().item() for _, _, w in pairs if w.numel()), default=0.0)
    compare([("y", y, r)] + pairs, tol, what, lambda name, ref: name not in ("y", "dx"), floor=max(floor, 1e-30))
    return (f"matches its portable path at this call's shape ({shape}, fp64 reference: output and {len(pairs)} "
            f"gradients within {tol:g}, those of parameters {25 * tol:g})")


_SIMPLE = (int, float, str, bool, type(None), tuple, list, dict)
_checks: dict[tuple, tuple[bool, str]] = {}  # (kernel, module's configuration, call's shape) -> (matches, what was found)


def _configuration(module: nn.Module) -> tuple:
    """What a check of ``module`` depends on besides the code: every submodule's class and plain
    attributes (its constructor's options, ``training``), every parameter's and buffer's name, shape
    and dtype, and the buffers' values (the parameters' values are the check's own)."""
    out = []
    for name, sub in module.named_modules():
        out.append((name, type(sub), tuple((k, repr(v)) for k, v in sorted(vars(sub).items())
                                           if not k.startswith("_") and isinstance(v, _SIMPLE))))
    out += [(n, tuple(p.shape), p.dtype) for n, p in module.named_parameters()]
    out += [(n, tuple(b.shape), b.dtype, hash(b.detach().cpu().numpy().tobytes())) for n, b in module.named_buffers()]
    return tuple(out)


def checked(module, name: str, x: torch.Tensor, args: tuple, fn: Callable, record: dict):
    """``fn`` (the fused CPU kernel ``name``, chosen for this call of ``module``) and its record where
    the kernel matches the module's portable path at this call's shape (``against_portable``, at the
    module's first call with each shape and mode, the batch aside; once per process for a
    configuration); else None (the portable path runs) and the record says why. An error of the
    check itself (a path that raises) is raised."""
    key = (module.training, x.dtype, tuple(x.shape[1:]),
           tuple((a.dtype, tuple(a.shape[1:] if a.dtype == torch.bool else a.shape)) if isinstance(a, torch.Tensor) else a
                 for a in args))
    mine = module.__dict__.setdefault("_kernel_checks", {})  # (the configuration, read once per module and shape)
    if key not in mine:
        full = (name, _configuration(module), key)
        if full not in _checks:
            rows = getattr(importlib.import_module(kernels.KERNELS[name].module), "MIN_ROWS", 0)
            kernels._state["checking"] = True
            try:
                with torch.inference_mode(False), torch.enable_grad():
                    _checks[full] = True, against_portable(module, x, args, rows)
            except Mismatch as err:
                _checks[full] = False, str(err)
            finally:
                kernels._state["checking"] = False
        mine[key] = _checks[full]
    ok, text = mine[key]
    if ok:
        return fn, {**record, "reason": f"{record['reason']}; {text}"}
    fallback = kernels.KERNELS[name].fallback
    return None, {**record, "path": "portable", "reason": f"{record['reason']}; {text}: {fallback}"}
