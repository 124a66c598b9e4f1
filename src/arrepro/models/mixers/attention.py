"""Multi-head causal softmax attention, optionally with rotary embeddings (on every channel of a
head, or on the first ``rotary_fraction`` of them: GPT-NeoX's ``rotary_pct``) and short
convolutions on the Q, K and/or V paths (the paper's "Attention + Conv", Sec. 7).

Portable path: ``torch.nn.functional.scaled_dot_product_attention``.
Kernel path:   ``flash_attn.flash_attn_func`` on CUDA in a bf16/fp16 run, head dim <= 256
               (``arrepro.models.kernels`` decides and records why).
CPU kernel:    ``cpu_kernels/attention_cpu.py`` (numba) on the CPU without dropout.
Reference:     explicit masked softmax.
Every path takes its queries and keys from ``_qkv``, rotated there (partial rotary included); the
compiled block (``block_cpu``, its block with the MLP in one kernel) turns every channel of a head
and has no dropout, so it declines the others, recorded (``block_call``, ``kernels.KERNELS``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.config.constraints import require
from arrepro.config.lookahead import layer_lookahead
from arrepro.models.kernels import KernelMixer, compute_dtype
from arrepro.models.ops import ShortConv, apply_rotary, rotary_tables
from arrepro.models.registry import register


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(num_heads, int) and num_heads >= 1", "num_heads must be a whole number >= 1"),
    ("d_model % num_heads == 0", "the width must be a multiple of num_heads"),
    ("isinstance(conv, str) and set(conv) <= set('qkv')", "conv must name a subset of 'qkv'"),
    ("isinstance(conv_size, int) and conv_size >= 1", "conv_size must be a whole number >= 1"),
    ("conv_mode in ('causal', 'centred')", "conv_mode must be 'causal' or 'centred'"),
    ("conv_mode == 'causal' or conv_size % 2 == 1", "a centred conv needs an odd conv_size"),
    ("conv_mode == 'causal' or len(conv) > 0", "conv_mode centred needs a conv (conv names no path: nothing to centre)"),
    ("0 <= dropout < 1", "dropout must be in [0, 1)"),
    ("isinstance(rotary_fraction, (int, float)) and not isinstance(rotary_fraction, bool) and 0 < rotary_fraction <= 1",
     "rotary_fraction (the share of each head's channels rotary positions turn) must be a number in (0, 1]"),
    ("rope or rotary_fraction == 1", "rotary_fraction below 1 needs rotary positions (the model's position: rope)"),
    ("not rope or int(d_model // num_heads * rotary_fraction) % 2 == 0",
     "rotary positions turn channel pairs: int(the head width * rotary_fraction) must be even"),
)


@register("attention")
class Attention(KernelMixer):
    supports_rope = True
    kernel_name = "flash_attn_func"
    cpu_kernel_name = "attention_cpu"
    block_cpu_kernel_name = "block_cpu"  # its block with the MLP, compiled whole (backbone.Block; block_kernel)

    def __init__(self, d_model: int, *, max_len: int, num_heads: int = 1, dropout: float = 0.0,
                 rope: bool = False, rotary_fraction: float = 1.0, conv: str = "", conv_size: int = 3,
                 conv_mode: str = "causal"):
        super().__init__()
        require(REQUIRES, locals())
        self.h, self.dh, self.dropout, self.rope, self.max_len = num_heads, d_model // num_heads, dropout, rope, max_len
        # the channels of a head that rotary positions turn, the first ones, counted as GPT-NeoX counts
        # them: int(head_size * rotary_pct) (transformers 4.37.2 models/gpt_neox/modeling_gpt_neox.py:113)
        self.rotary_fraction = rotary_fraction
        self.rotary_dims = int(self.dh * rotary_fraction) if rope else 0
        # causal: position t sees t-k+1..t; centred: t-s..t+s, s = (k-1)/2 future steps (the conv
        # as nn.Conv1d(padding=k//2) computes it, which the paper most likely ran: docs/reference/fidelity.md)
        self.conv_mode = conv_mode
        self.lookahead = layer_lookahead({"conv": conv, "conv_size": conv_size, "conv_mode": conv_mode})
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # a short conv (causal or centred: conv_mode) on the input of each chosen projection (Li et al., 2024)
        self.convs = nn.ModuleDict({p: ShortConv(d_model, conv_size) for p in sorted(set(conv))})

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, conv: str = "", conv_size: int = 3, **_) -> int:
        """Four d x d projections with biases, plus a depthwise conv (weights + bias) per path."""
        return 4 * (d_model * d_model + d_model) + len(set(conv)) * (d_model * conv_size + d_model)

    def _conv(self, name: str, x: torch.Tensor, conv_path: str) -> torch.Tensor:
        """The chosen projection's conv on x (B, L, D). Centred: the causal conv (any of its paths,
        unchanged) of x with s zeros after the sequence, shifted back by s steps: out[t] = the sum
        over x[t-s..t+s], zeros past the end."""
        conv = getattr(self.convs[name], conv_path)
        s = self.lookahead
        if not s:
            return conv(x)
        return conv(F.pad(x, (0, 0, 0, s)))[:, s:].contiguous()

    def _qkv(self, x: torch.Tensor, conv_path: str):
        out = []
        for name, proj in (("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj)):
            inp = self._conv(name, x, conv_path) if name in self.convs else x
            out.append(proj(inp).unflatten(-1, (self.h, self.dh)).transpose(1, 2))  # (B, H, L, dh)
        q, k, v = out
        if self.rotary_dims:  # the first rotary_dims channels of each head turned, the rest as they are
            cos, sin = rotary_tables(x.shape[1], self.rotary_dims, x.device)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return q, k, v

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        return self.out_proj(y.transpose(1, 2).flatten(2))

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"head_dim": self.dh, "dropout": self.dropout if self.training else 0.0}

    def block_kernel(self) -> dict:
        """The arguments of the compiled block (``cpu_kernels/block_cpu.py``) for a block of this mixer."""
        return {"num_heads": self.h, "conv": "".join(self.convs), "lookahead": self.lookahead, "rope": self.rope}

    def block_call(self) -> dict:
        """The facts of this mixer that the compiled block's limits read (``kernels.KERNELS["block_cpu"]``):
        it has no dropout and turns every channel of a head, so it declines the others, recorded.
        The options decide, not the mode: a model's training and evaluation run the same path."""
        return {"dropout": self.dropout, "rotary_fraction": self.rotary_fraction}

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward_portable")
        p = self.dropout if self.training else 0.0
        return self._out(F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True))

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        # the fused causal attention on the CPU (arrepro/models/cpu_kernels/attention_cpu.py); no dropout
        q, k, v = self._qkv(x, "forward")
        return self._out(self.kernel_function(self.cpu_kernel_name)(q, k, v))

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward")
        dtype = compute_dtype(x)  # half: the dispatch runs flash-attn only in a bf16/fp16 run
        q, k, v = (t.transpose(1, 2).to(dtype) for t in (q, k, v))  # flash-attn wants (B, L, H, dh)
        y = self.kernel_function()(q, k, v, dropout_p=self.dropout if self.training else 0.0, causal=True)
        return self._out(y.transpose(1, 2).to(x.dtype))

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward_reference")
        s = (q @ k.transpose(-1, -2)) / self.dh**0.5
        L = x.shape[1]
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return self._out(s.softmax(-1) @ v)
