"""The manuscript's keys: numbers.tex, every ``\\R{key}`` an experiment, the claims and the run
define (``numbers_tex``), the one numbering of the floats (``float_numbers``), and every key
numbers.tex can define (``MODEL_STATS``, ``EXP_FIELDS``, ``RUN_KEYS``: arrepro.report.lint checks
the manuscript against them)."""
from __future__ import annotations

import re

import pandas as pd

from arrepro.config import defaults
from arrepro.config.cards import cards as read_cards
from arrepro.report.claims import CLAIMS, judge, judge_by_recipe, paper_claim
from arrepro.report.verdicts import rules_text
from arrepro.report.prose import (GOOD_TEXT, METRIC_NAMES, cap, claims_summary, join, model_name, models_text,
                                  numerics_text, outcome_text, rests_on_short, seeds_list, sentences)
from arrepro.report.results import model_stats
from arrepro.report.setup_text import paper_scale_summary, protocol_text, recipes_summary, tasks_summary
from arrepro.report.tex import fmt_int, pct, plural, points, tex_escape, tex_lr

# Every key numbers.tex can define: \R{EXP/FIELD}, \R{EXP/[zoo/]MODEL/[L<n>/]STAT}, \R{claim/ID}, \R{claims/...}.
MODEL_STATS = {"max", "maxpm", "maxwidth", "maxlayers", "maxlen", "maxlr", "maxparams", "min", "minwidth", "minlen",
               "solved", "settings", "solvedof", "solvetext", "maxbasis", "good", "nlrs", "window", "refbest", "cells", "diverged",
               *(f"{shape}/{k}" for shape in ("wide", "deep") for k in ("acc", "width", "layers", "params", "shape"))}


SENTENCES = {"models", "maxlist", "basis", "goodtext", "goodmain", "besttext", "widest", "gridtext", "legend", "untrained"}  # arrepro.report.prose.sentences


EXP_FIELDS = {"title", "metric", "layers", "reflrs", "nlrs", "zoo/nlrs", "gain", "pespread", "pespreadmodel",
              *SENTENCES, *(f"best/{k}" for k in ("model", "width", "layers", "len", "acc", "basis"))}


# \R{fig5/copymamba/max}, ...: a copy-task experiment's first model of each family (its cards')
COPY_ALIASES = {"copytransformer": "attention", "copymamba": "recurrent"}


RUN_KEYS = {"claims/n", "claims/consistent", "claims/contradicted", "claims/inconclusive", "claims/notjudged",
            "claims/summary", "blocks/models", "blocks/paper", "blocks/paperdrew"}


def experiment_keys(e) -> dict[str, str]:
    """An experiment's keys (``\\R{EXP/...}``) of its ``arrepro.report.results.Results``."""
    out = {f"{e.name}/title": tex_escape(e.title),
           f"{e.name}/metric": METRIC_NAMES.get(e.metric, tex_escape(e.metric))}
    for part, prefix in (("main", ""), ("zoo", "zoo/")):
        for model in e.rows(part=part)["model"].unique():
            b, c = e.rows(model, part=part), e.rows(model, part=part, cells=True)
            for k, v in model_stats(b, c, e.metric, e.reference_lrs).items():
                out[f"{e.name}/{prefix}{model}/{k}"] = v
            for nl in sorted(b["layers"].unique()):
                for k, v in model_stats(b[b["layers"] == nl], c[c["layers"] == nl], e.metric,
                                        e.reference_lrs).items():
                    out[f"{e.name}/{prefix}{model}/L{nl}/{k}"] = v
    for alias, family in COPY_ALIASES.items() if e.copies() else ():  # the copy task's models, whichever the scale trains
        name = e.first_of(family)
        if name is None:
            continue
        out.update({f"{e.name}/{alias}/{k[len(e.name) + len(name) + 2:]}": v for k, v in list(out.items())
                    if k.startswith(f"{e.name}/{name}/")})
    main = e.rows()
    if not main.empty:
        top = main.loc[main["mean"].idxmax()]
        out.update({f"{e.name}/best/model": model_name(e.cards, top["model"]), f"{e.name}/best/width": fmt_int(top["width"]),
                    f"{e.name}/best/layers": fmt_int(top["layers"]), f"{e.name}/best/len": fmt_int(top["seq_len"]),
                    f"{e.name}/best/acc": pct(top["mean"]), f"{e.name}/best/basis": rests_on_short(top),
                    f"{e.name}/layers": join([str(n) for n in sorted(main["layers"].unique())])})
        if e.reference_lrs:
            out[f"{e.name}/reflrs"] = join([tex_lr(x) for x in e.reference_lrs])
        out.update({f"{e.name}/{k}": v for k, v in sentences(e).items() if v})
    for part, prefix in (("main", ""), ("zoo", "zoo/")):
        c = e.rows(part=part, cells=True)
        if not c.empty:
            out[f"{e.name}/{prefix}nlrs"] = fmt_int(c["lr"].nunique())
    gain = e.zoology_gain()
    if gain is not None:
        out[f"{e.name}/gain"] = points(gain)
    spread = e.pe_spread()
    if spread is not None:
        out[f"{e.name}/pespread"], out[f"{e.name}/pespreadmodel"] = points(spread[0]).lstrip("+"), model_name(e.cards, spread[1])
    return out


def claim_rows(results: dict) -> tuple[list[str], dict[str, str]]:
    """The claims table's rows (arrepro.report.claims judges them) and ``claim/ID`` -> verdict."""
    rows, keys = [], {}
    for c in judge(results):
        keys[f"claim/{c['id']}"] = c["verdict"]
        rows.append(f"{tex_escape(c['exp'])} & {tex_escape(c['claim'])} & {tex_escape(c['compared'])} & "
                    f"{c['verdict']} \\\\")
    return rows, keys


def recipe_claim_rows(meta: dict, results: dict) -> list[str]:
    """The rows of the claims judged again under each recipe (arrepro.report.claims.judge_by_recipe)."""
    from arrepro.config.grid import recipe_id

    names = {recipe_id(n, r): n for n, r in meta["recipes"].items()}
    return [f"{tex_escape(c['recipe'])} & {tex_escape(c['exp'])} & {tex_escape(c['claim'])} & {tex_escape(c['compared'])} & "
            f"{c['verdict']} \\\\" for c in judge_by_recipe(results, names)]


def numbers_tex(meta: dict, results: dict) -> str:
    """numbers.tex: the run's macros, every experiment's keys (``results``: experiment ->
    ``arrepro.report.results.Results``), the claims and the floats' numbers."""
    cells = pd.concat([r.cells for r in results.values()], ignore_index=True).drop_duplicates("cell_dir")
    scale = meta["scale"]
    macros = {
        "ScaleName": tex_escape(scale),
        "ScaleDevice": tex_escape(defaults.scale(meta, "device")),
        "NumExperiments": fmt_int(len(results)),
        "NumCells": fmt_int(len(cells)),
        "NumDiverged": fmt_int(cells["diverged"].astype(bool).sum()),
        "NumModels": fmt_int(cells["model"].nunique()),
        "NumSeeds": fmt_int(cells["seed"].nunique()),
        "SeedList": ", ".join(str(s) for s in sorted(cells["seed"].unique())),
        "SeedsText": seeds_list(sorted(cells["seed"].unique())),
        "ModelsCount": plural(cells["model"].nunique(), "model variant"),
        "CellsCount": plural(len(cells), "training run"),
        "DivergedText": (f"Of the {plural(len(cells), 'run')}, none diverged" if not cells["diverged"].astype(bool).any()
                         else f"{fmt_int(cells['diverged'].astype(bool).sum())} of the {plural(len(cells), 'run')} "
                              "diverged (non-finite loss); they are kept and count as failures"),
        "ModelsText": models_text(meta),
        "BlocksName": "Figures" if any(c in float_numbers(meta).get("blocks", "") for c in "-,") else "Figure",
        "TrainHours": f"{cells['train_seconds'].sum() / 3600:.2g}",
        "MetricName": METRIC_NAMES.get(meta["metric"], tex_escape(meta["metric"])),
        "GoodThreshold": GOOD_TEXT,
        "PaperScaleSummary": paper_scale_summary(meta.get("paper_scale")),
        "TaskSummary": tasks_summary(meta["tasks"]),
        "RecipeSummary": recipes_summary(meta["recipes"]),
        "LrProtocolText": protocol_text(meta),
        "LrOutcomeText": outcome_text(results),
        "NumericsText": numerics_text(cells),
    }
    lines = [f"% Generated by {__spec__.name} from results/tables/*_{{best,cells}}.csv: do not edit.",
             r"\providecommand{\arset}[2]{\expandafter\def\csname ar@#1\endcsname{#2}}",
             r"\providecommand{\arnum}[2]{\expandafter\def\csname ar@num@#1\endcsname{#2}}",
             r"\providecommand{\arexp}[1]{\expandafter\def\csname ar@exp@#1\endcsname{}}",
             r"\newif\ifPaperScale\PaperScale" + ("true" if scale == "paper" else "false")]
    lines += [f"\\newcommand{{\\{k}}}{{{v}}}" for k, v in macros.items()]
    lines += [f"\\arexp{{{exp}}}" for exp in results]
    lines += [f"\\arnum{{{k}}}{{{v}}}" for k, v in float_numbers(meta).items()]
    kinds = {exp: "figure" if "plot" in e else "table" if "table" in e else "" for exp, e in meta["experiments"].items()}
    lines.append(r"\newcommand{\ExpList}{" + "".join(f"\\DoExp{{{e}}}{{{k}}}" for e, k in kinds.items()) + "}")
    keys = {}
    for r in results.values():
        keys.update(experiment_keys(r))
    rows, claim_keys = claim_rows(results)
    keys.update(claim_keys)
    lines.append(f"\\newcommand{{\\NumClaims}}{{{len(rows)}}}")
    lines.append(f"\\newcommand{{\\ClaimRules}}{{{tex_escape(rules_text())}}}")
    keys["claims/n"] = fmt_int(len(rows))
    tested = {paper_claim(k.removeprefix("claim/")) for k in claim_keys}
    keys["claims/summary"] = claims_summary(list(claim_keys.values()), len(tested), len({paper_claim(c[0]) for c in CLAIMS}))
    if meta.get("blocks"):
        from arrepro.report.blocks import PAPER_FIGURES

        cards = read_cards(meta["models"])
        keys["blocks/models"] = join([model_name(cards, m) for m in meta["blocks"]])
        drawn = [m for m in meta["blocks"] if PAPER_FIGURES[m][0]]
        if drawn:
            many = len(drawn) > 1
            keys["blocks/paper"] = (f"the paper's Figure{'s' if many else ''} {join([str(PAPER_FIGURES[m][0]) for m in drawn])} "
                                    f"show{'' if many else 's'} {join([model_name(cards, m) for m in drawn])}")
            keys["blocks/paperdrew"] = cap(keys["blocks/paper"])
    for v in ("consistent", "contradicted", "inconclusive"):
        keys[f"claims/{v}"] = fmt_int(sum(x == v for x in claim_keys.values()))
    not_judged = [f"{exp}: {text}" for cid, exp, text, _ in CLAIMS if f"claim/{cid}" not in claim_keys]
    if not_judged:  # (the experiment is not declared at this scale, or does not train the models)
        keys["claims/notjudged"] = tex_escape("; ".join(not_judged))
    lines.append(r"\newcommand{\ClaimRows}{" + "\n".join(rows) + "}")
    lines.append(r"\newcommand{\RecipeClaimRows}{" + "\n".join(recipe_claim_rows(meta, results)) + "}")
    lines += [f"\\arset{{{k}}}{{{v}}}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


SUPPLEMENT_TABLES = ("setup", "overview", "claims")  # the document's own tables, before any experiment's


def float_numbers(meta: dict) -> dict[str, str]:
    """Every float's number, one numbering: an experiment named figN or tableN carries the paper's
    number N (its Figure N or Table N), the blocks figure the numbers of the paper's figures it
    draws (arrepro.report.blocks), and the floats the paper does not have S1, S2, ... (tables and figures
    counted apart)."""
    from arrepro.report.blocks import FIGURE, PAPER_FIGURES

    out, supplement = {}, {"table": 0, "figure": 0}

    def next_s(kind):
        supplement[kind] += 1
        return f"S{supplement[kind]}"
    for t in SUPPLEMENT_TABLES:
        out[t] = next_s("table")
    for exp, e in meta["experiments"].items():
        kind = "figure" if "plot" in e else "table"
        m = re.fullmatch(r"(fig|table)(\d+)", exp)
        out[exp] = m.group(2) if m and (m.group(1) == "fig") == (kind == "figure") else next_s(kind)
    numbers = [PAPER_FIGURES[m][0] for m in meta.get("blocks", []) if PAPER_FIGURES[m][0]]
    if meta.get("blocks"):
        out[FIGURE] = (next_s("figure") if not numbers else str(numbers[0]) if len(numbers) == 1 else
                       f"{min(numbers)}--{max(numbers)}" if max(numbers) - min(numbers) == len(numbers) - 1 else
                       ", ".join(map(str, numbers)))
    return out
