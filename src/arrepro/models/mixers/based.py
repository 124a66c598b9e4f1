"""Based: linear attention with a 2nd-order Taylor feature map, paired with a short convolution
(Arora et al., 2024, "Simple linear attention language models balance the recall-throughput
tradeoff"; the version in Zoology's ``zoology/mixers/based.py``).

Math, per head h (feature_dim F, value width Dv = d_model / num_heads):

    q_t = W_q u_t,  k_t = W_k u_t   in R^F        v_t = W_v u_t  in R^Dv
    phi(x) = [1, x / F^(1/4), vec(x x^T) / (sqrt(2) sqrt(F))]   in R^(1 + F + F^2)
    so that phi(q)·phi(k) = 1 + s + s^2 / 2,  s = q·k / sqrt(F)   (Taylor expansion of exp(s))
    S_t = sum_{s<=t} phi(k_s) v_s^T,   z_t = sum_{s<=t} phi(k_s)
    y_t = phi(q_t)^T S_t / (phi(q_t)·z_t + eps)

then the heads are concatenated and mapped by ``out_proj``. The denominator never vanishes:
1 + s + s^2/2 = ((1 + s)^2 + 1) / 2 >= 1/2 for every pair.

What Zoology does, and what is kept here. Zoology's Based layer has bias-free q/k/v/output
projections, q and k of width feature_dim per head, v of width d_model, the ``taylor_exp``
feature map above and eps = 1e-12. Its MQAR sweeps pair it with a short convolution through
``Hybrid([BaseConv(kernel_size=3), Based])``: the layers *alternate* (layer i takes
``configs[i % 2]``), so a 2-layer model is one gated short-conv layer (``u + conv(u) * W u``)
followed by one Based layer. This project's backbone builds every layer from one mixer class,
so the pairing lives inside each mixer instead: a depthwise causal ``ShortConv`` (kernel
``conv_size``, with bias) on the mixer input, feeding all three projections -- the same device
the attention+conv models use (Sec. 7 of the paper). It supplies what Based needs the conv for:
the key at a value's position sees the preceding key token, so one linear-attention layer can
store (key -> value) pairs. Default eps is 1e-6, the constant fla's Based kernel uses.

Paths over the same parameters:
* ``forward_portable`` -- chunked causal linear attention: inside a chunk of ``chunk_size``
  positions the masked quadratic form with the kernel 1 + s + s^2/2 (no feature expansion);
  across chunks the state (S, z) in feature space is carried by an exclusive prefix sum over
  chunks. When L <= chunk_size this is exactly the quadratic masked form.
* ``forward_kernel``   -- ``fla.ops.based.parallel_based(q, k, v, scale, use_norm)``
  (flash-linear-attention 0.6, Triton, inputs [B, T, H, K]): the same quadratic Taylor kernel
  with scale F^-1/2 and its fixed eps 1e-6, on raw q and k (the feature map is implicit).
* ``forward_reference``-- the recurrence above, one time step at a time, in feature space.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.kernels import KernelMixer, compute_dtype, fla_layout_kwargs
from arrepro.models.ops import ShortConv
from arrepro.models.registry import register


def taylor_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = [1, x / F^(1/4), vec(x x^T) / (sqrt(2) sqrt(F))] over the last axis (size F)."""
    F_ = x.shape[-1]
    outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / (math.sqrt(2.0) * math.sqrt(F_))
    return torch.cat([torch.ones_like(x[..., :1]), x / F_**0.25, outer], dim=-1)


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(num_heads, int) and num_heads >= 1", "num_heads must be a whole number >= 1"),
    ("d_model % num_heads == 0", "the width must be a multiple of num_heads"),
    ("isinstance(feature_dim, int) and feature_dim >= 1", "feature_dim must be a whole number >= 1"),
    ("conv_size is None or (isinstance(conv_size, int) and conv_size >= 1)",
     "conv_size must be a whole number >= 1, or null for no convolution"),
)


@register("based")
class Based(KernelMixer):
    source_output_name = "proj_o"  # Zoology's mixers/based.py: its init does not rescale it (arrepro.models.init)
    kernel_name = "parallel_based"
    # portable path: positions per chunk (quadratic inside, feature-space state across). The
    # state is (1 + F + F^2) x Dv per chunk, so for short sequences the plain quadratic form is
    # cheaper (on 2 CPU cores at L=256, F=16 about twice as fast as chunks of 64 or 128);
    # 512 keeps every MQAR length of the paper quadratic, longer inputs go by chunks.
    chunk_size = 512

    def __init__(self, d_model: int, *, max_len: int, feature_dim: int = 16, num_heads: int = 1,
                 conv_size: int | None = 3, eps: float = 1e-6):
        super().__init__()
        require(REQUIRES, locals())
        self.h, self.f, self.dv, self.eps, self.max_len = num_heads, feature_dim, d_model // num_heads, eps, max_len
        self.conv = None if conv_size is None else ShortConv(d_model, conv_size)  # None: the input as it is
        self.q_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.k_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, feature_dim: int = 16, num_heads: int = 1,
                            conv_size: int | None = 3, **_) -> int:
        """q, k: d x (H F); v, out: d x d (all bias-free); depthwise conv: d x conv_size + d bias."""
        conv = 0 if conv_size is None else d_model * conv_size + d_model
        return 2 * d_model * num_heads * feature_dim + 2 * d_model * d_model + conv

    # ---- shared pieces -------------------------------------------------------------------
    def _qkv(self, x: torch.Tensor, conv_path: str):
        u = x if self.conv is None else getattr(self.conv, conv_path)(x)
        B, L, _ = x.shape
        q = self.q_proj(u).view(B, L, self.h, self.f).transpose(1, 2)  # (B, H, L, F)
        k = self.k_proj(u).view(B, L, self.h, self.f).transpose(1, 2)
        v = self.v_proj(u).view(B, L, self.h, self.dv).transpose(1, 2)  # (B, H, L, Dv)
        return q, k, v

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        return self.out_proj(y.transpose(1, 2).flatten(2))

    # ---- paths ---------------------------------------------------------------------------
    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"feature_dim": self.f}

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward_portable")
        return self._out(self._chunked(q, k, v))

    def _chunked(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, H, L, F_ = q.shape
        C = min(self.chunk_size, L)
        N = -(-L // C)
        # a ones column on v makes every product below carry the normaliser along:
        # a @ [v, 1] = [sum_s a_ts v_s, sum_s a_ts]
        v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        if N * C != L:  # zero-pad the end: padded keys only reach padded (discarded) queries
            pad = (0, 0, 0, N * C - L)
            q, k, v = (torch.nn.functional.pad(t, pad) for t in (q, k, v))
        qc, kc, vc = (t.unflatten(2, (N, C)) for t in (q, k, v))  # (B, H, N, C, .)
        # intra-chunk: masked quadratic form, 1 + s + s^2/2 = (1 + (1 + s)^2) / 2
        t1 = (qc / math.sqrt(F_)) @ kc.transpose(-1, -2) + 1.0
        a = torch.tril(torch.addcmul(t1.new_tensor(0.5), t1, t1, value=0.5))
        out = a @ vc  # (B, H, N, C, Dv + 1)
        if N > 1:  # inter-chunk: the state (S, z) of all earlier chunks, in feature space
            kv = taylor_feature_map(kc).transpose(-1, -2) @ vc  # (B, H, N, P, Dv + 1)
            state = kv.cumsum(2) - kv  # exclusive prefix over chunks
            out = out + taylor_feature_map(qc) @ state
        y = out[..., :-1] / (out[..., -1:] + self.eps)
        return y.flatten(2, 3)[:, :, :L]

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward")
        dtype = compute_dtype(x)  # the run's precision: fp32, or the autocast half dtype
        # fla 0.6 takes [B, T, H, K]; the releases with a head_first switch are told so
        q, k, v = (t.transpose(1, 2).to(dtype).contiguous() for t in (q, k, v))
        op = self.kernel_function()
        y = op(q, k, v, scale=self.f**-0.5, use_norm=True, **fla_layout_kwargs(op))  # (B, L, H, Dv)
        return self.out_proj(y.flatten(2).to(x.dtype))

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, "forward_reference")
        pq, pk = taylor_feature_map(q), taylor_feature_map(k)  # (B, H, L, P)
        B, H, L, P = pq.shape
        S = q.new_zeros(B, H, P, self.dv)
        z = q.new_zeros(B, H, P)
        out = []
        for t in range(L):
            S = S + pk[:, :, t, :, None] * v[:, :, t, None, :]
            z = z + pk[:, :, t]
            num = (pq[:, :, t, :, None] * S).sum(-2)
            den = (pq[:, :, t] * z).sum(-1, keepdim=True)
            out.append(num / (den + self.eps))
        return self._out(torch.stack(out, 2))
