"""The language model every experiment trains (nanoGPT-sized, one screen).

token embedding (+ positional scheme) -> N x [pre-norm -> sequence mixer -> residual;
pre-norm -> MLP -> residual] -> final norm -> LM head. ``mlp=False`` drops the MLP
(the plain Mamba architecture, whose block already has its own gated expansion); ``mlp="identity"``
keeps its norm and residual with the identity for the MLP, x + LN(x): Zoology's TransformerBlock
with its ``state_mixer`` the identity (zoology/model.py lines 149-159; the replication's models).
``norm="rms"``: the blocks' pre-norms are RMSNorm (weight only, eps 1e-5), as Zoology's MambaBlock
and Mamba2Block have them (zoology/mixers/mamba.py); the final norm stays a LayerNorm (Zoology's
``ln_f``). The embedding dropout is Zoology's TransformerBlock's (its first ``dropout1``): a model of
Mamba's blocks (``init.is_mamba_block``) has none, as neither Zoology's MambaBlock nor mamba-ssm has.
``residual="parallel"`` puts both branches on the block's input, x + mixer(LN1 x) + MLP(LN2 x)
(GPT-NeoX's ``use_parallel_residual``, default True: transformers 4.37.2
models/gpt_neox/configuration_gpt_neox.py:129; modeling_gpt_neox.py:703-707). The LM head is the
token embedding's transpose (``tied_head=True``) or a Linear of its own without bias (GPT-NeoX's
``embed_out``, ``tie_word_embeddings`` default False: configuration_gpt_neox.py:128;
modeling_gpt_neox.py:966, 1048).

The first weights are drawn by the recipe's ``init`` rule (arrepro.models.init: Zoology's, Jelassi's
or this project's earlier one); the optimiser decays every parameter or, with ``decay="matrices"``,
the matrices only (``configure_optimizer``). The sinusoidal table is scaled to
the same RMS as the token embeddings it is added to: at the textbook amplitude 1 it is 50x larger
than them and swamps the tokens (a 1-layer Mamba on the demo's MQAR then ends at 0.012, under
chance; scaled, at 0.240: at chance, where the other schemes reach 0.88-0.93; docs/demo.md, Table 4).
"""
from __future__ import annotations

import functools
import math
from operator import attrgetter

import torch
import torch.nn.functional as F
from torch import nn

from arrepro.config import defaults
from arrepro.models.init import INIT_STD, initialise, is_mamba_block
from arrepro.models.kernels import KernelMixer, overridden
from arrepro.models.ops import MLP, TiedHead, apply_rotary, rotary_tables, sinusoidal_table, use_fused_linears
from arrepro.models.registry import get_mixer

POSITIONS = ("none", "sinusoidal", "learned", "rope")
# a block's parameters in the order the compiled block (cpu_kernels/block_cpu.py) takes them
BLOCK_PARAMS = ("norm1.weight", "norm1.bias", "mixer.q_proj.weight", "mixer.q_proj.bias", "mixer.k_proj.weight",
                "mixer.k_proj.bias", "mixer.v_proj.weight", "mixer.v_proj.bias", "mixer.out_proj.weight",
                "mixer.out_proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
                "mlp.out_proj.weight", "mlp.out_proj.bias")


@functools.lru_cache(maxsize=None)
def _block_params(conv: str):
    """A Block -> its compiled block's parameters: BLOCK_PARAMS, then each convolution's weight and
    bias in the order of the paths ``conv`` names; one C call (forward_cpu_kernel's hot path)."""
    return attrgetter(*BLOCK_PARAMS, *(f"mixer.convs.{path}.conv.{w}" for path in conv for w in ("weight", "bias")))

IGNORE = -100
NORMS = ("layer", "rms")
DECAYS = ("all", "matrices")
RESIDUALS = ("sequential", "parallel")


class Block(KernelMixer):
    """pre-norm -> mixer -> residual; pre-norm -> MLP -> residual (``residual="sequential"``), or
    x + mixer(LN1 x) + MLP(LN2 x) (``"parallel"``, which needs the MLP). A block with an MLP whose
    mixer names a compiled block (``block_cpu_kernel_name``; ``block_kernel()`` its arguments) asks
    for that one fused kernel on the CPU: its limits (``kernels.KERNELS``) read the block's residual
    and the mixer's ``block_call()`` facts, and where they rule it out the record says why and the
    block's modules run (each with its own kernels); elsewhere, and every other block, its modules.
    The mixer's file names the kernel, so only its cells' code digests count that kernel's file."""
    op_name = "block"

    def __init__(self, d_model: int, mixer: nn.Module, mlp: bool | str, mlp_ratio: int, norm: str = "layer",
                 residual: str = defaults.MODEL["residual"]):
        super().__init__()
        if residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {residual!r}")
        if residual == "parallel" and mlp is not True:
            raise ValueError("a parallel residual adds the MLP beside the mixer: it needs mlp")
        self.residual = residual
        make_norm = (lambda: nn.RMSNorm(d_model, eps=1e-5)) if norm == "rms" else (lambda: nn.LayerNorm(d_model))
        self.norm1, self.mixer = make_norm(), mixer
        self.norm2 = make_norm() if mlp else None
        self.mlp = nn.Identity() if mlp == "identity" else MLP(d_model, mlp_ratio) if mlp else None
        name = getattr(mixer, "block_cpu_kernel_name", None)
        # the compiled block is a LayerNorm block with its MLP
        self.fused = mixer.block_kernel() if mlp is True and norm == "layer" and name else None
        if self.fused is not None:
            self.kernel_name = self.cpu_kernel_name = name  # no CUDA kernel: on CUDA the modules

    def kernel_call(self, x: torch.Tensor) -> dict:
        return {"residual": self.residual, **self.mixer.block_call()}

    def forward(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        if self.fused is None or overridden(self.mixer.kernel_name):  # a test's stand-in runs in the mixer
            return self.forward_portable(x, rows)
        return super().forward(x, rows)

    def forward_cpu_kernel(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        params = _block_params(self.fused["conv"])(self)
        return self.kernel_function(self.cpu_kernel_name)(x, params, rows, eps=self.norm1.eps, **self.fused)

    def forward_portable(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``rows`` (a boolean (B, L) mask): return only those positions, (M, D). The mixer
        still sees the whole sequence; the position-wise MLP runs on the kept rows only."""
        y = x + self.mixer(self.norm1(x))
        z = x if self.residual == "parallel" else y  # what the MLP's norm reads
        if rows is not None:
            y, z = y[rows], z[rows]
        return y if self.mlp is None else y + self.mlp(self.norm2(z))


def constructor_kwargs(mixer: str, kwargs: dict | None, position: str) -> dict:
    """A mixer's constructor arguments for a model's position scheme: rotary positions go inside
    a mixer that has queries and keys (``supports_rope``), else on the embeddings (the backbone)."""
    out = dict(kwargs or {})
    if position == "rope" and getattr(get_mixer(mixer), "supports_rope", False):
        out["rope"] = True
    return out


def model_kwargs(model_def: dict) -> dict:
    """The ``LanguageModel`` arguments a config model (or a cell spec's ``model_def``) names, each
    optional one filled in from ``defaults.MODEL``; the caller adds the sizes and the recipe's dropout."""
    m = defaults.model(model_def)
    return {k: m[k] for k in ("mixer", "mixer_kwargs", "mlp", "mlp_ratio", "position", "norm", "residual", "tied_head")}


class LanguageModel(nn.Module):
    def __init__(self, *, vocab_size: int, d_model: int, n_layers: int, max_len: int, mixer: str,
                 mixer_kwargs: dict | None = None, mlp: bool = defaults.MODEL["mlp"],
                 mlp_ratio: int = defaults.MODEL["mlp_ratio"], position: str = defaults.MODEL["position"],
                 norm: str = defaults.MODEL["norm"], residual: str = defaults.MODEL["residual"],
                 tied_head: bool = defaults.MODEL["tied_head"], embed_dropout: float = defaults.RECIPE["embed_dropout"],
                 init: str = defaults.RECIPE["init"]):
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if mlp not in (True, False, "identity"):
            raise ValueError(f"mlp must be true, false or 'identity', got {mlp!r}")
        if not isinstance(tied_head, bool):
            raise ValueError(f"tied_head must be true or false, got {tied_head!r}")
        cls = get_mixer(mixer)
        kwargs = constructor_kwargs(mixer, mixer_kwargs, position)
        self.position = position
        self.rope_on_embeddings = position == "rope" and "rope" not in kwargs
        self.embed = nn.Embedding(vocab_size, d_model)
        if position == "learned":
            self.pos_embed = nn.Embedding(max_len, d_model)
        elif position == "sinusoidal":
            # sin/cos entries have an RMS of 1/sqrt(2): scaled, the table's RMS is INIT_STD
            table = sinusoidal_table(max_len, d_model) * (INIT_STD * math.sqrt(2))
            self.register_buffer("pos_table", table, persistent=False)
        self.layers = nn.ModuleList(
            Block(d_model, cls(d_model, max_len=max_len, **kwargs,
                               **({"layer_idx": i} if getattr(cls, "wants_layer_idx", False) else {})), mlp, mlp_ratio,
                  norm, residual)
            for i in range(n_layers)  # (a mixer that alternates by layer, Zoology's Hybrid, asks for its index)
        )
        self.drop = nn.Dropout(0.0 if is_mamba_block(self.layers[0]) else embed_dropout)
        self.norm_f = nn.LayerNorm(d_model)
        # tied: logits = hidden @ embed.weight.T (no parameters of its own); untied: its own weight
        self.tied_head = tied_head
        self.head = TiedHead() if tied_head else nn.Linear(d_model, vocab_size, bias=False)
        initialise(self, init, n_layers)
        use_fused_linears(self)  # every linear layer: the fused product on the CPU (ops.Linear)

    def hidden(self, inputs: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Final-norm hidden states (B, L, D); with a boolean mask ``rows``, only those
        positions (M, D): the last block's MLP and the final norm then skip the others."""
        L = inputs.shape[1]
        x = self.embed(inputs)
        if self.position == "learned":
            x = x + self.pos_embed.weight[:L]
        elif self.position == "sinusoidal":
            x = x + self.pos_table[:L].to(x.dtype)
        elif self.rope_on_embeddings:
            x = apply_rotary(x, *rotary_tables(L, x.shape[-1], x.device))
        x = self.drop(x)
        for i, block in enumerate(self.layers):
            x = block(x, rows if i == len(self.layers) - 1 else None)
        return self.norm_f(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on hidden states: the token embedding's transpose, or the head's own weight."""
        return self.head(hidden, self.embed.weight) if self.tied_head else self.head(hidden)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits at every position (B, L, V)."""
        return self.logits(self.hidden(inputs))

    def labelled_logits(self, inputs: torch.Tensor, labels: torch.Tensor):
        """Logits only where a label is set: (M, V) and the M targets. The loss and its
        gradients equal those of the full head with ignore_index, at a fraction of the cost."""
        mask = labels != IGNORE
        return self.logits(self.hidden(inputs, mask)), labels[mask]

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor):
        logits, target = self.labelled_logits(inputs, labels)
        return F.cross_entropy(logits.float(), target.long()), logits, target

    def configure_optimizer(self, *, lr: float, weight_decay: float, betas=(0.9, 0.999), fused=None,
                            decay: str = defaults.RECIPE["decay"]):
        """AdamW. ``decay="all"``: weight decay on every parameter, as both sources' trainers
        (Zoology's train.py, ``AdamW(model.parameters(), ...)``; Jelassi et al.'s train_utils.py, the
        same). ``"matrices"``: on parameters of two or more dimensions that are not embeddings only
        (this project's earlier rule, GPT-2/nanoGPT's: embeddings, norms, biases, Mamba's D and dt bias
        undecayed; Mamba's A_log decayed)."""
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
        if decay == "all":
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay, betas=betas, fused=fused)
        decayed, undecayed = [], []
        for n, p in self.named_parameters():
            (decayed if p.dim() >= 2 and "embed" not in n else undecayed).append(p)
        return torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                                  {"params": undecayed, "weight_decay": 0.0}], lr=lr, betas=betas, fused=fused)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
