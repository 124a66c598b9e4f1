"""Mamba: the selective state-space (S6) block of Gu & Dao, "Mamba: Linear-Time Sequence Modeling
with Selective State Spaces" (arXiv:2312.00752, COLM 2024), as in the `Mamba` module of mamba-ssm
1.x/2.x (``mamba_simple.py``): same layers, shapes, biases and initialisation. Two switches give the
paper's ablations (Sec. 7, App. A.1, Figs. 9-10): ``conv=False`` drops the depthwise conv1d
("Mamba w/o conv1d"); ``gate=False`` drops the gate branch z ("w/o gating"; with an MLP after the
mixer this is "S6 + MLP", Fig. 8).

For an input u of shape (B, L, d_model), with E = expand * d_model channels and N = d_state:

    x, z     = in_proj(u)                     (B, L, E) each; z only if gate
    x        = silu(conv1d(x))                depthwise causal conv, kernel d_conv (silu(x) if not conv)
    r, B, C  = x_proj(x)                      (B, L, R), (B, L, N), (B, L, N);  R = dt_rank
    dt       = softplus(dt_proj(r))           (B, L, E), dt_proj has a bias
    A        = -exp(A_log)                    (E, N), S4D-real init A[e, n] = -(n + 1)
    h_t      = exp(dt_t A) * h_{t-1} + (dt_t x_t) B_t^T     h_t: (E, N) per batch element
    y_t      = h_t C_t + D * x_t              (E,)
    out      = out_proj(y * silu(z))          (y alone if not gate)

Three paths over the same parameters:
* ``forward_reference``: the recurrence above, one Python step per time step.
* ``forward_portable``: a chunked (two-level) scan with a hand-written backward, pure PyTorch.
  The decay exp(dt_t[e] A[e, n]) differs for every (e, n), so the "attention-like" chunk form
  (as in Mamba2) would need a (T x T) matrix per (e, n): T times the work of the scan itself.
  Instead, with the sequence cut into nc chunks of T ~ sqrt(L) steps: (1) every chunk's end
  state from a zero start, all nc chunks advancing together (T - 1 batched steps); (2) a scan over
  the nc chunk ends gives each chunk the state it starts from; (3) the scan inside every chunk
  from that start (T - 1 batched steps). Only products of decays in (0, 1] appear, never exp of
  a positive number. The backward pass runs the adjoint recurrence g_t = C_t dy_t + a_{t+1} g_{t+1}
  through the same scheme right to left. About 3 sqrt(L) Python steps instead of L.
* ``forward_kernel``: mamba-ssm's ``selective_scan_fn`` (CUDA) and causal-conv1d, used by
  ``forward`` on CUDA when installed (``arrepro.models.kernels`` decides and records why); the
  block is ours, so the ablations work there too.
* ``forward_cpu_kernel``: the whole mixer fused on the CPU (numba, ``arrepro.models.cpu_kernels.mamba_cpu``,
  around the fused scan of ``selective_scan_cpu``: one pass over the sequence with the states in
  cache), used by ``forward`` on the CPU where it compiles and passes its self-check.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from arrepro.config.constraints import require
from arrepro.models.kernels import KernelMixer
from arrepro.models.ops import ShortConv
from arrepro.models.registry import register


# --------------------------------------------------------------------------- the chunked scan


def _scan_(a: torch.Tensor, u: torch.Tensor, chunk: int) -> torch.Tensor:
    """In place on u (B, L, ...), with decays a in [0, 1] of the same shape and L a multiple of
    ``chunk``: u_t <- u_t + a_t u_{t-1}, i.e. the states h_t = a_t h_{t-1} + u_t (h_{-1} = 0)."""
    nb, L = u.shape[:2]
    T, nc = chunk, L // chunk
    a5, u5 = a.view(nb, nc, T, *a.shape[2:]), u.view(nb, nc, T, *u.shape[2:])
    if nc > 1:
        # (1) every chunk's end state from a zero start; all chunks advance together
        end = u5[:, :, 0].clone()
        for j in range(1, T):
            torch.addcmul(u5[:, :, j], a5[:, :, j], end, out=end)
        # (2) a scan over the chunk ends: the true end states (decay across a chunk: a product)
        decay = a5.prod(2)
        for c in range(1, nc):
            end[:, c].addcmul_(decay[:, c], end[:, c - 1])
        # chunk c >= 1 starts from the end state of chunk c - 1
        u5[:, 1:, 0].addcmul_(a5[:, 1:, 0], end[:, :-1])
    # (3) the scan inside every chunk, from its true start
    for j in range(1, T):
        u5[:, :, j].addcmul_(a5[:, :, j], u5[:, :, j - 1])
    return u


def _scan_reverse_(a: torch.Tensor, u: torch.Tensor, chunk: int) -> torch.Tensor:
    """The adjoint of ``_scan_``, in place: u_t <- u_t + a_{t+1} u_{t+1}, right to left."""
    nb, L = u.shape[:2]
    T, nc = chunk, L // chunk
    a5, u5 = a.view(nb, nc, T, *a.shape[2:]), u.view(nb, nc, T, *u.shape[2:])
    if nc > 1:
        # (1) every chunk's value at its first step from a zero start on its right
        first = u5[:, :, T - 1].clone()
        for j in range(T - 2, -1, -1):
            torch.addcmul(u5[:, :, j], a5[:, :, j + 1], first, out=first)
        # (2) a scan over chunks, right to left: decay from chunk c + 1's first step to chunk c's
        decay = a5[:, :, 1:].prod(2)
        decay[:, :-1].mul_(a5[:, 1:, 0])
        for c in range(nc - 2, -1, -1):
            first[:, c].addcmul_(decay[:, c], first[:, c + 1])
        # chunk c < nc - 1 receives the first-step value of chunk c + 1
        u5[:, :-1, T - 1].addcmul_(a5[:, 1:, 0], first[:, 1:])
    # (3) the scan inside every chunk, from its true end
    for j in range(T - 2, -1, -1):
        u5[:, :, j].addcmul_(a5[:, :, j + 1], u5[:, :, j + 1])
    return u


class _SelectiveScan(torch.autograd.Function):
    """y[b,t,e] = sum_n C[b,t,n] h[b,t,e,n],  h_t = exp(dt_t A) * h_{t-1} + (dt_t x_t) B_t  (fp32)."""

    @staticmethod
    def forward(ctx, dt, A, x, Bm, Cm, chunk):
        a = (dt[..., None] * A).exp_()  # (B, L, E, N) decays in (0, 1]
        h = (dt * x)[..., None] * Bm[:, :, None, :]  # inputs, scanned in place into the states
        _scan_(a, h, chunk)
        ctx.save_for_backward(dt, A, x, Bm, Cm, a, h)
        ctx.chunk = chunk
        return torch.einsum("bten,btn->bte", h, Cm)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        dt, A, x, Bm, Cm, a, h = ctx.saved_tensors
        gy = gy.contiguous()
        dC = torch.einsum("bte,bten->btn", gy, h)
        g = gy[..., None] * Cm[:, :, None, :]  # dL/dh_t from y_t alone ...
        _scan_reverse_(a, g, ctx.chunk)  # ... plus what flows back from h_{t+1}
        dtx = dt * x
        d_dtx = torch.einsum("bten,btn->bte", g, Bm)  # through the input (dt_t x_t) B_t
        dB = torch.einsum("bten,bte->btn", g, dtx)
        g.mul_(a)  # through the decay: d(dt_t A) = g_t * a_t * h_{t-1}
        g[:, 1:].mul_(h[:, :-1])
        g[:, 0].zero_()
        dA = torch.einsum("bten,bte->en", g, dt)
        d_dt = g.mul_(A).sum(-1).addcmul_(d_dtx, x)  # (faster than a batched-over-e einsum)
        return d_dt, dA, d_dtx * dt, dB, dC, None


def selective_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
                   chunk: int | None = None) -> torch.Tensor:
    """The S6 scan without the D skip: x, dt (B, L, E); A (E, N); Bm, Cm (B, L, N) -> y (B, L, E).
    Computed in fp32 at least; the sequence is padded at the end to a multiple of the chunk (causal, so
    the padding changes nothing before it)."""
    L = x.shape[1]
    chunk = chunk or 1 << max(0, round(math.log2(max(L, 1)) / 2))  # ~sqrt(L): O(sqrt L) Python steps
    pad = (-L) % chunk
    dtype = torch.promote_types(x.dtype, torch.float32)
    args = [t.to(dtype) for t in (dt, A, x, Bm, Cm)]
    if pad:
        args = [F.pad(t, (0, 0, 0, pad)) if t.dim() == 3 else t for t in args]
    with torch.autocast(x.device.type, enabled=False):  # fp32 inside, so gradients match outputs in dtype
        y = _SelectiveScan.apply(*args, chunk)
    return y[:, :L].to(x.dtype)


# --------------------------------------------------------------------------- the block


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(d_state, int) and d_state >= 1", "d_state must be a whole number >= 1"),
    ("isinstance(d_conv, int) and d_conv >= 1", "d_conv must be a whole number >= 1"),
    ("expand > 0 and int(expand * d_model) >= 1", "expand must be > 0"),
    ("dt_rank == 'auto' or (isinstance(dt_rank, int) and dt_rank >= 1)",
     "dt_rank must be 'auto' or a whole number >= 1"),
)


@register("mamba")
class Mamba(KernelMixer):
    source_block = "mamba"  # Zoology builds it into its MambaBlock, mamba-ssm into its Block (arrepro.models.init)
    kernel_name = "selective_scan_fn"
    cpu_kernel_name = "mamba_cpu"
    chunk_size: int | None = None  # portable scan: steps per chunk; None: about sqrt(L)

    def __init__(self, d_model: int, *, max_len: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                 dt_rank: int | str = "auto", conv: bool = True, gate: bool = True,
                 dt_min: float = 1e-3, dt_max: float = 0.1, dt_init_floor: float = 1e-4):
        super().__init__()
        require(REQUIRES, locals())
        self.d_inner = E = int(expand * d_model)
        self.d_state, self.gate = d_state, gate
        self.dt_rank = R = math.ceil(d_model / 16) if dt_rank == "auto" else int(dt_rank)
        self.dt_min, self.dt_max, self.dt_init_floor = dt_min, dt_max, dt_init_floor
        self.in_proj = nn.Linear(d_model, 2 * E if gate else E, bias=False)
        self.conv1d = ShortConv(E, d_conv, bias=True, activation="silu") if conv else None
        self.x_proj = nn.Linear(E, R + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        self.A_log = nn.Parameter(torch.empty(E, d_state))
        self.D = nn.Parameter(torch.empty(E))
        self.out_proj = nn.Linear(E, d_model, bias=False)
        self.reset_special_parameters()

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                            dt_rank: int | str = "auto", conv: bool = True, gate: bool = True, **_) -> int:
        E, N = int(expand * d_model), d_state
        R = math.ceil(d_model / 16) if dt_rank == "auto" else int(dt_rank)
        return (d_model * E * (2 if gate else 1)  # in_proj (no bias)
                + (E * d_conv + E if conv else 0)  # depthwise conv1d with bias
                + E * (R + 2 * N)  # x_proj (no bias)
                + R * E + E  # dt_proj with bias
                + E * N + E  # A_log, D
                + E * d_model)  # out_proj (no bias)

    def reset_special_parameters(self) -> None:
        """mamba-ssm's init, run after the backbone's generic one: dt_proj weight U(+-R^-1/2);
        dt_proj bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max]; A = -(1..N) (S4D-real); D = 1."""
        E, N, R = self.d_inner, self.d_state, self.dt_rank
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -R**-0.5, R**-0.5)
            dt = torch.exp(torch.rand(E) * (math.log(self.dt_max) - math.log(self.dt_min)) + math.log(self.dt_min))
            dt = dt.clamp(min=self.dt_init_floor)
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
            self.A_log.copy_(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).expand(E, N))
            self.D.fill_(1.0)

    # shared by the paths: projections and conv (conv_path picks the conv's own path)
    def _ssm_inputs(self, u: torch.Tensor, conv_path: str):
        xz = self.in_proj(u)
        x, z = xz.chunk(2, dim=-1) if self.gate else (xz, None)
        x = getattr(self.conv1d, conv_path)(x) if self.conv1d is not None else F.silu(x)
        r, Bm, Cm = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return x, z, r, Bm, Cm

    def _output(self, y: torch.Tensor, z: torch.Tensor | None) -> torch.Tensor:
        return self.out_proj(y * F.silu(z) if z is not None else y)

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"d_state": self.d_state}

    def forward_portable(self, u: torch.Tensor, scan=selective_scan) -> torch.Tensor:
        x, z, r, Bm, Cm = self._ssm_inputs(u, "forward_portable")
        dt = F.softplus(self.dt_proj(r))
        A = -torch.exp(self.A_log)
        y = scan(x, dt, A, Bm, Cm, self.chunk_size) + x * self.D
        return self._output(y, z)

    def forward_cpu_kernel(self, u: torch.Tensor) -> torch.Tensor:
        # the whole mixer fused on the CPU (arrepro/models/cpu_kernels/mamba_cpu.py)
        return self.kernel_function(self.cpu_kernel_name)(u, *self.cpu_kernel_arguments())

    def cpu_kernel_arguments(self) -> tuple:
        """The parameters as the fused CPU mixer takes them (the conv's weight (E, 1, k), or None)."""
        conv = self.conv1d.conv if self.conv1d is not None else None
        return (self.in_proj.weight, conv.weight if conv is not None else None,
                conv.bias if conv is not None else None, self.x_proj.weight, self.dt_proj.weight, self.dt_proj.bias,
                self.A_log, self.D, self.out_proj.weight)

    def forward_kernel(self, u: torch.Tensor) -> torch.Tensor:
        # conv path "forward": ShortConv runs causal-conv1d on CUDA when that is installed
        x, z, r, Bm, Cm = self._ssm_inputs(u, "forward")
        dt = r @ self.dt_proj.weight.t().to(r.dtype)  # the bias goes in as delta_bias (fp32)
        dtype = x.dtype  # the kernel wants u, delta, B, C, z in one dtype, laid out (B, channels, L)
        ch = lambda t: t.transpose(1, 2).to(dtype).contiguous()  # noqa: E731
        y = self.kernel_function()(ch(x), ch(dt), -torch.exp(self.A_log.float()), ch(Bm), ch(Cm),
                              D=self.D.float(), z=ch(z) if z is not None else None,
                              delta_bias=self.dt_proj.bias.float(), delta_softplus=True)
        return self.out_proj(y.transpose(1, 2))  # the kernel already applied D and y * silu(z)

    def forward_reference(self, u: torch.Tensor) -> torch.Tensor:
        x, z, r, Bm, Cm = self._ssm_inputs(u, "forward_reference")
        dt = F.softplus(self.dt_proj(r))
        A = -torch.exp(self.A_log)
        h = x.new_zeros(x.shape[0], self.d_inner, self.d_state)
        ys = []
        for t in range(x.shape[1]):
            dA = torch.exp(dt[:, t, :, None] * A)  # (B, E, N) zero-order-hold decay
            dBx = dt[:, t, :, None] * Bm[:, t, None, :] * x[:, t, :, None]  # (B, E, N)
            h = dA * h + dBx
            ys.append((h * Cm[:, t, None, :]).sum(-1) + self.D * x[:, t])
        return self._output(torch.stack(ys, dim=1), z)
