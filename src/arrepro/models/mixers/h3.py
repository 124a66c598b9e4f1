"""H3, "Hungry Hungry Hippos" (Fu et al., ICLR 2023), as in Zoology's ``zoology/mixers/h3``
(H3 with a shift SSM on the keys and an S4D diagonal SSM over the key-value products).

Math. With q, k, v = W_q u, W_k u, W_v u (each d_model wide, with bias):

1. Shift SSM on k, per channel c (state size N = d_state): the state is a shift register,
       s_t = shift(s_{t-1}) + b_c k_t,     (shift(s)[n] = s[n-1], shift(s)[0] = 0)
       k'_t = c_c · s_t + D^shift_c k_t
   i.e. a causal convolution of k with the length-N kernel K^shift[j] = sum_m c[m + j] b[m].
   Zoology initialises b = e_1 (so the kernel is c) and keeps b trainable.
2. Multiplicative interaction per head: channels split into H = d_model / head_dim heads of
   head_dim; for each head the outer product kv_t[i, j] = k'_t[i] v_t[j] (head_dim^2 signals).
3. Diagonal SSM (S4D, complex, N/2 conjugate-pair modes, bilinear discretisation), one SSM per
   head shared by its head_dim^2 signals:
       A = -exp(a_re) + i a_im,  dt = exp(log_dt),  dA = (1 + dt A / 2) / (1 - dt A / 2),
       dB = B dt / (1 - dt A / 2),
       x_t = dA x_{t-1} + dB kv_t,      y_t = 2 Re(C · x_t) + D kv_t
   i.e. a causal convolution with K^diag[l] = 2 Re(sum_n C_n dB_n dA_n^l), plus D kv_t.
   Initialisation S4D-Lin as in Zoology: A = -1/2 + i pi n, B = 1, C ~ complex normal,
   log dt ~ U(log 1e-3, log 1e-1), D ~ N(0, 1), D^shift ~ N(0, 1), c ~ U(+-1/sqrt(N)).
4. Read-out by the queries: o_t[j] = sum_i q_t[i] y_t[i, j] per head, then ``out_proj``.

Zoology computes both SSMs as FFT convolutions of their kernels (``use_fast_fftconv=False``),
which is what ``forward_portable`` does here (O(L log L), ``ops.fft_causal_conv``); the shift
kernel is formed by a cross-correlation of c with b (Zoology does the same by FFT). Zoology's
output channel order is (head_dim, head) where this file uses (head, head_dim): a fixed
permutation in front of ``out_proj``, the same function class. There is no kernel package
(Zoology's optional ``fftconv`` CUDA extension is not used in its MQAR runs).
``forward_reference`` runs both state recurrences one time step at a time.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.config.constraints import require
from arrepro.models.ops import fft_causal_conv
from arrepro.models.registry import register


# The constructor's arguments: what they must satisfy (arrepro.config.constraints: checked before any job
# by arrepro.config.grid, which reads this literal with ast, and by the constructor)
REQUIRES = (
    ("isinstance(head_dim, int) and head_dim >= 1", "head_dim must be a whole number >= 1"),
    ("d_model % head_dim == 0", "the width must be a multiple of head_dim"),
    ("d_state == 'seq_len' or (isinstance(d_state, int) and d_state >= 2 and d_state % 2 == 0)",
     "d_state must be 'seq_len' or an even whole number >= 2 (conjugate pairs of modes)"),
)


@register("h3")
class H3(nn.Module):
    source_output_name = "output_linear"  # Zoology's mixers/h3/h3.py: its init does not rescale it (arrepro.models.init)

    def __init__(self, d_model: int, *, max_len: int, d_state: int | str = 64, head_dim: int = 2,
                 dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        require(REQUIRES, locals())
        # "seq_len": the state as long as the input, as Zoology's MQAR sweeps set it
        # (d_state = input_seq_len, "mathematically equivalent to Hyena")
        d_state = self.resolve_d_state(d_state, max_len)
        self.d, self.n, self.hd, self.nh, self.max_len = d_model, d_state, head_dim, d_model // head_dim, max_len
        self.dt_min, self.dt_max = dt_min, dt_max
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # shift SSM on k: one per channel
        self.shift_B = nn.Parameter(torch.empty(d_model, d_state))
        self.shift_C = nn.Parameter(torch.empty(d_model, d_state))
        self.shift_D = nn.Parameter(torch.empty(d_model))
        # diagonal SSM: one per head, N/2 complex modes, complex numbers stored as (..., 2) reals
        m = d_state // 2
        self.log_dt = nn.Parameter(torch.empty(self.nh))
        self.A_log_neg_real = nn.Parameter(torch.empty(self.nh, m))
        self.A_imag = nn.Parameter(torch.empty(self.nh, m))
        self.ssm_B = nn.Parameter(torch.empty(self.nh, m, 2))
        self.ssm_C = nn.Parameter(torch.empty(self.nh, m, 2))
        self.ssm_D = nn.Parameter(torch.empty(self.nh))
        self.reset_special_parameters()

    @staticmethod
    def resolve_d_state(d_state: int | str, max_len: int) -> int:
        if d_state == "seq_len":  # rounded up to even: the modes come in conjugate pairs (MQAR's L is even)
            return int(max_len) + int(max_len) % 2
        if isinstance(d_state, str):
            raise ValueError(f"h3: d_state must be an int or 'seq_len', got {d_state!r}")
        return int(d_state)

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, d_state: int | str = 64, head_dim: int = 2, **_) -> int:
        """q, k, v, out: d x d + bias; shift SSM: b, c (d x N) and D (d); diagonal SSM per head:
        log dt (1), A real and imaginary parts (N/2 each), B and C (N/2 complex = N reals each), D (1)."""
        d_state = H3.resolve_d_state(d_state, max_len)
        heads = d_model // head_dim
        return 4 * (d_model * d_model + d_model) + d_model * (2 * d_state + 1) + heads * (3 * d_state + 2)

    def reset_special_parameters(self) -> None:
        """S4D-Lin / shift-SSM initialisation (Zoology's SSKernel defaults); not nn.Linear, so the
        backbone's generic init leaves these alone -- this re-draws them all the same."""
        n, m = self.n, self.n // 2
        with torch.no_grad():
            self.shift_B.zero_()
            self.shift_B[:, 0] = 1.0
            self.shift_C.uniform_(-1.0 / math.sqrt(n), 1.0 / math.sqrt(n))  # Conv1d-style init
            self.shift_D.normal_()
            self.log_dt.uniform_(math.log(self.dt_min), math.log(self.dt_max))
            self.A_log_neg_real.fill_(math.log(0.5))
            self.A_imag.copy_(math.pi * torch.arange(m, dtype=torch.float32).expand(self.nh, m))
            self.ssm_B.zero_()
            self.ssm_B[..., 0] = 1.0
            self.ssm_C.normal_(0.0, math.sqrt(0.5))  # complex standard normal
            self.ssm_D.normal_()

    # ---- SSM parameters ------------------------------------------------------------------
    def _shift_kernel(self) -> torch.Tensor:
        """K^shift (d, N): K[j] = sum_m c[m + j] b[m], a per-channel cross-correlation."""
        windows = F.pad(self.shift_C, (0, self.n - 1)).unfold(-1, self.n, 1)  # (d, j, m) = c[m + j]
        return torch.einsum("djm,dm->dj", windows, self.shift_B)

    def _discretised(self):
        """(dA, dB, C) complex (heads, N/2), bilinear discretisation of the diagonal SSM."""
        dt = self.log_dt.exp().unsqueeze(-1)
        A = torch.complex(-self.A_log_neg_real.exp(), self.A_imag)
        dtA = dt * A
        dA = (1 + dtA / 2) / (1 - dtA / 2)
        dB = torch.view_as_complex(self.ssm_B) * dt / (1 - dtA / 2)
        return dA, dB, torch.view_as_complex(self.ssm_C)

    def _diag_kernel(self, L: int) -> torch.Tensor:
        """K^diag (heads, L) = 2 Re(sum_n C_n dB_n dA_n^l), the Vandermonde product."""
        dA, dB, C = self._discretised()
        powers = torch.exp(dA.log().unsqueeze(-1) * torch.arange(L, device=dA.device))  # (heads, N/2, L)
        return 2 * torch.einsum("hn,hnl->hl", C * dB, powers).real

    # ---- paths ---------------------------------------------------------------------------
    def _proj(self, x: torch.Tensor):
        """q, k, v as (B, d, L), in fp32 even under autocast (the SSMs run in fp32, as in Zoology)."""
        return (p(x).transpose(1, 2).float() for p in (self.q_proj, self.k_proj, self.v_proj))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_portable(x)

    def forward_portable(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self._proj(x)
        # the skip terms D u_t are folded into tap 0 of the kernels: one pass over the big tensors
        k = fft_causal_conv(k, _add_to_tap0(self._shift_kernel(), self.shift_D))
        kv = k.view(B, self.nh, self.hd, 1, L) * v.view(B, self.nh, 1, self.hd, L)  # (B, H, i, j, L)
        y = fft_causal_conv(kv, _add_to_tap0(self._diag_kernel(L), self.ssm_D)[:, None, None])
        o = (q.view(B, self.nh, self.hd, 1, L) * y).sum(2)  # (B, H, j, L)
        return self.out_proj(o.reshape(B, self.d, L).transpose(1, 2).to(x.dtype))

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self._proj(x)
        dA, dB, C = self._discretised()  # (H, m)
        dA, dB, C = (t[:, None, None] for t in (dA, dB, C))  # broadcast over (i, j)
        s = k.new_zeros(B, self.d, self.n)  # shift-register state
        h = torch.zeros(B, self.nh, self.hd, self.hd, self.n // 2, dtype=dA.dtype, device=x.device)  # S4D state
        out = []
        for t in range(L):
            k_t = k[..., t]
            s = F.pad(s, (1, -1)) + self.shift_B * k_t.unsqueeze(-1)
            ks_t = (self.shift_C * s).sum(-1) + self.shift_D * k_t
            kv_t = ks_t.view(B, self.nh, self.hd, 1) * v[..., t].view(B, self.nh, 1, self.hd)
            h = dA * h + dB * kv_t.unsqueeze(-1)
            y_t = 2 * (C * h).sum(-1).real + self.ssm_D[:, None, None] * kv_t
            out.append((q[..., t].view(B, self.nh, self.hd, 1) * y_t).sum(2).reshape(B, self.d))
        return self.out_proj(torch.stack(out, 1).to(x.dtype))


def _add_to_tap0(kernel: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """kernel (C, Lk) with d (C) added to its first tap: conv(u, K) + d u == conv(u, K + d delta_0)."""
    return torch.cat([kernel[:, :1] + d.unsqueeze(-1), kernel[:, 1:]], dim=-1)
