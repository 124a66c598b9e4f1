"""Hyena operator (Poli et al., ICML 2023, "Hyena Hierarchy"), as in Zoology's
``zoology/mixers/hyena.py`` (order 2, implicit filters, FFT long convolution).

Math, for order N (Zoology and this project's config use N = 2):

    (g_0, ..., g_{N-1}, v) = split(ShortConv(W_in u))        each d_model wide;
                                                             ShortConv: depthwise causal, kernel short_filter
    for i = 0 .. N-2:   v = h_i * (v . g_i) + bias_i . (v . g_i)    (* causal long conv, . elementwise)
    y = out_proj(v . g_{N-1})

For N = 2 this is Zoology's  v = v.x1;  v = h * v + bias.v;  y = out_proj(v.x2).

The long filters h_i (one per channel, as long as the sequence) are implicit:
    h(t) = MLP(z_t) . exp(-|delta_c| t_norm)            t_norm = t / (max_len - 1) in [0, 1]
    z_t = [t_norm, cos(f_b w_t), -sin(f_b w_t)]_b       w_t = 2 pi t / max_len,
                                                        f = linspace(1e-4, bands - 1, bands),
                                                        bands = (emb_dim - 1) / 2
    MLP = Linear(emb_dim, F) sin Linear(F, F) sin Linear(F, F) sin Linear(F, (N-1) d, no bias)
with F = filter_order, sin(x) = sin(freq . x) one trainable frequency vector (init 1) shared by
all three activations, and decay rates delta_c = linspace(ln(1e-2)/1.5, ln(1e-2)/0.3) over the
channels (a fixed buffer). As in Zoology, the positional features z are a trainable parameter
(Zoology gives it its own tiny learning rate, 1e-5, through an ``_optim`` attribute that its
trainer's AdamW does not read), the bias per channel is drawn N(0, 1), and the filter MLP's
Linear layers are left to the model-wide init (Zoology's ``_init_weights`` reaches every
nn.Linear, the filter's too, with N(0, 0.02) and zero biases; this backbone does the same), so
the long filters start close to zero and the bias path dominates at first.

Paths over the same parameters:
* ``forward_portable`` -- FFT long convolution (``ops.fft_causal_conv``, O(L log L)), as Zoology's
  ``fftconv_ref``.
* ``forward_reference``-- the causal convolution sums y_t = sum_{j<=t} h[j] v[t-j], one t at a time.
* ``forward_cpu_kernel`` -- on CPU tensors up to length 256 (``cpu_kernels.hyena_cpu.MAX_LEN``, the
  kernel's limit, a rule by shape: a direct convolution's L^2 against the FFTs' calls): the operator fused
  (numba, ``arrepro.models.cpu_kernels.hyena_cpu``), the filters still from their MLP in ATen.
  Elsewhere ``forward_fallback``: the FFT convolution, with the short conv's and the linear
  layers' own kernel choices.
No GPU kernel path (Zoology's MQAR runs use the PyTorch FFT convolution).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.kernels import KernelMixer
from arrepro.models.ops import ShortConv, fft_causal_conv
from arrepro.models.registry import register


class Sin(nn.Module):
    """sin(freq . x) with a trainable frequency per feature."""

    def __init__(self, dim: int, w: float = 1.0):
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.freq * x)


def positional_features(max_len: int, emb_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """z (max_len, emb_dim) = [t_norm, cos(f w), -sin(f w)] and t_norm (max_len, 1)."""
    if emb_dim < 3 or emb_dim % 2 == 0:
        raise ValueError(f"hyena: emb_dim must be odd and >= 3 (time, cosines, sines), got {emb_dim}")
    bands = (emb_dim - 1) // 2
    t = torch.linspace(0, 1, max_len)[:, None]
    w = 2 * math.pi * torch.arange(max_len, dtype=torch.float32)[:, None] / max_len
    f = torch.linspace(1e-4, bands - 1, bands)[None]
    return torch.cat([t, torch.cos(f * w), -torch.sin(f * w)], dim=-1), t


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(order, int) and order >= 2", "order must be a whole number >= 2"),
    ("isinstance(filter_order, int) and filter_order >= 1", "filter_order must be a whole number >= 1"),
    ("isinstance(short_filter, int) and short_filter >= 1", "short_filter must be a whole number >= 1"),
    ("isinstance(emb_dim, int) and emb_dim >= 3 and emb_dim % 2 == 1",
     "emb_dim must be odd and >= 3 (time, cosines, sines)"),
)


@register("hyena")
class Hyena(KernelMixer):
    kernel_name = "hyena_cpu"  # no GPU kernel: on CUDA tensors forward_fallback runs
    cpu_kernel_name = "hyena_cpu"

    def __init__(self, d_model: int, *, max_len: int, order: int = 2, filter_order: int = 64,
                 short_filter: int = 3, emb_dim: int = 3):
        super().__init__()
        require(REQUIRES, locals())
        self.d, self.order, self.max_len = d_model, order, max_len
        width = (order + 1) * d_model
        n_filt = (order - 1) * d_model
        self.in_proj = nn.Linear(d_model, width)
        self.short_conv = ShortConv(width, short_filter)
        self.out_proj = nn.Linear(d_model, d_model)
        # implicit long filters
        z, t = positional_features(max_len, emb_dim)
        self.z = nn.Parameter(z)
        self.register_buffer("t", t, persistent=False)
        act = Sin(filter_order)  # one module, so one frequency vector shared by the activations
        self.filter_mlp = nn.Sequential(
            nn.Linear(emb_dim, filter_order), act,
            nn.Linear(filter_order, filter_order), act,
            nn.Linear(filter_order, filter_order), act,
            nn.Linear(filter_order, n_filt, bias=False),
        )
        max_decay, min_decay = math.log(1e-2) / 0.3, math.log(1e-2) / 1.5
        self.register_buffer("deltas", torch.linspace(min_decay, max_decay, n_filt), persistent=False)
        self.filter_bias = nn.Parameter(torch.randn(n_filt))

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, order: int = 2, filter_order: int = 64,
                            short_filter: int = 3, emb_dim: int = 3, **_) -> int:
        """in_proj d -> (N+1) d and its depthwise short conv; out_proj d -> d (all with biases);
        positional features z (max_len x emb_dim); filter MLP (three Linear with bias, a last one
        without) and the shared sine frequencies; one bias per filtered channel."""
        width, n_filt, fo = (order + 1) * d_model, (order - 1) * d_model, filter_order
        proj = width * d_model + width + width * short_filter + width + d_model * d_model + d_model
        mlp = emb_dim * fo + fo + 2 * (fo * fo + fo) + fo * n_filt + fo
        return proj + max_len * emb_dim + mlp + n_filt

    def filters(self, L: int) -> torch.Tensor:
        """The modulated implicit filters, (N-1, d, L)."""
        if L > self.max_len:
            raise ValueError(f"hyena: length {L} exceeds max_len {self.max_len}")
        t = self.t[:L]
        h = self.filter_mlp(self.z[:L]) * torch.exp(-t * self.deltas.abs())  # (L, (N-1) d)
        return h.T.reshape(self.order - 1, self.d, L)

    def _mix(self, x: torch.Tensor, conv_path: str, long_conv) -> torch.Tensor:
        L = x.shape[1]
        u = getattr(self.short_conv, conv_path)(self.in_proj(x)).transpose(1, 2)  # (B, (N+1) d, L)
        *gates, v = u.split(self.d, dim=1)
        h, bias = self.filters(L), self.filter_bias.view(self.order - 1, self.d, 1)
        for i in range(self.order - 1):
            v = v * gates[i]
            v = long_conv(v, h[i]) + bias[i] * v
        return self.out_proj((v * gates[-1]).transpose(1, 2))

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"length": x.shape[1]}

    def forward_fallback(self, x: torch.Tensor) -> torch.Tensor:
        return self._mix(x, "forward", fft_causal_conv)

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        # the operator fused on the CPU (arrepro/models/cpu_kernels/hyena_cpu.py), the filters from ATen
        return self.kernel_function(self.cpu_kernel_name)(x, *self.cpu_kernel_arguments(x.shape[1]))

    def cpu_kernel_arguments(self, L: int) -> tuple:
        """The parameters as the fused CPU operator takes them, with the long filters for length L."""
        return (self.in_proj.weight, self.in_proj.bias, self.short_conv.conv.weight, self.short_conv.conv.bias,
                self.filters(L), self.filter_bias, self.out_proj.weight, self.out_proj.bias)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        return self._mix(x, "forward_portable", fft_causal_conv)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        return self._mix(x, "forward_reference", _direct_causal_conv)


def _direct_causal_conv(v: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """y[..., t] = sum_{j=0}^{t} h[..., j] v[..., t - j], one output step at a time."""
    return torch.stack([(h[..., : t + 1].flip(-1) * v[..., : t + 1]).sum(-1) for t in range(v.shape[-1])], -1)
