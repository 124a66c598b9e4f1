"""A model's first weights, drawn as the code each task's source draws them: the recipe's ``init``.

``zoology``  Zoology's ``_init_weights`` (HazyResearch/zoology, zoology/model.py at 0bb9665, lines
             81-124), the MQAR code the paper built on. In a block of Mamba's kind (below) every
             nn.Linear keeps PyTorch's default weights (kaiming-uniform, a = sqrt 5), its bias is
             zeroed, and the residual outputs (the mixer's ``out_proj``, an MLP's second layer) are
             redrawn kaiming-uniform and divided by sqrt(k n_layers): mamba-ssm's rule, k = 1
             without an MLP and 2 with one (mamba_ssm/models/mixer_seq_simple.py, n_residuals_per_layer).
             In every other block every nn.Linear is N(0, 0.02), its bias zero, and a residual output
             N(0, 0.02 / sqrt(2 n_layers)) where Zoology's name test finds it: it matches the
             substrings ``out_proj.weight`` and ``fc2.weight``, so a mixer whose Zoology file names its
             output otherwise (``source_output_name``: H3's ``output_linear``, Based's ``proj_o``,
             RWKV's ``output``, DeltaNet's ``o_proj``) keeps N(0, 0.02) there.
``jelassi``  Jelassi et al.'s copy models (sjelassi/transformers_ssm_copy): GPT-NeoX's ``_init_weights``
             (transformers 4.37.2, models/gpt_neox/modeling_gpt_neox.py lines 87-99) for attention
             blocks (every nn.Linear and embedding N(0, 0.02), biases zero, no residual rescaling),
             mamba-ssm's rule above for Mamba's (MambaLMHeadModel, mamba-ssm 1.0.1).
``normal``   the rule this project used before (issue 54): every nn.Linear N(0, 0.02) and every
             ``*out_proj`` N(0, 0.02 / sqrt(2 n_layers)), Mamba's blocks included; kept so that what the
             sources' rule does to a learning-rate window can be measured (the same bits as before).

Under every rule: embeddings N(0, 0.02) (Zoology, mamba-ssm and GPT-NeoX alike), convolutions and
norms keep PyTorch's defaults (no source touches them), and each mixer's own parameters are then
drawn by its ``reset_special_parameters`` (Mamba's dt, A and D, H3's kernels, ...), as the sources'
constructors draw them after (mamba-ssm marks its dt bias ``_no_reinit``).

A block is of Mamba's kind where its mixer's class says ``source_block = "mamba"`` (Mamba, Mamba2:
Zoology builds them into its MambaBlock and Mamba2Block, whose ``block_type`` holds "Mamba", and
mamba-ssm into its own Block); every other block is Zoology's TransformerBlock / GPT-NeoX's layer.
"""
from __future__ import annotations

import math

from torch import nn

from arrepro.models.ops import MLP

INIT_STD = 0.02
RULES = ("zoology", "jelassi", "normal")
# the names Zoology's rescale finds (substring test on "<name>.weight": model.py lines 117 and 123)
_ZOOLOGY_RESCALED = ("out_proj", "fc2")


def is_mamba_block(block: nn.Module) -> bool:
    """A block the sources build as Mamba's own (a mixer that says ``source_block = "mamba"``)."""
    return getattr(block.mixer, "source_block", "transformer") == "mamba"


def _kaiming_scaled_(weight, divisor: float) -> None:
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    weight.data.div_(divisor)


def _residual_output(block: nn.Module, name: str) -> str | None:
    """The source's name of a block's residual output at ``name`` (a Linear's path in the block),
    or None: the mixer's ``out_proj`` (as its source names it) and the MLP's ``out_proj`` (``fc2``)."""
    if name == "mixer.out_proj":
        return getattr(block.mixer, "source_output_name", "out_proj")
    if name == "mlp.out_proj":
        return "fc2"
    return None


def initialise(model: nn.Module, rule: str, n_layers: int) -> None:
    """Draw ``model``'s weights by ``rule`` (one of ``RULES``). One pass over the modules in order,
    then each block's special parameters: under ``normal`` the draws of the rule it keeps."""
    if rule not in RULES:
        raise ValueError(f"init must be one of {', '.join(RULES)}, got {rule!r}")
    blocks = {f"layers.{i}.": block for i, block in enumerate(model.layers)}
    for name, m in model.named_modules():
        if not isinstance(m, (nn.Linear, nn.Embedding)):
            continue
        prefix = name[: name.find(".", len("layers.")) + 1] if name.startswith("layers.") else ""
        block = blocks.get(prefix)
        if rule == "normal" or block is None:
            rescaled = rule == "normal" and name.endswith("out_proj")
            nn.init.normal_(m.weight, 0.0, INIT_STD / math.sqrt(2 * n_layers) if rescaled else INIT_STD)
        else:
            output = _residual_output(block, name[len(prefix):])
            if is_mamba_block(block):
                if output is not None:
                    _kaiming_scaled_(m.weight, math.sqrt((2 if isinstance(block.mlp, MLP) else 1) * n_layers))
            else:
                rescaled = rule == "zoology" and output in _ZOOLOGY_RESCALED
                nn.init.normal_(m.weight, 0.0, INIT_STD / math.sqrt(2 * n_layers) if rescaled else INIT_STD)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
    for block in model.layers:
        if hasattr(block.mixer, "reset_special_parameters"):
            block.mixer.reset_special_parameters()
