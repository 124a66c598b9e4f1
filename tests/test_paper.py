"""The manuscript builds for real: for each scale of config.yaml, fabricated results for every
experiment it declares (figures, tables, the aggregated CSVs, made with the real aggregator), then
the workflow's own rules `paper_numbers` and `paper` through Snakemake, then the PDF's text.

Needs pdflatex, bibtex, pdftotext and pdfinfo; as root, installs Debian's texlive-latex-base,
texlive-latex-recommended, texlive-fonts-recommended and poppler-utils if they are missing
(about a minute), otherwise skips."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from arrepro.aggregate import best_over_lr
from arrepro.data import task_seq_len
from arrepro.grid import Grid
from arrepro.paper import BEST_COLUMNS, grid_meta, is_replication, manuscript_keys, write_paper_inputs
from arrepro.tools import apt_install

try:
    from arrepro.tables import render_table
except ImportError:  # no table writer yet: plain tabulars
    render_table = None

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ["pdflatex", "bibtex", "pdftotext", "pdfinfo"]
DEBIAN = ["texlive-latex-base", "texlive-latex-recommended", "texlive-fonts-recommended", "poppler-utils"]
PLANTED = 0.9731  # one setting's accuracy: the number that must reach the PDF's text
SCALES = list(yaml.safe_load((ROOT / "config.yaml").read_text())["scales"])


@pytest.fixture(scope="module")
def tex():
    if all(shutil.which(t) for t in TOOLS):
        return
    problem = apt_install(DEBIAN, capture=True)
    if problem:
        pytest.skip(f"needs {', '.join(TOOLS)}: {problem}")
    assert all(shutil.which(t) for t in TOOLS)


def copy_workflow(dst: Path) -> Path:
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, dst / name)
    for name in ("workflow", "src", "scripts", "paper", "envs"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    snakefile = (dst / "Snakefile").read_text()
    if "workflow/rules/paper.smk" not in snakefile:  # until the Snakefile includes it
        (dst / "Snakefile").write_text(snakefile + '\ninclude: "workflow/rules/paper.smk"\n')
    return dst


def fabricate_cells(grid: Grid, exp: str, rng) -> pd.DataFrame:
    metric = grid.metric(exp)
    rows = []
    for g in grid.experiments[exp]["grids"]:
        for c in grid.grid_cells(g):
            task = grid.tasks[c.task]
            rows.append({
                "series": g.get("series", "main"), "task": c.task, "task_name": task["name"], "model": c.model,
                "mixer": grid.models[c.model]["mixer"], "width": c.width, "layers": c.layers, "recipe": c.recipe,
                "lr": float(c.lr), "seed": c.seed, "seq_len": task_seq_len(task),
                "final_accuracy": rng.uniform(0, 0.9), "best_accuracy": rng.uniform(0, 0.9),
                metric: rng.uniform(0, 0.9),
                "diverged": bool(rng.random() < 0.02), "parameters": 1000 * c.width * c.layers,
                "train_seconds": rng.uniform(1, 10), "cell_dir": c.path, "pinned": True,
            })
    return pd.DataFrame(rows)


def fabricate_results(wd: Path, scale: str, config: dict) -> None:
    """What the workflow would have made for this scale, with made-up accuracies; in the first
    experiment, one setting of the main series gets PLANTED at one learning rate for every seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = Grid(config, scale)
    rng = np.random.default_rng(0)
    out = wd / grid.out
    (out / "tables").mkdir(parents=True)
    for i, exp in enumerate(grid.experiments):
        cells = fabricate_cells(grid, exp, rng)
        if i == 0:
            main = next(g.get("series", "main") for g in grid.experiments[exp]["grids"] if not is_replication(g))
            first = cells[cells["series"] == main].iloc[0]
            same = (cells[["series", "task", "model", "width", "layers", "lr"]]
                    == first[["series", "task", "model", "width", "layers", "lr"]]).all(axis=1)
            cells.loc[same, grid.metric(exp)] = PLANTED
            cells.loc[same, "diverged"] = False  # (a diverged run's accuracy counts as 0)
        cells.to_csv(out / f"tables/{exp}_cells.csv", index=False)
        best_over_lr(cells, grid.metric(exp)).to_csv(out / f"tables/{exp}_best.csv", index=False)
        if "plot" in grid.experiments[exp]:
            fig, ax = plt.subplots(figsize=(6, 2.5))
            ax.plot([1, 2, 3], [0.2, 0.5, 0.9])
            ax.set_title(f"fabricated figure {exp}")
            for ext in ("pdf", "png"):
                fig.savefig(out / f"{exp}.{ext}")
            plt.close(fig)
        elif "table" in grid.experiments[exp]:
            t = out / "tables"
            if render_table is not None:  # the workflow's own table writer
                render_table(grid.experiments[exp]["table"], t / f"{exp}_best.csv", t / f"{exp}_cells.csv",
                             grid.experiment_models(exp), grid.metric(exp), scale,
                             out / f"{exp}.csv", out / f"{exp}.tex")
            else:
                (out / f"{exp}.tex").write_text(
                    "\\begin{tabular}{lr}\\toprule\nmodel & accuracy \\\\\\midrule\n"
                    f"{exp.replace('_', '-')} & 0.5 \\\\\n\\bottomrule\n\\end{{tabular}}\n")


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
def test_paper_builds_from_the_results(tex, tmp_path, scale):
    wd = copy_workflow(tmp_path)
    config = yaml.safe_load((wd / "config.yaml").read_text())
    fabricate_results(wd, scale, config)
    p = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--config", f"scale={scale}",
                        "--allowed-rules", "paper_numbers", "paper", "--", f"results/{scale}/paper.pdf"],
                       cwd=wd, capture_output=True, text=True,
                       env={**os.environ, "max_print_line": "10000"})  # TeX's log: one file name a line
    log = wd / f"results/{scale}/logs/paper.log"
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    pdf = wd / f"results/{scale}/paper.pdf"
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    n_exp = len(Grid(config, scale).experiments)
    assert pages >= 3 + n_exp // 3, info  # title and setup, results, discussion, references; the floats
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    assert f"Scale of every number in this document: {scale}" in flat
    assert f"{100 * PLANTED:.1f}%" in flat  # drawn from the fabricated tables, not typed
    tex_log = (wd / f"results/{scale}/paper/build/main.log").read_text(errors="replace")
    assert "Float too large" not in tex_log
    for exp, e in Grid(config, scale).experiments.items():  # every figure and table is in
        if "plot" in e:
            assert f"fabricated figure {exp}" in flat, exp
            assert f"<results/{exp}.pdf" in tex_log, exp
        if "table" in e:
            assert re.search(rf"\((\./)?results/{exp}\.tex", tex_log), exp
    assert "??" not in flat  # no undefined reference or citation


def test_a_missing_column_fails_loudly(tmp_path, config):
    scale = config["scale"]
    grid = Grid(config, scale)
    exp = next(iter(grid.experiments))
    cells = fabricate_cells(grid, exp, np.random.default_rng(0))
    best = best_over_lr(cells, grid.metric(exp))
    assert set(BEST_COLUMNS) <= set(best.columns)  # the aggregator writes what the paper reads
    best.drop(columns=["n_seeds"]).to_csv(tmp_path / "best.csv", index=False)
    cells.to_csv(tmp_path / "cells.csv", index=False)
    meta = {**grid_meta(grid, config), "experiments": {exp: grid.experiments[exp]}}
    with pytest.raises(ValueError, match="n_seeds"):
        write_paper_inputs(meta, {exp: tmp_path / "best.csv"}, {exp: tmp_path / "cells.csv"},
                           tmp_path / "numbers.tex", tmp_path / "setup.tex")


def paper_inputs(tmp_path, config, manuscript):
    grid = Grid(config, config["scale"])
    exp = next(iter(grid.experiments))
    cells = fabricate_cells(grid, exp, np.random.default_rng(0))
    best_over_lr(cells, grid.metric(exp)).to_csv(tmp_path / "best.csv", index=False)
    cells.to_csv(tmp_path / "cells.csv", index=False)
    meta = {**grid_meta(grid, config), "experiments": {exp: grid.experiments[exp]}}
    write_paper_inputs(meta, {exp: tmp_path / "best.csv"}, {exp: tmp_path / "cells.csv"},
                       tmp_path / "numbers.tex", tmp_path / "setup.tex", manuscript)
    return exp


@pytest.mark.parametrize("typo", [r"\R{fig1/attention/maxx}", r"\R{fig1/atention/max}", r"\R{fgi1/title}",
                                  r"\Verdict{lrwindwo}", r"\R{claims/consistant}"])
def test_a_key_the_numbers_cannot_define_fails_naming_it(tmp_path, config, typo):
    """A misspelt key used to print "n/a" in the PDF; now paper_numbers fails and names it."""
    tex = tmp_path / "main.tex"
    tex.write_text((ROOT / "paper/main.tex").read_text() + f"\n{typo}\n% {typo.replace('x', 'y')} in a comment\n")
    key = typo.split("{")[1].rstrip("}")
    with pytest.raises(ValueError, match=re.escape(key)):
        paper_inputs(tmp_path, config, tex)


def test_the_manuscript_keys_are_all_known(tmp_path, config):
    """paper/main.tex itself passes (a result this scale lacks, like a model it does not train,
    is a known key and reads n/a); and the check sees its keys."""
    keys = manuscript_keys((ROOT / "paper/main.tex").read_text())
    assert "fig1/mamba/maxlr" in keys and "claim/lrwindow" in keys and not any("#" in k for k in keys)
    paper_inputs(tmp_path, config, ROOT / "paper/main.tex")
    assert r"\arset{claims/inconclusive}" in (tmp_path / "numbers.tex").read_text()
