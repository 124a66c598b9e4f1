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
A missing column fails loudly. The text names only what the scale ran: a passage listing models
(``Results.sentences``) lists the ones the experiment trained and says which of the paper's it does
not; main.tex reads a single model's number only under ``\\IfR`` (a key left undefined would print
"n/a", which tests/test_paper.py refuses). Figures and tables carry one numbering
(``float_numbers``): the paper's for its own, S1, S2, ... for the document's.
"""
from __future__ import annotations


import re
from pathlib import Path

import numpy as np
import pandas as pd

from arrepro.config import defaults
from arrepro.report import fidelity
from arrepro.report.claims import ATTENTION_MIXERS, CLAIMS, COPY_MAMBA, COPY_TRANSFORMER, judge, present, rules_text, window_of
from arrepro.report.aggregate import WINDOW
from arrepro.config.grid import ZOO_PREFIX, architecture, is_replication_series
from arrepro.search.thresholds import GOOD, chance_level
from arrepro.report.tex import fmt_count, fmt_int, pct, pct_pm, pct_range, plural, points, tex_escape, tex_lr

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
    from arrepro.files import read_table

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
    return is_replication_series(grid.get("series", "")) or grid["lrs"] == "zoology"


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
                                                         window (arrepro.search.protocol.window) in decades
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
             settings=fmt_int(len(best)), solvedof=of_total(int((best["mean"] >= GOOD).sum()), len(best), "setting"),
             solvetext=(f"its one setting reaches {pct_range(low['mean'], low['min'], low['max'])}" if len(best) == 1 else
                        f"its worst setting reaches {pct_range(low['mean'], low['min'], low['max'])} and it solves "
                        f"{of_total(int((best['mean'] >= GOOD).sum()), len(best), 'setting')}"),
             maxbasis=rests_on(top))
    shapes = best.sort_values("mean", ascending=False).drop_duplicates(["width", "layers"])
    if len(shapes) > 1:
        wide = shapes.sort_values(["width", "layers"], ascending=[False, True]).iloc[0]
        deep = shapes.sort_values(["layers", "width"], ascending=[False, True]).iloc[0]
        for name, r in (("wide", wide), ("deep", deep)):
            s.update({f"{name}/acc": pct_range(r["mean"], r["min"], r["max"]), f"{name}/width": fmt_int(r["width"]),
                      f"{name}/layers": fmt_int(r["layers"]), f"{name}/params": fmt_count(r["parameters"]),
                      f"{name}/shape": shape_text(r)})
    windows = [window_of(r) for _, r in best.iterrows()] if "window_status" in best.columns else []
    if windows:
        widest = max(windows, key=window_rank)
        s.update(good=fmt_int(max(w.n_good for w in windows)), nlrs=fmt_int(best["n_lrs"].max()),
                 window=window_text(widest))
    if len(cells):
        ref = reference_best(cells, metric, reference_lrs)
        if ref is not None:
            s["refbest"] = pct(ref)
        s.update(cells=fmt_int(cells["cell_dir"].nunique()),
                 diverged=fmt_int(cells.drop_duplicates("cell_dir")["diverged"].astype(bool).sum()))
    return s



# --------------------------------------------------------------------------- words
# How the text names a config model (its architecture, or the ablation it is); a model not listed
# is named by its config name. ``model_name`` adds the positional and Zoology variants.
NAMES = {"attention": "attention", "based": "Based", "h3": "H3", "hyena": "Hyena", "rwkv": "RWKV", "mamba": "Mamba",
         "mamba2": "Mamba2", "deltanet": "DeltaNet", "gated_deltanet": "Gated DeltaNet",
         "attention_conv_qkv": "attention with a convolution on Q, K and V",
         "attention_conv_q": "attention with a convolution on Q", "attention_conv_k": "attention with a convolution on K",
         "attention_conv_v": "attention with a convolution on V",
         "attention_conv_qkv_centred": "attention with a centred convolution on Q, K and V",
         "attention_conv_q_centred": "attention with a centred convolution on Q",
         "attention_conv_k_centred": "attention with a centred convolution on K",
         "attention_conv_v_centred": "attention with a centred convolution on V", "mamba_noconv": "Mamba without conv1d",
         "mamba_nogate": "Mamba without its gate", "s6_mlp": "S6 + MLP", "transformer_rope": "the Transformer (RoPE)",
         "transformer_rope_jelassi": "the Transformer (RoPE)", "mamba_jelassi": "Mamba"}
PE_NAMES = {"sinusoidal": "sinusoidal", "rope": "rotary", "learned": "learned"}


def model_name(model: str) -> str:
    """"Mamba", "attention with a convolution on K", "Zoology's Hyena", "H3 with rotary positions"."""
    if model in NAMES:
        return NAMES[model]
    if model.startswith(ZOO_PREFIX):
        return f"Zoology's {model_name(model[len(ZOO_PREFIX):])}"
    base, _, pe = model.partition("_pe_")
    if pe in PE_NAMES and base in NAMES:
        return f"{NAMES[base]} with {PE_NAMES[pe]} positions"
    return tex_escape(model)


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def join(items, conj: str = "and") -> str:
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {conj} {items[-1]}" if items else ""


def of_total(n: int, total: int, noun: str = "") -> str:
    """"none of its 4 settings", "1 of its 4 settings", "both its settings", "its one setting",
    "no setting (it has one)": what follows "solves"."""
    noun_n = f" {noun}{'s' if total != 1 else ''}" if noun else ""
    if total == 1:
        return f"its one{noun_n}" if n else f"no {noun or 'one'} (it has one)"
    if n == 0:
        return f"none of its {total}{noun_n}"
    if n == total:
        return f"both its{noun_n}" if total == 2 else f"all {total} of its{noun_n}"
    return f"{n} of its {total}{noun_n}"


def seeds_list(seeds) -> str:
    """"seed 0", "seeds 0, 1 and 2"."""
    seeds = [str(x) for x in seeds]
    return f"seed{'s' if len(seeds) > 1 else ''} {join(seeds)}"


def row_seeds(r) -> list[str]:
    return str(r["seeds"]).split(";")


def row_candidates(r) -> list[float]:
    return [float(x) for x in str(r["candidates"]).split(";") if x]


def shape_text(r) -> str:
    """"2 layers of width 32"."""
    return f"{plural(r['layers'], 'layer')} of width {fmt_int(r['width'])}"


def rests_on(r) -> str:
    """What a best-table row's number rests on: "the best of 2 candidate learning rates
    ($10^{-3}$, $3.16\times10^{-3}$), each on seeds 0, 1 and 2"."""
    cands = row_candidates(r)
    lrs = join([tex_lr(x) for x in cands])
    which = f"the only learning rate trained on every seed, {lrs}," if len(cands) == 1 else \
        f"the best of {len(cands)} candidate learning rates ({lrs}), each"
    return f"{which} on {seeds_list(row_seeds(r))}"


def series_legend(series, published: bool = False) -> str:
    """A width figure's series in words, as arrepro.report.plots draws them: "Solid lines, filled
    circles: the search (this work); dotted lines, open squares: replication (coarse grid)"."""
    from arrepro.report.plots import series_styles, style_text

    styles = series_styles(series)
    text = cap("; ".join(f"{style_text(st)}: {tex_escape(name)}" for name, st in styles.items()))
    if len(styles) > 1:
        text += (". Each series is drawn a little to the side of the others, so that a point where both series "
                 "have the same number (their cells are shared) shows twice")
    return text + ("; stars: Zoology's published numbers" if published else "")


def rests_on_short(r) -> str:
    """``rests_on`` for a table cell: "best of $10^{-3}$ and $3.16\\times10^{-3}$; seeds 0, 1, 2"."""
    cands = row_candidates(r)
    lrs = join([tex_lr(x) for x in cands])
    return f"{'best of ' if len(cands) > 1 else ''}{lrs}; seed{'s' if len(row_seeds(r)) > 1 else ''} {', '.join(row_seeds(r))}"


def window_rank(w) -> tuple:
    """Widest first: a window before none, wider (at least, then at most) before narrower."""
    return (w.status == "window", w.width, w.width_max if w.width_max is not None else float("inf"))


def window_text(w) -> str:
    """A window in words, its widths as the window table prints them: "0.50 to 1.00 decades
    ($10^{-3}$ to $3.16\\times10^{-3}$ good)", "at least 0.25 decades (... good; open above)",
    "one good learning rate, $10^{-3}$ (at most 0.50 decades)", "no good learning rate", "not learned"."""
    if w.status == "not learned":
        return "not learned"
    if w.status != "window":
        return "no good learning rate"
    sides = [s for s, edge in (("below", w.below), ("above", w.above)) if edge is None]
    open_txt = f"open {join(sides)}"
    if w.lo == w.hi:
        return (f"one good learning rate, {tex_lr(w.lo)} (" +
                (open_txt if sides else f"at most {w.width_max:.2f} decades") + ")")
    span = f"{tex_lr(w.lo)} to {tex_lr(w.hi)} good"
    if sides:
        return f"at least {w.width:.2f} decades ({span}; {open_txt})"
    return f"{w.width:.2f} to {w.width_max:.2f} decades ({span})"


class Results:
    """One experiment's tables. Its series are split in two: the replication of Zoology's sweep
    (``zoo``), if any, and all the others together (``main``; a cell in two of them counts once)."""

    def __init__(self, name: str, exp_def: dict, best: pd.DataFrame, cells: pd.DataFrame, reference_lrs,
                 tasks: dict | None = None, paper_def: dict | None = None):
        self.name, self.title, self.definition = name, exp_def.get("title", name), exp_def
        self.paper_definition = paper_def  # the paper scale's experiment of that name, if any
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
        """The chance level of a row's task (arrepro.search.thresholds.chance_level)."""
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
            out.update({f"{self.name}/best/model": model_name(top["model"]), f"{self.name}/best/width": fmt_int(top["width"]),
                        f"{self.name}/best/layers": fmt_int(top["layers"]), f"{self.name}/best/len": fmt_int(top["seq_len"]),
                        f"{self.name}/best/acc": pct(top["mean"]), f"{self.name}/best/basis": rests_on_short(top),
                        f"{self.name}/layers": join([str(n) for n in sorted(main["layers"].unique())])})
            if self.reference_lrs:
                out[f"{self.name}/reflrs"] = join([tex_lr(x) for x in self.reference_lrs])
            out.update({f"{self.name}/{k}": v for k, v in self.sentences().items() if v})
        for part, prefix in (("main", ""), ("zoo", "zoo/")):
            c = self.rows(part=part, cells=True)
            if not c.empty:
                out[f"{self.name}/{prefix}nlrs"] = fmt_int(c["lr"].nunique())
        gain = self.zoology_gain()
        if gain is not None:
            out[f"{self.name}/gain"] = points(gain)
        spread = self.pe_spread()
        if spread is not None:
            out[f"{self.name}/pespread"], out[f"{self.name}/pespreadmodel"] = points(spread[0]).lstrip("+"), model_name(spread[1])
        return out

    def models(self, part: str = "main") -> list[str]:
        """The models this experiment's series trained, in the config's order."""
        trained = set(self.rows(part=part)["model"])
        order = [m for g in self.definition["grids"] for m in g["models"]]
        return [m for m in dict.fromkeys(order) if m in trained]

    def sentences(self) -> dict[str, str]:
        """The passages of the text that list this experiment's models (only those it trained:
        a model it does not train is never named with a missing number) or say what its numbers
        rest on; main.tex reads each as \\R{EXP/NAME}."""
        main, models = self.rows(), self.models()
        out = {"models": join([model_name(m) for m in models]),
               "maxlist": join([f"{model_name(m)} {self.stat(m, 'max')}" for m in models]),
               "basis": self.basis(), "goodtext": self.good_text(), "besttext": self.best_text(),
               "goodmain": self.good_text(("attention", "hyena", "mamba")),
               "widest": "; ".join(f"{model_name(m)}: {self.stat(m, 'window')}" for m in models if self.stat(m, "window")),
               "untrained": self.untrained_text()}
        if self.series["zoo"] and not self.rows(part="zoo").empty:
            out["gridtext"] = self.grid_text()
        if self.definition.get("plot") == "width":
            out["legend"] = series_legend(main["series"].tolist() + self.rows(part="zoo")["series"].tolist(),
                                          "published" in self.definition)
        return out

    def untrained_text(self) -> str:
        """The models the paper scale's experiment of this name trains that this one does not:
        "Mamba without its gate and S6 + MLP are not trained at this scale."."""
        if not self.paper_definition:
            return ""
        paper = dict.fromkeys(m for g in self.paper_definition["grids"] if not is_replication(g) for m in g["models"])
        names = set(map(model_name, self.models()))
        missing = list(dict.fromkeys(model_name(m) for m in paper if model_name(m) not in names))
        if not missing:
            return ""
        return f"{cap(join(missing))} {'is' if len(missing) == 1 else 'are'} not trained at this scale."

    def stat(self, model: str, key: str, part: str = "main") -> str:
        b, c = self.rows(model, part=part), self.rows(model, part=part, cells=True)
        return model_stats(b, c, self.metric, self.reference_lrs).get(key, "") if len(b) else ""

    def basis(self) -> str:
        """What each point of the experiment's figure (or row of its table) rests on, in a sentence."""
        b = self.rows()
        if b.empty:
            return ""
        n = sorted({len(row_candidates(r)) for _, r in b.iterrows()})
        seeds = sorted({";".join(row_seeds(r)) for _, r in b.iterrows()})
        seeds_txt = seeds_list(seeds[0].split(";")) if len(seeds) == 1 else "every seed of its grid"
        cands = (f"{n[0]} candidate learning rate{'s' if n[0] != 1 else ''}" if len(n) == 1 else
                 f"{n[0]} to {n[-1]} candidate learning rates")
        spent = sorted({int(x) for x in b["n_cells"]})
        cells = plural(spent[0], "training run") if len(spent) == 1 else f"{spent[0]} to {spent[-1]} training runs"
        stat_txt = (f"the best, over its setting's {cands}, of the mean over {seeds_txt} (each candidate "
                    f"trained on every one of them; the setting's search spent {cells})")
        kind = self.definition.get("plot", "table")
        if kind == "dynamics":
            return (f"Each curve: the mean over {seeds_txt} at the learning rate reported, {stat_txt}.")
        if kind == "lr":
            c = self.rows(cells=True)
            per = c.groupby(["task", "model", "width", "layers", "lr"])["seed"].nunique()
            full = per.max()
            points_txt = ("Each point: the mean over " + seeds_txt + " at that learning rate" if (per == full).all() else
                          "Each point: the mean over the seeds trained at that learning rate (" + seeds_txt +
                          " at the candidates, fewer elsewhere)")
            return (f"{points_txt}; bars from min to max over them. Rings: the learning rate reported, {stat_txt}.")
        spread = r"$\pm$ the standard deviation over those seeds" if kind == "table" else "bars from min to max over them"
        return f"Each number is {stat_txt}; {spread}."

    def good_text(self, models=None) -> str:
        """Per model (of ``models``, if given), the setting with the most good learning rates:
        "attention reaches 90\\% at 3 of the 5 learning rates tried ($10^{-3}$ to $10^{-2}$), Hyena at
        none of the 4"."""
        parts = []
        for i, m in enumerate(x for x in self.models() if models is None or x in models):
            b = self.rows(m)
            if "window_status" not in b.columns:
                return ""
            ws = [(window_of(r), r) for _, r in b.iterrows()]
            w, r = max(ws, key=lambda p: (p[0].n_good, window_rank(p[0])))
            main = self.rows()
            varies = [(k, f"{k.replace('seq_len', 'length')} {fmt_int(r[k])}") for k in ("seq_len", "width", "layers")
                      if main[k].nunique() > 1]
            where = f" at {', '.join(t for _, t in varies)}" if varies else ""
            tried = int(r["n_lrs"])
            count = "none" if w.n_good == 0 else str(w.n_good)
            at = (f"at {count} of the {tried} learning rates tried" if tried > 1 else
                  f"at its one learning rate" if w.n_good else "not at its one learning rate")
            verb = f"{model_name(m)}{' reaches ' + GOOD_TEXT if i == 0 else ''} {at}"
            good = ("" if w.status != "window" else f" ({tex_lr(w.lo)})" if w.lo == w.hi else
                    f" ({tex_lr(w.lo)} to {tex_lr(w.hi)})")
            parts.append(f"{verb}{where}{good}")
        return join(parts)

    def best_text(self) -> str:
        """Per model, its best mean accuracy and learning rate, and what the reference grid's
        learning rates alone would have given (where the search tried them all)."""
        if not self.reference_lrs:
            return ""
        parts = []
        for m in self.models():
            top = self.rows(m).sort_values("mean").iloc[-1]
            ref = self.stat(m, "refbest")
            ref_txt = (f"; with the coarse grid's learning rates alone, {ref}" if ref else
                       "; the coarse grid's learning rates were not all tried")
            parts.append(f"{model_name(m)}'s best mean accuracy is {pct_range(top['mean'], top['min'], top['max'])}, "
                         f"at learning rate {tex_lr(top['best_lr'])}{ref_txt}")
        return cap("; ".join(parts))

    def grid_text(self) -> str:
        """The search (or fine grid) against the replication of Zoology's coarse grid."""
        main, zoo = self.rows(cells=True), self.rows(part="zoo", cells=True)
        searched = self.rows()["outcome"].ne("fixed").any() if "outcome" in self.rows().columns else False
        ours = "the search" if searched else "the fine grid"
        per, total = self.rows()["n_lrs"], main["lr"].nunique()
        tried = (f"tried {fmt_int(per.min())} to {fmt_int(per.max())} learning rates a setting"
                 if per.min() != per.max() else f"tried {plural(per.max(), 'learning rate')} a setting")
        if total != per.max():
            tried += f" ({plural(total, 'learning rate')} in all)"
        zlrs = sorted(zoo["lr"].unique())
        text = (f"{cap(ours)} {tried}; the replication trains the coarse grid's {plural(len(zlrs), 'learning rate')} "
                f"({join([tex_lr(x) for x in zlrs])})")
        gain = self.zoology_gain()
        if gain is not None:
            change = ("leaves the best mean accuracy where the coarse grid has it (a mean change of 0.0 points)"
                      if points(gain) == "0.0" else f"changes the best mean accuracy by {points(gain)} points on average")
            text += f". Over the {plural(len(self.matched()), 'matched setting')} of the recurrent models, {ours} {change}"
        for m in self.models():
            zm = next((z for z in self.models("zoo") if architecture(z) == m), None)
            if zm is None or self.rows(m)["mixer"].iloc[0] in ATTENTION_MIXERS:
                continue
            zoo = self.rows(zm, part="zoo")
            both = self.rows(m).merge(zoo[["task", "width", "layers"]], on=["task", "width", "layers"])
            if both.empty:
                continue
            top = both.sort_values("mean").iloc[-1]  # the best of the settings both trained
            z = zoo[(zoo["width"] == top["width"]) & (zoo["layers"] == top["layers"]) & (zoo["task"] == top["task"])]
            a, b = (pct_range(r["mean"], r["min"], r["max"]) for r in (top, z.iloc[0]))
            where = "" if self.rows()["seq_len"].nunique() == 1 else f", length {fmt_int(top['seq_len'])}"
            text += (f"; {fmt_int(top['layers'])}-layer {model_name(m)}'s best setting of those (width {fmt_int(top['width'])}"
                     f"{where}) reaches " + (f"{a} with both" if a == b else f"{a} with {ours} and {b} with the coarse grid"))
        return text

    def matched(self) -> pd.DataFrame:
        """The main series' rows of recurrent models matched with the replication's (same setting)."""
        zoo = self.rows(part="zoo")
        zoo = zoo.assign(model=zoo["model"].map(architecture))  # zoology_hyena: the replication's hyena
        m = self.rows().merge(zoo, on=["task", "model", "width", "layers"], suffixes=("", "_zoo"))
        return m[~m["mixer"].isin(ATTENTION_MIXERS)]

    def zoology_gain(self) -> float | None:
        """Mean over matched settings of recurrent models of (main - Zoology replication) best
        accuracy, in points."""
        m = self.matched()
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
    """The claims table's rows (arrepro.report.claims judges them) and ``claim/ID`` -> verdict."""
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
    items = [f"{tex_escape(n)}: {plural(r['epochs'], 'epoch')}" for n, r in recipes.items()]
    return f"recipe{'s' if len(items) > 1 else ''} {join(items)}"


# --------------------------------------------------------------------------- the models in words
CITES = {"based": "arora2024based", "h3": "fu2023h3", "hyena": "poli2023hyena", "rwkv": "peng2023rwkv",
         "mamba": "gu2024mamba", "mamba2": "dao2024transformers", "deltanet": "yang2024deltanet"}
ABLATIONS = ("attention_conv_qkv", "attention_conv_q", "attention_conv_k", "attention_conv_v", "attention_conv_qkv_centred",
             "attention_conv_q_centred", "attention_conv_k_centred", "attention_conv_v_centred", "mamba_noconv",
             "mamba_nogate", "s6_mlp")
COPY_MODELS = ("transformer_rope", "transformer_rope_jelassi", "mamba_jelassi")


def scale_models(experiments: dict) -> list[str]:
    """The config models a scale's experiments train, in the config's order of first use."""
    return list(dict.fromkeys(m for e in experiments.values() for g in e["grids"] for m in g["models"]))


def _describe(model: str, definition: dict) -> str:
    d = defaults.model(definition)
    name = model_name(model)
    cite = f" \\citep{{{CITES[model]}}}" if model in CITES else ""
    if d["mixer"] == "attention":
        heads = d["mixer_kwargs"].get("num_heads", 1)
        pos = {"learned": "learned absolute", "rope": "rotary", "sinusoidal": "sinusoidal"}.get(d["position"], "no")
        return f"{'a Transformer' if model in COPY_MODELS else name}{cite} ({plural(heads, 'head')}, {pos} positions)"
    if model in COPY_MODELS and "d_state" in d["mixer_kwargs"]:
        return f"{name}{cite} (state size {d['mixer_kwargs']['d_state']})"
    return name + cite


def models_text(meta: dict) -> str:
    """The Models paragraph: what this scale trains, grouped as the paper does, and which of the
    paper scale's models it does not train (never a model it does not run as if it did)."""
    models, defs = scale_models(meta["experiments"]), meta.get("models") or {}
    def group(pred):
        return [m for m in models if pred(m)]
    zoo = group(lambda m: m.startswith(ZOO_PREFIX))
    pe = group(lambda m: "_pe_" in m)
    abl = group(lambda m: m in ABLATIONS)
    copy = group(lambda m: m in COPY_MODELS)
    core = [m for m in models if m not in zoo + pe + abl + copy]
    parts = []
    if core:
        parts.append(f"{join([_describe(m, defs.get(m, {})) for m in core])}")
    if abl:
        conv = [m for m in abl if m.startswith("attention_conv_")]
        mamba = [model_name(m) for m in abl if m not in conv]

        def where(paths):
            singles = [p.upper() for p in paths if p != "qkv"]
            return join((["Q, K and V together"] if "qkv" in paths else [])
                        + ([f"{join(singles, 'or')} alone"] if singles else []), "or of")
        causal = [m[len("attention_conv_"):] for m in conv if not m.endswith("_centred")]
        centred = [m[len("attention_conv_"):-len("_centred")] for m in conv if m.endswith("_centred")]
        if causal and sorted(centred) == sorted(causal):
            convs = [f"a short convolution on the input of {where(causal)}, each both causal and centred (one step "
                     f"ahead, as the paper most likely ran it)"]
        else:
            convs = ([f"a short causal convolution on the input of {where(causal)}"] if causal else []) + \
                ([f"a short centred convolution (one step ahead) on the input of {where(centred)}"] if centred else [])
        items = ([f"attention with {join(convs, 'or')} \\citep{{li2024convolution}}"] if conv else []) + mamba
        parts.append(f"the ablations of the paper's Section~7: {join(items)}")
    if copy:
        parts.append(f"for copying, {join([_describe(m, defs.get(m, {})) for m in copy])}")
    if zoo:
        parts.append(f"for the replication, Zoology's own forms of {join([model_name(architecture(m)) for m in zoo])} "
                     "(no MLP after the mixer)")
    if pe:
        bases = list(dict.fromkeys(model_name(m.partition('_pe_')[0]) for m in pe))
        schemes = list(dict.fromkeys(PE_NAMES.get(m.partition('_pe_')[2], m.partition('_pe_')[2]) for m in pe))
        parts.append(f"{join(bases)} with {join(schemes)} positions")
    text = f"This scale trains {'; '.join(parts)}."
    paper = meta.get("paper_scale")
    if paper and meta["scale"] != "paper":
        missing = [m for m in scale_models(paper["experiments"]) if m not in models]
        named = list(dict.fromkeys(model_name(m) for m in missing if not m.startswith(ZOO_PREFIX) and "_pe_" not in m))
        extra = (["Zoology's own model forms"] if any(m.startswith(ZOO_PREFIX) for m in missing) else []) + (
            ["the positional variants"] if any("_pe_" in m for m in missing) else [])
        if named or extra:
            text += f" Of the paper's models, {join(named + extra)} are not trained at this scale."
    return text


# --------------------------------------------------------------------------- float numbers
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


def claims_summary(verdicts: list[str], n_claims: int) -> str:
    """"This scale tests 8 of the paper's 15 claims: our results are consistent with 5, contradict 1
    and are inconclusive on 2"."""
    n = len(verdicts)
    if not n:
        return f"This scale tests none of the paper's {n_claims} claims"
    counts = {v: sum(x == v for x in verdicts) for v in ("consistent", "contradicted", "inconclusive")}
    if n == 1:
        v = verdicts[0]
        how = {"consistent": "our results are consistent with it", "contradicted": "our results contradict it",
               "inconclusive": "our results are inconclusive on it"}[v]
        return f"This scale tests one of the paper's {n_claims} claims: {how}"
    parts = [f"consistent with {counts['consistent']}" if counts["consistent"] else "",
             f"contradict {counts['contradicted']}" if counts["contradicted"] else "",
             f"are inconclusive on {counts['inconclusive']}" if counts["inconclusive"] else ""]
    parts = [p for p in parts if p]
    first = parts[0]
    if first.startswith("consistent"):
        parts[0] = "are " + first
    return f"This scale tests {n} of the paper's {n_claims} claims: our results {join(parts)}"


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
    from arrepro.config.grid import schema_defaults

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
    seeds = "every seed" if d["search_seeds"] == "all" else (
        "the first seed" if d["search_seeds"] == 1 else f"the first {d['search_seeds']} seeds")
    if not d["rounds"]:
        return f"search \\emph{{{tex_escape(g['search'])}}}: {_lrs_text(start)} on {seeds}, no refinement"
    return (f"search \\emph{{{tex_escape(g['search'])}}}: start {_lrs_text(start)}, within {tex_lr(lo)} to "
            f"{tex_lr(hi)}, to {d['resolution']:g} decades, {_rounds_text(d)}, on "
            f"{seeds}{', window resolved' if d['window'] else ''}")


def _rounds_text(d: dict) -> str:
    """A search's refinement budget: "at most 2 rounds of 2 learning rates", "no refinement"."""
    if not d["rounds"]:
        return "no refinement (the start grid only)"
    return f"at most {plural(d['rounds'], 'round')} of {plural(d['per_round'], 'learning rate')}"


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
            "deterministic search, one per setting, which the workflow runs in rounds (\\texttt{src/arrepro/search/protocol.py}; "
            "every decision and its reason is written to a file). Round~0 trains a start grid on the seeds a search starts with. "
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
        seeds = "every seed" if d["search_seeds"] == "all" else plural(d["search_seeds"], "seed")
        ladder = "" if d["search_seeds"] == "all" else (
            ", then " + ", then ".join(f"the best {t} on {'every seed' if k == 'all' else plural(k, 'seed')}"
                                      for k, t in d["ladder"]))
        budget = d.get("budget") or 0
        tiers = "".join(f" ({v} for the {k} cost tier)" for k, v in d.get("tier_budget", {}).items())
        parts.append(f"\\emph{{{tex_escape(n)}}}: start {start_txt}{rng}, resolution {d['resolution']:g} decades, "
                     f"{_rounds_text(d)}, search on "
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
    parts = [f"{fmt_int(per[k])} with {v}" for k, v in OUTCOMES.items() if k in per]
    return (f"This scale's {plural(int(per.sum()), 'search', 'searches')} (one a setting) ended: {join(parts)}; "
            f"they trained {plural(len(cells), 'cell')} in all.")


def setup_tex(meta: dict) -> str:
    """\\SetupTables (a table float of tasks and recipes) and \\SetupGrids (each experiment's grids)."""
    out = [r"\newcommand{\SetupTables}{\begin{table}[htbp]\centering\small\FloatNumber{table}{setup}",
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
    """The paper scale's fidelity table (arrepro.report.fidelity), whatever the scale of this document."""
    if not meta.get("paper_scale") or not meta.get("models"):
        return r"\emph{The configuration declares no paper scale.}"
    config = {"models": meta["models"], "lr_grids": meta["lr_grids"], "aggregate": {"metric": meta["metric"]},
              "scales": {"paper": meta["paper_scale"]}, "lr_protocol": meta.get("lr_protocol", "search"),
              "lr_searches": meta.get("lr_searches", {})}
    return fidelity.latex(config)


# --------------------------------------------------------------------------- the manuscript's keys
# Every key numbers.tex can define: \R{EXP/FIELD}, \R{EXP/[zoo/]MODEL/[L<n>/]STAT}, \R{claim/ID}, \R{claims/...}.
MODEL_STATS = {"max", "maxpm", "maxwidth", "maxlayers", "maxlen", "maxlr", "maxparams", "min", "minwidth", "minlen",
               "solved", "settings", "solvedof", "solvetext", "maxbasis", "good", "nlrs", "window", "refbest", "cells", "diverged",
               *(f"{shape}/{k}" for shape in ("wide", "deep") for k in ("acc", "width", "layers", "params", "shape"))}
SENTENCES = {"models", "maxlist", "basis", "goodtext", "goodmain", "besttext", "widest", "gridtext", "legend", "untrained"}  # Results.sentences
EXP_FIELDS = {"title", "metric", "layers", "reflrs", "nlrs", "zoo/nlrs", "gain", "pespread", "pespreadmodel",
              *SENTENCES, *(f"best/{k}" for k in ("model", "width", "layers", "len", "acc", "basis"))}
COPY_ALIASES = {"copytransformer": COPY_TRANSFORMER, "copymamba": COPY_MAMBA}  # \R{fig5/copymamba/max}, ...
RUN_KEYS = {"claims/n", "claims/consistent", "claims/contradicted", "claims/inconclusive", "claims/notjudged",
            "claims/summary", "blocks/models", "blocks/paper", "blocks/paperdrew"}


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
                         f"experiment/model/statistic or claim (see {__spec__.name}.MODEL_STATS, EXP_FIELDS, "
                         f"{judge.__module__}.CLAIMS)")


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
        keys.update(r.keys())
    rows, claim_keys = claim_rows(results)
    keys.update(claim_keys)
    lines.append(f"\\newcommand{{\\NumClaims}}{{{len(rows)}}}")
    lines.append(f"\\newcommand{{\\ClaimRules}}{{{tex_escape(rules_text())}}}")
    keys["claims/n"] = fmt_int(len(rows))
    keys["claims/summary"] = claims_summary(list(claim_keys.values()), len(CLAIMS))
    if meta.get("blocks"):
        from arrepro.report.blocks import PAPER_FIGURES

        keys["blocks/models"] = join([model_name(m) for m in meta["blocks"]])
        drawn = [m for m in meta["blocks"] if PAPER_FIGURES[m][0]]
        if drawn:
            many = len(drawn) > 1
            keys["blocks/paper"] = (f"the paper's Figure{'s' if many else ''} {join([str(PAPER_FIGURES[m][0]) for m in drawn])} "
                                    f"show{'' if many else 's'} {join([model_name(m) for m in drawn])}")
            keys["blocks/paperdrew"] = cap(keys["blocks/paper"])
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
    not train with the pinned numerics (arrepro.train.numerics: another thread count, a CPU without
    AVX2, an earlier attempt with other settings) is named, by its folder."""
    unpinned = sorted(cells.loc[~cells["pinned"].astype(bool), "cell_dir"])
    if not unpinned:
        return f"All {fmt_int(len(cells))} runs trained with the pinned CPU numerics."
    names = "; ".join(r"\texttt{" + tex_escape(d.removeprefix("results/cells/")) + "}" for d in unpinned)
    return (rf"{fmt_int(len(unpinned))} of the {fmt_int(len(cells))} runs trained \emph{{without}} the pinned CPU "
            rf"numerics (their \texttt{{result.json}} says why; on another machine their numbers may differ): {names}.")


def load_results(meta: dict, best_csvs: dict[str, str], cells_csvs: dict[str, str]) -> dict[str, Results]:
    from arrepro.report.aggregate import BEST_NOT_NULL, CELLS_NOT_NULL

    paper = (meta.get("paper_scale") or {}).get("experiments", {})
    return {exp: Results(exp, meta["experiments"][exp], read_csv(best_csvs[exp], BEST_COLUMNS, BEST_NOT_NULL),
                         read_csv(cells_csvs[exp], CELL_COLUMNS, CELLS_NOT_NULL + ["series"]),
                         meta["reference_lrs"].get(exp, []), meta["tasks"], paper.get(exp))
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
    from arrepro.report.blocks import block_models
    from arrepro.config.grid import schema_defaults

    return {"scale": grid.scale_name, "device": defaults.scale(grid.scale, "device"), "tasks": grid.scale["tasks"],
            "recipes": grid.scale["recipes"], "experiments": grid.experiments, "lr_grids": config["lr_grids"],
            "reference_lrs": {e: grid.reference_lrs(e) for e in grid.experiments},
            "metric": config["aggregate"]["metric"], "paper_scale": config["scales"].get("paper"),
            "models": config["models"], "lr_protocol": config.get("lr_protocol", schema_defaults()["lr_protocol"]),
            "lr_searches": config.get("lr_searches", {}), "blocks": list(block_models(grid))}
