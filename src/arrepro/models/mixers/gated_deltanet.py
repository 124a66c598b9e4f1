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

``GatedDeltaNet`` subclasses ``deltanet.DeltaNet``: the projections, convolutions, q/k/v/beta,
norm and all three paths are DeltaNet's; this file adds only the decay, the output gate and the
kernel op. Paths (the delta-rule core lives in ``deltanet.py``):
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

from arrepro.models.registry import register
from arrepro.models.mixers.deltanet import DeltaNet


@register("gated_deltanet")
class GatedDeltaNet(DeltaNet):
    """DeltaNet (projections, convolutions, q/k/v/beta, norm, all paths) plus the decay (a_proj,
    A_log, dt_bias), the output gate (g_proj) and fla's gated op; built as DeltaNet is."""
    kernel_name = "chunk_gated_delta_rule"
    cpu_kernel_name = None  # DeltaNet's fused CPU mixer computes no decay and no output gate

    def __init__(self, d_model: int, **kwargs):
        super().__init__(d_model, **kwargs)
        self.reset_special_parameters()

    def _head_projections(self, d_model: int) -> None:
        """a_proj, b_proj, g_proj, A_log, dt_bias, in this order (it fixes the init under a seed and
        the parameter order)."""
        self.a_proj = nn.Linear(d_model, self.h, bias=False)
        super()._head_projections(d_model)
        self.g_proj = nn.Linear(d_model, d_model, bias=False)
        self.A_log = nn.Parameter(torch.empty(self.h))
        self.dt_bias = nn.Parameter(torch.empty(self.h))

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

    def _log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """g = -exp(A_log) softplus(W_a x + dt_bias): (B, H, L), fp32."""
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias.float())
        return g.transpose(1, 2)

    def _output_gate(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm(o) * SiLU(W_g x), per head, fp32."""
        gate = self.g_proj(x).unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        return o * F.silu(gate.float())
