"""Values that pass the schema but no job could run (issue 18): a mixer argument its constructor
refuses (``num_heads: 0``, a width ``num_heads`` does not divide) or a model no machine can hold
(width 1e9: 192 EB) is refused before any job, naming the key (the workflow's dry runs:
tests/test_hostile_config.py). The requirements are declared once, next to each mixer
(``REQUIRES``, arrepro.config.constraints), read by the grid with ast and checked by the constructor too."""
import copy
import re

import pytest

from arrepro.config.constraints import names_in
from arrepro.config.catalogue import BACKBONE_ARGS, mixer_names, mixer_signature
from arrepro.config.checks import load_grid
from arrepro.config.grid import ConfigError
from test_hostile_config import fig2
from test_workflow import ROOT


def test_an_inherited_requirement_is_checked(config):
    """gated_deltanet hands **kwargs to DeltaNet (a sibling file): DeltaNet's requirements hold."""
    c = copy.deepcopy(config)
    c["models"]["gated_deltanet"]["mixer_kwargs"]["num_heads"] = 0
    fig2(c)["grids"][0]["models"] = ["gated_deltanet"]
    with pytest.raises(ConfigError, match=re.escape("models.gated_deltanet.mixer_kwargs: num_heads must be")):
        load_grid(c, "tiny")


def test_a_gpu_cell_whose_parameters_outgrow_every_gpu_is_refused(config):
    c = copy.deepcopy(config)
    c["scales"]["tiny"]["device"] = "cuda"
    fig2(c)["grids"][0]["widths"] = [2 ** 20]  # 1.3e13 parameters: host memory fits, no GPU does
    with pytest.raises(ConfigError, match="more than any GPU has"):
        load_grid(c, "tiny")


def test_every_requirement_reads_only_its_constructors_arguments():
    """A declaration with a typo (a name the constructor does not take) would refuse every config."""
    for mixer in sorted(mixer_names()):
        sig = mixer_signature(mixer, str(ROOT))
        assert sig is not None, mixer
        arguments, requires = sig
        for expr, meaning in requires:
            assert set(names_in(expr)) <= set(arguments) | BACKBONE_ARGS, (mixer, expr)
            assert isinstance(meaning, str) and meaning, (mixer, expr)


def test_the_constructor_checks_the_same_requirements():
    from arrepro.models import get_mixer

    with pytest.raises(ValueError, match=re.escape("the width must be a multiple of num_heads (d_model=8, num_heads=3)")):
        get_mixer("attention")(8, max_len=16, num_heads=3)
    with pytest.raises(ValueError, match=re.escape("num_heads must be a whole number >= 1 (num_heads=0)")):
        get_mixer("deltanet")(8, max_len=16, num_heads=0)
    with pytest.raises(ValueError, match="d_state must be 'seq_len' or an even whole number"):
        get_mixer("h3")(8, max_len=16, d_state=5)



@pytest.mark.parametrize("kw, message", [
    (dict(rotary_fraction=0), "rotary_fraction (the share of each head's channels rotary positions turn) must be a number in (0, 1]"),
    (dict(rotary_fraction=1.5), "must be a number in (0, 1]"),
    (dict(rotary_fraction=float("nan")), "must be a number in (0, 1]"),
    (dict(rotary_fraction=True), "must be a number in (0, 1]"),
    (dict(rotary_fraction="0.25"), "must be a number in (0, 1]"),
    (dict(rotary_fraction=0.5, rope=False), "rotary_fraction below 1 needs rotary positions"),
    (dict(rotary_fraction=0.25, num_heads=2), "int(the head width * rotary_fraction) must be even (rope=True, rotary_fraction=0.25, d_model=24, num_heads=2)"),
])
def test_the_attention_constructor_refuses_a_rotary_fraction_it_cannot_honour(kw, message):
    """GPT-NeoX turns int(head_size * rotary_pct) channels in pairs (transformers 4.37.2
    models/gpt_neox/modeling_gpt_neox.py:113, 613-617): an odd count, a share outside (0, 1], or a
    share without rotary positions to turn is refused, naming the values."""
    from arrepro.models import get_mixer

    args = {"num_heads": 1, "rope": True, **kw}
    with pytest.raises(ValueError, match=re.escape(message)):
        get_mixer("attention")(24, max_len=16, **args)


def test_a_rotary_fraction_without_rotary_positions_is_refused_before_any_job(config):
    """The check sees the ``rope`` the backbone hands the mixer (backbone.constructor_kwargs): a
    share of channels to turn on a model with learned positions is refused, naming the key; with
    rotary positions the same share passes, and at a width where the share is an odd count of a
    head's channels the grid's widths are named."""
    c = copy.deepcopy(config)
    c["models"]["attention"]["mixer_kwargs"]["rotary_fraction"] = 0.5
    fig2(c)["grids"][0]["models"] = ["attention"]
    with pytest.raises(ConfigError, match=re.escape("models.attention.mixer_kwargs: rotary_fraction below 1 needs rotary positions")):
        load_grid(c, "tiny")
    c["models"]["attention"]["position"] = "rope"
    widths = fig2(c)["grids"][0]["widths"]
    assert all((w * 0.5) % 2 == 0 for w in widths), widths  # 1 head: int(w * 0.5) even at each of tiny's widths
    load_grid(c, "tiny")
    fig2(c)["grids"][0]["widths"] = [widths[0] + 2]
    with pytest.raises(ConfigError, match=r"widths: model 'attention' at width \d+: rotary positions turn channel pairs"):
        load_grid(c, "tiny")


def test_the_parameter_estimate_counts_an_untied_head(config):
    """The copy Transformer's own LM head (tied_head: false) adds vocabulary x width to the
    estimate the memory checks read (arrepro.config.costs.parameters), as it does to the model."""
    from arrepro.config import costs
    from arrepro.config.grid import Grid

    def estimate(tied: bool) -> int:
        c = copy.deepcopy(config)
        c["models"]["transformer_rope_jelassi"]["tied_head"] = tied
        grid = Grid(c, "paper")
        return costs.parameters(grid.spec_of(grid.cell("copy", "transformer_rope_jelassi", 1024, 12, "copy", 1e-3, 0)))

    vocab = config["scales"]["paper"]["tasks"]["copy"]["vocab_size"]
    assert estimate(False) - estimate(True) == vocab * 1024
