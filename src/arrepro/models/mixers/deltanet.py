"""DeltaNet (Yang et al., 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length"), as the layer ``fla.layers.DeltaNet(use_beta=True, use_short_conv=True, conv_size=4)``
of flash-linear-attention (defaults expand_k = expand_v = 1, qk_activation silu, qk_norm l2, no
output gate, no biases).

Per head h (head dim d_h = d_model / num_heads), with state S in R^{d_h x d_h}:

    q, k, v   = SiLU(ShortConv(W_q x)), SiLU(ShortConv(W_k x)), SiLU(ShortConv(W_v x))
    q, k      <- q / ||q||_2, k / ||k||_2;   q <- q / sqrt(d_h)   (fla's default scale)
    beta_t    = sigmoid(W_b x_t)                     (one scalar per head)
    S_t       = S_{t-1} - beta_t (S_{t-1} k_t - v_t) k_t^T      (S_0 = 0)
    o_t       = S_t q_t
    y         = out_proj(concat_h RMSNorm(o_t))      (RMSNorm over d_h, weight shared by heads)

The delta-rule core ``chunk_delta_rule`` below also takes an optional per-head log decay g_t
(alpha_t = e^{g_t} multiplies the state before the update), which is the Gated DeltaNet rule;
``gated_deltanet.GatedDeltaNet`` subclasses ``DeltaNet`` and adds only the decay and output gate.

Paths:
* ``forward_portable``: chunked delta rule in the WY / UT-transform form (Yang et al. 2024,
  Sec. 3; the gated version of Yang et al. 2025). Within a chunk of C steps starting from state
  H = S^T (d_k x d_v), with gamma_t = prod_{i<=t in chunk} alpha_i,
      delta_i = beta_i (v_i - alpha_i S_{i-1} k_i)    satisfies    (I + A) Delta = diag(beta)(V - diag(gamma) K H),
      A_ij = beta_i (gamma_i / gamma_j) k_i . k_j  for j < i (strictly lower triangular),
  so with the UT transform U = (I + A)^{-1} diag(beta) V, W = (I + A)^{-1} diag(beta gamma) K
  (one batched unit-triangular solve for all chunks): Delta = U - W H,
      O      = diag(gamma) Q H + (Q K^T o Gamma o M) Delta,   Gamma_ti = gamma_t / gamma_i, M causal incl. diag
      H_next = gamma_C H + (K o gamma_C / gamma)^T Delta.
  Everything except the last two lines runs for all chunks at once; the loop is over chunks only.
  Decay ratios are formed as exp(cumsum differences) on the causal side only, so they are <= 1.
* ``forward_reference``: the per-timestep recurrence above.
* ``forward_cpu_kernel``: the whole mixer fused on the CPU (numba, ``arrepro.models.cpu_kernels.deltanet_cpu``:
  the delta rule step by step, forward and backward in one call each; its own bits, the same on
  every x86-64 CPU). Not for ``GatedDeltaNet``, whose decay and output gate it does not compute.
* ``forward_kernel`` (CUDA, flash-linear-attention installed; checked against 0.6.0):
  ``fla.ops.delta_rule.chunk_delta_rule(q, k, v, beta, scale)`` on [B, T, H, d] tensors (not
  head-first; older releases with a ``head_first`` switch are told so), bf16/fp16 only, so the
  dispatch (``arrepro.models.kernels``) runs it only in a half-precision run, head dim <= 256. q and k
  are L2-normalised and q scaled here, so ``scale=1`` and ``use_qk_l2norm_in_kernel`` stays off.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.kernels import KernelMixer, compute_dtype, fla_layout_kwargs
from arrepro.models.ops import ShortConv
from arrepro.models.registry import register


L2_EPS = 1e-6  # as fla's l2norm: x / sqrt(sum x^2 + eps)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)


def chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     g: torch.Tensor | None = None, chunk_size: int = 64) -> torch.Tensor:
    """Chunked (gated) delta rule. q, k: (B, H, L, dk); v: (B, H, L, dv); beta, g: (B, H, L).

    g is the per-step log decay (alpha = e^g <= 1; None for plain DeltaNet). q is used as given
    (scale it beforehand). Computes in fp32 and returns o: (B, H, L, dv) in v's dtype.
    """
    out_dtype = v.dtype
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    B, H, L, dk = k.shape
    dv = v.shape[-1]
    C = min(chunk_size, L)
    N = math.ceil(L / C)
    pad = N * C - L
    if pad:  # zero steps appended after the sequence: they only influence the discarded tail
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        beta = F.pad(beta, (0, pad))
        g = None if g is None else F.pad(g.float(), (0, pad))
    q, k, v = (t.reshape(B, H, N, C, -1) for t in (q, k, v))
    beta = beta.reshape(B, H, N, C)
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    strict = causal.tril(-1)

    kk = k @ k.transpose(-1, -2)                                   # (B, H, N, C, C)
    qk = q @ k.transpose(-1, -2)
    if g is None:
        A = (beta[..., None] * kk).masked_fill(~strict, 0.0)
        Aqk = qk.masked_fill(~causal, 0.0)
        q_dec, k_dec, w_in = q, k, k
        chunk_decay = None
    else:
        gc = g.float().reshape(B, H, N, C).cumsum(-1)             # log gamma_t within each chunk
        diff = (gc[..., :, None] - gc[..., None, :]).masked_fill(~causal, float("-inf"))
        ratio = diff.exp()                                         # gamma_t / gamma_i (t >= i), else 0
        A = (beta[..., None] * kk * ratio).masked_fill(~strict, 0.0)
        Aqk = qk * ratio
        q_dec = q * gc[..., None].exp()                            # diag(gamma) Q
        k_dec = k * (gc[..., -1:] - gc)[..., None].exp()           # K o gamma_C / gamma
        w_in = k * gc[..., None].exp()                             # diag(gamma) K
        chunk_decay = gc[..., -1].exp()                            # gamma_C per chunk: (B, H, N)

    # UT transform: (I + A) [U | W] = diag(beta) [V | gamma K], one unit-lower-triangular solve
    eye = torch.eye(C, dtype=k.dtype, device=k.device)
    rhs = beta[..., None] * torch.cat([v, w_in], dim=-1)
    uw = torch.linalg.solve_triangular(A + eye, rhs, upper=False, unitriangular=True)
    u, w = uw[..., :dv], uw[..., dv:]

    state = q.new_zeros(B, H, dk, dv)                              # H = S^T
    outs = []
    for n in range(N):
        delta = u[:, :, n] - w[:, :, n] @ state                    # (B, H, C, dv)
        outs.append(q_dec[:, :, n] @ state + Aqk[:, :, n] @ delta)
        decayed = state if chunk_decay is None else state * chunk_decay[:, :, n, None, None]
        state = decayed + k_dec[:, :, n].transpose(-1, -2) @ delta
    o = torch.stack(outs, dim=2).reshape(B, H, N * C, dv)[:, :, :L]
    return o.to(out_dtype)


def delta_rule_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None) -> torch.Tensor:
    """The per-timestep (gated) delta rule, shapes as ``chunk_delta_rule``; S: (B, H, dv, dk)."""
    B, H, L, dk = k.shape
    S = q.new_zeros(B, H, v.shape[-1], dk)
    outs = []
    for t in range(L):
        if g is not None:
            S = S * g[:, :, t, None, None].exp()
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t, None, None]
        pred = (S @ kt[..., None])                                 # S_{t-1} k_t: (B, H, dv, 1)
        S = S - bt * (pred - vt[..., None]) @ kt[..., None, :]
        outs.append((S @ q[:, :, t, :, None])[..., 0])
    return torch.stack(outs, dim=2)


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(num_heads, int) and num_heads >= 1", "num_heads must be a whole number >= 1"),
    ("d_model % num_heads == 0", "the width must be a multiple of num_heads"),
    ("isinstance(conv_size, int) and conv_size >= 1", "conv_size must be a whole number >= 1"),
    ("isinstance(chunk_size, int) and chunk_size >= 1", "chunk_size must be a whole number >= 1"),
)


@register("deltanet")
class DeltaNet(KernelMixer):
    """Also the base of ``GatedDeltaNet``, which adds its layers in ``_head_projections``,
    overrides ``_log_decay`` and ``_output_gate`` (both trivial here) and names its own kernel."""
    source_output_name = "o_proj"  # Zoology's mixers/delta_net.py (fla's DeltaNet): its init does not rescale it (arrepro.models.init)
    kernel_name = "chunk_delta_rule"
    cpu_kernel_name = "deltanet_cpu"

    def __init__(self, d_model: int, *, max_len: int, num_heads: int = 2, conv_size: int = 4,
                 norm_eps: float = 1e-5, chunk_size: int = 64):
        super().__init__()
        require(REQUIRES, locals())
        self.h, self.dh, self.max_len, self.chunk_size = num_heads, d_model // num_heads, max_len, chunk_size
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self._head_projections(d_model)
        self.q_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.k_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.v_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.o_norm = nn.RMSNorm(self.dh, eps=norm_eps)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def _head_projections(self, d_model: int) -> None:
        """The layers made between v_proj and the convolutions: here the beta projection. Where a
        layer is made fixes its init under a given seed and its place in the parameter order
        (hence in optimizer state), so a subclass adds its own here, not after __init__."""
        self.b_proj = nn.Linear(d_model, self.h, bias=False)

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, num_heads: int = 2, conv_size: int = 4, **_) -> int:
        """q, k, v, out projections (d x d) + beta projection (d x H) + three depthwise convs
        (d x conv_size, no bias) + the shared per-head RMSNorm weight (d / H)."""
        return 4 * d_model * d_model + d_model * num_heads + 3 * d_model * conv_size + d_model // num_heads

    def _features(self, x: torch.Tensor, conv_path: str):
        """q (scaled), k, v as (B, H, L, dh); beta and the log decay g (``_log_decay``) as (B, H, L)."""
        heads = lambda t: t.unflatten(-1, (self.h, self.dh)).transpose(1, 2)  # noqa: E731
        q = heads(getattr(self.q_conv, conv_path)(self.q_proj(x)))
        k = heads(getattr(self.k_conv, conv_path)(self.k_proj(x)))
        v = heads(getattr(self.v_conv, conv_path)(self.v_proj(x)))
        q, k = l2norm(q.float()) * self.dh**-0.5, l2norm(k.float())
        beta = torch.sigmoid(self.b_proj(x).float()).transpose(1, 2)
        return q, k, v, beta, self._log_decay(x)

    def _log_decay(self, x: torch.Tensor) -> torch.Tensor | None:
        """Per-head log decay g (B, H, L) in fp32; None: DeltaNet has no decay."""
        return None

    def _output_gate(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Gate on the normalised fp32 output o (B, H, L, dh); DeltaNet has none."""
        return o

    def _out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """o: (B, H, L, dh) -> per-head RMSNorm (fp32) -> output gate -> out_proj."""
        o = self._output_gate(self.o_norm(o.float()), x).to(x.dtype)
        return self.out_proj(o.transpose(1, 2).flatten(2))

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"head_dim": self.dh}

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward_portable")
        return self._out(chunk_delta_rule(q, k, v, beta, g, chunk_size=self.chunk_size), x)

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        # the whole mixer fused on the CPU (arrepro/models/cpu_kernels/deltanet_cpu.py)
        return self.kernel_function(self.cpu_kernel_name)(x, *self.cpu_kernel_arguments())

    def cpu_kernel_arguments(self) -> tuple:
        """The parameters as the fused CPU mixer takes them, then the heads and the two epsilons."""
        return (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight, self.b_proj.weight,
                self.q_conv.conv.weight, self.k_conv.conv.weight, self.v_conv.conv.weight, self.o_norm.weight,
                self.out_proj.weight, self.h, L2_EPS, self.o_norm.eps)

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward")
        dtype = compute_dtype(x)  # the run's precision (chunk_delta_rule runs only in a half one)
        # fla wants (B, L, H, d); the gated op takes (q, k, v, g, beta) with g in fp32
        q, k, v, beta = (t.transpose(1, 2).to(dtype).contiguous() for t in (q, k, v, beta))
        decay = () if g is None else (g.transpose(1, 2).contiguous(),)
        op = self.kernel_function()
        o, _ = op(q, k, v, *decay, beta, scale=1.0, **fla_layout_kwargs(op))
        return self._out(o.transpose(1, 2), x)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward_reference")
        return self._out(delta_rule_reference(q, k, v.float(), beta, g), x)
