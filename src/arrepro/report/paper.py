"""The manuscript's numbers: LaTeX written from the experiments' aggregated tables.

``write_paper_inputs`` reads, for every experiment of the scale, its best-over-LR table
(``{exp}_best.csv``) and its cells (``{exp}_cells.csv``), and writes two files that
paper/main.tex inputs:

numbers.tex  - ``\\newcommand`` macros for the run as a whole (``\\ScaleName``, ``\\NumCells``, ...);
             - a key store read with ``\\R{key}``, one entry per experiment, model and statistic,
               e.g. ``\\R{fig3/mamba/max}`` or ``\\R{fig1/attention/window}`` (see ``arrepro.report.results.model_stats``);
             - ``\\arexp{exp}`` for each declared experiment (main.tex's ``\\IfExp`` reads it) and
               ``\\ExpList``, the experiments in config order;
             - ``\\ClaimRows``: the paper's claims, each with what this run measured and whether it
               agrees (see ``arrepro.report.claims.CLAIMS``), and ``\\R{claim/ID}`` for each verdict.
setup.tex    ``\\SetupTables`` and ``\\SetupGrids``: the scale's tasks, recipes and grids, as the
             config declares them.
claims.md, claims.csv  the claims table's rows (the same ``arrepro.report.claims.judge``) as files a
             user reads in a terminal, diffs between runs or loads in pandas (arrepro.report.claims_files).

The parts, each in its own module: reading the tables (arrepro.report.results), the results
and the models in words (arrepro.report.prose: a model is named by its card's label), the setup
in words (arrepro.report.setup_text), the keys (arrepro.report.texkeys) and the manuscript's lint
(arrepro.report.lint); this module writes the files.

Nothing here is typed by hand: a number in the manuscript is a number in a results table.
A missing column fails loudly. The text names only what the scale ran: a passage listing models
(``arrepro.report.prose.sentences``) lists the ones the experiment trained and says which of the paper's it does
not; main.tex reads a single model's number only under ``\\IfR`` (a key left undefined would print
"n/a", which tests/test_paper.py refuses). Figures and tables carry one numbering
(``arrepro.report.texkeys.float_numbers``): the paper's for its own, S1, S2, ... for the document's.
"""
from __future__ import annotations

import re
from pathlib import Path

from arrepro.config import defaults
from arrepro.report.claims import judge
from arrepro.report.claims_files import write_claims
from arrepro.report.lint import check_citations, check_manuscript_keys
from arrepro.report.results import load_results
from arrepro.report.setup_text import setup_tex
from arrepro.report.texkeys import numbers_tex


def write_paper_inputs(meta: dict, best_csvs: dict[str, str], cells_csvs: dict[str, str],
                       numbers_out: str | Path, setup_out: str | Path, manuscript: str | Path = "paper/main.tex",
                       claims_out: tuple[str | Path, str | Path] | None = None) -> None:
    """``meta``: see ``grid_meta``. Fails, naming the key, when ``manuscript`` reads a key that the
    numbers do not define and that is no known result (``check_manuscript_keys``), or when a model
    card cites a key the bibliography lacks (``check_citations``). ``claims_out``: (claims.md,
    claims.csv), the claims table's rows as files."""
    results = load_results(meta, best_csvs, cells_csvs)
    text = numbers_tex(meta, results)
    check_manuscript_keys(manuscript, set(re.findall(r"\\arset\{([^{}]*)\}", text)), meta)
    check_citations(manuscript, meta)
    Path(numbers_out).parent.mkdir(parents=True, exist_ok=True)
    Path(numbers_out).write_text(text)
    Path(setup_out).write_text(setup_tex(meta))
    if claims_out is not None:
        write_claims(judge(results), meta["scale"], *claims_out)


def grid_meta(grid, config: dict) -> dict:
    """What the paper needs from the config (the paper_numbers rule's param)."""
    from arrepro.report.blocks import block_models
    from arrepro.config.grid import schema_defaults

    return {"scale": grid.scale_name, "device": defaults.scale(grid.scale, "device"), "tasks": grid.scale["tasks"],
            "recipes": grid.scale["recipes"], "experiments": grid.experiments, "lr_grids": config["lr_grids"],
            "reference_lrs": {e: grid.reference_lrs(e) for e in grid.experiments},
            "metric": config["aggregate"]["metric"], "paper_scale": config["scales"].get("paper"),
            "models": config["models"], "lr_protocol": config.get("lr_protocol", schema_defaults()["lr_protocol"]),
            "lr_searches": config.get("lr_searches", {}), "blocks": list(block_models(grid))}
