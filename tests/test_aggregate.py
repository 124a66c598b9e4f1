"""best_over_lr: the reported learning rate among tied best means; a best table without a number
is refused by its readers, naming the file and the line."""
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from arrepro.files import UnreadableFile, write_table
from arrepro.report.aggregate import best_over_lr, read_best_table


def cells(accs):
    return pd.DataFrame([{"series": "s", "task": "t", "task_name": "t", "seq_len": 64, "model": "m", "mixer": "m",
                          "width": 64, "layers": 2, "recipe": "r", "lr": lr, "seed": s, "final_accuracy": a,
                          "diverged": False, "parameters": 1} for lr, per_seed in accs.items() for s, a in enumerate(per_seed)])


def test_ties_take_the_middle_learning_rate_and_are_counted():
    # five LRs, the middle three all at 1.0 for both seeds: idxmax used to report the smallest, 1e-3
    b = best_over_lr(cells({1e-4: [0.2, 0.3], 1e-3: [1.0, 1.0], 1e-2: [1.0, 1.0], 1e-1: [1.0, 1.0], 1.0: [0.0, 0.0]}))
    assert len(b) == 1 and b["best_lr"].iloc[0] == 1e-2 and b["n_tied_lrs"].iloc[0] == 3
    assert b["mean"].iloc[0] == 1.0 and b["n_seeds"].iloc[0] == 2
    b = best_over_lr(cells({1e-3: [1.0], 1e-2: [1.0]}))
    assert b["best_lr"].iloc[0] == 1e-3 and b["n_tied_lrs"].iloc[0] == 2  # even: the lower middle
    b = best_over_lr(cells({1e-3: [0.5, 0.7], 1e-2: [0.9, 0.8], 1e-1: [0.1, 0.2]}))
    assert b["best_lr"].iloc[0] == 1e-2 and b["n_tied_lrs"].iloc[0] == 1 and abs(b["std"].iloc[0] - 0.0707) < 1e-3


@pytest.mark.parametrize("column", ["mean", "std", "min", "max"])
def test_a_best_table_without_a_statistic_is_refused_naming_the_file_and_line(tmp_path, column):
    """Issue 38: a NaN mean in a best table (sealed with its checksum, as the workflow writes one)
    passed the paper's reader, and the claim read "NaN%" with no reason. Every reader of a best
    table (the figures', the tables', the paper's) refuses it, naming the file and the line."""
    from pathlib import Path

    from arrepro.report.results import load_results

    df = cells({1e-3: [0.5, 0.7], 1e-2: [0.9, 0.8]})
    b = pd.concat([best_over_lr(df), best_over_lr(df.assign(width=128))], ignore_index=True)
    b.loc[1, column] = float("nan")
    best = tmp_path / "e_best.csv"
    write_table(b, best)
    expected = re.escape(str(best)) + f".*'{column}'.*line 3"
    with pytest.raises(UnreadableFile, match=expected):
        read_best_table(best)
    cells_csv = tmp_path / "e_cells.csv"
    write_table(df.assign(cell_dir=[f"c{i}" for i in range(len(df))], train_seconds=1.0, pinned=True), cells_csv)
    models = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())["models"]
    meta = {"experiments": {"e": {"title": "e", "grids": [{"series": "s", "models": ["m"]}]}},
            "reference_lrs": {}, "tasks": {"t": {"kind": "mqar", "num_kv_pairs": 4}}, "models": models}
    with pytest.raises(UnreadableFile, match=expected):  # the paper's reader
        load_results(meta, {"e": str(best)}, {"e": str(cells_csv)})


@pytest.mark.parametrize("rate", [float(np.logspace(-4, -2, 4)[2]), 1.2345e-3])  # 2.1544e-3: config lrs accept it
def test_a_rate_trained_on_every_seed_is_the_same_rate_in_the_table_and_the_claims(tmp_path, rate):
    """Issue 55: the best table wrote candidates with three significant digits (0.00215) and the
    claims compared the winner's full-precision rate (2.1544e-3) with them at a relative 1e-3:
    "at chance without having trained mamba's learning rate 0.00215 on every seed", on a loser
    that trained it on every seed. One definition of the same rate: the table writes its rates
    exactly, and the claims read them back as they were trained."""
    from arrepro.report import claims
    from arrepro.report.results import Results
    from arrepro.search.cover import same_lr

    rates = [1e-4, rate, 1e-2]
    df = pd.concat([cells({lr: [0.26, 0.27, 0.28] for lr in rates}).assign(model="attention", mixer="attention"),
                    cells({lr: [0.97, 0.98, 0.99] if lr == rate else [0.3] * 3 for lr in rates}).assign(model="mamba")])
    df = df.assign(layers=1, task="L64", task_name="L64")
    write_table(best_over_lr(df), tmp_path / "best.csv")
    best = read_best_table(tmp_path / "best.csv")
    mamba = best.set_index("model").loc["mamba"]
    assert mamba["best_lr"] == rate
    assert [float(x) for x in best.set_index("model").loc["attention", "candidates"].split(";")] == sorted(rates)
    assert same_lr(rate, rate) and not same_lr(rate, float(f"{rate:.3g}"))  # 3 digits are another rate
    models = yaml.safe_load(open("config.yaml"))["models"]
    from arrepro.config.cards import cards
    e = Results("fig3", {"grids": [{"series": "s", "models": ["attention", "mamba"]}]}, best.assign(series="s"),
                df.assign(cell_dir=range(len(df))), [], {"L64": {"kind": "mqar", "num_kv_pairs": 4}}, cards=cards(models))
    row = next(r for r in claims.judge({"fig3": e}) if r["id"] == "attn1")
    assert row["verdict"] == "consistent", row["compared"]


def test_a_windows_gaps_reach_the_best_table_and_the_window_table(tmp_path):
    """Issue 55: the best table dropped a window's gaps (``Window.gaps``), so a rate inside the window
    that is not good read as solid in the window table."""
    from arrepro.report.claim_kinds import window_of
    from arrepro.report.tables import lr_window

    b = best_over_lr(cells({1e-3: [0.95, 0.96], 3.16e-3: [0.5, 0.6], 1e-2: [0.95, 0.97], 3.16e-2: [0.3, 0.3]}),
                     learned=0.4375)
    write_table(b, tmp_path / "best.csv")
    row = read_best_table(tmp_path / "best.csv").iloc[0]
    w = window_of(row)
    assert (w.lo, w.hi, w.gaps) == (1e-3, 1e-2, 1)
    assert lr_window(read_best_table(tmp_path / "best.csv"))["good LRs"].iloc[0] == "1e-3 - 1e-2, 1 rate inside not good"
    assert "1 rate inside not good" in w.short()


def test_the_reference_grids_best_reads_the_same_rates_as_the_claims():
    """One definition of the same rate (cover.same_lr): a reference grid's 2.15e-3 is not a cell at
    2.16e-3 (the paper's reading of the reference grid took any rate within 1%)."""
    from arrepro.report.results import reference_best

    c = cells({1e-4: [0.3], 2.16e-3: [0.9], 1e-2: [0.5]}).assign(cell_dir=lambda d: d.index.astype(str))
    assert reference_best(c, "final_accuracy", [1e-4, 2.15e-3, 1e-2]) is None  # 2.15e-3 never trained
    c = cells({1e-4: [0.3], 2.15e-3: [0.9], 1e-2: [0.5]}).assign(cell_dir=lambda d: d.index.astype(str))
    assert reference_best(c, "final_accuracy", [1e-4, 2.15e-3, 1e-2]) == 0.9
