"""The manuscript's numbers: LaTeX written from the experiments' aggregated tables.

``write_paper_inputs`` reads, for every experiment of the scale, its best-over-LR table
(``{exp}_best.csv``) and its cells (``{exp}_cells.csv``), and writes two files that
paper/main.tex inputs:

numbers.tex  - ``\\newcommand`` macros for the run as a whole (``\\ScaleName``, ``\\NumCells``, ...);
             - a key store read with ``\\R{key}``, one entry per experiment, model and statistic,
               e.g. ``\\R{fig3/mamba/max}`` or ``\\R{fig1/attention/window}`` (see ``model_stats``);
             - ``\\arexp{exp}`` for each declared experiment (main.tex's ``\\IfExp`` reads it) and
               ``\\ExpList``, the experiments in config order;
             - ``\\ClaimRows``: the paper's claims, each with what this run measured and whether it
               agrees (see ``CLAIMS``), and ``\\R{claim/ID}`` for each verdict.
setup.tex    ``\\SetupTables`` and ``\\SetupGrids``: the scale's tasks, recipes and grids, as the
             config declares them.

Nothing here is typed by hand: a number in the manuscript is a number in a results table.
A missing column fails loudly; a model an experiment does not train reads "n/a".
"""
from __future__ import annotations


import re
from pathlib import Path

import numpy as np
import pandas as pd

from arrepro import defaults, fidelity
from arrepro.claims import (ATTENTION_MIXERS, CLAIMS, COPY_MAMBA, COPY_TRANSFORMER, GOOD, chance_level, judge,
                            present, rules_text, window_of)
from arrepro.aggregate import WINDOW
from arrepro.grid import architecture
from arrepro.tex import fmt_count, fmt_int, pct, pct_pm, pct_range, tex_escape, tex_lr

BEST_COLUMNS = ["series", "task", "seq_len", "model", "mixer", "width", "layers", "metric", "best_lr",
                "mean", "std", "min", "max", "n_seeds", "n_diverged", "n_lrs", "parameters"]
CELL_COLUMNS = ["series", "task", "task_name", "seq_len", "model", "width", "layers", "lr", "seed", "diverged",
                "parameters", "cell_dir", "train_seconds", "pinned"]
NA = "n/a"
GOOD_TEXT = f"{100 * GOOD:g}\\%"
METRIC_NAMES = {"final_accuracy": "the test accuracy after the last epoch",
                "best_accuracy": "the best test accuracy over epochs",
                "final_exact_match": "the fraction of test sequences reproduced exactly after the last epoch"}


# --------------------------------------------------------------------------- reading
def read_csv(path, columns: list[str], not_null=()) -> pd.DataFrame:
    from .files import read_table

    df = read_table(path, not_null=not_null)  # its checksum, and a value on every row in ``not_null``
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; has {list(df.columns)}")
    return df


def lr_grid(grid: dict, lr_grids: dict) -> list[float]:
    lrs = grid["lrs"]
    return [float(x) for x in (lr_grids[lrs] if isinstance(lrs, str) else lrs)]


def is_replication(grid: dict) -> bool:
    """A grid that replicates Zoology's sweep (the dotted series of Figures 2 and 11)."""
    return grid.get("series", "").startswith("replication") or grid["lrs"] == "zoology"


# --------------------------------------------------------------------------- statistics
def reference_best(cells: pd.DataFrame, metric: str, reference_lrs: list[float]) -> float | None:
    """The best mean accuracy over seeds that a grid of only ``reference_lrs`` (Zoology's, say)
    would have found, over the settings of ``cells``; None unless every reference learning rate
    was trained in a setting (a search need not try them)."""
    if not reference_lrs or cells.empty:
        return None
    per_lr = (cells.drop_duplicates("cell_dir").assign(acc=cells[metric].fillna(0.0))
              .groupby(["task", "width", "layers", "lr"])["acc"].mean().reset_index())
    out = None
    for _, g in per_lr.groupby(["task", "width", "layers"]):
        on_ref = g[g["lr"].apply(lambda x: any(abs(x / r - 1) < 0.01 for r in reference_lrs))]
        if len(on_ref) == len(reference_lrs):
            out = max(out or 0.0, float(on_ref["acc"].max()))
    return out


def model_stats(best: pd.DataFrame, cells: pd.DataFrame, metric: str, reference_lrs) -> dict[str, str]:
    """Statistics of one model's rows of an experiment, as LaTeX strings.

    max/maxpm/maxwidth/maxlayers/maxlen/maxlr/maxparams  the setting with the best mean accuracy
    min/minwidth/minlen                                  the setting with the worst
    solved, settings                                     settings whose mean reaches GOOD, of all
    wide/deep/{acc,width,layers,params}                  the widest and the deepest configuration
    good, nlrs, window                                   most learning rates reaching GOOD in one
                                                         setting, of how many tried, and the widest
                                                         window (arrepro.search.window) in decades
    refbest                                              best mean accuracy a grid of only the
                                                         reference LRs finds (where all were tried)
    cells, diverged                                      training runs and how many diverged
    """
    s = {}
    top, low = best.loc[best["mean"].idxmax()], best.loc[best["mean"].idxmin()]
    s.update(max=pct_range(top["mean"], top["min"], top["max"]), maxpm=pct_pm(top["mean"], top["std"]), maxwidth=fmt_int(top["width"]),
             maxlayers=fmt_int(top["layers"]), maxlen=fmt_int(top["seq_len"]), maxlr=tex_lr(top["best_lr"]),
             maxparams=fmt_count(top["parameters"]), min=pct_range(low["mean"], low["min"], low["max"]), minwidth=fmt_int(low["width"]),
             minlen=fmt_int(low["seq_len"]), solved=fmt_int((best["mean"] >= GOOD).sum()),
             settings=fmt_int(len(best)))
    shapes = best.sort_values("mean", ascending=False).drop_duplicates(["width", "layers"])
    if len(shapes) > 1:
        wide = shapes.sort_values(["width", "layers"], ascending=[False, True]).iloc[0]
        deep = shapes.sort_values(["layers", "width"], ascending=[False, True]).iloc[0]
        for name, r in (("wide", wide), ("deep", deep)):
            s.update({f"{name}/acc": pct_range(r["mean"], r["min"], r["max"]), f"{name}/width": fmt_int(r["width"]),
                      f"{name}/layers": fmt_int(r["layers"]), f"{name}/params": fmt_count(r["parameters"])})
    windows = [window_of(r) for _, r in best.iterrows()] if "window_status" in best.columns else []
    if windows:
        widest = max(windows, key=lambda w: w.width)
        s.update(good=fmt_int(max(w.n_good for w in windows)), nlrs=fmt_int(best["n_lrs"].max()),
                 window=(f"{widest.width:.1f} decades" if widest.status == "window" else "none"))
    if len(cells):
        ref = reference_best(cells, metric, reference_lrs)
        s.update(refbest=pct(ref) if ref is not None else NA, cells=fmt_int(cells["cell_dir"].nunique()),
                 diverged=fmt_int(cells.drop_duplicates("cell_dir")["diverged"].astype(bool).sum()))
    return s


class Results:
    """One experiment's tables. Its series are split in two: the replication of Zoology's sweep
    (``zoo``), if any, and all the others together (``main``; a cell in two of them counts once)."""

    def __init__(self, name: str, exp_def: dict, best: pd.DataFrame, cells: pd.DataFrame, reference_lrs,
                 tasks: dict | None = None):
        self.name, self.title = name, exp_def.get("title", name)
        self.tasks = tasks or {}  # task name -> its definition (for the chance level)
        replication = {g.get("series", "main") for g in exp_def["grids"] if is_replication(g)}
        self.series = {"main": {g.get("series", "main") for g in exp_def["grids"]} - replication,
                       "zoo": replication}
        self.metric = str(best["metric"].iloc[0]) if len(best) else "final_accuracy"
        if len(cells) and self.metric not in cells.columns:
            raise ValueError(f"{name}_cells.csv: missing column {self.metric!r} (the best table's metric)")
        self.best, self.cells = best, cells
        self.reference_lrs = [float(x) for x in reference_lrs]

    def rows(self, model=None, layers=None, part="main", cells=False, width=None) -> pd.DataFrame:
        df = self.cells if cells else self.best
        keep = df["series"].isin(self.series[part])
        if model is not None:
            keep &= df["model"] == model
        if layers is not None:
            keep &= df["layers"] == layers
        if width is not None:
            keep &= df["width"] == width
        return df[keep].drop_duplicates("cell_dir" if cells else ["task", "model", "width", "layers", "recipe"])

    def chance(self, row) -> float:
        """The chance level of a row's task (arrepro.claims.chance_level)."""
        name = row["task_name"]
        if name not in self.tasks:
            raise ValueError(f"{self.name}: task {name!r} of the results is not among the scale's tasks "
                             f"{sorted(self.tasks)}")
        return chance_level(self.tasks[name], self.metric)

    def keys(self) -> dict[str, str]:
        out = {f"{self.name}/title": tex_escape(self.title),
               f"{self.name}/metric": METRIC_NAMES.get(self.metric, tex_escape(self.metric))}
        for part, prefix in (("main", ""), ("zoo", "zoo/")):
            for model in self.rows(part=part)["model"].unique():
                b, c = self.rows(model, part=part), self.rows(model, part=part, cells=True)
                for k, v in model_stats(b, c, self.metric, self.reference_lrs).items():
                    out[f"{self.name}/{prefix}{model}/{k}"] = v
                for nl in sorted(b["layers"].unique()):
                    for k, v in model_stats(b[b["layers"] == nl], c[c["layers"] == nl], self.metric,
                                            self.reference_lrs).items():
                        out[f"{self.name}/{prefix}{model}/L{nl}/{k}"] = v
        for alias, names in COPY_ALIASES.items():  # the copy task's models, whichever the scale trains
            name = present(self, *names)
            out.update({f"{self.name}/{alias}/{k[len(self.name) + len(name) + 2:]}": v for k, v in list(out.items())
                        if k.startswith(f"{self.name}/{name}/")})
        main = self.rows()
        if not main.empty:
            top = main.loc[main["mean"].idxmax()]
            out.update({f"{self.name}/best/model": tex_escape(top["model"]), f"{self.name}/best/width": fmt_int(top["width"]),
                        f"{self.name}/best/layers": fmt_int(top["layers"]), f"{self.name}/best/len": fmt_int(top["seq_len"]),
                        f"{self.name}/best/acc": pct(top["mean"]),
                        f"{self.name}/layers": ", ".join(str(n) for n in sorted(main["layers"].unique())),
                        f"{self.name}/reflrs": ", ".join(tex_lr(x) for x in self.reference_lrs) or NA})
        for part, prefix in (("main", ""), ("zoo", "zoo/")):
            c = self.rows(part=part, cells=True)
            if not c.empty:
                out[f"{self.name}/{prefix}nlrs"] = fmt_int(c["lr"].nunique())
        gain = self.zoology_gain()
        if gain is not None:
            out[f"{self.name}/gain"] = f"{gain:+.1f}"
        spread = self.pe_spread()
        if spread is not None:
            out[f"{self.name}/pespread"], out[f"{self.name}/pespreadmodel"] = f"{spread[0]:.1f}", tex_escape(spread[1])
        return out

    def zoology_gain(self) -> float | None:
        """Mean over matched settings of recurrent models of (main - Zoology replication) best
        accuracy, in points."""
        zoo = self.rows(part="zoo")
        zoo = zoo.assign(model=zoo["model"].map(architecture))  # zoology_hyena: the replication's hyena
        m = self.rows().merge(zoo, on=["task", "model", "width", "layers"], suffixes=("", "_zoo"))
        m = m[~m["mixer"].isin(ATTENTION_MIXERS)]
        return None if m.empty else float(100 * (m["mean"] - m["mean_zoo"]).mean())

    def pe_spread(self) -> tuple[float, str] | None:
        """Largest (max - min) best accuracy, in points, across positional variants of one model
        (variants are named MODEL_pe_SCHEME; MODEL itself is the variant without)."""
        r = self.rows()
        base = r["model"].str.replace(r"_pe_.*$", "", regex=True)
        by = r.groupby(base).agg(n=("model", "nunique"), hi=("mean", "max"), lo=("mean", "min"))
        by = by[by["n"] > 1]
        if by.empty:
            return None
        spread = 100 * (by["hi"] - by["lo"])
        return float(spread.max()), str(spread.idxmax())


# --------------------------------------------------------------------------- the paper's claims
def claim_rows(results: dict[str, "Results"]) -> tuple[list[str], dict[str, str]]:
    """The claims table's rows (arrepro.claims judges them) and ``claim/ID`` -> verdict."""
    rows, keys = [], {}
    for c in judge(results):
        keys[f"claim/{c['id']}"] = c["verdict"]
        rows.append(f"{tex_escape(c['exp'])} & {tex_escape(c['claim'])} & {tex_escape(c['compared'])} & "
                    f"{c['verdict']} \\\\")
    return rows, keys


# --------------------------------------------------------------------------- setup (from the config)
def _lengths(t: dict) -> str:
    if t["kind"] == "mqar":
        return str(t["seq_len"])
    return f"{t.get('min_len', '?')}--{t.get('max_len', '?')}"


def _batch(bs) -> str:
    if isinstance(bs, int):
        return str(bs)
    items = sorted(bs.items(), key=lambda kv: int(kv[0]))
    return f"{'/'.join(str(v) for _, v in items)} ($L\\le{'/'.join(str(k) for k, _ in items)}$)"


def tasks_summary(tasks: dict) -> str:
    """One line for the title page: MQAR (length, pairs) and copying, with the shared sizes."""
    def shared(ts, key):
        return "/".join(dict.fromkeys(fmt_int(t[key]) for t in ts if key in t))

    mqar = [t for t in tasks.values() if t["kind"] == "mqar"]
    copy = [t for t in tasks.values() if t["kind"] != "mqar"]
    parts = []
    if mqar:
        pairs = ", ".join(f"({t['seq_len']}, {t['num_kv_pairs']})" for t in mqar)
        parts.append(f"MQAR with (length, key--value pairs) {pairs}, vocabulary {shared(mqar, 'vocab_size')} "
                     f"and {shared(mqar, 'n_train')} training sequences")
    if copy:
        parts.append(f"copying strings of {', '.join(_lengths(t) for t in copy)} tokens over "
                     f"{shared(copy, 'vocab_size')} symbols")
    return "; ".join(parts)


def recipes_summary(recipes: dict) -> str:
    return ", ".join(f"{r['epochs']} epochs ({tex_escape(n)})" for n, r in recipes.items())


def paper_scale_summary(paper: dict | None) -> str:
    """The config's `paper` scale in a line, for the title page of a smaller scale's document."""
    if not paper:
        return "the config declares no paper scale"
    seeds = sorted({s for e in paper["experiments"].values() for g in e["grids"] for s in g["seeds"]})
    return (f"{tasks_summary(paper['tasks'])}; {recipes_summary(paper['recipes'])}; "
            f"{len(seeds)} seeds")


def _lrs_text(lrs) -> str:
    lrs = sorted(float(x) for x in lrs)
    return f"{len(lrs)} from {tex_lr(lrs[0])} to {tex_lr(lrs[-1])}" if len(lrs) > 1 else tex_lr(lrs[0])


def searched(g: dict, meta: dict) -> dict | None:
    """The lr_searches entry (defaults filled in) a grid runs under the scale's protocol, or None
    for a fixed grid."""
    from .grid import schema_defaults

    if meta.get("lr_protocol", "search") != "search" or not g.get("search"):
        return None
    return {**schema_defaults("search"), **meta["lr_searches"][g["search"]]}


def grid_lrs_text(g: dict, meta: dict) -> str:
    """A grid's learning rates in words: its search (start grid, range, resolution, rounds, search
    seeds) or its fixed grid."""
    fixed = lr_grid(g, meta["lr_grids"])
    d = searched(g, meta)
    if d is None:
        named = f"grid \\emph{{{tex_escape(g['lrs'])}}}, " if isinstance(g["lrs"], str) else ""
        return f"{named}{_lrs_text(fixed)} on every seed"
    start = lr_grid({"lrs": d["start"]}, meta["lr_grids"]) if "start" in d else fixed
    lo, hi = d.get("range", (min(start), max(start)))
    seeds = "every seed" if d["search_seeds"] == "all" else f"the first {d['search_seeds']} seed(s)"
    if not d["rounds"]:
        return f"search \\emph{{{tex_escape(g['search'])}}}: {_lrs_text(start)} on {seeds}, no refinement"
    return (f"search \\emph{{{tex_escape(g['search'])}}}: start {_lrs_text(start)}, within {tex_lr(lo)} to "
            f"{tex_lr(hi)}, to {d['resolution']:g} decades, at most {d['rounds']} rounds of {d['per_round']}, on "
            f"{seeds}{', window resolved' if d['window'] else ''}")


def protocol_text(meta: dict) -> str:
    """The learning-rate protocol of the scale's grids, in words, with its parameters."""
    grids = [g for e in meta["experiments"].values() for g in e["grids"]]
    names = list(dict.fromkeys(g["search"] for g in grids if searched(g, meta) is not None))
    if not names:
        return ("Every grid trains its fixed learning rates on every seed (the literal reading of the paper's "
                "Appendix~A.2), and the learning rate with the best mean over seeds is reported; among tied best "
                "means, the middle one.")
    text = ("Every number reported is the paper's statistic (its Appendix~A.2): the best, over the learning "
            "rates, of the mean accuracy over every reported seed. Which learning rates compete is decided by a "
            "deterministic search, one per setting, which the workflow runs in rounds (\\texttt{src/arrepro/search.py}; "
            "every decision and its reason is written to a file). Round~0 trains a start grid on the search seed(s). "
            "Then, for at most a given number of rounds, each adding at most a given number of learning rates: a best "
            "learning rate on the edge of what was tried extends the search outward by the start grid's step, never "
            "leaving the search's range; otherwise new learning rates bracket the best at geometric midpoints until its "
            "nearest neighbours lie within the resolution; where a window is reported, its two edges are resolved the "
            "same way. ``Best'' here is a learning rate's mean over the seeds it has so far. Seeds are then spent where "
            "they can change the answer, by successive halving: the best-scoring learning rates (the \\emph{candidates}, "
            "at least two) climb to every reported seed, and any other learning rate that could still beat the best "
            "candidate (its accuracies so far, with 1 on every seed not yet trained, above the candidate's mean) climbs "
            "too, within the setting's budget of cells. Where the search seed learns nothing anywhere, the next seed "
            "trains every learning rate tried before the search goes on, and a setting is called ``not learned'' only "
            "when no cell of any seed learned. The reported learning rate is the candidate with the best mean over every "
            "seed; curves of accuracy against learning rate train every seed at every learning rate they show. The "
            "searches of this scale: ")
    parts = []
    for n in names:
        d = searched({"search": n}, meta)
        start = d.get("start")
        start_txt = "the grid's own learning rates" if start is None else _lrs_text(lr_grid({"lrs": start}, meta["lr_grids"]))
        rng = f", range {tex_lr(d['range'][0])} to {tex_lr(d['range'][1])}" if "range" in d else ""
        seeds = "every seed" if d["search_seeds"] == "all" else f"{d['search_seeds']} seed(s)"
        ladder = "" if d["search_seeds"] == "all" else (
            ", then " + ", then ".join(f"the best {t} on {'every' if k == 'all' else k} seed{'s' if k != 1 else ''}"
                                      for k, t in d["ladder"]))
        budget = d.get("budget") or 0
        tiers = "".join(f" ({v} for the {k} cost tier)" for k, v in d.get("tier_budget", {}).items())
        parts.append(f"\\emph{{{tex_escape(n)}}}: start {start_txt}{rng}, resolution {d['resolution']:g} decades, "
                     f"at most {d['rounds']} {'round' if d['rounds'] == 1 else 'rounds'} of {d['per_round']}, search on "
                     f"{seeds}{ladder}{', window resolved' if d['window'] else ''}"
                     f"{f', at most {budget} cells{tiers}' if budget else ''}, plateau at {d['plateau']:g}")
    fixed = any(searched(g, meta) is None for g in grids)
    return (text + "; ".join(parts) + "." + (" Grids without a search train their fixed learning rates on every "
                                             "seed." if fixed else ""))


OUTCOMES = {"resolved": "a best resolved to the search's resolution", "plateau": "a plateau at the top",
            "range": "a best on a bound of the search's range", "budget": "a best still unresolved when the "
            "round budget ran out", "not learned": "no learning rate learned", "fixed": "a fixed grid"}


def outcome_text(results: dict) -> str:
    """How this scale's searches ended, counted once per search (from the best tables)."""
    best = pd.concat([r.best for r in results.values() if "outcome" in r.best.columns], ignore_index=True)
    if best.empty or "search" not in best.columns:
        return ""
    per = best.drop_duplicates("search")["outcome"].value_counts()
    cells = pd.concat([r.cells for r in results.values()], ignore_index=True).drop_duplicates("cell_dir")
    parts = [f"{int(per[k])} {v}" for k, v in OUTCOMES.items() if k in per]
    return (f"Of this scale's {len(per) and int(per.sum())} settings' searches, {', '.join(parts)}; they trained "
            f"{fmt_int(len(cells))} cells in all.")


def setup_tex(meta: dict) -> str:
    """\\SetupTables (a table float of tasks and recipes) and \\SetupGrids (each experiment's grids)."""
    out = [r"\newcommand{\SetupTables}{\begin{table}[htbp]\centering\small",
           r"\caption{Tasks and recipes of scale \textbf{" + tex_escape(meta["scale"]) + r"} (from config.yaml).}"
           r"\label{tab:setup}",
           r"\begin{tabular}{lllrrr}\toprule",
           r"task & kind & length & KV pairs & vocabulary & train / test \\ \midrule"]
    for name, t in meta["tasks"].items():
        out.append(f"{tex_escape(name)} & {t['kind'].upper() if t['kind'] == 'mqar' else t['kind']} & "
                   f"{_lengths(t)} & {t.get('num_kv_pairs', '--')} & "
                   f"{fmt_int(t['vocab_size']) if 'vocab_size' in t else '--'} & "
                   f"{fmt_int(t['n_train'])} / {fmt_int(t['n_test'])} \\\\")
    out += [r"\bottomrule\end{tabular}\par\medskip",
            r"\begin{tabular}{lrlrlrr}\toprule",
            r"recipe & epochs & batch size & warmup & schedule & weight decay & dropout \\ \midrule"]
    for name, r in meta["recipes"].items():
        out.append(f"{tex_escape(name)} & {r['epochs']} & {_batch(r['batch_size'])} & {100 * r['warmup_frac']:.0f}\\% & "
                   f"{r['schedule']} & {r['weight_decay']} & {defaults.recipe(r)['embed_dropout']} \\\\")
    out += [r"\bottomrule\end{tabular}", r"\end{table}}", "",
            r"\newcommand{\SetupGrids}{\begin{description}\small"]
    for exp, e in meta["experiments"].items():
        out.append(f"\\item[{tex_escape(exp)}] \\emph{{{tex_escape(e.get('title', exp))}}}.")
        for g in e["grids"]:
            out.append(
                f"Series \\emph{{{tex_escape(g.get('series', 'main'))}}}: tasks {tex_escape(', '.join(g['tasks']))}; "
                f"models {tex_escape(', '.join(g['models']))}; widths {', '.join(map(str, g['widths']))}; "
                f"layers {', '.join(map(str, g['layers']))}; learning rates: {grid_lrs_text(g, meta)}; "
                f"seeds {', '.join(map(str, g['seeds']))}; recipe {tex_escape(g['recipe'])}.")
    out.append(r"\end{description}}")
    out.append(r"\newcommand{\FidelityTable}{" + fidelity_tex(meta) + "}")
    return "\n".join(out) + "\n"


def fidelity_tex(meta: dict) -> str:
    """The paper scale's fidelity table (arrepro.fidelity), whatever the scale of this document."""
    if not meta.get("paper_scale") or not meta.get("models"):
        return r"\emph{The configuration declares no paper scale.}"
    config = {"models": meta["models"], "lr_grids": meta["lr_grids"], "aggregate": {"metric": meta["metric"]},
              "scales": {"paper": meta["paper_scale"]}, "lr_protocol": meta.get("lr_protocol", "search"),
              "lr_searches": meta.get("lr_searches", {})}
    return fidelity.latex(config)


# --------------------------------------------------------------------------- the manuscript's keys
# Every key numbers.tex can define: \R{EXP/FIELD}, \R{EXP/[zoo/]MODEL/[L<n>/]STAT}, \R{claim/ID}, \R{claims/...}.
MODEL_STATS = {"max", "maxpm", "maxwidth", "maxlayers", "maxlen", "maxlr", "maxparams", "min", "minwidth", "minlen",
               "solved", "settings", "good", "nlrs", "window", "refbest", "cells", "diverged",
               *(f"{shape}/{k}" for shape in ("wide", "deep") for k in ("acc", "width", "layers", "params"))}
EXP_FIELDS = {"title", "metric", "layers", "reflrs", "nlrs", "zoo/nlrs", "gain", "pespread", "pespreadmodel",
              *(f"best/{k}" for k in ("model", "width", "layers", "len", "acc"))}
COPY_ALIASES = {"copytransformer": COPY_TRANSFORMER, "copymamba": COPY_MAMBA}  # \R{fig5/copymamba/max}, ...
RUN_KEYS = {"claims/n", "claims/consistent", "claims/contradicted", "claims/inconclusive", "claims/notjudged"}


def manuscript_keys(tex: str) -> list[str]:
    """The literal keys a manuscript reads with \\R{key} or \\Verdict{id} (comments ignored;
    keys built from a macro argument, ``#1``, are not literal)."""
    body = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())
    keys = re.findall(r"\\R\{([^{}#]+)\}", body) + [f"claim/{k}" for k in re.findall(r"\\Verdict\{([^{}#]+)\}", body)]
    return list(dict.fromkeys(keys))


def possible_key(key: str, experiments: set[str], models: set[str]) -> bool:
    """A key numbers.tex defines when the scale has that result (a known experiment, model and
    statistic): left undefined it reads "n/a"; anything else is a typo."""
    if key in RUN_KEYS:
        return True
    if key.startswith("claim/"):
        return key[len("claim/"):] in {cid for cid, *_ in CLAIMS}
    exp, _, rest = key.partition("/")
    if exp not in experiments:
        return False
    if rest in EXP_FIELDS:
        return True
    rest = rest.removeprefix("zoo/")
    model, _, stat = rest.partition("/")
    stat = re.sub(r"^L\d+/", "", stat)
    return model in models and stat in MODEL_STATS


def check_manuscript_keys(tex_path, defined: set[str], meta: dict) -> None:
    """Fail on a key the manuscript reads that numbers.tex does not define and could not define
    (a misspelt experiment, model, statistic or claim): it would print "n/a"."""
    scales = [meta] + ([meta["paper_scale"]] if meta.get("paper_scale") else [])
    experiments = {e for s in scales for e in s["experiments"]}
    models = set(meta.get("models") or ()) | set(COPY_ALIASES) | {
        m for s in scales for e in s["experiments"].values() for g in e["grids"] for m in g["models"]}
    bad = [k for k in manuscript_keys(Path(tex_path).read_text()) if k not in defined
           and not possible_key(k, experiments, models)]
    if bad:
        raise ValueError(f"{tex_path}: key(s) {', '.join(bad)} not defined by numbers.tex and not a known "
                         f"experiment/model/statistic or claim (see arrepro.paper.MODEL_STATS, EXP_FIELDS, "
                         f"arrepro.claims.CLAIMS)")


# --------------------------------------------------------------------------- numbers.tex
def numbers_tex(meta: dict, results: dict[str, Results]) -> str:
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
    lines = ["% Generated by src/arrepro/paper.py from results/tables/*_{best,cells}.csv: do not edit.",
             r"\providecommand{\arset}[2]{\expandafter\def\csname ar@#1\endcsname{#2}}",
             r"\providecommand{\arexp}[1]{\expandafter\def\csname ar@exp@#1\endcsname{}}",
             r"\newif\ifPaperScale\PaperScale" + ("true" if scale == "paper" else "false")]
    lines += [f"\\newcommand{{\\{k}}}{{{v}}}" for k, v in macros.items()]
    lines += [f"\\arexp{{{exp}}}" for exp in results]
    kinds = {exp: "figure" if "plot" in e else "table" if "table" in e else "" for exp, e in meta["experiments"].items()}
    lines.append(r"\newcommand{\ExpList}{" + "".join(f"\\DoExp{{{e}}}{{{k}}}" for e, k in kinds.items()) + "}")
    keys = {}
    for r in results.values():
        keys.update(r.keys())
    rows, claim_keys = claim_rows(results)
    keys.update(claim_keys)
    lines.append(f"\\newcommand{{\\NumClaims}}{{{len(rows)}}}")
    lines.append(f"\\newcommand{{\\ClaimRules}}{{{tex_escape(rules_text())}}}")
    keys["claims/n"] = fmt_int(len(rows))
    for v in ("consistent", "contradicted", "inconclusive"):
        keys[f"claims/{v}"] = fmt_int(sum(x == v for x in claim_keys.values()))
    not_judged = [f"{exp}: {text}" for cid, exp, text, _ in CLAIMS if f"claim/{cid}" not in claim_keys]
    if not_judged:  # (the experiment is not declared at this scale, or does not train the models)
        keys["claims/notjudged"] = tex_escape("; ".join(not_judged))
    lines.append(r"\newcommand{\ClaimRows}{" + "\n".join(rows) + "}")
    lines += [f"\\arset{{{k}}}{{{v}}}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def numerics_text(cells: pd.DataFrame) -> str:
    """What the manuscript says of the CPU numerics its runs trained with: every run that did
    not train with the pinned numerics (arrepro.numerics: another thread count, a CPU without
    AVX2, an earlier attempt with other settings) is named, by its folder."""
    unpinned = sorted(cells.loc[~cells["pinned"].astype(bool), "cell_dir"])
    if not unpinned:
        return f"All {fmt_int(len(cells))} runs trained with the pinned CPU numerics."
    names = "; ".join(r"\texttt{" + tex_escape(d.removeprefix("results/cells/")) + "}" for d in unpinned)
    return (rf"{fmt_int(len(unpinned))} of the {fmt_int(len(cells))} runs trained \emph{{without}} the pinned CPU "
            rf"numerics (their \texttt{{result.json}} says why; on another machine their numbers may differ): {names}.")


def load_results(meta: dict, best_csvs: dict[str, str], cells_csvs: dict[str, str]) -> dict[str, Results]:
    from .aggregate import BEST_NOT_NULL, CELLS_NOT_NULL

    return {exp: Results(exp, meta["experiments"][exp], read_csv(best_csvs[exp], BEST_COLUMNS, BEST_NOT_NULL),
                         read_csv(cells_csvs[exp], CELL_COLUMNS, CELLS_NOT_NULL + ["series"]),
                         meta["reference_lrs"].get(exp, []), meta["tasks"])
            for exp in meta["experiments"]}


def write_paper_inputs(meta: dict, best_csvs: dict[str, str], cells_csvs: dict[str, str],
                       numbers_out: str | Path, setup_out: str | Path, manuscript: str | Path = "paper/main.tex") -> None:
    """``meta``: see ``grid_meta``. Fails, naming the key, when ``manuscript`` reads a key that the
    numbers do not define and that is no known result (``check_manuscript_keys``)."""
    results = load_results(meta, best_csvs, cells_csvs)
    text = numbers_tex(meta, results)
    check_manuscript_keys(manuscript, set(re.findall(r"\\arset\{([^{}]*)\}", text)), meta)
    Path(numbers_out).parent.mkdir(parents=True, exist_ok=True)
    Path(numbers_out).write_text(text)
    Path(setup_out).write_text(setup_tex(meta))


def grid_meta(grid, config: dict) -> dict:
    """What the paper needs from the config (the paper_numbers rule's param)."""
    from .grid import schema_defaults

    return {"scale": grid.scale_name, "device": defaults.scale(grid.scale, "device"), "tasks": grid.scale["tasks"],
            "recipes": grid.scale["recipes"], "experiments": grid.experiments, "lr_grids": config["lr_grids"],
            "reference_lrs": {e: grid.reference_lrs(e) for e in grid.experiments},
            "metric": config["aggregate"]["metric"], "paper_scale": config["scales"].get("paper"),
            "models": config["models"], "lr_protocol": config.get("lr_protocol", schema_defaults()["lr_protocol"]),
            "lr_searches": config.get("lr_searches", {})}
