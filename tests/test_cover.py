"""The cover (arrepro.search.cover): a setting at chance is trained at its rivals' best learning
rates on every seed, and only there; the aggregate counts those rates among its candidates."""
import pytest

from arrepro.search import cover

LEARNED = 0.4375


def entry(model, width, layers, points, chosen, task="t", seeds=(0, 1, 2), lo=1e-4, hi=1e-1):
    return {"setting": {"task": task, "model": model, "width": width, "layers": layers, "recipe": "r"},
            "spec": {"learned": LEARNED, "lo": lo, "hi": hi, "seeds": list(seeds)},
            "state": {"phase": "done", "chosen_lr": chosen, "points": [[lr, m] for lr, m in sorted(points.items())]}}


def test_a_setting_at_chance_trains_each_rivals_best_rate_on_every_seed():
    entries = {
        "attn": entry("attention", 32, 1, {1e-3: 0.27, 3.16e-3: 0.26}, 1e-3),
        "mamba": entry("mamba", 32, 1, {3.16e-3: 0.60, 1e-2: 0.95}, 1e-2),
        "mamba16": entry("mamba", 16, 1, {1e-2: 0.70, 3.16e-2: 0.80}, 3.16e-2),
    }
    got = cover.plan(entries, 3)
    # mamba 1x16 is another model at another width: no claim compares it with attention 1x32
    assert [(c.search, c.lr, c.seeds) for c in got] == [("attn", 1e-2, (0, 1, 2))]
    assert "mamba 1x32 (0.950)" in got[0].why and "at chance" in got[0].why


def test_rivals_are_other_models_at_the_same_shape_then_the_same_model_at_other_shapes_and_capped():
    entries = {
        "m16": entry("mamba", 16, 1, {1e-2: 0.30}, 1e-2),                   # at chance
        "m32": entry("mamba", 32, 1, {3.16e-2: 0.90}, 3.16e-2),             # itself, wider
        "h16": entry("hyena", 16, 1, {1e-3: 0.60}, 1e-3),                   # another model, same shape
        "a16": entry("attention", 16, 1, {3.16e-3: 0.95}, 3.16e-3),         # another model, same shape
        "m2": entry("mamba", 16, 2, {1e-4: 0.80}, 1e-4),                    # itself, deeper, worse: left out
    }
    got = [(c.search, c.lr) for c in cover.plan(entries, 3)]
    # same shape first, best mean first (attention 3.16e-3, hyena 1e-3), then itself wider (3.16e-2); capped at 3
    assert got == [("m16", 1e-3), ("m16", 3.16e-3), ("m16", 3.16e-2)]
    assert [(c.search, c.lr) for c in cover.plan(entries, 1)] == [("m16", 3.16e-3)]
    assert cover.max_cells([3, 5], 2) == 16


def test_learned_settings_rates_already_candidates_other_tasks_and_out_of_range_rates_are_not_covered():
    entries = {
        "attn": entry("attention", 32, 1, {1e-3: 0.27, 1e-2: 0.26}, 1e-3, hi=3e-2),
        "mamba": entry("mamba", 32, 1, {1e-2: 0.95}, 1e-2),          # already an attn candidate
        "hyena": entry("hyena", 32, 1, {1e-1: 0.90}, 1e-1),          # outside attn's range
        "other": entry("mamba", 32, 1, {3.16e-3: 0.99}, 3.16e-3, task="u"),  # another task
        # a rival at chance shows no rate worth covering (and has mamba's and hyena's... rates: none to add)
        "weak": entry("based", 32, 1, {3.16e-3: 0.30, 1e-2: 0.28}, 3.16e-3, hi=3e-2),
    }
    assert cover.plan(entries, 3) == []


def test_two_rivals_at_one_rate_cover_it_once_and_the_plan_is_deterministic():
    entries = {
        "a": entry("attention", 32, 1, {1e-3: 0.2}, 1e-3),
        "b": entry("x", 32, 1, {1e-2: 0.9}, 1e-2),
        "c": entry("y", 32, 1, {1.0001e-2: 0.8}, 1.0001e-2),
    }
    got = cover.plan(entries, 3)
    assert len(got) == 1 and got[0].lr == 1e-2 and "x 1x32" in got[0].why and "y 1x32" in got[0].why
    assert cover.plan(dict(reversed(list(entries.items()))), 3) == got


def test_a_mean_that_is_not_a_number_is_refused_not_taken_as_learned():
    """Issue 55: a rival whose mean is NaN passed ``mean < learned`` as learned and its rate was covered."""
    entries = {"attn": entry("attention", 32, 1, {1e-3: 0.27}, 1e-3),
               "mamba": entry("mamba", 32, 1, {1e-2: float("nan")}, 1e-2)}
    with pytest.raises(ValueError, match=r"search of mamba 1x32: its mean at 0.01 is nan, not a number"):
        cover.plan(entries, 3)


def test_the_cover_file_is_sealed_and_a_damaged_one_names_itself(tmp_path):
    class P:
        searches = {"attn": entry("attention", 32, 1, {1e-3: 0.27}, 1e-3),
                    "mamba": entry("mamba", 32, 1, {1e-2: 0.95}, 1e-2)}
    path = tmp_path / "fig3.json"
    covers = cover.write(path, "fig3", [P()], ["attn", "mamba"], 3)
    back, settings = cover.read(path)
    assert back == covers and settings["attn"]["model"] == "attention"
    path.write_text(path.read_text().replace("0.01", "0.02"))
    with pytest.raises(ValueError, match="fig3.json"):
        cover.read(path)


def test_a_search_not_done_is_refused():
    e = entry("attention", 32, 1, {1e-3: 0.27}, 1e-3)
    e["state"]["phase"] = "seeds"

    class P:
        searches = {"attn": e}
    with pytest.raises(ValueError, match="not done"):
        cover.write("/nonexistent/x.json", "fig3", [P()], ["attn"], 3)


# --------------------------------------------------------------------------- in the workflow
def test_a_setting_at_chance_trains_its_rivals_best_rate_and_the_table_counts_it(tmp_path):
    """The tiny scale with an experiment that covers: 2-layer attention searched on L8 (it learns),
    1-layer attention at width 8 trained at 3.16e-2 alone (at chance, where the search of the
    2-layer one does not end). The cover job lists the 1-layer one at the 2-layer one's best rate,
    Snakemake trains that cell, the best table counts it among the candidates, and a second run
    plans nothing."""
    import pandas as pd
    import yaml

    from test_workflow import planned, smk
    from workflow_copy import copy_workflow

    wd = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    tiny = cfg["scales"]["tiny"]
    searched = dict(tiny["experiments"]["fig1"]["grids"][0])
    # one rate inside a range: the cover may train others there
    cfg["lr_searches"]["one_rate"] = {"start": [3.16e-2], "range": [1e-4, 1e-1], "rounds": 0, "search_seeds": "all"}
    fixed = {**searched, "series": "one rate", "widths": [8], "layers": [1], "search": "one_rate"}
    tiny["experiments"]["fig3"] = {"title": "tiny: a cover", "plot": "width", "cover": 2, "grids": [searched, fixed]}
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    target = "results/tiny/tables/fig3_best.csv"
    smk(wd, "--cores", "2", target, "--config", "scale=tiny")
    covers, settings = cover.read(wd / "results/tiny/searches/cover/fig3.json")
    best = pd.read_csv(wd / target, comment="#")
    big, small = best[best["layers"] == 2].iloc[0], best[best["layers"] == 1].iloc[0]
    assert big["mean"] >= LEARNED - 0.2  # (L8 has K = 2: learned from 0.625) the 2-layer one learns
    if small["mean"] >= 0.625:
        pytest.skip("1-layer attention learned here: nothing to cover")
    assert [(settings[c.search]["width"], c.lr, c.seeds) for c in covers] == [(8, big["best_lr"], (0,))]
    assert f"{big['best_lr']:.3g}" in str(small["candidates"]).split(";") and str(small["cover"]) == f"{big['best_lr']:.3g}"
    assert planned(wd, targets=[target]) == {}


# --------------------------------------------------------------------------- a cover that wins (issue 55)
def covered_experiment(tmp_path, monkeypatch, world, specs):
    """An experiment's best table through ``aggregate.write_tables``, from real plans and a real
    cover file: each search of ``specs`` (key -> (model, SearchSpec)) run against ``world(model,
    lr, seed)``, its last plan written and sealed, the cover decided from it (2 rates at most), and
    every cell's result (the searches' and the cover's) read from ``world`` (the result files
    stand in by a loader of the same rows)."""
    from arrepro.report import aggregate
    from arrepro.search import protocol
    from arrepro.search.plans import Plan
    from arrepro.search.rounds import state_dict

    searches, settings = {}, {}
    for key, (model, sp) in specs.items():
        setting = {"task": "mqar-L8", "model": model, "width": 16, "layers": 1, "recipe": "r"}
        rounds, state, results = protocol.run(sp, lambda lr, s, m=model: world(m, lr, s))
        searches[key] = {"setting": setting, "metric": "final_accuracy", "spec": sp.as_dict(),
                         "rounds": [r.as_dict() for r in rounds], "state": state_dict(state, sp, results)}
        settings[key] = setting
    plan = Plan({"group": "g", "round": 9, "searches": searches}).write(tmp_path / "round9.json")
    cover.write(tmp_path / "cover.json", "fig3", [plan], list(specs), 2)

    def rows(paths, task_names=None):
        import pandas as pd

        out = []
        for p in paths:
            d = str(p).rsplit("/", 1)[0]
            model, rest = d.split("/")[-4], d.rsplit("/", 1)[1]  # .../{model}/w16-l1/r/lr{lr}-s{seed}
            lr, seed = float(rest[2:].split("-s")[0]), int(rest.split("-s")[1])
            out.append({"task": "mqar-L8", "task_name": "L8", "model": model, "mixer": model, "width": 16, "layers": 1,
                        "recipe": "r", "lr": lr, "seed": seed, "seq_len": 8, "cell_dir": d, "diverged": False,
                        "parameters": 1000, "pinned": True, "final_accuracy": world(model, lr, seed)})
        return pd.DataFrame(out)
    monkeypatch.setattr(aggregate, "load_results", rows)
    aggregate.write_tables([tmp_path / "round9.json"], [{"series": "s", "searches": list(specs)}], "final_accuracy",
                           tmp_path / "cells.csv", tmp_path / "best.csv", cover_file=str(tmp_path / "cover.json"))
    return aggregate.read_best_table(tmp_path / "best.csv").set_index("model")


def fixed(start, lo=1e-4, hi=1e-1):
    from arrepro.search.protocol import SearchSpec

    return SearchSpec(tuple(start), lo, hi, 0.5, 0, 1, (0, 1, 2), (0, 1, 2), False, (), 0, 0.99, LEARNED, 0.9)


def test_a_cover_that_wins_decides_the_rows_outcome_and_window(tmp_path, monkeypatch):
    """Issue 55: attention's grid misses its window at 5.62e-3 (at chance at 3.16e-3 and 1e-2:
    "not learned"); Mamba's best is 5.62e-3, so the cover trains attention there, where it reaches
    0.95 on every seed. The row reports 0.95 at 5.62e-3: its outcome and window are those of the
    points it reports (before: "not learned" beside a mean of 0.95), and the window table, the
    paper's outcome counts and the window claims read them."""
    from types import SimpleNamespace

    import pandas as pd

    from arrepro.report.claim_kinds import window_of
    from arrepro.report.prose import outcome_text
    from arrepro.report.tables import lr_window

    def world(model, lr, seed):
        return 0.95 if abs(lr / 5.62e-3 - 1) < 1e-9 else 0.26
    best = covered_experiment(tmp_path, monkeypatch, world,
                              {"a": ("attention", fixed([1e-3, 3.16e-3, 1e-2])), "m": ("mamba", fixed([1e-3, 5.62e-3]))})
    a = best.loc["attention"]
    assert float(a["cover"]) == 5.62e-3 and a["best_lr"] == 5.62e-3 and a["mean"] == pytest.approx(0.95)
    assert a["outcome"] == "cover" and a["window_status"] == "window"
    w = window_of(a)
    assert (w.below, w.lo, w.hi, w.above) == (3.16e-3, 5.62e-3, 5.62e-3, 1e-2)
    assert lr_window(best.reset_index()).set_index("model").loc["attention", "search"] == "cover"
    assert lr_window(best.reset_index()).set_index("model").loc["attention", "width (decades)"] != "not learned"
    e = SimpleNamespace(best=best.reset_index(), cells=pd.DataFrame({"cell_dir": []}))
    assert "1 with a best at a learning rate the cover added" in outcome_text({"fig3": e})
    # a cover that does not win leaves the search's own outcome; its rate joins the window's points
    best = covered_experiment(tmp_path, monkeypatch, lambda m, lr, s: 0.26 if m == "attention" else world(m, lr, s),
                              {"a": ("attention", fixed([1e-3, 3.16e-3, 1e-2])), "m": ("mamba", fixed([1e-3, 5.62e-3]))})
    a = best.loc["attention"]
    assert float(a["cover"]) == 5.62e-3 and a["outcome"] == "not learned" and a["window_status"] == "not learned"
    assert a["window_n_tried"] == 4
