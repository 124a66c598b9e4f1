"""Tidy tables of finished cells and the paper's statistic: best-over-LR accuracy.

The number reported for each (series, task, model, width, layers, recipe) is the paper's (A.2):
the best, over the learning rates, of the mean over every reported seed. Which learning rates
compete is the learning-rate search's decision (``arrepro.search.protocol``): its *candidates*, each
trained on every reported seed; the best table's row is the chosen candidate (the best mean;
among exactly tied ones the middle in LR order, the lower of the two middle ones for an even
count; ``n_tied_lrs`` says how many tied) with the mean, std, min and max over every reported
seed, and says what the number rests on: the candidates (``candidates``), the reported seeds
(``seeds``), the learning rates tried (``n_lrs``) and cells trained (``n_cells``), the
contenders the budget left untried (``n_contenders``). A fixed grid trained on every seed is the
search's special case (every learning rate a candidate). The row also carries the outcome and
the setting's good-LR window (``arrepro.search.protocol.window``: its edges, as the tried learning
rates bound them, and its gaps), decided from the points it reports: the search's candidates and
its experiment's cover's rates (``arrepro.search.cover.report``).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from arrepro.config.cellfiles import RESULT, read_result
from arrepro.files import read_table, write_table
from arrepro.data import task_seq_len
from arrepro.config.grid import Setting, fmt_lr
from arrepro.search import cover, protocol
from arrepro.search.plans import Plan
from arrepro.search.rounds import window_dict
from arrepro.search.thresholds import GOOD

CONFIG_KEYS = ["task", "task_name", "model", "mixer", "width", "layers", "recipe", "lr", "seed"]
GROUP = ["series", "task", "task_name", "seq_len", "model", "mixer", "width", "layers", "recipe"]
WINDOW = ["status", "lo", "hi", "below", "above", "width", "width_max", "open_lo", "open_hi", "n_good", "n_tried",
          "gaps", "unknown"]  # (Window.from_dict reads them back)
# the columns every reader of the tables relies on, each with a value on every row (read_*_table)
CELLS_NOT_NULL = CONFIG_KEYS + ["seq_len", "cell_dir", "diverged", "parameters", "pinned"]
BEST_NOT_NULL = GROUP + ["metric", "best_lr", "mean", "std", "min", "max", "n_seeds", "n_diverged", "n_tied_lrs", "n_lrs", "parameters", "search",
                         "outcome", "window_status", "candidates", "n_candidates", "seeds", "n_cells", "n_contenders", "contender_bound"]


def load_results(paths: list[str | Path], task_names: dict | None = None) -> pd.DataFrame:
    """One row per result.json, each checked (``cellfiles.read_result``); ``task_names`` labels
    task ids with this scale's names (a cell, shared by scales, does not carry one)."""
    rows = []
    for p in paths:
        r = read_result(p)
        cell = r.pop("cell")
        r["task_name"] = (task_names or {}).get(r["task"], r["task"])
        r["seq_len"] = task_seq_len(cell["task_def"])
        r["cell_dir"] = str(Path(p).parent)
        r["pinned"] = bool((r.get("numerics") or {}).get("pinned"))  # trained with the pinned CPU numerics
        rows.append(r)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    first = [c for c in CONFIG_KEYS + ["seq_len"] if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]].sort_values(CONFIG_KEYS)


def cell_accuracy(df: pd.DataFrame, metric: str) -> pd.Series:
    """The per-cell number of the statistic; a diverged cell counts as 0 (its number, if any, and a
    missing one too): what the tables, the search and the learning-rate figure count."""
    return df[metric].fillna(0.0).where(~df["diverged"].astype(bool), 0.0)


def _lr_list(lrs) -> str:
    """Learning rates as a table's cell, each exactly (``fmt_lr``: three digits where they are
    exact, else every digit), so that its readers compare the rates trained (``cover.same_lr``)."""
    return ";".join(fmt_lr(x) for x in sorted(lrs))


def _row(g: pd.DataFrame, metric: str, decision: dict) -> dict:
    """One best-table row: the statistics over every reported seed at the chosen learning rate
    (a row resting on fewer seeds than reported is refused: it would not be the paper's number)."""
    at = g[g["lr"] == decision["chosen"]].drop_duplicates("seed")
    seeds = decision["seeds"]
    if sorted(at["seed"]) != sorted(seeds):
        raise ValueError(f"search {decision['search']}: the chosen learning rate {decision['chosen']:g} has seeds "
                         f"{sorted(at['seed'])}, not every reported seed {sorted(seeds)}")
    acc = cell_accuracy(at, metric)
    w = decision["window"] or {}
    first = g.iloc[0]
    return {**{k: first[k] for k in GROUP}, "metric": metric, "best_lr": decision["chosen"],
            "mean": acc.mean(), "std": acc.std() if len(acc) > 1 else 0.0, "min": acc.min(), "max": acc.max(),
            "n_seeds": len(at), "n_diverged": int(at["diverged"].astype(bool).sum()),
            "n_tied_lrs": decision["n_tied"], "n_lrs": g["lr"].nunique(), "parameters": first["parameters"],
            "search": decision["search"], "outcome": decision["outcome"],
            "candidates": _lr_list(decision["points"]), "n_candidates": len(decision["points"]),
            "seeds": ";".join(str(int(x)) for x in seeds), "n_cells": len(g.drop_duplicates(["lr", "seed"])),
            "n_contenders": decision.get("contenders", 0),
            # the most a contender could still reach; the number itself when none could beat it
            "contender_bound": acc.mean() if decision.get("contender_bound") is None else decision["contender_bound"],
            **{f"window_{k}": w.get(k) for k in WINDOW}}


def contender_bound(state: dict, n_seeds: int) -> float | None:
    """The highest mean over every seed a contender left by the budget could still reach (its
    accuracies so far, and 1 on every seed not trained); None without contenders."""
    scores = {lr: (k, m) for lr, k, m in state.get("scores", [])}
    bounds = [(k * m + (n_seeds - k)) / n_seeds for lr in state.get("contenders", []) if lr in scores
              for k, m in [scores[lr]]]
    return max(bounds) if bounds else None


def _points_decision(points: dict[float, float], search: str, outcome: str, window: dict | None, seeds) -> dict:
    top = max(points.values())
    return {"chosen": protocol.best(points), "search": search, "outcome": outcome, "window": window, "points": points,
            "n_tied": sum(m >= top - protocol.EXACT for m in points.values()), "seeds": list(seeds)}


def best_over_lr(df: pd.DataFrame, metric: str = "final_accuracy", learned: float = 0.0,
                 good: float | None = None) -> pd.DataFrame:
    """The best table of fixed grids, every learning rate trained on every seed (the search's
    special case, without its plan files): the best mean over seeds, middle of exact ties."""
    rows = []
    for _, g in df.assign(acc=cell_accuracy(df, metric)).groupby(GROUP, dropna=False, sort=True):
        points = g.groupby("lr")["acc"].mean().to_dict()
        w = protocol.window(points, learned, GOOD if good is None else good, min(points), max(points))
        rows.append(_row(g, metric, _points_decision(points, "fixed", "fixed", window_dict(w), sorted(g["seed"].unique()))))
    return pd.DataFrame(rows).sort_values(GROUP).reset_index(drop=True)


def write_tables(plan_paths, series: list[dict], metric: str, cells_csv, best_csv, task_names: dict | None = None,
                 cover_file: str | None = None) -> None:
    """An experiment's cells table (every cell of its searches, one row per series it is in) and
    best table (one row per series and search: the search's chosen learning rate). ``series``:
    [{"series": name, "searches": [search key, ...]}]; ``plan_paths``: the last plans of the
    searches' groups (arrepro.search.plans.Plan); ``task_names``: task id -> this scale's name;
    ``cover_file``: the experiment's cover file (arrepro.search.cover), whose learning rates, each
    trained on every reported seed, join their settings' candidates (column ``cover``)."""
    entries, rounds = {}, {}
    for p in plan_paths:
        plan = Plan.read(p)
        for key, entry in plan.searches.items():
            entries[key] = entry
            rounds[key] = plan.rounds(key)
    covered: dict[str, list[tuple[float, int]]] = {}
    for c in (cover.read(cover_file)[0] if cover_file else []):
        covered.setdefault(c.search, []).extend((c.lr, s) for s in c.seeds)
    results: dict[str, dict] = {}
    cell_parts, best_rows = [], []
    for s in series:
        for key in s["searches"]:
            if key not in entries:
                raise ValueError(f"search {key} of series {s['series']!r} is in none of the plans {list(plan_paths)}")
            entry, setting = entries[key], Setting(**entries[key]["setting"])
            extra = covered.get(key, [])
            paths = [f"{setting.cell(lr, seed).path}/{RESULT}"
                     for lr, seed in dict.fromkeys(protocol.cells_of(rounds[key]) + extra)]
            missing = [p for p in paths if p not in results]
            if missing:
                df = load_results(missing, task_names)
                results.update({f"{d}/{RESULT}": r for d, r in zip(df["cell_dir"], df.to_dict("records"))})
            g = pd.DataFrame([results[p] for p in paths]).assign(series=s["series"], search=key)
            cell_parts.append(g)
            state = entry["state"]
            if state["phase"] != "done":
                raise ValueError(f"search {key} is not done ({state['phase']}): its group's plan is not the last round's")
            seeds = entry["spec"]["seeds"]
            bound = contender_bound(state, len(seeds))
            cover_lrs = sorted({lr for lr, _ in extra})
            acc = g.assign(acc=cell_accuracy(g, metric))  # each cover rate on every reported seed: a candidate like the search's own
            rep = cover.report(entry, {lr: float(acc.loc[acc["lr"] == lr, "acc"].mean()) for lr in cover_lrs})
            best_rows.append(_row(g, metric, {**_points_decision(rep["points"], key, rep["outcome"], window_dict(rep["window"]),
                                                                 seeds),
                                              "chosen": rep["chosen"], "contenders": len(state["contenders"]),
                                              "contender_bound": bound}) | {"cover": _lr_list(cover_lrs)})
    cells = pd.concat(cell_parts, ignore_index=True)
    write_table(cells[["series"] + [c for c in cells.columns if c != "series"]], cells_csv)
    write_table(pd.DataFrame(best_rows).sort_values(GROUP).reset_index(drop=True), best_csv)


def merge_cell_tables(cell_csvs, out_csv) -> None:
    """One row per cell, from the experiments' cell tables (a cell shared by experiments or
    series appears once): the same rows as ``write_tables`` over every cell's result, read from a
    handful of tables instead of thousands of result files."""
    df = pd.concat([read_cells_table(p) for p in cell_csvs], ignore_index=True).drop(columns=["series", "search"])
    df = df.drop_duplicates("cell_dir").sort_values(CONFIG_KEYS)
    write_table(df, out_csv)


def read_cells_table(path, series: bool = True) -> pd.DataFrame:
    """A cells table (an experiment's, with its ``series`` column; ``series=False``: the
    scale's cells.csv), checked (arrepro.files.read_table): an error names the file."""
    cols = CELLS_NOT_NULL + (["series"] if series else [])
    return read_table(path, cols, cols)


def read_best_table(path) -> pd.DataFrame:
    """A best-over-LR table, checked (arrepro.files.read_table): an error names the file."""
    return read_table(path, BEST_NOT_NULL, BEST_NOT_NULL)


def table_content_problem(path) -> str | None:
    """Why a table of the workflow's (``{exp}_best.csv``, ``{exp}_cells.csv``, ``cells.csv``)
    cannot be read as one, or None: what its readers check (checksum, columns, values)."""
    name = Path(path).name
    read = (read_best_table if name.endswith("_best.csv") else
            read_cells_table if name.endswith("_cells.csv") else lambda p: read_cells_table(p, series=False))
    try:
        read(path)
    except ValueError as err:  # UnreadableFile: its message starts with the path
        return str(err).removeprefix(f"{path}: ")
    return None
