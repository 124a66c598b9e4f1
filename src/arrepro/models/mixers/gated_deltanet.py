"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2025, "Gated Delta Networks: Improving Mamba2 with
Delta Rule"), as the layer ``fla.layers.GatedDeltaNet`` of flash-linear-attention with the key and
value head size both d_model / num_heads (expand_v = 1, so it has DeltaNet's state size), short
convolutions, the output gate on, and no biases.

Per head h (d_h = d_model / num_heads), with state S in R^{d_h x d_h}:

    q, k, v   = SiLU(ShortConv(W_q x)), SiLU(ShortConv(W_k x)), SiLU(ShortConv(W_v x))
    q, k      <- q / ||q||_2, k / ||k||_2;   q <- q / sqrt(d_h)
    beta_t    = sigmoid(W_b x_t)
    g_t       = -exp(A_log) * softplus(W_a x_t + dt_bias),   alpha_t = e^{g_t} in (0, 1]   (per head)
    S_t       = alpha_t S_{t-1} - beta_t (alpha_t S_{t-1} k_t - v_t) k_t^T    (decay, then delta update)
    o_t       = S_t q_t
    y         = out_proj(concat_h RMSNorm(o_t) * SiLU(W_g x_t))   (RMSNorm over d_h, shared weight)

Init as fla: A = Uniform(0, 16), A_log = log A; dt = exp(Uniform(log 1e-3, log 1e-1)) clamped at
1e-4 and dt_bias = softplus^{-1}(dt).

Paths (the delta-rule core is shared with DeltaNet and lives in ``deltanet.py``):
* ``forward_portable``: ``deltanet.chunk_delta_rule`` with the log decay g (chunked WY/UT form,
  decay ratios gamma_t / gamma_i inside the chunk, loop over chunks only).
* ``forward_reference``: ``deltanet.delta_rule_reference`` (per-timestep loop) with g.
* ``forward_kernel`` (CUDA, flash-linear-attention installed; checked against 0.6.0):
  ``fla.ops.gated_delta_rule.chunk_gated_delta_rule(q, k, v, g, beta, scale)`` on [B, T, H, d]
  tensors, bf16/fp16 q/k/v, g in fp32 log space. g, beta, the L2 norms and the q scale are
  computed here, so ``scale=1`` and ``use_gate_in_kernel``, ``use_beta_sigmoid_in_kernel`` and
  ``use_qk_l2norm_in_kernel`` stay off.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import ShortConv
from ..registry import register, use_kernels
from .deltanet import chunk_delta_rule, delta_rule_reference, fla_layout_kwargs, l2norm

try:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk_gated_delta_rule
except Exception:  # noqa: BLE001 - any import failure means "no kernel"
    fla_chunk_gated_delta_rule = None


@register("gated_deltanet")
class GatedDeltaNet(nn.Module):
    kernel_package = "flash-linear-attention"

    def __init__(self, d_model: int, *, max_len: int, num_heads: int = 2, conv_size: int = 4,
                 norm_eps: float = 1e-5, chunk_size: int = 64):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"gated_deltanet: d_model {d_model} not divisible by num_heads {num_heads}")
        self.h, self.dh, self.max_len, self.chunk_size = num_heads, d_model // num_heads, max_len, chunk_size
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.a_proj = nn.Linear(d_model, num_heads, bias=False)
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.g_proj = nn.Linear(d_model, d_model, bias=False)
        self.A_log = nn.Parameter(torch.empty(num_heads))
        self.dt_bias = nn.Parameter(torch.empty(num_heads))
        self.q_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.k_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.v_conv = ShortConv(d_model, conv_size, bias=False, activation="silu")
        self.o_norm = nn.RMSNorm(self.dh, eps=norm_eps)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.reset_special_parameters()

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, num_heads: int = 2, conv_size: int = 4, **_) -> int:
        """q, k, v, gate, out projections (d x d) + alpha and beta projections (d x H) + A_log and
        dt_bias (H each) + three depthwise convs (d x conv_size) + shared RMSNorm weight (d / H)."""
        return (5 * d_model * d_model + 2 * d_model * num_heads + 2 * num_heads
                + 3 * d_model * conv_size + d_model // num_heads)

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        self.A_log.copy_(torch.empty(self.h).uniform_(0, 16).log())
        dt_min, dt_max = 1e-3, 1e-1
        dt = torch.exp(torch.rand(self.h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=1e-4)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)

    def _features(self, x: torch.Tensor, conv_path: str):
        """q (scaled), k, v as (B, H, L, dh); beta and the log decay g as (B, H, L), fp32."""
        heads = lambda t: t.unflatten(-1, (self.h, self.dh)).transpose(1, 2)  # noqa: E731
        q = heads(getattr(self.q_conv, conv_path)(self.q_proj(x)))
        k = heads(getattr(self.k_conv, conv_path)(self.k_proj(x)))
        v = heads(getattr(self.v_conv, conv_path)(self.v_proj(x)))
        q, k = l2norm(q.float()) * self.dh**-0.5, l2norm(k.float())
        beta = torch.sigmoid(self.b_proj(x).float()).transpose(1, 2)
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias.float())
        return q, k, v, beta, g.transpose(1, 2)

    def _out(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """o: (B, H, L, dh) -> per-head RMSNorm (fp32) * SiLU(gate) -> out_proj."""
        gate = self.g_proj(x).unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        o = (self.o_norm(o.float()) * F.silu(gate.float())).to(x.dtype)
        return self.out_proj(o.transpose(1, 2).flatten(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fla_chunk_gated_delta_rule is not None and use_kernels(x):
            return self.forward_kernel(x)
        return self.forward_portable(x)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward_portable")
        return self._out(chunk_delta_rule(q, k, v, beta, g, chunk_size=self.chunk_size), x)

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward")
        dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
        q, k, v = (t.transpose(1, 2).to(dtype).contiguous() for t in (q, k, v))  # fla wants (B, L, H, d)
        o, _ = fla_chunk_gated_delta_rule(q, k, v, g.transpose(1, 2).contiguous(),
                                          beta.transpose(1, 2).to(dtype).contiguous(), scale=1.0,
                                          **fla_layout_kwargs(fla_chunk_gated_delta_rule))
        return self._out(o.transpose(1, 2), x)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, beta, g = self._features(x, "forward_reference")
        return self._out(delta_rule_reference(q, k, v.float(), beta, g), x)
