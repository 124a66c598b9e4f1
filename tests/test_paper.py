"""The manuscript builds for real: for each scale of config.yaml, fabricated results for every
experiment it declares (figures, tables, the aggregated CSVs, made with the real aggregator), then
the workflow's own rules `paper_numbers` and `paper` through Snakemake, then the PDF's text.

Needs pdflatex, bibtex, pdftotext and pdfinfo; as root, installs Debian's texlive-latex-base,
texlive-latex-recommended, texlive-fonts-recommended and poppler-utils if they are missing
(about a minute), otherwise skips."""
import os
import re
import zlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from arrepro.report.aggregate import best_over_lr
from arrepro.data import task_seq_len
from arrepro.config.grid import Grid, is_replication
from arrepro.report.blocks import block_models
from arrepro.report.lint import manuscript_keys
from arrepro.report.paper import grid_meta, write_paper_inputs
from arrepro.report.results import BEST_COLUMNS
from arrepro.cluster.tools import apt_install
from workflow_copy import copy_workflow

try:
    from arrepro.report.tables import render_table
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


def peak(model: str, mixer: str, width: int, layers: int, kind: str) -> tuple[float, float, float]:
    """A made-up but paper-shaped accuracy curve over log10(lr): (peak accuracy, centre, half-width
    in decades). Attention of 2+ layers (or with a convolution) solves the task over two decades;
    1-layer attention and the conv-less Mamba stay near chance; recurrent models grow with width
    in a narrow window; Hyena never learns (the demo's)."""
    if kind == "copy":
        return (0.95, -3.6, 0.9) if mixer == "attention" else (0.6 if layers > 12 else 0.9, -3.3, 0.3)
    if mixer in ("attention", "based"):
        learns = layers > 1 or "conv" in model or mixer == "based"
        return (0.995 if learns else 0.2, -2.8, 1.0)
    if mixer == "hyena" or model.endswith("noconv") or layers > 1 and width < 32:
        return (0.0, -2.5, 0.3)
    return (min(0.99, 0.3 + 0.7 * width / 64), -2.2, 0.35)


def cell_accuracy(task: dict, model: str, mixer: str, width: int, layers: int, lr: float, seed: int) -> float:
    """The same number for the same cell in every experiment and series (shared cells agree)."""
    chance = 1 / task["num_kv_pairs"] if task["kind"] == "mqar" else 0.0
    top, centre, half = peak(model, mixer, width, layers, task["kind"])
    rng = np.random.default_rng(zlib.crc32(repr((model, width, layers, f"{lr:.3g}", seed)).encode()))
    gain = max(top - chance, 0.0) * np.exp(-(((np.log10(lr) - centre) / half) ** 2))
    return float(np.clip(chance + gain + rng.normal(0, 0.02), 0, 1))


def fabricate_cells(grid: Grid, exp: str, rng) -> pd.DataFrame:
    """An experiment's cells as a search leaves them: the grid's learning rates (and, for a search,
    a midpoint beside the best) on the first seed, the best two (the candidates) on every seed."""
    metric = grid.metric(exp)
    rows = []
    for g in grid.experiments[exp]["grids"]:
        lrs = grid.lrs(g)
        search = grid.config["lr_searches"].get(g.get("search"), {})
        if search.get("rounds", 2) and g.get("search") and len(lrs) > 1:  # (a refinement's midpoint)
            lrs = sorted(set(lrs) | {float(np.sqrt(lrs[0] * lrs[1]))})
        for t, model, width, layers in ((t, m, w, nl) for t in g["tasks"] for m in g["models"]
                                        for w in g["widths"] for nl in g["layers"]):
            task = grid.tasks[grid.task_names[t]]
            mixer = grid.models[model]["mixer"]
            first = {lr: cell_accuracy(task, model, mixer, width, layers, lr, g["seeds"][0]) for lr in lrs}
            every = set(sorted(lrs, key=lambda x: -first[x])[:2]) if g.get("search") else set(lrs)
            for lr in lrs:
                for seed in g["seeds"] if lr in every else g["seeds"][:1]:
                    c = grid.cell(t, model, width, layers, g["recipe"], lr, seed)
                    a = cell_accuracy(task, model, mixer, width, layers, lr, seed)
                    rows.append({
                        "series": g.get("series", "main"), "task": c.task, "task_name": task["name"], "model": model,
                        "mixer": mixer, "width": width, "layers": layers, "recipe": c.recipe, "lr": float(c.lr),
                        "seed": seed, "seq_len": task_seq_len(task), "final_accuracy": a, "best_accuracy": a,
                        metric: a, "diverged": False, "parameters": 1000 * width * layers,
                        "train_seconds": rng.uniform(1, 10), "cell_dir": c.path, "pinned": True,
                    })
    return pd.DataFrame(rows)


def best_table(cells: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The best table a search writes: the aggregator's statistic over the candidates (the learning
    rates trained on every seed), with the search's columns (what was tried, its outcome)."""
    n = cells.groupby(["series", "task", "model", "width", "layers", "lr"])["seed"].transform("nunique")
    full = cells.groupby(["series", "task", "model", "width", "layers"])["seed"].transform("nunique")
    best = best_over_lr(cells[n == full], metric)
    keys = ["series", "task", "model", "width", "layers"]
    tried = cells.groupby(keys).agg(n_lrs=("lr", "nunique"), n_cells=("cell_dir", "nunique")).reset_index()
    best = best.drop(columns=["n_lrs", "n_cells"]).merge(tried, on=keys)
    best["search"] = best["series"] + "/" + best["model"] + "/" + best["width"].astype(str) + "/" + best["layers"].astype(str)
    best["outcome"] = np.where(best["window_status"] == "not learned", "not learned", "resolved")
    return best


def fabricate_results(wd: Path, scale: str, config: dict) -> None:
    """What the workflow would have made for this scale, with made-up accuracies; in the first
    experiment, the first model's best is PLANTED (its first setting's, at a candidate learning rate)."""
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
            metric = grid.metric(exp)
            main = next(g.get("series", "main") for g in grid.experiments[exp]["grids"] if not is_replication(g))
            model = cells["model"] == cells.loc[cells["series"] == main, "model"].iloc[0]
            cells.loc[model, metric] = cells.loc[model, metric].clip(upper=PLANTED - 0.1)
            pool = cells[(cells["series"] == main) & model]
            on_more = pool[pool["seed"] != pool["seed"].min()]  # a candidate: trained on every seed
            first = (on_more if len(on_more) else pool).iloc[0]
            same = (cells[["task", "model", "width", "layers", "lr"]]
                    == first[["task", "model", "width", "layers", "lr"]]).all(axis=1)
            cells.loc[same, metric] = PLANTED
        cells.to_csv(out / f"tables/{exp}_cells.csv", index=False)
        best_table(cells, grid.metric(exp)).to_csv(out / f"tables/{exp}_best.csv", index=False)
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
    if block_models(grid):  # the Mamba blocks' figure (rules block_structure, blocks)
        (out / "tables/blocks.json").write_text('{"blocks": []}\n')
        fig, ax = plt.subplots(figsize=(6, 2.5))
        ax.set_title("fabricated figure blocks")
        fig.savefig(out / "blocks.pdf")
        plt.close(fig)


# What a sentence about a result the scale does not have, or a number badly put into words, prints
BAD_TEXT = {"a missing number": r"n/a", "NaN": r"(?i)\bnan\b", "Python's None": r"\bNone\b",
            "a count of nothing": r"\b0 (rounds|epochs|seeds|layers)\b",
            "a wrong plural": r"\b1 (epochs|rounds|seeds|layers|settings|runs|learning rates|model variants)\b",
            "a plural left to the reader": r"\w\(s\)", "a double dot": r"[a-z]\.\. "}


def bad_text(flat: str) -> list[str]:
    """The passages of a PDF's text that read as a program's output, not a person's."""
    return [f"{what}: ...{flat[max(m.start() - 60, 0):m.end() + 40]}..." for what, rx in BAD_TEXT.items()
            for m in re.finditer(rx, flat)]


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
    assert not bad_text(flat), "\n".join(bad_text(flat))
    if block_models(Grid(config, scale)):  # the paper's Figs. 8-10, under their numbers
        assert "fabricated figure blocks" in flat and "<results/blocks.pdf" in tex_log
        assert re.search(r"Figures? (8|9|10)\b.{0,20}: One layer of Mamba", flat), flat
    # one numbering: the paper's numbers for its figures and tables, S1, S2, ... for the document's own
    for exp, e in Grid(config, scale).experiments.items():
        m = re.fullmatch(r"(fig|table)(\d+)", exp)
        if m:
            assert f"{'Figure' if m.group(1) == 'fig' else 'Table'} {m.group(2)}: " in flat, exp
    assert "Table S1: Tasks and recipes" in flat and "Numbering." in flat


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
    is a known key, which main.tex reads only where the run has it); and the check sees its keys."""
    keys = manuscript_keys((ROOT / "paper/main.tex").read_text())
    assert "fig3/mamba/max" in keys and "claim/lrwindow" in keys and not any("#" in k for k in keys)
    paper_inputs(tmp_path, config, ROOT / "paper/main.tex")
    assert r"\arset{claims/inconclusive}" in (tmp_path / "numbers.tex").read_text()


def test_one_rounding_rule_for_the_readme_and_the_pdf(tmp_path, config):
    """0.9755 printed 0.976 in the README (three decimals, half up) and 97.5 in the PDF (binary
    100 * 0.9755 = 97.549...): one rule now, the same digits either way, tables included."""
    from arrepro.report.tables import render_table
    from arrepro.report.tex import acc, pct, pct_range

    assert (acc(0.9755), acc(0.9755, percent=False), pct(0.9755)) == ("97.6", "0.976", r"97.6\%")
    assert (acc(0.97549), acc(0.0), acc(1.0), acc(0.6640625)) == ("97.5", "0.0", "100.0", "66.4")
    assert pct_range(0.9755, 0.95, 0.9755) == r"97.6\% [95.0--97.6]"
    grid = Grid(config, "demo")
    cells = fabricate_cells(grid, "table2", np.random.default_rng(0))
    best = best_table(cells, "final_accuracy").assign(mean=0.9755, std=0.0)
    best.to_csv(tmp_path / "b.csv", index=False)
    cells.to_csv(tmp_path / "c.csv", index=False)
    render_table("accuracy", tmp_path / "b.csv", tmp_path / "c.csv", grid.experiment_models("table2"),
                 "final_accuracy", "demo", tmp_path / "t.csv", tmp_path / "t.tex")
    assert "97.6 $\\pm$ 0.0" in (tmp_path / "t.tex").read_text() and "97.5" not in (tmp_path / "t.tex").read_text()


@pytest.mark.parametrize("scale", ["demo", "tiny"])
def test_the_numbers_read_as_written(tmp_path, config, scale):
    """numbers.tex alone (no TeX needed): every sentence, number and caption text it defines, on
    realistic tables, reads as written by a person (the PDF test checks what main.tex makes of them)."""
    grid = Grid(config, scale)
    best_csvs, cells_csvs = {}, {}
    for exp in grid.experiments:
        cells = fabricate_cells(grid, exp, np.random.default_rng(0))
        cells.to_csv(cells_csvs.setdefault(exp, tmp_path / f"{exp}_cells.csv"), index=False)
        best_table(cells, grid.metric(exp)).to_csv(best_csvs.setdefault(exp, tmp_path / f"{exp}_best.csv"), index=False)
    write_paper_inputs(grid_meta(grid, config), best_csvs, cells_csvs, tmp_path / "numbers.tex", tmp_path / "setup.tex")
    values = re.findall(r"\\arset\{[^{}]*\}\{(.*)\}$", (tmp_path / "numbers.tex").read_text(), re.M)
    values += re.findall(r"\\newcommand\{\\[A-Za-z]+\}\{(.*)\}$", (tmp_path / "numbers.tex").read_text(), re.M)
    text = " ".join(values)
    assert not bad_text(text), "\n".join(bad_text(text))
    assert not re.search(r"[^\x00-\x7f]", text)  # (a raw '±' needs TS1 fonts, which stop pdflatex)


def test_the_claims_files_hold_the_pdfs_claims_rows(tmp_path, config):
    """claims.md and claims.csv beside the PDF (issue 56): the same rows as the PDF's claims table
    (\\ClaimRows in numbers.tex), in its order, with the verdicts, what was compared, each 95%
    interval it quotes and, for an inconclusive row, why; claims.csv loads in pandas."""
    from arrepro.report.tex import tex_escape

    grid = Grid(config, "demo")
    best_csvs, cells_csvs = {}, {}
    for exp in grid.experiments:
        cells = fabricate_cells(grid, exp, np.random.default_rng(0))
        cells.to_csv(cells_csvs.setdefault(exp, tmp_path / f"{exp}_cells.csv"), index=False)
        best_table(cells, grid.metric(exp)).to_csv(best_csvs.setdefault(exp, tmp_path / f"{exp}_best.csv"), index=False)
    md, csv = tmp_path / "claims.md", tmp_path / "claims.csv"
    write_paper_inputs(grid_meta(grid, config), best_csvs, cells_csvs, tmp_path / "numbers.tex", tmp_path / "setup.tex",
                       claims_out=(md, csv))
    numbers = (tmp_path / "numbers.tex").read_text()
    body = numbers.split("\\newcommand{\\ClaimRows}{", 1)[1].split("}\n\\newcommand{\\RecipeClaimRows}", 1)[0]
    pdf_rows = [[c.strip() for c in line.removesuffix("\\\\").split(" & ")] for line in body.strip().splitlines()]
    table = pd.read_csv(csv, keep_default_na=False)
    assert list(table.columns) == ["id", "experiment", "claim", "verdict", "compared", "interval", "reason"]
    assert len(table) == len(pdf_rows) >= 10
    assert [[tex_escape(r.experiment), tex_escape(r.claim), tex_escape(r.compared), r.verdict]
            for r in table.itertuples()] == pdf_rows
    assert set(table["verdict"]) <= {"consistent", "contradicted", "inconclusive"}
    for r in table.itertuples():
        assert (r.reason != "") == (r.verdict == "inconclusive"), (r.id, r.verdict, r.reason)
        assert r.interval.count(" to ") == r.compared.count("% interval "), (r.id, r.interval, r.compared)
    interval_rows = table[table["interval"] != ""]
    assert len(interval_rows) and all(f"interval {i.split('; ')[0]}" in c
                                      for i, c in zip(interval_rows["interval"], interval_rows["compared"]))
    text = md.read_text()
    assert sum(line.startswith("| ") for line in text.splitlines()) == len(table) + 1  # the header and a row each
    for r in table.itertuples():
        assert f"| {r.experiment} | {r.claim.replace('|', chr(92) + '|')} | **{r.verdict}** |" in text
    assert "This scale tests" in text and "The rules every verdict follows" in text
