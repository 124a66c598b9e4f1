"""The comparison of `make gpu-verify` (arrepro.cluster.gpuverify): each kernel path the paper
scale uses (``VERIFY_CASES``) against its portable path at a paper shape, forward and every
gradient.

``compare_case``: the mixer's portable path in fp32 (TF32 off: the reference) against its
dispatch (``forward``: the kernel the paper scale would call) in the precision the paper scale
runs that kernel at: its ``precision`` (tf32) where the kernel takes fp32, bf16 autocast where it
needs half precision (``kernels.KERNELS[...].half_only``; the paper scale's fp32 runs use the
portable path there). Max relative error per tensor (largest absolute difference over the
reference's largest magnitude; a gradient over at least GRAD_FLOOR of the largest reference
gradient, as tests/test_mixers.py measures: one that vanishes in exact arithmetic is rounding
noise), output and every gradient (input and each parameter) against ``TOLERANCES``. A case whose
core kernel cannot run here is reported, not compared; one that raises is a failure, as is a
mismatch.
"""
from __future__ import annotations

from dataclasses import dataclass

# (test_kernel_matches_portable). tests/test_gpucheck.py checks that they are those tests' numbers.
TOLERANCES = {"fp32": (1e-4, 1e-4), "tf32": (2e-2, 5e-2), "bf16": (3e-2, 1.5e-1)}
GRAD_FLOOR = 1e-2
IMPORT_FAILED = "installed but its import failed"  # a kernel that cannot run for that: an error, not a skip


@dataclass(frozen=True)
class Case:
    name: str  # the kernel path, as the tables name it
    model: str  # the config.yaml model whose mixer calls it ("short_conv": ops.ShortConv alone)
    kernels: tuple[str, ...]  # the kernel functions its forward calls; the first is the one checked


# every kernel path of the paper scale: the mixers of its models that have a kernel package
VERIFY_CASES = (
    Case("selective scan", "mamba_noconv", ("selective_scan_fn",)),
    Case("causal-conv1d", "short_conv", ("causal_conv1d_fn",)),
    Case("Mamba block", "mamba", ("selective_scan_fn", "causal_conv1d_fn")),
    Case("Mamba2 chunked scan", "mamba2", ("mamba_chunk_scan_combined", "causal_conv1d_fn")),
    Case("delta rule", "deltanet", ("chunk_delta_rule", "causal_conv1d_fn")),
    Case("gated delta rule", "gated_deltanet", ("chunk_gated_delta_rule", "causal_conv1d_fn")),
    Case("Based", "based", ("parallel_based", "causal_conv1d_fn")),
)


def precision_context(precision: str, device):
    """A fresh context for one forward pass at ``precision``, with TF32 set as the training loop
    sets it (arrepro.train.prepare.autocast_for: tf32 only on CUDA; bf16 autocast, here on the CPU too,
    which the stand-in run uses)."""
    import contextlib

    import torch

    tf32 = precision == "tf32" and device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def effective_precision(precision: str, device) -> str:
    """What a run at ``precision`` computes in on ``device``: the CPU has no TF32."""
    return "fp32" if precision == "tf32" and device.type != "cuda" else precision


def case_precision(case: Case, paper_precision: str) -> str:
    """The paper scale's precision where its kernel takes fp32, bf16 where it needs half precision."""
    from arrepro.models import kernels

    return "bf16" if kernels.KERNELS[case.kernels[0]].half_only else paper_precision


def build_case_module(case: Case, config: dict, width: int, seq_len: int):
    """(the module whose paths are compared, its input width): the config model's mixer, or for
    "short_conv" the short conv of the Mamba block (expand x width channels, d_conv taps, SiLU)."""
    from arrepro.config import defaults
    from arrepro.models import get_mixer
    from arrepro.models.backbone import constructor_kwargs

    if case.model == "short_conv":
        from arrepro.models.ops import ShortConv

        k = defaults.model(config["models"]["mamba"])["mixer_kwargs"]
        channels = k.get("expand", 2) * width
        return ShortConv(channels, k.get("d_conv", 4), bias=True, activation="silu"), channels
    spec = defaults.model(config["models"][case.model])
    kwargs = constructor_kwargs(spec["mixer"], spec["mixer_kwargs"], spec["position"])
    return get_mixer(spec["mixer"])(width, max_len=seq_len, **kwargs), width


def rel_errors(outs, refs, names) -> dict[str, float]:
    """Max relative error of each tensor: output over its own largest magnitude, gradients over at
    least GRAD_FLOOR of the largest reference gradient (the module's docstring)."""
    out = {}
    grads = [b for b in refs[1:] if b is not None]
    floor = GRAD_FLOOR * max((float(b.abs().max()) for b in grads), default=0.0)
    for i, (name, a, b) in enumerate(zip(names, outs, refs)):
        if (a is None) != (b is None):
            raise AssertionError(f"{name}: computed on one path only")
        if a is None:
            continue
        scale = float(b.abs().max())
        if i > 0:
            scale = max(scale, floor)
        out[name] = float((a.float() - b.float()).abs().max()) / max(scale, 1e-30)
    return out


def compare_case(case: Case, config: dict, *, batch: int, seq_len: int, width: int, device, paper_precision: str,
                 why_not: dict[str, str | None], overrides: dict | None, log=print) -> dict:
    """One row of the agreement table (the module's docstring): the kernel path against the portable path."""
    import contextlib
    import copy

    import torch

    from arrepro.models import kernels

    precision = case_precision(case, paper_precision)
    label = effective_precision(precision, device)
    fwd_tol, grad_tol = TOLERANCES[label]
    row = {"case": case.name, "model": case.model, "kernels": list(case.kernels), "precision": label,
           "shape": f"{batch}x{seq_len}x{width}", "tolerance": [fwd_tol, grad_tol], "errors": {}, "paths": []}
    core = why_not.get(case.kernels[0])
    if core:
        status = "error" if core.startswith(IMPORT_FAILED) else "not run"
        log(f"  {case.name}: {status} ({core})")
        return {**row, "status": status, "reason": core}
    torch.manual_seed(0)
    ref, d_in = build_case_module(case, config, width, seq_len)
    ref = ref.to(device).float()
    ker = copy.deepcopy(ref)
    torch.manual_seed(1)
    x = torch.randn(batch, seq_len, d_in, device=device)
    names = ["output", "d input", *(f"d {n}" for n, _ in ref.named_parameters())]
    try:
        xr = x.clone().requires_grad_()
        with precision_context("fp32", device):
            yr = ref.forward_portable(xr)
            w = torch.randn_like(yr)  # a random cotangent: every output element counts
            gr = torch.autograd.grad((yr * w).sum(), [xr, *ref.parameters()], allow_unused=True)
        refs = [yr.detach(), *gr]
        del yr, gr
        xk = x.clone().requires_grad_()
        with kernels.override(overrides) if overrides else contextlib.nullcontext():
            with precision_context(precision, device):
                y = ker(xk)
            gk = torch.autograd.grad((y.float() * w).sum(), [xk, *ker.parameters()], allow_unused=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
        row["paths"] = kernels.paths_used(ker)
        errors = rel_errors([y.detach(), *gk], refs, names)
    except Exception as err:  # noqa: BLE001 - a kernel that raises is a failing row, with its message
        msg = f"{type(err).__name__}: {err}"
        log(f"  {case.name}: ERROR {msg[:300]}")
        return {**row, "paths": row["paths"], "status": "error", "reason": msg[:2000]}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ran = {p["op"].rsplit(".", 1)[-1]: p for p in row["paths"] if p["path"] == "kernel"}
    if case.kernels[0] not in ran:
        why = "; ".join(f"{p['op']}: {p['reason']}" for p in row["paths"] if p["path"] != "kernel") or "no record"
        log(f"  {case.name}: not run (the portable path ran: {why})")
        return {**row, "status": "not run", "reason": f"the portable path ran: {why}"}
    worst_grad = max((v for k, v in errors.items() if k != "output"), default=0.0)
    ok = errors["output"] <= fwd_tol and worst_grad <= grad_tol
    row.update(errors=errors, max_forward=errors["output"], max_gradient=worst_grad,
               status="pass" if ok else "FAIL", reason="" if ok else "outside the tolerance")
    log(f"  {case.name} ({label}, {row['shape']}): output {errors['output']:.1e}, worst gradient {worst_grad:.1e} "
        f"-> {row['status']}")
    return row
