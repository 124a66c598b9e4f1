"""Issue 31: no side of a claim the demo judges is trained at a single learning rate without a
search. A model trained only at another model's rate may simply have missed its own, and a verdict
on it says nothing about the model.

The sides are found by running every claim (arrepro.report.claims.CLAIMS) on a stand-in of each
demo experiment's best table, one row per setting its grids train, and recording every row that
enters a comparison (``claim_kinds.stat``, ``claim_kinds.window_of``): no hand list that could drift from the
claims. All parameter counts are equal, so every wide-and-deep pair qualifies: the recorded sides
can be more than a run compares, never fewer. Each side's grid (same experiment, same series,
the setting among its products) must run a learning-rate search (``search``) or train more than
one learning rate on every seed. A search that then ends on one rate says so in its decision
file (its outcome), which is the "said why".
"""
import itertools

import pandas as pd
import pytest
import yaml

from arrepro.config.checks import load_grid
from arrepro.report import claim_kinds as K
from arrepro.report import claims as C
from arrepro.config.cards import cards
from arrepro.config.grid import is_replication
from arrepro.report.results import Results
from arrepro.search.protocol import window
from arrepro.search.rounds import window_dict
from arrepro.search.thresholds import GOOD

from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
SCALE = "demo"


class Recording(Results):
    """Results that note every row a claim asks for by model name (``rows(model)``: the window
    claims read their sides so) into ``self.read``; a claim's listing of all rows (``rows()``,
    to find its models' names) is noted only where a row then enters a comparison (``claim_kinds.stat``)."""
    read: set

    def rows(self, model=None, layers=None, part="main", cells=False, width=None):
        df = super().rows(model, layers, part, cells, width)
        if model is not None and not cells:
            for _, r in df.iterrows():
                note(self.read, r)
        return df


def note(read: set, r) -> None:
    read.add((str(r["series"]), str(r["task_name"]), str(r["model"]), int(r["width"]), int(r["layers"])))


def stand_in(grid, exp: str) -> Recording:
    """The experiment's best table as the aggregation would shape it (values irrelevant)."""
    e = grid.experiments[exp]
    w = window_dict(window({}, 0.5, GOOD))
    rows = []
    for g in e["grids"]:
        for t, m, wd, nl in itertools.product(g["tasks"], g["models"], g["widths"], g["layers"]):
            rows.append({"series": g.get("series", "main"), "task": t, "task_name": t, "seq_len": 0, "model": m,
                         "mixer": grid.models[m]["mixer"], "width": wd, "layers": nl, "recipe": g["recipe"],
                         "metric": grid.metric(exp), "best_lr": 1e-3, "mean": 0.5, "std": 0.0, "min": 0.5, "max": 0.5,
                         "parameters": 1000, "candidates": "0.001", "n_seeds": 3,
                         **{f"window_{k}": v for k, v in w.items()}})
    r = Recording(exp, e, pd.DataFrame(rows), pd.DataFrame(columns=["cell_dir", grid.metric(exp)]), [],
                  grid.scale["tasks"], cards=cards(grid.models))
    r.read = set()
    return r


def claim_sides(grid) -> dict[str, set]:
    """claim id -> {(exp, series, task, model, width, layers)} of every row a claim compares."""
    seen: dict[str, set] = {}
    stat = K.stat

    def stat_rec(e, r, label=None):
        note(e.read, r)
        return stat(e, r, label)

    mp = pytest.MonkeyPatch()
    mp.setattr(K, "stat", stat_rec)
    try:
        for cid, exp, _, fn in C.CLAIMS:
            if exp in grid.experiments:
                e = stand_in(grid, exp)
                fn(e)
                seen[cid] = {(exp, *side) for side in e.read}
    finally:
        mp.undo()
    return seen


def single_rate_sides(grid) -> list[str]:
    """Every claim side whose grid trains one fixed learning rate without a search."""
    bad = []
    for cid, sides in claim_sides(grid).items():
        for exp, series, task, model, width, layers in sorted(sides):
            for i, g in enumerate(grid.experiments[exp]["grids"]):
                if (g.get("series", "main") != series or task not in g["tasks"] or model not in g["models"]
                        or width not in g["widths"] or layers not in g["layers"]):
                    continue
                if not g.get("search") and len(grid.lrs(g)) < 2:
                    bad.append(f"{cid}: {exp}.grids[{i}] ({series}) trains {model} {task} {layers}x{width} at "
                               f"{grid.lrs(g)[0]:g} alone, with no search")
    return bad


def test_every_claim_side_of_the_demo_is_searched():
    grid = load_grid(CONFIG, SCALE)
    sides = claim_sides(grid)
    assert len(sides) >= 14  # every claim the demo judges found its sides (Fig. 13's too)
    bad = single_rate_sides(grid)
    assert not bad, "claim sides trained at one learning rate:\n" + "\n".join(bad)


def test_the_check_finds_a_side_at_one_rate():
    """The test can fail: Table 2 back at its base model's rate (the demo before issue 31)."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    t2 = cfg["scales"][SCALE]["experiments"]["table2"]["grids"][0]
    t2.update(lrs=[3.16e-3], search=None)
    bad = single_rate_sides(load_grid(cfg, SCALE))
    assert any(b.startswith("conv: table2.grids[0]") and "attention_conv_qkv" in b for b in bad)
    # and a replication series is judged as a side too (Fig. 2's coarse grid is searched: grid_one_seed)
    assert any(is_replication(g) for g in cfg["scales"][SCALE]["experiments"]["fig2"]["grids"])


WINDOW_CLAIMS = {"lrwindow", "copylr", "deltanet", "depth12"}  # curves: every seed at every rate, windows closed
GRID_CLAIMS = {"finegrid"}  # about the grids themselves: a side's failure is never read as evidence
SOLO_CLAIMS = {"attn2"}  # one model against a bar, no rival


def test_every_experiment_whose_claims_read_a_failure_trains_its_settings_at_their_rivals_rates():
    """Issue 36, evidence not absence: an experiment whose claims compare models (not windows, not
    the grids) runs the cover (arrepro.search.cover), so a side at chance is also trained at the
    best learning rate of every setting of its task that learned, on every seed."""
    grid = load_grid(CONFIG, SCALE)
    exps = {exp for cid, exp, _, _ in C.CLAIMS if cid not in WINDOW_CLAIMS | GRID_CLAIMS | SOLO_CLAIMS
            and exp in grid.experiments}
    assert {"fig3", "fig4", "table1", "table2", "table3", "table4"} <= exps
    missing = sorted(e for e in exps if not grid.experiments[e].get("cover"))
    assert not missing, f"experiments whose claims read a failure without a cover: {missing}"


def test_every_window_claim_of_the_demo_reads_a_curve_that_closes():
    grid = load_grid(CONFIG, SCALE)
    from arrepro.search.rounds import Searches
    searches = Searches(grid)
    exps = {exp for cid, exp, _, _ in C.CLAIMS if cid in WINDOW_CLAIMS and exp in grid.experiments}
    assert exps == {"fig1", "fig5", "fig7", "fig13"}
    for exp in exps:
        for _, s in searches.of_experiment(exp):
            assert s.spec.close and s.spec.search_seeds == s.spec.seeds, f"{exp}: {s.key} is not a closing curve"
