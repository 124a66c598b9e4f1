"""The paper's reading of the results: an experiment's aggregated tables (its best-over-LR table
``{exp}_best.csv`` and its cells ``{exp}_cells.csv``), checked for the columns it reads, and the
statistics of a model's rows (``model_stats``) that the manuscript's keys print."""
from __future__ import annotations

import pandas as pd

from arrepro.config.cards import cards as read_cards
from arrepro.config.grid import is_replication
from arrepro.report.claim_kinds import window_of
from arrepro.report.prose import of_total, rests_on, shape_text, window_rank, window_text
from arrepro.report.tex import fmt_count, fmt_int, pct, pct_pm, pct_range, tex_lr
from arrepro.search.cover import same_lr
from arrepro.search.thresholds import GOOD, chance_level

BEST_COLUMNS = ["series", "task", "seq_len", "model", "mixer", "width", "layers", "metric", "best_lr",
                "mean", "std", "min", "max", "n_seeds", "n_diverged", "n_lrs", "parameters"]


CELL_COLUMNS = ["series", "task", "task_name", "seq_len", "model", "width", "layers", "lr", "seed", "diverged",
                "parameters", "cell_dir", "train_seconds", "pinned"]


def read_csv(path, columns: list[str], not_null=()) -> pd.DataFrame:
    from arrepro.files import read_table

    df = read_table(path, not_null=not_null)  # its checksum, and a value on every row in ``not_null``
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; has {list(df.columns)}")
    return df


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
        on_ref = g[g["lr"].apply(lambda x: any(same_lr(x, r) for r in reference_lrs))]  # (the one definition)
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


class Results:
    """One experiment's tables. Its series are split in two: the replication of Zoology's sweep
    (``zoo``), if any, and all the others together (``main``; a cell in two of them counts once)."""

    def __init__(self, name: str, exp_def: dict, best: pd.DataFrame, cells: pd.DataFrame, reference_lrs,
                 tasks: dict | None = None, paper_def: dict | None = None, cards: dict | None = None):
        self.name, self.title, self.definition = name, exp_def.get("title", name), exp_def
        self.cards = cards or {}  # model -> its card (arrepro.config.cards.Card): what the model is
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

    def restricted(self, recipe: str, settings: pd.DataFrame) -> "Results":
        """This experiment's rows of one recipe (its id, as the tables carry it) at ``settings``
        (task, model, width, layers: another experiment's), as an experiment of its own: that
        experiment's claims judged on them (``claims_of``). Its series are those rows' series."""
        keys = ["task", "model", "width", "layers"]
        at = settings[keys].drop_duplicates()
        best = self.best[self.best["recipe"] == recipe].merge(at, on=keys)
        cells = self.cells[self.cells["recipe"] == recipe].merge(at, on=keys)
        definition = {"title": self.title, "grids": [{"series": x} for x in best["series"].unique()]}
        return Results(self.name, definition, best, cells, self.reference_lrs, self.tasks, self.paper_definition, self.cards)

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

    def card(self, model: str):
        """The card of a model of the results (arrepro.config.cards.Card)."""
        if model not in self.cards:
            raise ValueError(f"{self.name}: model {model!r} of the results has no card among config.yaml's models "
                             f"({', '.join(sorted(self.cards)) or 'none given'})")
        return self.cards[model]

    def first_of(self, family: str) -> str | None:
        """The first model of ``family`` (attention or recurrent, its card's) this experiment's main
        series trained, in config.yaml's order (None if none): the copy task's Transformer and Mamba."""
        trained = set(self.rows()["model"])
        return next((m for m, c in self.cards.items() if m in trained and c.family == family), None)

    def copies(self) -> bool:
        """Whether this experiment's main series trains the copy task."""
        return any(self.tasks.get(t, {}).get("kind") == "copy" for t in self.rows()["task_name"].unique())

    def models(self, part: str = "main") -> list[str]:
        """The models this experiment's series trained, in the config's order."""
        trained = set(self.rows(part=part)["model"])
        order = [m for g in self.definition["grids"] for m in g["models"]]
        return [m for m in dict.fromkeys(order) if m in trained]

    def stat(self, model: str, key: str, part: str = "main") -> str:
        b, c = self.rows(model, part=part), self.rows(model, part=part, cells=True)
        return model_stats(b, c, self.metric, self.reference_lrs).get(key, "") if len(b) else ""

    def matched(self) -> pd.DataFrame:
        """The main series' rows of recurrent models matched with the replication's (same setting)."""
        zoo = self.rows(part="zoo")
        zoo = zoo.assign(model=[self.card(z).base for z in zoo["model"]])  # Zoology's Hyena: the replication's Hyena
        m = self.rows().merge(zoo, on=["task", "model", "width", "layers"], suffixes=("", "_zoo"))
        return m[[not self.card(x).attention for x in m["model"]]]

    def zoology_gain(self) -> float | None:
        """Mean over matched settings of recurrent models of (main - Zoology replication) best
        accuracy, in points."""
        m = self.matched()
        return None if m.empty else float(100 * (m["mean"] - m["mean_zoo"]).mean())

    def pe_spread(self) -> tuple[float, str] | None:
        """Largest (max - min) best accuracy, in points, across positional variants of one model
        (a card of role positional names the model it varies; that model is the variant without)."""
        r = self.rows()
        base = r["model"].map(lambda m: self.card(m).base if self.card(m).role == "positional" else m)
        by = r.groupby(base).agg(n=("model", "nunique"), hi=("mean", "max"), lo=("mean", "min"))
        by = by[by["n"] > 1]
        if by.empty:
            return None
        spread = 100 * (by["hi"] - by["lo"])
        return float(spread.max()), str(spread.idxmax())


def load_results(meta: dict, best_csvs: dict[str, str], cells_csvs: dict[str, str]) -> dict[str, Results]:
    from arrepro.report.aggregate import BEST_NOT_NULL, CELLS_NOT_NULL

    paper = (meta.get("paper_scale") or {}).get("experiments", {})
    return {exp: Results(exp, meta["experiments"][exp], read_csv(best_csvs[exp], BEST_COLUMNS, BEST_NOT_NULL),
                         read_csv(cells_csvs[exp], CELL_COLUMNS, CELLS_NOT_NULL + ["series"]),
                         meta["reference_lrs"].get(exp, []), meta["tasks"], paper.get(exp), read_cards(meta["models"]))
            for exp in meta["experiments"]}
