"""Building blocks shared by several mixers: short causal convolution, rotary embeddings, MLP."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.models.kernels import KernelMixer


class ShortConv(KernelMixer):
    """Depthwise causal 1-D convolution over time on (B, L, D); kernel path: causal-conv1d; on the
    CPU the fused ``short_conv_cpu``."""
    op_name = "short_conv"
    kernel_name = "causal_conv1d_fn"
    cpu_kernel_name = "short_conv_cpu"

    def __init__(self, dim: int, kernel_size: int = 3, bias: bool = True, activation: str | None = None):
        super().__init__()
        self.kernel_size = kernel_size
        self.activation = activation
        self.conv = nn.Conv1d(dim, dim, kernel_size, groups=dim, padding=kernel_size - 1, bias=bias)

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"width": self.kernel_size}

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        # k shifted multiply-adds on (B, L, D) in tap order, not nn.Conv1d: with oneDNN off (pinned
        # CPU numerics, arrepro.train.numerics) ATen's native depthwise conv and its weight gradient took
        # ~4x the time of the rest of a demo-sized Mamba block; this is elementwise ATen code only
        L, k = x.shape[1], self.kernel_size
        w = self.conv.weight[:, 0].to(x.dtype)  # (D, k); tap k-1 multiplies the current step
        xp = F.pad(x, (0, 0, k - 1, 0))
        y = xp[:, :L] * w[:, 0]
        for j in range(1, k):
            y = y + xp[:, j : j + L] * w[:, j]
        if self.conv.bias is not None:
            y = y + self.conv.bias.to(x.dtype)
        return F.silu(y) if self.activation == "silu" else y

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        # fused on the CPU (arrepro/models/cpu_kernels/short_conv_cpu.py): the portable path's arithmetic
        return self.kernel_function(self.cpu_kernel_name)(x, self.conv.weight[:, 0], self.conv.bias,
                                                          self.activation == "silu")

    def forward_kernel(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight.squeeze(1)
        y = self.kernel_function()(x.transpose(1, 2).contiguous(), w, self.conv.bias, activation=self.activation)
        return y.transpose(1, 2)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight.squeeze(1)  # (D, k); tap k-1 multiplies the current step
        out = []
        for t in range(x.shape[1]):
            acc = self.conv.bias.clone() if self.conv.bias is not None else torch.zeros_like(x[:, 0])
            for j in range(self.kernel_size):
                if t - j >= 0:
                    acc = acc + x[:, t - j] * w[:, self.kernel_size - 1 - j]
            out.append(acc)
        y = torch.stack(out, 1)
        return F.silu(y) if self.activation == "silu" else y


def rotary_tables(length: int, dim: int, device=None, base: float = 10000.0):
    """cos, sin (length, dim / 2) of the angles position t * base^(-2i / dim) turns the rotated
    channels by: ``dim`` the channels rotated (a head's, or GPT-NeoX's share of them, whose
    frequencies span the rotated channels alone: transformers 4.37.2
    models/gpt_neox/modeling_gpt_neox.py:537, ``GPTNeoXRotaryEmbedding`` built on ``rotary_ndims``, :138-139)."""
    inv = 1.0 / base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ang = torch.arange(length, device=device, dtype=torch.float32)[:, None] * inv[None]
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the channel pairs (i, i + h) of x's first 2h channels (x (..., L, dim)) by the
    position angles, h the tables' width (cos, sin (L, h): ``rotary_tables(L, 2h)``); channels
    from 2h on pass unchanged (partial rotary: GPT-NeoX turns the first ``rotary_ndims`` of each
    head with ``rotate_half`` on that slice and concatenates the rest, transformers 4.37.2
    models/gpt_neox/modeling_gpt_neox.py:190-202, 613-617, 644-645)."""
    half = cos.shape[-1]
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rot = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return torch.cat([rot, x[..., 2 * half :]], dim=-1) if 2 * half < x.shape[-1] else rot


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)[:, : dim // 2]
    return table


class Linear(KernelMixer, nn.Linear):
    """``nn.Linear`` (its parameters, names and init) whose CPU path is the fused product of
    ``cpu_kernels/linear_cpu.py`` (kernel ``linear_cpu``: the same bits on every x86-64 CPU, ~3x
    MKL's pinned branch); elsewhere, or where that kernel cannot run, ``F.linear``. The backbone
    makes every ``nn.Linear`` of a model one of these (``use_fused_linears``)."""
    op_name = "linear"
    cpu_kernel_name = "linear_cpu"
    kernel_name = cpu_kernel_name  # no CUDA kernel: on CUDA (a CPU kernel's refusal) F.linear

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel_function(self.cpu_kernel_name)(x, self.weight, self.bias)


class TiedHead(KernelMixer):
    """``x @ weight.T`` for a weight owned elsewhere (the LM head tied to the token embeddings): the
    path ``Linear`` takes, without parameters of its own (the state dict does not change)."""
    op_name = "linear"
    cpu_kernel_name = "linear_cpu"
    kernel_name = cpu_kernel_name

    def forward_portable(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

    def forward_cpu_kernel(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.kernel_function(self.cpu_kernel_name)(x, weight)


def use_fused_linears(module: nn.Module) -> None:
    """Every plain ``nn.Linear`` inside ``module`` becomes a ``Linear`` in place (the same object,
    parameters and state dict; only its forward dispatches): the mixers keep writing nn.Linear."""
    for m in module.modules():
        if type(m) is nn.Linear:
            m.__class__ = Linear


class MLP(KernelMixer):
    """fc1 -> GELU -> out_proj. On the CPU in fp32 the fused ``mlp_cpu`` (one call each way; its
    GELU by Abramowitz and Stegun's erf, as the compiled attention block's); elsewhere its layers
    (each the fused linear layer on the CPU) and ATen's exact GELU."""
    op_name = "mlp"
    kernel_name = "mlp_cpu"  # no CUDA kernel: on CUDA forward_portable runs
    cpu_kernel_name = "mlp_cpu"

    def __init__(self, d_model: int, ratio: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_model, ratio * d_model)
        self.out_proj = nn.Linear(ratio * d_model, d_model)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(F.gelu(self.fc1(x)))

    def forward_cpu_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel_function(self.cpu_kernel_name)(x, self.fc1.weight, self.fc1.bias, self.out_proj.weight,
                                                          self.out_proj.bias)


def fft_causal_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal long convolution along the last axis by FFT, O(L log L):
    ``y[..., t] = sum_{j=0}^{t} k[..., j] * u[..., t - j]``.

    ``u`` is (..., L); ``k`` is (..., Lk) and broadcasts against ``u`` in every axis but the
    last (a per-channel filter such as (C, Lk) against (B, C, L)). Taps of ``k`` beyond L are
    ignored; zero padding to at least L + Lk - 1 points keeps the circular convolution from
    wrapping around. Computed in fp32 at least (cuFFT/pocketfft take no bf16; fp64 stays fp64),
    returned in u's dtype.
    """
    L = u.shape[-1]
    k = k[..., :L]
    n = 1 << (L + k.shape[-1] - 2).bit_length()  # a power of two >= L + Lk - 1
    dtype = torch.promote_types(torch.promote_types(u.dtype, k.dtype), torch.float32)
    u_f = torch.fft.rfft(u.to(dtype), n=n)
    k_f = torch.fft.rfft(k.to(dtype), n=n)
    return torch.fft.irfft(u_f * k_f, n=n)[..., :L].to(u.dtype)
