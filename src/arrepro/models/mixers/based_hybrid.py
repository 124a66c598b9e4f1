"""Zoology's "Based" of its MQAR sweeps (the paper's Fig. 2/11 "replication" curve): a hybrid whose
layers alternate between a gated short convolution and Based linear attention.

Facts from Zoology (HazyResearch/zoology, ``mixers/hybrid.py``, ``mixers/base_conv.py`` and the
ICLR'24 Figure-2 config): ``Hybrid(configs=[BaseConv, Based])`` gives layer ``i`` the mixer
``configs[i % 2]``, so a 2-layer model is one BaseConv layer followed by one Based layer.

* BaseConv (even layers), kernel ``conv_size`` (3): ``y = conv(u) * (W u + b) + u`` with a
  depthwise causal conv (with bias) and a d x d linear projection (with bias); the ``+ u`` is
  BaseConv's own, inside the block's residual.
* Based (odd layers): this project's ``based`` mixer (Taylor feature map, feature_dim 8, one head,
  bias-free projections) with no convolution of its own: in Zoology the convolution is the other
  layer's.

The backbone passes ``layer_idx`` to mixers that declare ``wants_layer_idx``.
"""
from __future__ import annotations

import torch
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.ops import ShortConv
from arrepro.models.registry import register
from arrepro.models.mixers.based import Based


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(num_heads, int) and num_heads >= 1", "num_heads must be a whole number >= 1"),
    ("d_model % num_heads == 0", "the width must be a multiple of num_heads"),
    ("isinstance(feature_dim, int) and feature_dim >= 1", "feature_dim must be a whole number >= 1"),
    ("isinstance(conv_size, int) and conv_size >= 1", "conv_size must be a whole number >= 1"),
)


@register("based_hybrid")
class BasedHybrid(nn.Module):
    wants_layer_idx = True

    def __init__(self, d_model: int, *, max_len: int, layer_idx: int = 0, feature_dim: int = 8, num_heads: int = 1,
                 conv_size: int = 3):
        super().__init__()
        require(REQUIRES, locals())
        self.kind = "base_conv" if layer_idx % 2 == 0 else "based"
        self.max_len = max_len
        if self.kind == "base_conv":
            self.conv = ShortConv(d_model, conv_size)
            self.projection = nn.Linear(d_model, d_model)
        else:
            self.based = Based(d_model, max_len=max_len, feature_dim=feature_dim, num_heads=num_heads, conv_size=None)

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, layer_idx: int = 0, feature_dim: int = 8,
                            num_heads: int = 1, conv_size: int = 3, **_) -> int:
        """BaseConv: depthwise conv (d x k + d) and a d x d projection with bias; Based: its own
        count without its convolution."""
        if layer_idx % 2 == 0:
            return d_model * conv_size + d_model + d_model * d_model + d_model
        return Based.expected_parameters(d_model, max_len=max_len, feature_dim=feature_dim, num_heads=num_heads,
                                         conv_size=None)

    def _base_conv(self, x: torch.Tensor, path: str) -> torch.Tensor:
        return getattr(self.conv, path)(x) * self.projection(x) + x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._base_conv(x, "forward") if self.kind == "base_conv" else self.based(x)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        return self._base_conv(x, "forward_portable") if self.kind == "base_conv" else self.based.forward_portable(x)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        return self._base_conv(x, "forward_reference") if self.kind == "base_conv" else self.based.forward_reference(x)
