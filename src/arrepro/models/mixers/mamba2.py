"""Mamba2: the SSD (state-space duality) block of Dao & Gu, "Transformers are SSMs: Generalized
Models and Efficient Algorithms Through Structured State Space Duality" (ICML 2024,
arXiv:2405.21060), as in the `Mamba2` module of mamba-ssm 2.x with ngroups = 1: same layers,
shapes, biases and initialisation.

For an input u of shape (B, L, d_model), with E = expand * d_model channels in H = E / P heads of
P = headdim channels, and N = d_state:

    z, xBC, dt = in_proj(u)                   (B, L, E), (B, L, E + 2N), (B, L, H); no bias
    x, B, C    = silu(conv1d(xBC))            depthwise causal conv, kernel d_conv, one for all three
    dt         = softplus(dt + dt_bias)       (B, L, H)
    A          = -exp(A_log)                  one scalar per head, A_log init log U[1, 16]
    h_t        = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T      h_t: (H, P, N) per batch element
    y_t        = h_t C_t + D x_t              (H, P); D one scalar per head
    out        = out_proj(rmsnorm(y * silu(z)) * w)        the gated RMSNorm, norm after the gate

Because the decay is one scalar per head, the recurrence is a masked "attention"
y_t = sum_{s<=t} (C_t . B_s) exp(sum_{r=s+1..t} dt_r A) dt_s x_s, evaluated chunk by chunk:
* ``forward_portable``: the chunked SSD algorithm ("minimal discrete" block decomposition), with
  heads folded into the batch. Cut L into chunks of T steps and let cum_t be the running sum of
  dt A from the chunk's start (<= 0, decreasing). Inside a chunk, the quadratic form above with
  batched matmuls, its decays exp(cum_t - cum_s) for s <= t (masked to -inf above the diagonal
  before the exp, so no exp of a positive number); each chunk's end state
  sum_s exp(cum_end - cum_s) dt_s x_s B_s^T; a Python loop over chunks carries the state across
  them; each step then adds exp(cum_t) C_t . (the state its chunk started from).
* ``forward_reference``: the recurrence, one Python step per time step.
* ``forward_cpu_kernel``: the whole mixer fused on the CPU (numba, ``arrepro.models.cpu_kernels.mamba2_cpu``:
  the same chunks, each a chain of fused multiply-adds in a fixed order), used by ``forward`` on CPU
  tensors.
* ``forward_kernel``: mamba-ssm's Triton ``mamba_chunk_scan_combined`` and causal-conv1d, used by
  ``forward`` on CUDA when installed (the gated RMSNorm stays in PyTorch).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.kernels import KernelMixer
from arrepro.models.ops import ShortConv
from arrepro.models.registry import register


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
                chunk: int = 64) -> torch.Tensor:
    """The SSD scan without the D skip: x (B, L, H, P), dt (B, L, H) after softplus, A (H,) < 0,
    Bm, Cm (B, L, N) shared by all heads -> y (B, L, H, P). The sequence is padded at the end to
    a multiple of the chunk (causal, so the padding changes nothing before it)."""
    nb, L, H, P = x.shape
    N = Bm.shape[-1]
    T = min(chunk, L)
    pad = (-L) % T
    if pad:
        x, dt, Bm, Cm = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, Bm, Cm))
    nc = (L + pad) // T
    # heads go to the batch dimensions: tensors are (B, H, nc, T, ...) or (B, 1, nc, T, N)
    xdt = (x * dt[..., None]).view(nb, nc, T, H, P).permute(0, 3, 1, 2, 4)  # dt_s x_s
    Bc, Cc = Bm.reshape(nb, 1, nc, T, N), Cm.reshape(nb, 1, nc, T, N)
    cum = (dt * A).view(nb, nc, T, H).permute(0, 3, 1, 2).cumsum(-1)  # log decay, chunk start -> t

    # 1. within each chunk: y_t = sum_{s<=t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # (B,H,nc,T,T)
    y = ((Cc @ Bc.transpose(-1, -2)) * decay) @ xdt  # (B, H, nc, T, P)

    # 2. each chunk's end state from a zero start: sum_s exp(cum_end - cum_s) dt_s x_s B_s^T
    to_end = (cum[..., -1:] - cum).exp()  # (B, H, nc, T)
    chunk_states = (xdt * to_end[..., None]).transpose(-1, -2) @ Bc  # (B, H, nc, P, N)

    # 3. carry the state across chunks (a loop over chunks): the state entering chunk c
    state, incoming = torch.zeros_like(chunk_states[:, :, 0]), []
    for decay_c, new_c in zip(cum[..., -1].exp().unbind(2), chunk_states.unbind(2)):
        incoming.append(state)
        state = decay_c[..., None, None] * state + new_c
    incoming = torch.stack(incoming, dim=2)  # (B, H, nc, P, N)

    # 4. the entering state's contribution: y_t += exp(cum_t) C_t . state_in
    y = y + (Cc @ incoming.transpose(-1, -2)) * cum.exp()[..., None]
    return y.permute(0, 2, 3, 1, 4).reshape(nb, nc * T, H, P)[:, :L]


class GatedRMSNorm(nn.Module):
    """rmsnorm(y * silu(z)) * weight over the last dimension (mamba-ssm's RMSNormGated with
    norm_before_gate=False and one group)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = y * F.silu(z)
        wide = y.to(torch.promote_types(y.dtype, torch.float32))  # half precision up to fp32; fp64 stays
        return y * torch.rsqrt(wide.square().mean(-1, keepdim=True) + self.eps).to(y.dtype) * self.weight


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(d_state, int) and d_state >= 1", "d_state must be a whole number >= 1"),
    ("isinstance(d_conv, int) and d_conv >= 1", "d_conv must be a whole number >= 1"),
    ("isinstance(headdim, int) and headdim >= 1", "headdim must be a whole number >= 1"),
    ("isinstance(chunk_size, int) and chunk_size >= 1", "chunk_size must be a whole number >= 1"),
    ("expand > 0 and int(expand * d_model) % headdim == 0", "expand x width (d_inner) must be a multiple of headdim"),
)


@register("mamba2")
class Mamba2(KernelMixer):
    source_block = "mamba"  # Zoology builds it into its Mamba2Block, mamba-ssm into its Block (arrepro.models.init)
    kernel_name = "mamba_chunk_scan_combined"
    cpu_kernel_name = "mamba2_cpu"

    def __init__(self, d_model: int, *, max_len: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                 headdim: int = 16, chunk_size: int = 64, A_init_range: tuple = (1.0, 16.0),
                 dt_min: float = 1e-3, dt_max: float = 0.1, dt_init_floor: float = 1e-4):
        super().__init__()
        require(REQUIRES, locals())
        self.d_inner = E = int(expand * d_model)
        self.d_state, self.headdim, self.nheads, self.chunk_size = d_state, headdim, E // headdim, chunk_size
        self.A_init_range, self.dt_min, self.dt_max, self.dt_init_floor = A_init_range, dt_min, dt_max, dt_init_floor
        H, N = self.nheads, d_state
        self.in_proj = nn.Linear(d_model, 2 * E + 2 * N + H, bias=False)  # [z, x, B, C, dt]
        self.conv1d = ShortConv(E + 2 * N, d_conv, bias=True, activation="silu")
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.A_log = nn.Parameter(torch.empty(H))
        self.D = nn.Parameter(torch.empty(H))
        self.norm = GatedRMSNorm(E)
        self.out_proj = nn.Linear(E, d_model, bias=False)
        self.reset_special_parameters()

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                            headdim: int = 16, **_) -> int:
        E, N = int(expand * d_model), d_state
        H = E // headdim
        return (d_model * (2 * E + 2 * N + H)  # in_proj (no bias)
                + (E + 2 * N) * (d_conv + 1)  # depthwise conv1d with bias over x, B, C
                + 3 * H  # dt_bias, A_log, D
                + E  # gated RMSNorm weight
                + E * d_model)  # out_proj (no bias)

    def reset_special_parameters(self) -> None:
        """mamba-ssm's init: dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max];
        A = -U[A_init_range] per head; D = 1; norm weight = 1."""
        H = self.nheads
        with torch.no_grad():
            dt = torch.exp(torch.rand(H) * (math.log(self.dt_max) - math.log(self.dt_min)) + math.log(self.dt_min))
            dt = dt.clamp(min=self.dt_init_floor)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
            self.A_log.copy_(torch.empty(H).uniform_(*self.A_init_range).log())
            self.D.fill_(1.0)
            self.norm.weight.fill_(1.0)

    def _project(self, u: torch.Tensor, conv_path: str):
        E, N, H = self.d_inner, self.d_state, self.nheads
        z, xBC, dt = self.in_proj(u).split([E, E + 2 * N, H], dim=-1)
        x, Bm, Cm = getattr(self.conv1d, conv_path)(xBC).split([E, N, N], dim=-1)
        return z, x.unflatten(-1, (H, self.headdim)), Bm, Cm, dt

    def _output(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.norm(y.flatten(-2), z))

    def forward_portable(self, u: torch.Tensor) -> torch.Tensor:
        z, x, Bm, Cm, dt = self._project(u, "forward_portable")
        dt = F.softplus(dt + self.dt_bias)
        y = ssd_chunked(x, dt, -torch.exp(self.A_log), Bm, Cm, self.chunk_size)
        return self._output(y + x * self.D[:, None], z)

    def forward_cpu_kernel(self, u: torch.Tensor) -> torch.Tensor:
        # the whole mixer fused on the CPU (arrepro/models/cpu_kernels/mamba2_cpu.py)
        return self.kernel_function(self.cpu_kernel_name)(u, *self.cpu_kernel_arguments())

    def cpu_kernel_arguments(self) -> tuple:
        """The parameters as the fused CPU mixer takes them, then headdim, d_state, the chunk and the
        norm's epsilon."""
        return (self.in_proj.weight, self.conv1d.conv.weight, self.conv1d.conv.bias, self.dt_bias, self.A_log, self.D,
                self.norm.weight, self.out_proj.weight, self.headdim, self.d_state, self.chunk_size, self.norm.eps)

    def forward_kernel(self, u: torch.Tensor) -> torch.Tensor:
        # conv path "forward": ShortConv runs causal-conv1d on CUDA when that is installed
        z, x, Bm, Cm, dt = self._project(u, "forward")
        y = self.kernel_function()(x, dt, -torch.exp(self.A_log.float()), Bm[:, :, None], Cm[:, :, None],
                                      chunk_size=256, D=self.D.float(), z=None,
                                      dt_bias=self.dt_bias.float(), dt_softplus=True)
        return self._output(y, z)

    def forward_reference(self, u: torch.Tensor) -> torch.Tensor:
        z, x, Bm, Cm, dt = self._project(u, "forward_reference")
        dt = F.softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log)
        h = x.new_zeros(x.shape[0], self.nheads, self.headdim, self.d_state)
        ys = []
        for t in range(x.shape[1]):
            dA = torch.exp(dt[:, t] * A)[:, :, None, None]  # (B, H, 1, 1)
            dBx = (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, None, None, :]  # (B, H, P, N)
            h = dA * h + dBx
            ys.append(torch.einsum("bhpn,bn->bhp", h, Cm[:, t]) + self.D[:, None] * x[:, t])
        return self._output(torch.stack(ys, dim=1), z)
