"""The paper scale of config.yaml against the values the paper states, and the fidelity tables:
the settings (arrepro.report.fidelity) and what the code builds (arrepro.report.fidelity_built)."""
import copy
import functools
from pathlib import Path

import pytest
import yaml

from arrepro.report import fidelity, fidelity_built
from arrepro.config.grid import Grid

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
PAPER = CONFIG["scales"]["paper"]


def test_every_setting_is_a_sources_or_a_stated_choice():
    bad = [r["setting"] for r in fidelity.rows(CONFIG) if r["whose"] == "DEVIATION"]
    assert not bad, f"paper-scale settings that match no source and carry no reason in `choices`: {bad}"


def test_where_the_paper_states_a_value_the_config_takes_it():
    rows = fidelity.rows(CONFIG)
    stated = [r for r in rows if r["paper"] not in (fidelity.SILENT, fidelity.NONE) and isinstance(r["paper"], (int, float, list, dict))
              or isinstance(r["paper"], tuple) and fidelity.SILENT not in r["paper"]]
    assert len(stated) >= 15
    assert all(r["whose"] == "paper" for r in stated), [(r["setting"], r["here"], r["paper"]) for r in stated
                                                        if r["whose"] != "paper"]


def test_the_paper_scale_against_appendix_a2():
    """Read straight from config.yaml (not through the fidelity table): settings, vocabulary,
    sizes, seeds, epochs, batch sizes, warmup, weight decay."""
    grid = Grid(CONFIG, "paper")
    mqar = {n: t for n, t in PAPER["tasks"].items() if t["kind"] == "mqar"}
    assert {(t["seq_len"], t["num_kv_pairs"]) for t in mqar.values()} == {(64, 4), (128, 8), (256, 16), (512, 64), (256, 64)}
    assert {t["vocab_size"] for t in mqar.values()} == {8192}
    assert {(t["n_train"], t["n_test"]) for t in mqar.values()} == {(100_000, 3_000)}
    r = PAPER["recipes"]["paper"]
    assert (r["epochs"], r["warmup_frac"], r["weight_decay"]) == (50, 0.1, 0.1)
    for L, bs in ((64, 512), (128, 512), (256, 256), (512, 128)):
        assert Grid.batch_size(r, {**PAPER["tasks"]["L64"], "seq_len": L}) == bs
    seeds = {tuple(g["seeds"]) for e in PAPER["experiments"].values() for g in e["grids"]}
    assert seeds == {(42, 123, 777, 456, 789)}
    for exp in ("fig2", "fig3", "fig11", "fig12"):
        assert grid.experiments[exp]["grids"][0]["widths"] == [64, 128, 256, 512, 1024, 2048], exp
    assert {n for g in grid.experiments["fig4"]["grids"] for n in g["widths"]} == {64, 128, 256, 512, 1024, 2048}
    # the MQAR experiments train on the paper's own tasks with its recipe, except the Zoology replication
    for exp, e in grid.experiments.items():
        for g in e["grids"]:
            if "copy" not in g["tasks"]:
                assert g["recipe"] == ("zoology" if g.get("series", "").startswith("replication") else "paper"), exp
    # Tables 2-3: 1-layer attention's 2% is 1/K: K = 64
    for exp in ("table2", "table3", "table4"):
        g = grid.experiments[exp]["grids"][0]
        assert {PAPER["tasks"][t]["num_kv_pairs"] for t in g["tasks"]} == {64} and g["layers"] == [1], exp


def test_a_changed_setting_is_caught():
    c = copy.deepcopy(CONFIG)
    c["scales"]["paper"]["recipes"]["paper"]["warmup_frac"] = 0.05
    row = next(r for r in fidelity.rows(c) if r["setting"] == "recipes.paper.warmup_frac")
    assert row["whose"] == "DEVIATION"
    c["scales"]["paper"]["choices"]["recipes.paper.warmup_frac"] = "a reason of some length"
    assert next(r for r in fidelity.rows(c) if r["setting"] == "recipes.paper.warmup_frac")["whose"].startswith("CHOICE")
    del c["scales"]["paper"]["tasks"]["L256K64"]
    with pytest.raises(ValueError, match="L256K64"):
        fidelity.rows(c)


@functools.lru_cache(maxsize=None)
def built(key: str = "config") -> list[dict]:
    """The built-model table of config.yaml (building the paper scale's models takes seconds: once)."""
    return fidelity_built.rows(CONFIG)


def test_every_choice_names_a_setting_of_the_tables():
    settings = {r.setting for r in fidelity.REFERENCE} | {k for r in built() for k in r["keys"]}
    assert set(PAPER["choices"]) <= settings, set(PAPER["choices"]) - settings
    used = {r["setting"] for r in fidelity.rows(CONFIG) if r["whose"].startswith("CHOICE")}
    used |= {k for r in built() if r["whose"].startswith("CHOICE") for k in r["keys"] if k in PAPER["choices"]}
    assert used == set(PAPER["choices"]), "a reason for a setting that takes a source's value is stale"


def test_the_readme_shows_the_current_tables():
    page = (ROOT / "docs" / "reference" / "fidelity.md").read_text()
    assert fidelity.markdown(CONFIG) in page, "docs/reference/fidelity.md's table is stale: python -m arrepro.report.fidelity"
    assert fidelity_built.markdown(CONFIG, built()) in page, \
        "docs/reference/fidelity.md's built-model table is stale: python -m arrepro.report.fidelity_built"


def test_what_the_code_builds_is_the_sources_or_a_stated_choice():
    """Every paper-scale model as its cells build it: first weights, weight decay, dropout, norms."""
    rows = built()
    bad = [(r["model"], r["quantity"], r["here"], r["rule"]) for r in rows if r["whose"] == "DEVIATION"]
    assert not bad, f"built models that follow neither their source nor a stated choice: {bad}"
    quantities = {r["quantity"] for r in rows}
    assert {"init: other linear weights", "init: residual outputs", "init: embeddings", "weight decay",
            "embedding dropout", "attention dropout", "block norm"} <= quantities
    models = {m for r in rows for m in r["model"].split(", ")}
    paper_models = {m for e in PAPER["experiments"].values() for g in e["grids"] for m in g["models"]}
    assert models == paper_models  # every model the paper scale trains is built and read


def _deviations(config, model) -> set[tuple[str, str]]:
    return {(m, r["quantity"]) for r in fidelity_built.rows(config, {model}) if r["whose"] == "DEVIATION"
            for m in r["model"].split(", ")}


@pytest.mark.parametrize("edit, model, quantity", [
    # the project's earlier recipe: matrices decayed only, N(0, 0.02) for Mamba's blocks
    (lambda c: c["scales"]["paper"]["recipes"]["paper"].update(decay="matrices"), "attention", "weight decay"),
    (lambda c: c["scales"]["paper"]["recipes"]["paper"].update(init="normal"), "mamba", "init: other linear weights"),
    (lambda c: c["scales"]["paper"]["recipes"]["paper"].update(init="normal"), "deltanet", "init: residual outputs"),
    (lambda c: c["scales"]["paper"]["recipes"]["copy"].update(init="zoology"), "transformer_rope_jelassi",
     "init: residual outputs"),
    (lambda c: c["models"]["mamba"].pop("norm"), "mamba", "block norm"),
    (lambda c: c["models"]["attention"]["mixer_kwargs"].update(dropout=0.1), "attention", "attention dropout"),
    (lambda c: c["scales"]["paper"]["recipes"]["paper"].update(embed_dropout=0.0), "hyena", "embedding dropout"),
])
def test_a_departure_of_what_is_built_is_caught(edit, model, quantity):
    c = copy.deepcopy(CONFIG)
    edit(c)
    assert (model, quantity) not in _deviations(CONFIG, model)
    assert (model, quantity) in _deviations(c, model)
