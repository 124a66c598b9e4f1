"""Tidy tables of finished cells and the paper's statistic: best-over-LR accuracy.

For each (series, task, model, width, layers, recipe) the learning rate with the highest mean
accuracy over seeds is chosen, and the mean, std, min and max over seeds at that learning rate
are reported (choosing the best LR per seed would be biased upwards). Where several learning
rates tie for the best mean (every seed at 1.0, say), the middle one of them in LR order is
reported (the lower of the two middle ones for an even count), and ``n_tied_lrs`` says how many
tied: the statistics are the same, but the reported LR is not an edge of the good range.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .cellfiles import read_result
from .files import read_csv
from .grid import task_seq_len

TIE_TOL = 1e-9  # means closer than this are tied (ties at accuracy 1.0 are common on MQAR)
CONFIG_KEYS = ["task", "task_name", "model", "mixer", "width", "layers", "recipe", "lr", "seed"]
GROUP = ["series", "task", "task_name", "seq_len", "model", "mixer", "width", "layers", "recipe"]


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
        rows.append(r)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    first = [c for c in CONFIG_KEYS + ["seq_len"] if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]].sort_values(CONFIG_KEYS)


def assign_series(df: pd.DataFrame, series: list[dict]) -> pd.DataFrame:
    """One row per (series, cell): a cell in two series (two LR grids, say) appears in both."""
    parts = []
    for s in series:
        members = {str(Path(c)) for c in s["cells"]}
        part = df[df["cell_dir"].isin(members)].copy()
        part.insert(0, "series", s["series"])
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def best_over_lr(df: pd.DataFrame, metric: str = "final_accuracy") -> pd.DataFrame:
    per_lr = (df.groupby(GROUP + ["lr"], dropna=False)[metric]
              .agg(mean="mean", std="std", min="min", max="max", n_seeds="count").reset_index())
    diverged = df.groupby(GROUP + ["lr"], dropna=False)["diverged"].sum().reset_index(name="n_diverged")
    per_lr = per_lr.merge(diverged, on=GROUP + ["lr"])
    top = per_lr.groupby(GROUP, dropna=False)["mean"].transform("max")
    tied = per_lr[per_lr["mean"] >= top - TIE_TOL].sort_values(GROUP + ["lr"])
    n_tied = tied.groupby(GROUP, dropna=False)["lr"].transform("size")
    rank = tied.groupby(GROUP, dropna=False).cumcount()
    best = tied[rank == (n_tied - 1) // 2].assign(n_tied_lrs=n_tied)  # the middle of the tied LRs (lower middle if even)
    best = best.rename(columns={"lr": "best_lr"}).reset_index(drop=True)
    best["std"] = best["std"].fillna(0.0)
    n_lrs = per_lr.groupby(GROUP, dropna=False)["lr"].nunique().reset_index(name="n_lrs")
    best = best.merge(n_lrs, on=GROUP)
    params = df.groupby(GROUP, dropna=False)["parameters"].first().reset_index()
    best = best.merge(params, on=GROUP)
    best.insert(len(GROUP), "metric", metric)
    return best.sort_values(GROUP).reset_index(drop=True)


def write_tables(result_paths, cells_csv, best_csv=None, series=None, metric="final_accuracy",
                 task_names=None) -> None:
    df = load_results(result_paths, task_names)
    if series is not None:
        df = assign_series(df, series)
    Path(cells_csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(cells_csv, index=False)
    if best_csv is not None:
        best_over_lr(df, metric).to_csv(best_csv, index=False)


def merge_cell_tables(cell_csvs, out_csv) -> None:
    """One row per cell, from the experiments' cell tables (a cell shared by experiments or
    series appears once): the same rows as ``write_tables`` over every cell's result, read from a
    handful of tables instead of thousands of result files."""
    df = pd.concat([read_csv(p) for p in cell_csvs], ignore_index=True).drop(columns="series")
    df = df.drop_duplicates("cell_dir").sort_values(CONFIG_KEYS)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
