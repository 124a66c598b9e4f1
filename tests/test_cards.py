"""A model says what it is (issue 32): config.yaml's cards, checked before any job, are what the
paper, the claims, the figures, the tables and the cost model read, never a model's name."""
import copy
import re
from pathlib import Path

import pytest
import yaml

from arrepro.config import costs
from arrepro.config.cards import CardError, card_of, cards
from arrepro.config.checks import load_grid
from arrepro.config.grid import ConfigError, Grid, identity

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_every_model_has_a_card_and_a_variant_names_a_model():
    found = cards(CONFIG["models"])
    assert set(found) == set(CONFIG["models"])
    for c in found.values():
        assert (c.of is not None) == (c.role in ("ablation", "positional", "replication")), c
        assert c.base in CONFIG["models"]


@pytest.mark.parametrize("edit,key", [
    (lambda m: m["mamba"]["card"].pop("cost"), "config.yaml models.mamba.card.cost: missing"),
    (lambda m: m["mamba_noconv"]["card"].pop("of"), "config.yaml models.mamba_noconv.card.of: missing"),
    (lambda m: m["mamba_noconv"]["card"].update(of="mambo"), "config.yaml models.mamba_noconv.card.of: 'mambo'"),
    (lambda m: m["mamba_noconv"]["card"].update(of="s6_mlp"), "config.yaml models.mamba_noconv.card.of: 's6_mlp' is itself"),
    (lambda m: m["hyena"].pop("card"), "config.yaml models.hyena.card: missing"),
    (lambda m: m["hyena"]["card"].update(family="convolution"), "config.yaml models.hyena.card.family"),
])
def test_a_card_lacking_what_it_needs_is_refused_naming_the_file_and_key(edit, key):
    config = copy.deepcopy(CONFIG)
    edit(config["models"])
    with pytest.raises(ConfigError, match=re.escape(key.removeprefix("config.yaml "))):
        load_grid(config, "tiny")  # what every entry point builds, before any job
    with pytest.raises(CardError, match=re.escape(key)):
        cards(config["models"])


@pytest.mark.parametrize("edit,key,why", [
    (lambda m: m["mamba"]["card"].update(of="hyena"), "models.mamba.card.of", "role core, which varies no model"),
    (lambda m: m["mamba_jelassi"]["card"].update(of="mamba"), "models.mamba_jelassi.card.of", "role copy"),
    (lambda m: m["hyena"]["card"].update(label=""), "models.hyena.card.label", "empty"),
    (lambda m: m["hyena"]["card"].update(label="  "), "models.hyena.card.label", "empty"),
])
def test_an_of_that_would_be_ignored_and_an_empty_label_are_refused(edit, key, why):
    """Issue 38: a card with role core and an ``of`` was accepted (the ``of`` silently ignored),
    and so was an empty label."""
    config = copy.deepcopy(CONFIG)
    edit(config["models"])
    with pytest.raises(ConfigError, match=re.escape(key) + ".*" + re.escape(why)):
        load_grid(config, "tiny")


def test_a_card_error_names_the_file_once_and_the_key():
    """Issue 38: a card error printed "config.yaml: config.yaml models...": the file twice."""
    from arrepro.cluster.configfile import COMMAND_LINE, config_error

    config = copy.deepcopy(CONFIG)
    config["models"]["mamba"]["card"].pop("cost")
    with pytest.raises(ConfigError) as err:
        load_grid(config, "tiny")
    assert config_error(err.value) == "config.yaml: models.mamba.card.cost: missing"
    # a card value given on the command line: named as coming from there (the key is found)
    config = copy.deepcopy(CONFIG)
    config["models"]["mamba"]["card"]["of"] = "hyena"
    with pytest.raises(ConfigError) as err:
        load_grid(config, "tiny")
    line = config_error(err.value, {"models": {"mamba": {"card": {"of": "hyena"}}}})
    assert line.startswith(f"{COMMAND_LINE}: models.mamba.card.of: 'hyena'") and "config.yaml" not in line


def test_two_models_with_one_label_where_they_meet_are_refused_naming_both():
    """Issue 38: two models of one experiment with one card label were accepted: the width figure
    drew them as one line with one legend entry and Table 4's pivot kept one row of the two. One
    label in two experiments that never meet (Mamba on MQAR and on the copy task) is fine."""
    config = copy.deepcopy(CONFIG)
    load_grid(config, "demo")
    assert CONFIG["models"]["mamba"]["card"]["label"] == CONFIG["models"]["mamba_jelassi"]["card"]["label"]
    exp = next(e for e, x in config["scales"]["demo"]["experiments"].items()
               if {"mamba", "hyena"} <= {m for g in x["grids"] for m in g["models"]})
    config["models"]["hyena"]["card"]["label"] = config["models"]["mamba"]["card"]["label"]
    with pytest.raises(ConfigError, match=re.escape(f"scales.demo.experiments.{exp}: models 'hyena' and 'mamba'")
                       + ".*models.hyena.card.label.*models.mamba.card.label"):
        load_grid(config, "demo")
    # the models the variants of Table 4 vary are its rows (by label), though the grid names only the variants
    config = copy.deepcopy(CONFIG)
    exps = config["scales"]["demo"]["experiments"]
    t4 = next(e for e, x in exps.items() if x.get("table") == "positional")
    exps[t4]["grids"] = [{**exps[t4]["grids"][0], "models": ["mamba_pe_rope", "hyena_pe_rope"]}]
    config["scales"]["demo"]["experiments"] = {t4: exps[t4]}
    load_grid(config, "demo")
    config["models"]["hyena"]["card"]["label"] = config["models"]["mamba"]["card"]["label"]
    with pytest.raises(ConfigError, match=re.escape(f"scales.demo.experiments.{t4}: models 'mamba' and 'hyena'")):
        load_grid(config, "demo")


def test_the_cost_model_reads_the_card_and_refuses_a_spec_without_one():
    grid = Grid(CONFIG, "demo")
    cell = grid.all_cells()[0]
    spec = grid.spec_of(cell)
    assert spec["cost_factor"] == card_of(CONFIG["models"], cell.model).cost
    dearer = {**spec, "cost_factor": 2 * spec["cost_factor"]}
    assert costs.flops_per_token(dearer) > costs.flops_per_token(spec)
    with pytest.raises(ValueError, match=f"models.{cell.model}.card.cost"):
        costs.flops_per_token({k: v for k, v in spec.items() if k != "cost_factor"})


def test_a_card_changes_no_cell():
    """The card is left out of a cell's identity: the spec's model is the config's without it,
    and the cost factor is not passed on (a card edit retrains nothing)."""
    grid = Grid(CONFIG, "demo")
    spec = grid.spec_of(grid.all_cells()[0])
    assert "card" not in spec["model_def"] and "cost_factor" not in identity(spec)
    config = copy.deepcopy(CONFIG)
    for m in config["models"].values():
        m["card"] = {**m["card"], "label": m["card"]["label"] + " (renamed)", "cost": 3.0}
    other = Grid(config, "demo")
    assert [identity(other.spec_of(c)) for c in other.all_cells()] == [identity(grid.spec_of(c)) for c in grid.all_cells()]


# what reading a model's name for its meaning looked like (issue 32's list)
NAME_PARSING = [r'"_pe_"', r"_pe_\.\*", r"ZOO_PREFIX", r'"zoology_"', r'startswith\("replication', r'"attention_conv_"',
                r"ATTENTION_MIXERS", r"MIXER_FACTOR", r"COPY_MODELS", r"ABLATIONS", r"\bCITES\b", r"\bNAMES\b"]


def test_no_code_reads_a_models_name_for_its_meaning():
    files = sorted(f for part in ("report", "config", "cluster", "search") for f in (ROOT / "src/arrepro" / part).glob("*.py"))
    found = [f"{f.relative_to(ROOT)}:{i}: {line.strip()}" for f in files
             for i, line in enumerate(f.read_text().splitlines(), 1) if any(re.search(p, line) for p in NAME_PARSING)]
    assert not found, "\n".join(found)


def test_renaming_a_model_changes_neither_its_label_nor_a_claims_verdict_input():
    """A model's meaning follows its card when renamed: its label, family and base stay."""
    config = copy.deepcopy(CONFIG)
    config["models"]["zoology_snake"] = config["models"].pop("zoology_hyena")
    c = card_of(config["models"], "zoology_snake")
    assert (c.label, c.family, c.role, c.base) == ("Zoology's Hyena", "recurrent", "replication", "hyena")


def test_a_card_citing_a_key_the_bibliography_lacks_fails_naming_the_model():
    from arrepro.report.lint import check_citations

    config = copy.deepcopy(CONFIG)
    check_citations(ROOT / "paper/main.tex", {"models": config["models"]})  # every card's key is in refs.bib
    config["models"]["hyena"]["card"]["cite"] = "poli2099hyena"
    with pytest.raises(ValueError, match=r"config.yaml models.hyena.card.cite: 'poli2099hyena'"):
        check_citations(ROOT / "paper/main.tex", {"models": config["models"]})
