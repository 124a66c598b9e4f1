"""CPU stand-ins for the CUDA/Triton kernel functions the mixers call (tests only).

Each stand-in has the real function's signature, enforces the checks the pinned package's own
code makes on the call (dtypes, layouts, strides after the Python wrapper's own fix-ups, head-dim,
width and state-size limits; file and lines cited) and computes with this project's portable
math, so a mixer's ``forward_kernel`` runs end to end on CPU under ``kernels.override(STANDINS)``.
A violated check raises ``ContractError`` with the package's own message. Device checks (CUDA,
sm80+) are the one thing left out: that is what the stand-ins are for.

Pinned sources read (the GPU env's versions: envs/train.post-deploy.sh, envs/train.yaml; the same
in envs/kernels-cpu.txt): flash-attn 2.8.3, causal-conv1d 1.6.0, mamba-ssm 2.3.1, fla-core 0.6.0
(flash-linear-attention 0.6.0). Line numbers below are those versions'.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from arrepro.models.mixers.deltanet import chunk_delta_rule as portable_delta_rule, l2norm
from arrepro.models.mixers.mamba import selective_scan
from arrepro.models.mixers.mamba2 import ssd_chunked

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
HALF = (torch.float16, torch.bfloat16)
# limits as the sources state them (the tests' expectations read these, not arrepro's table)
FLASH_MAX_HEAD_DIM = 256     # flash_api.cpp 393 (mha_fwd), 830 (mha_bwd)
CONV_WIDTHS = range(2, 5)    # causal_conv1d.cpp 182 (fwd), 289 (bwd)
BASED_MAX_FEATURE_DIM = 128  # fla/ops/based/parallel.py 430 (assert), 355 (NK == 1)
SCAN_MAX_DSTATE = 256        # selective_scan.cpp 262 (fwd), 382 (bwd)
DELTA_MAX_HEAD_DIM = 256     # fla/ops/common/chunk_delta_h.py 716 (fwd), 772 (bwd)
HALF_ONLY = {"flash_attn_func", "chunk_delta_rule"}  # flash_api.cpp 373-374; delta_rule/chunk.py 303


class ContractError(RuntimeError):
    """A call the real kernel would refuse."""


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ContractError(message)


def _fp32(*tensors):
    """fp32 copies, computed with autocast off (the kernels compute in fp32 internally)."""
    return [None if t is None else t.float() for t in tensors]


def _no_autocast(t: torch.Tensor) -> torch.autocast:
    return torch.autocast(t.device.type, enabled=False)


def _same_device(*tensors) -> None:
    devs = {t.device for t in tensors if t is not None}
    check(len(devs) == 1, f"tensors on several devices: {devs}")


# ------------------------------------------------------------------------------ causal-conv1d
def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None):
    """causal_conv1d_interface.py 9-64 (CausalConv1dFn.forward) and csrc/causal_conv1d.cpp 150-190
    (causal_conv1d_fwd checks)."""
    if activation not in (None, "silu", "swish"):
        raise NotImplementedError("activation must be None, silu, or swish")
    if seq_idx is not None or initial_states is not None or return_final_states or final_states_out is not None:
        raise NotImplementedError("stand-in: seq_idx, initial and final states are not used by arrepro")
    _same_device(x, weight, bias)
    if x.stride(2) != 1 and x.stride(1) != 1:  # the wrapper's fix-up
        x = x.contiguous()
    check(x.dtype in FLOATS, "causal_conv1d: input must be fp32, fp16 or bf16")
    check(weight.dtype in FLOATS, "causal_conv1d: weight must be fp32, fp16 or bf16")
    check(x.dim() == 3, "x must have shape (batch_size, dim, seqlen)")
    B, D, L = x.shape
    W = weight.shape[-1]
    check(tuple(weight.shape) == (D, W), "weight must have shape (dim, width)")
    channel_last = x.stride(1) == 1 and x.stride(2) > 1
    if channel_last:
        check(D % 8 == 0, "causal_conv1d only supports channel dimension divisible by 8 for now")
        check(x.stride(2) % 8 == 0 and x.stride(0) % 8 == 0,
              "causal_conv1d with channel last layout requires strides (x.stride(0) and x.stride(2)) to be multiples of 8")
    check(W in CONV_WIDTHS, "causal_conv1d only supports width between 2 and 4")
    if bias is not None:
        check(bias.dtype == weight.dtype, "bias.scalar_type() == weight_type")
        check(tuple(bias.shape) == (D,), "bias must have shape (dim)")
    with _no_autocast(x):
        xf, wf, bf = _fp32(x, weight, bias)
        y = F.conv1d(xf, wf.unsqueeze(1), bf, padding=W - 1, groups=D)[..., :L]
        y = F.silu(y) if activation in ("silu", "swish") else y
    return y.to(x.dtype)  # out = torch::empty_like(x)


# ------------------------------------------------------------------------------ flash-attn
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_interface.py 807-892 (FlashAttnFunc: head dim padded to a multiple of 8; stride(-1)
    made 1) and flash_api.cpp 369-418 (mha_fwd), 797-830 (mha_bwd)."""
    if tuple(window_size) != (-1, -1) or softcap != 0.0 or alibi_slopes is not None or return_attn_probs:
        raise NotImplementedError("stand-in: windows, softcap, ALiBi and attention probabilities are not used")
    _same_device(q, k, v)
    check(q.dtype in HALF, "FlashAttention only support fp16 and bf16 data type")
    check(k.dtype == q.dtype, "query and key must have the same dtype")
    check(v.dtype == q.dtype, "query and value must have the same dtype")
    check(q.dim() == 4, "q must be (batch_size, seqlen, num_heads, head_size)")
    B, L, H, D = q.shape
    Lk, Hk = k.shape[1], k.shape[2]
    check(B > 0, "batch size must be positive")
    padded = -(-D // 8) * 8  # the wrapper pads to a multiple of 8 before the C++ checks
    check(padded <= FLASH_MAX_HEAD_DIM, "FlashAttention forward only supports head dimension at most 256")
    check(H % Hk == 0, "Number of heads in key/value must divide number of heads in query")
    check(tuple(k.shape) == (B, Lk, Hk, D) and tuple(v.shape) == (B, Lk, Hk, D), "k, v must have shape (batch_size, seqlen_k, num_heads_k, head_size)")
    check(0.0 <= dropout_p < 1.0, "p_dropout < 1")
    scale = D**-0.5 if softmax_scale is None else softmax_scale
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if Hk != H:
        kt, vt = (t.repeat_interleave(H // Hk, dim=1) for t in (kt, vt))
    with _no_autocast(q):
        o = F.scaled_dot_product_attention(*_fp32(qt, kt, vt), dropout_p=dropout_p, is_causal=causal, scale=scale)
    return o.transpose(1, 2).to(q.dtype)


# ------------------------------------------------------------------------------ fla: Based
def parallel_based(q, k, v, scale=None, use_norm=True):
    """fla/ops/based/parallel.py 423-438 (q.shape[-1] <= 128; [B, T, H, K] in, transposed for the
    kernel) and 337-376 (NK == 1, i.e. K <= 128; input_guard makes inputs contiguous)."""
    _same_device(q, k, v)
    check(q.shape[-1] <= BASED_MAX_FEATURE_DIM, "only support feature dim up to 128")
    check(q.dim() == 4 and k.shape == q.shape and v.shape[:3] == q.shape[:3], "q, k: [B, T, H, K]; v: [B, T, H, V]")
    check(q.dtype.is_floating_point and k.dtype == q.dtype and v.dtype == q.dtype, "q, k, v: one float dtype")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with _no_autocast(q):
        qf, kf, vf = (t.transpose(1, 2) for t in _fp32(q, k, v))  # (B, H, T, .)
        s = scale * qf @ kf.transpose(-1, -2)
        a = torch.tril(1.0 + s + 0.5 * s * s)  # the Taylor kernel, causal
        o = a @ vf
        if use_norm:
            o = o / (a.sum(-1, keepdim=True) + 1e-6)
    return o.transpose(1, 2).to(q.dtype)


# ------------------------------------------------------------------------------ mamba-ssm
def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False):
    """selective_scan_interface.py 23-45 (SelectiveScanFn.forward: stride(-1) made 1; 3-D B, C
    become (b, 1, n, l)) and csrc/selective_scan/selective_scan.cpp 227-303 (selective_scan_fwd checks)."""
    if return_last_state:
        raise NotImplementedError("stand-in: return_last_state is not used by arrepro")
    _same_device(u, delta, A, B, C, D, z, delta_bias)
    check(u.dtype in FLOATS, "input_type must be fp32, fp16 or bf16")
    check(A.dtype == torch.float32, "weight_type (A) must be fp32 or complex64 (real A here)")
    check(delta.dtype == u.dtype, "delta.scalar_type() == input_type")
    check(B.dim() >= 3 and C.dim() >= 3, "arrepro passes variable (input-dependent) B and C")
    check(B.dtype == u.dtype and C.dtype == u.dtype, "B, C (variable) must have the input dtype")
    check(u.dim() == 3, "u must have shape (batch_size, dim, seqlen)")
    b, d, L = u.shape
    n = A.shape[1]
    check(n <= SCAN_MAX_DSTATE, "selective_scan only supports state dimension <= 256")
    check(tuple(delta.shape) == (b, d, L), "delta must have shape (batch_size, dim, seqlen)")
    check(tuple(A.shape) == (d, n), "A must have shape (dim, dstate)")
    B4 = B.unsqueeze(1) if B.dim() == 3 else B
    C4 = C.unsqueeze(1) if C.dim() == 3 else C
    check(tuple(B4.shape) == (b, 1, n, L) and tuple(C4.shape) == (b, 1, n, L),
          "B, C must have shape (batch_size, n_groups, dstate, seqlen) (one group here)")
    if D is not None:
        check(D.dtype == torch.float32 and tuple(D.shape) == (d,), "D must be fp32 with shape (dim)")
    if delta_bias is not None:
        check(delta_bias.dtype == torch.float32 and tuple(delta_bias.shape) == (d,),
              "delta_bias must be fp32 with shape (dim)")
    if z is not None:
        check(z.dtype == u.dtype and tuple(z.shape) == (b, d, L), "z: input dtype, shape (batch_size, dim, seqlen)")
    with _no_autocast(u):
        uf, df, Bf, Cf, zf = (None if t is None else t.float().transpose(1, 2) for t in (u, delta, B4[:, 0], C4[:, 0], z))
        if delta_bias is not None:
            df = df + delta_bias
        if delta_softplus:
            df = F.softplus(df)
        y = selective_scan(uf, df, A, Bf, Cf)
        if D is not None:
            y = y + uf * D
        if zf is not None:
            y = y * F.silu(zf)
    return y.transpose(1, 2).to(u.dtype)


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """ssd_combined.py 343-367 (_mamba_chunk_scan_combined_fwd shape asserts) and ssd_chunk_state.py
    718-722 (A, dt_bias of shape (nheads,)); the output has x's dtype (ssd_chunk_scan.py 1276)."""
    if initial_states is not None or seq_idx is not None or cu_seqlens is not None or return_final_states \
            or return_varlen_states:
        raise NotImplementedError("stand-in: states, seq_idx and varlen are not used by arrepro")
    _same_device(x, dt, A, B, C, D, z, dt_bias)
    batch, seqlen, nheads, headdim = x.shape
    _, _, ngroups, dstate = B.shape
    check(nheads % ngroups == 0, "nheads % ngroups == 0")
    check(tuple(B.shape) == (batch, seqlen, ngroups, dstate), "B.shape == (batch, seqlen, ngroups, dstate)")
    check(tuple(dt.shape) == (batch, seqlen, nheads), "dt.shape == (batch, seqlen, nheads)")
    check(tuple(A.shape) == (nheads,), "A.shape == (nheads,)")
    check(C.shape == B.shape, "C.shape == B.shape")
    if z is not None:
        check(z.shape == x.shape, "z.shape == x.shape")
    if D is not None:
        check(tuple(D.shape) in ((nheads, headdim), (nheads,)), "D.shape == (nheads, headdim) or (nheads,)")
    if dt_bias is not None:
        check(tuple(dt_bias.shape) == (nheads,), "dt_bias.shape == (nheads,)")
    if ngroups != 1:
        raise NotImplementedError("stand-in: ngroups == 1 only (arrepro's Mamba2)")
    with _no_autocast(x):
        xf, dtf, Bf, Cf, zf = _fp32(x, dt, B, C, z)
        if dt_bias is not None:
            dtf = dtf + dt_bias.float()
        if dt_softplus:
            dtf = F.softplus(dtf)
        if tuple(dt_limit) != (0.0, float("inf")):
            dtf = dtf.clamp(*dt_limit)
        y = ssd_chunked(xf, dtf, A.float(), Bf[:, :, 0], Cf[:, :, 0], chunk_size)
        if D is not None:
            y = y + xf * (D.float()[:, None] if D.dim() == 1 else D.float())
        if zf is not None:
            y = y * F.silu(zf)
    return y.to(x.dtype)


# ------------------------------------------------------------------------------ fla: delta rules
def _delta_rule_checks(q, k, v, beta, kwargs, op):
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")
    chunk_size = kwargs.pop("chunk_size", 64)
    check(chunk_size in (16, 32, 64), f"`chunk_size` must be 16, 32, or 64, got {chunk_size}.")
    check(q.dim() == 4 and k.shape == q.shape, "q, k: [B, T, H, K]")
    check(v.dim() == 4 and v.shape[:2] == q.shape[:2], "v: [B, T, HV, V]")
    check(v.shape[2] == q.shape[2], f"stand-in: {op} with HV == H only (arrepro's layers)")
    check(q.shape[-1] <= DELTA_MAX_HEAD_DIM, "current kernel does not support head dimension larger than 256.")
    check(len(beta.shape) == 3 and tuple(beta.shape) == tuple(v.shape[:3]),
          "beta must be of shape (batch size, num of head, seq len).")
    return chunk_size


def _delta_rule(q, k, v, beta, g, scale, l2, chunk_size):
    with _no_autocast(q):
        qf, kf, vf, bf, gf = (None if t is None else t.float().transpose(1, 2) for t in (q, k, v, beta, g))
        if l2:
            qf, kf = l2norm(qf), l2norm(kf)
        scale = k.shape[-1] ** -0.5 if scale is None else scale
        o = portable_delta_rule(qf * scale, kf, vf, bf, gf, chunk_size=chunk_size)
    return o.transpose(1, 2).to(q.dtype), None


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """fla/ops/delta_rule/chunk.py 302-312 (dtype and layout asserts) and ops/common/chunk_delta_h.py
    716, 772 (K <= 256)."""
    if initial_state is not None or output_final_state or cu_seqlens is not None:
        raise NotImplementedError("stand-in: states and varlen are not used by arrepro")
    _same_device(q, k, v, beta)
    check(q.dtype == k.dtype == v.dtype, "q.dtype == k.dtype == v.dtype")
    check(q.dtype != torch.float32, "ChunkDeltaRuleFunction does not support float32. Please use bfloat16.")
    chunk_size = _delta_rule_checks(q, k, v, beta, kwargs, "chunk_delta_rule")
    return _delta_rule(q, k, v, beta, None, scale, use_qk_l2norm_in_kernel, chunk_size)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, **kwargs):
    """fla/ops/gated_delta_rule/chunk.py 510-567 (head and layout checks; no dtype assert) and
    ops/common/chunk_delta_h.py 716, 772 (K <= 256)."""
    if initial_state is not None or output_final_state or cu_seqlens is not None or cp_context is not None \
            or use_beta_sigmoid_in_kernel or kwargs.get("use_gate_in_kernel"):
        raise NotImplementedError("stand-in: states, varlen, CP and in-kernel gates are not used by arrepro")
    _same_device(q, k, v, g, beta)
    check(q.shape[2] == k.shape[2], "q and k must have the same number of heads")
    check(v.shape[2] % q.shape[2] == 0, "num_v_heads must be evenly divisible by num_heads")
    check(tuple(g.shape) == tuple(v.shape[:3]), "g: [B, T, HV]")
    check(q.dtype.is_floating_point and k.dtype == q.dtype and v.dtype == q.dtype, "q, k, v: one float dtype")
    chunk_size = _delta_rule_checks(q, k, v, beta, kwargs, "chunk_gated_delta_rule")
    return _delta_rule(q, k, v, beta, g, scale, use_qk_l2norm_in_kernel, chunk_size)


STANDINS = {f.__name__: f for f in (causal_conv1d_fn, flash_attn_func, parallel_based, selective_scan_fn,
                                    mamba_chunk_scan_combined, chunk_delta_rule, chunk_gated_delta_rule)}
__all__ = ["STANDINS", "ContractError", *STANDINS]
