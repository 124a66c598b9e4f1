"""RWKV-4 time mixing (Peng et al., 2023, "RWKV: Reinventing RNNs for the Transformer Era"),
the version Zoology's MQAR sweeps use (``RWKVTimeMixer``); the channel mixing is the backbone's MLP.

Per channel c (all operations are elementwise over channels):

    token shift   xx_t = x_{t-1} (zero at t = 0)
                  x^k_t = mu_k x_t + (1 - mu_k) xx_t   (likewise x^v, x^r with mu_v, mu_r)
    projections   k = W_k x^k,  v = W_v x^v,  r = W_r x^r          (no biases)
    decay, bonus  w = -exp(time_decay) < 0,  u = time_first
    WKV           a_t = e^w a_{t-1} + e^{k_t} v_t,   b_t = e^w b_{t-1} + e^{k_t}
                  wkv_t = (a_{t-1} + e^{u + k_t} v_t) / (b_{t-1} + e^{u + k_t})
    output        out_proj(sigmoid(r_t) * wkv_t)

Unrolled, wkv_t is a per-channel softmax average of the values:
wkv_t = sum_s p_ts v_s with p_ts proportional to exp(w (t-1-s) + k_s) for s < t and to
exp(u + k_t) for s = t. Both the chunked path and the reference subtract a running maximum
exponent, so nothing overflows whatever the sizes of k, u and w.

* ``forward_portable``: chunked. The sequence is cut into N chunks of T steps (T = 4). A query at
  chunk n, offset i sees (1) the keys j <= i of its own chunk with exponents w (i-1-j) + k_j
  (u + k_i on the diagonal), computed for all chunks at once as a (T x T)-per-channel weight
  tensor, and (2) the state (a, b) at the chunk start with exponent w i. The states are kept as
  (A, B, P) with the true value A e^P (P a running maximum exponent, as in the reference) and are
  carried by a loop over chunks that touches only (batch, channel) tensors. One shared maximum
  over (1) and (2) stabilises each query. No L x L tensor; O(B L T C) elementwise work.
* ``forward_reference``: the per-timestep loop of the official RWKV-4 CUDA kernel (aa, bb, pp with
  a running maximum exponent pp).
* No kernel path: Zoology compiles RWKV's own ``wkv_cuda`` extension at import time; there is no
  pip kernel package for RWKV-4, so ``forward`` always uses the portable path.

Initialisation: RWKV-4's "fancy init" as Zoology's ``RWKVTimeMixer`` computes it, from the layer's
index l (the backbone passes it: ``wants_layer_idx``) and Zoology's ``n_layer``, which its configs
leave at the default 12 whatever the model's depth (``N_LAYER``). With r0 = l / (N_LAYER - 1) and
r1 = 1 - l / N_LAYER: time_decay_c = -5 + 8 (c/(C-1))^(0.7 + 1.3 r0),
time_first = log 0.3 + 0.5 * zigzag(c), mu_k = (c/C)^r1, mu_v = (c/C)^r1 + 0.3 r0,
mu_r = (c/C)^(0.5 r1). Layer 0 (r0 = 0, r1 = 1): decay exponent 0.7, mu_k = mu_v = c/C,
mu_r = (c/C)^0.5. The projections keep the backbone's generic init.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.models.registry import register


def _token_shift(x: torch.Tensor) -> torch.Tensor:
    """x_{t-1} with zeros at t = 0, for (B, L, C)."""
    return F.pad(x, (0, 0, 1, -1))


def wkv_chunked(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                chunk: int = 4) -> torch.Tensor:
    """RWKV-4 WKV for w, u: (C,) (w < 0 is the log decay) and k, v: (B, L, C); fp32 math.

    Small chunks are fastest on a CPU: the intra-chunk weights cost O(B L T C) memory traffic,
    while the loop over chunks only touches (B, C) tensors.
    """
    B, L, C = k.shape
    T = min(chunk, L)
    N = math.ceil(L / T)
    pad = N * T - L
    if pad:  # padded steps come after every real step, so they cannot affect real outputs
        k = F.pad(k, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
    k = k.view(B, N, T, C)
    v = v.view(B, N, T, C)
    dev, dt = k.device, k.dtype
    idx = torch.arange(T, device=dev)

    # (1) within a chunk: query i, key j -> exponent w (i-1-j) + k_j (j < i), u + k_i (j = i)
    rel = (idx[:, None] - 1 - idx[None, :]).to(dt)                               # (T, T)
    intra = w * rel[..., None] + k[:, :, None, :, :]                               # (B, N, T, T, C)
    eye = torch.eye(T, dtype=torch.bool, device=dev)[..., None]
    intra = torch.where(eye, (u + k)[:, :, :, None, :], intra)
    intra = intra.masked_fill(torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)[..., None], float("-inf"))

    # (2) each chunk's own contribution to the state at its end, scaled by e^{-q}: a = sum_j
    # e^{w (T-1-j) + k_j - q} v_j, b likewise with 1 for v_j (all chunks at once)
    e = w * (T - 1 - idx).to(dt)[:, None] + k                                     # (B, N, T, C)
    q = e.amax(dim=2).detach()                                                     # (B, N, C)
    pe = torch.exp(e - q[:, :, None, :])
    a, b = (pe * v).sum(2), pe.sum(2)

    # (3) the state at each chunk start, (A, Bs) scaled by e^{-P}: A_n = e^{w T} A_{n-1} + a_{n-1}
    A, Bs = [torch.zeros_like(a[:, 0])], [torch.zeros_like(b[:, 0])]
    P = [torch.full_like(q[:, 0], -1e30)]                                          # "minus infinity"
    for n in range(1, N):
        p_new = torch.maximum(P[-1] + w.detach() * T, q[:, n - 1])
        s_old, s_new = torch.exp(P[-1] + w * T - p_new), torch.exp(q[:, n - 1] - p_new)
        A.append(A[-1] * s_old + a[:, n - 1] * s_new)
        Bs.append(Bs[-1] * s_old + b[:, n - 1] * s_new)
        P.append(p_new)
    A, Bs, P = torch.stack(A, 1), torch.stack(Bs, 1), torch.stack(P, 1)         # (B, N, C)

    # (4) query i of chunk n sees the state with exponent w i + P_n; one stabilising maximum per
    # query over (1) and (4) (the ratio does not depend on it, hence detach)
    ex = w * idx.to(dt)[:, None] + P[:, :, None, :]                                # (B, N, T, C)
    m = torch.maximum(intra.amax(dim=3), ex).detach()
    p_in = torch.exp(intra - m[:, :, :, None, :])
    p_ex = torch.exp(ex - m)
    num = (p_in * v[:, :, None, :, :]).sum(3) + p_ex * A[:, :, None, :]
    den = p_in.sum(3) + p_ex * Bs[:, :, None, :]                                   # >= 1: the max term is e^0
    return (num / den).reshape(B, N * T, C)[:, :L]


def wkv_reference(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The per-timestep RWKV-4 recurrence with a running maximum exponent ``pp``."""
    B, L, C = k.shape
    aa = torch.zeros(B, C, dtype=k.dtype, device=k.device)
    bb = torch.zeros_like(aa)
    pp = torch.full_like(aa, -1e38)
    out = []
    for t in range(L):
        kk, vv = k[:, t], v[:, t]
        ww = u + kk                          # output: (a_{t-1} + e^{u+k} v) / (b_{t-1} + e^{u+k})
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
        ww = w + pp                          # state: a_t = e^w a_{t-1} + e^k v
        p = torch.maximum(ww, kk)
        e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
        aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
    return torch.stack(out, 1)


@register("rwkv")
class RWKV(nn.Module):
    """RWKV-4 time mixing over (B, L, d_model); state size d_model (one scalar pair per channel)."""
    source_output_name = "output"  # Zoology's mixers/rwkv.py: its init does not rescale it (arrepro.models.init)
    chunk_size = 4  # portable path: steps per chunk (see wkv_chunked)
    wants_layer_idx = True  # the init depends on the layer (the backbone passes layer_idx)
    # Zoology's n_layer: RWKVTimeMixer's default (zoology/mixers/rwkv.py:169, cited at 0bb9665),
    # which no Zoology config sets, so its ratios (:179-180) are those of a 12-layer stack at any depth
    N_LAYER = 12

    def __init__(self, d_model: int, *, max_len: int, layer_idx: int = 0):
        super().__init__()
        if not 0 <= layer_idx < self.N_LAYER:
            raise ValueError(f"rwkv: layer_idx {layer_idx} is outside 0..{self.N_LAYER - 1}: the time-mix init "
                             f"(Zoology's, for a {self.N_LAYER}-layer stack) gives a mix of infinity at channel 0 there")
        self.d_model, self.max_len, self.layer_idx = d_model, max_len, layer_idx
        self.time_decay = nn.Parameter(torch.empty(d_model))
        self.time_first = nn.Parameter(torch.empty(d_model))
        self.time_mix_k = nn.Parameter(torch.empty(d_model))
        self.time_mix_v = nn.Parameter(torch.empty(d_model))
        self.time_mix_r = nn.Parameter(torch.empty(d_model))
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.reset_special_parameters()

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, **_) -> int:
        """k, v, r and output projections (d x d, no bias) + decay, bonus and three token-shift mixes."""
        return 4 * d_model * d_model + 5 * d_model

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        C, n = self.d_model, self.N_LAYER
        r0 = self.layer_idx / (n - 1)          # 0 at the first layer, 1 at layer n - 1
        r1 = 1.0 - self.layer_idx / n          # 1 at the first layer, 1/n at layer n - 1
        c = torch.arange(C, dtype=torch.float32)
        self.time_decay.copy_(-5 + 8 * (c / max(C - 1, 1)) ** (0.7 + 1.3 * r0))
        zigzag = ((c + 1) % 3 - 1) * 0.5
        self.time_first.copy_(math.log(0.3) + zigzag)
        self.time_mix_k.copy_((c / C) ** r1)
        self.time_mix_v.copy_((c / C) ** r1 + 0.3 * r0)
        self.time_mix_r.copy_((c / C) ** (0.5 * r1))

    def _rkv(self, x: torch.Tensor):
        xx = _token_shift(x)
        mix = lambda mu: x * mu + xx * (1 - mu)  # noqa: E731
        r = self.receptance(mix(self.time_mix_r))
        k = self.key(mix(self.time_mix_k))
        v = self.value(mix(self.time_mix_v))
        w = -torch.exp(self.time_decay.float())
        return r, k.float(), v.float(), w, self.time_first.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_portable(x)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        r, k, v, w, u = self._rkv(x)
        wkv = wkv_chunked(w, u, k, v, self.chunk_size).to(r.dtype)
        return self.out_proj(torch.sigmoid(r) * wkv)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        r, k, v, w, u = self._rkv(x)
        wkv = wkv_reference(w, u, k, v).to(r.dtype)
        return self.out_proj(torch.sigmoid(r) * wkv)
