"""Every figure and table of a scale renders through the workflow's own rules (aggregate,
figure, table, cells_table) from cell results shaped like the trainer's, with made-up numbers:
no training, but the real aggregation, plotting and table code on every experiment's cells,
copy-task experiments included."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from arrepro.config.cellfiles import metrics_text, seal
from arrepro.config.grid import Grid

from test_workflow import ROOT
from workflow_copy import copy_workflow


def fabricate_cell(spec: dict, path, rng, epochs: int = 3) -> None:
    """A finished cell as train_cell leaves it: metrics.jsonl and result.json (the keys the
    aggregation and the figures read), with random accuracies."""
    path.mkdir(parents=True)
    rows = [{"epoch": e + 1, "step": 10 * (e + 1), "lr": spec["lr"], "train_loss": float(rng.uniform(0.1, 4)),
             "test_loss": float(rng.uniform(0.1, 4)), "test_accuracy": float(rng.uniform(0, 1)),
             "test_exact_match": float(rng.uniform(0, 1)), "seconds": float(e + 1)} for e in range(epochs)]
    (path / "metrics.jsonl").write_text(metrics_text(rows))
    last = rows[-1]
    result = {
        **{k: spec[k] for k in ("task", "model", "width", "layers", "recipe", "lr", "seed", "batch_size")},
        "mixer": spec["model_def"]["mixer"],
        "final_accuracy": last["test_accuracy"], "best_accuracy": max(r["test_accuracy"] for r in rows),
        "final_exact_match": last["test_exact_match"], "final_test_loss": last["test_loss"],
        "diverged": False, "parameters": 100 * spec["width"] ** 2 * spec["layers"], "epochs_run": epochs,
        "steps": last["step"], "train_seconds": 1.0, "tokens_per_second": 1.0, "device": "cpu", "cell": spec,
    }
    (path / "result.json").write_text(json.dumps(seal(result, metrics_text(rows))))


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["demo"])
def test_every_figure_and_table_renders(tmp_path, scale):
    wd = copy_workflow(tmp_path)
    config = yaml.safe_load((wd / "config.yaml").read_text())
    grid = Grid(config, scale)
    rng = np.random.default_rng(0)
    for c in grid.all_cells():
        fabricate_cell(grid.cell_spec(c.task, c.model, c.width, c.layers, c.recipe, c.lr, c.seed), wd / c.path, rng)
    figures = [e for e, x in grid.experiments.items() if "plot" in x]
    tables = [e for e, x in grid.experiments.items() if "table" in x]
    out = f"results/{scale}"
    targets = [f"{out}/{e}.png" for e in figures] + [f"{out}/{e}.tex" for e in tables] + [f"{out}/tables/cells.csv"]
    # the fixed grids (lr_protocol grid): every cell is known before any result, so all are made up
    p = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"scale={scale}", "lr_protocol=grid",
                        "--allowed-rules", "search_round", "aggregate", "figure", "table", "cells_table", "--", *targets],
                       cwd=wd, capture_output=True, text=True)
    logs = "".join(f.read_text()[-1500:] for f in (wd / out / "logs").rglob("*.log"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:] + logs
    for t in targets:
        assert (wd / t).stat().st_size > (5000 if t.endswith(".png") else 200), t
    for e in tables:
        assert "tabular" in (wd / f"{out}/{e}.tex").read_text(), e
    every = pd.read_csv(wd / f"{out}/tables/cells.csv")  # every cell once, shared ones included
    assert sorted(every["cell_dir"]) == sorted(c.path for c in grid.all_cells())


# --------------------------------------------------------------------------- reading at a glance
# Figures drawn from small hand-made tables (no workflow): milliseconds to build, about a second
# to draw each.
def drawn(monkeypatch, kind: str, best: pd.DataFrame, cells: pd.DataFrame, tmp_path, **extra):
    """The matplotlib figure a plot function draws (captured before it is closed)."""
    from arrepro.report import plots

    figs = []
    monkeypatch.setattr(plots.plt, "close", lambda fig: figs.append(fig))
    plots.PLOTS[kind](best, cells, "t", "demo", [tmp_path / "f.png"], **extra)
    return figs[0]


def best_rows(rows: list[dict]) -> pd.DataFrame:
    base = {"task": "L32", "task_name": "L32", "seq_len": 32, "mixer": "mamba", "layers": 1, "recipe": "demo",
            "std": 0.0, "n_seeds": 3, "candidates": "0.001;0.01", "seeds": "0;1;2"}
    return pd.DataFrame([{**base, **r} for r in rows]).assign(min=lambda d: d["mean"] - 0.01, max=lambda d: d["mean"] + 0.01)


def test_fig1_labels_every_decade_and_half_decade_tried(monkeypatch, tmp_path):
    from arrepro.report.plots import lr_ticks

    lrs = [1e-4, 3.16e-4, 1e-3, 1.78e-3, 3.16e-3, 1e-2]
    major, minor = lr_ticks(lrs)
    assert major == [1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2] and minor == [1.78e-3]
    cells = pd.DataFrame([{"series": "s", "task_name": "L32", "seq_len": 32, "model": "attention", "width": 32,
                           "layers": 2, "lr": lr, "seed": seed, "final_accuracy": 0.5, "diverged": False}
                          for lr in lrs for seed in (0, 1)])
    best = best_rows([{"series": "s", "model": "attention", "width": 32, "layers": 2, "best_lr": 1e-3, "mean": 0.5}])
    ax = drawn(monkeypatch, "lr", best, cells, tmp_path).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["1e-4", "3.16e-4", "1e-3", "3.16e-3", "1e-2"], labels


def test_fig2_coinciding_series_stay_distinguishable(monkeypatch, tmp_path):
    """The replication's cells are the search's own: same numbers. Its points are drawn beside the
    search's, with another marker and line."""
    same = {"model": "mamba", "mean": 0.5, "best_lr": 1e-2}
    best = best_rows([{**same, "series": s, "width": w} for s in ("the search (this work)", "replication (coarse grid)")
                      for w in (16, 32)])
    from arrepro.config.cards import cards

    models = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]
    ax = drawn(monkeypatch, "width", best, pd.DataFrame(), tmp_path, cards=cards(models),
               replication=["replication (coarse grid)"]).axes[0]  # (its grid says `replication: true`)
    lines = [line for line in ax.get_lines() if line.get_marker() in ("o", "s", "^", "D")]  # (not the bars' caps)
    assert len(lines) == 2
    a, b = lines
    assert a.get_marker() != b.get_marker() and a.get_linestyle() != b.get_linestyle()
    assert all(abs(x / y - 1) > 0.02 for x, y in zip(a.get_xdata(), b.get_xdata()))  # beside, not on top


def test_fig4_labels_clear_their_markers(monkeypatch, tmp_path):
    best = best_rows([{"series": "width scaling", "model": "mamba", "width": w, "layers": 1, "mean": m,
                       "parameters": 14000 * w / 32, "best_lr": 1e-2} for w, m in ((16, 0.4), (32, 0.55))]
                     + [{"series": "depth scaling", "model": "attention", "mixer": "attention", "width": 32,
                         "layers": nl, "mean": m, "parameters": 17900 * nl, "best_lr": 1e-3} for nl, m in ((1, 0.27), (2, 0.95))]
                     # the demo's: 2x24 Mamba beside 1x32 attention (15.8k and 17.9k parameters, 23% and 27%)
                     + [{"series": "depth scaling", "model": "mamba", "width": 24, "layers": 2, "mean": 0.233,
                         "parameters": 15800, "best_lr": 1e-2}])
    fig = drawn(monkeypatch, "params", best, pd.DataFrame(), tmp_path)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    points = fig.dpi / 72
    labels = [t for t in ax.texts if "x" in t.get_text()]
    assert len(labels) == 5
    markers = [line for line in ax.get_lines() if line.get_marker() not in ("None", "", None, "_")]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # nor each other
    for t in labels:
        box = t.get_window_extent(renderer)
        for line in markers:
            r = (line.get_markersize() / 2 + line.get_markeredgewidth() + 2) * points  # 2 points clear
            for x, y in ax.transData.transform(line.get_xydata()):
                assert not (box.x0 - r < x < box.x1 + r and box.y0 - r < y < box.y1 + r), (t.get_text(), box, x, y)


def test_the_lr_figure_draws_every_series_and_a_diverged_cell_at_0(monkeypatch, tmp_path):
    """Issue 55: the learning-rate figure drew a diverged cell at its raw final accuracy (the tables
    count 0) and only the experiment's first series (a second was neither drawn nor named)."""
    def cell(series, lr, seed, acc, diverged=False):
        return {"series": series, "task_name": "L32", "seq_len": 32, "model": "mamba", "width": 32, "layers": 1,
                "lr": lr, "seed": seed, "final_accuracy": acc, "diverged": diverged}
    rows = [cell("the search", lr, s, 0.9) for lr in (1e-3, 1e-2) for s in (0, 1)]
    rows += [cell("the search", 1e-1, 0, 0.6, diverged=True), cell("the search", 1e-1, 1, 0.6, diverged=True)]
    rows += [cell("another grid", lr, s, 0.5) for lr in (1e-3, 3.16e-2) for s in (0, 1)]
    best = best_rows([{"series": s, "model": "mamba", "width": 32, "best_lr": 1e-3, "mean": m}
                      for s, m in (("the search", 0.9), ("another grid", 0.5))])
    fig = drawn(monkeypatch, "lr", best, pd.DataFrame(rows), tmp_path)
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if line.get_marker() in ("o", "s", "^") and line.get_markersize() < 10]
    assert len(lines) == 2  # one per series (the rings are larger)
    search = next(line for line in lines if len(line.get_xdata()) == 3)
    assert list(search.get_ydata()) == [0.9, 0.9, 0.0]  # 1e-1 diverged on both seeds: 0, as the tables count it
    other = next(line for line in lines if line is not search)
    assert other.get_marker() != search.get_marker() and other.get_linestyle() != search.get_linestyle()
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "mamba, the search" in names and "mamba, another grid" in names, names
