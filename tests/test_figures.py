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

from arrepro.cellfiles import metrics_text, seal
from arrepro.grid import Grid

from test_workflow import copy_workflow


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
