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

