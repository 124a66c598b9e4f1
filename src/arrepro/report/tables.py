"""The paper's tables (and one beyond it), as CSV and LaTeX, from the aggregated tables.

Every table reports the paper's statistic: the best, over the search's candidate learning rates,
of the mean accuracy over every reported seed, with the std over seeds there; each row says which
learning rates and seeds its number rests on (the best table's ``candidates`` and ``seeds``).
Accuracies are percentages rounded by the project's one rule (``arrepro.report.tex.acc``).
"""
from __future__ import annotations

import textwrap

import pandas as pd

from arrepro.config import defaults
from arrepro.config.cards import card_of
from arrepro.report.tex import acc, literal_tex, lr_label, tex_escape


def _pm(mean: float, std: float) -> str:
    return f"{acc(mean)} ± {acc(std)}"


def _lr(x: float) -> str:
    return lr_label(float(x))


def candidates_text(r) -> str:
    """The learning rates a row's number is the best of ("1e-3, 3.16e-3"), from its ``candidates``."""
    return ", ".join(_lr(x) for x in str(r["candidates"]).split(";") if x)


def seeds_text(r) -> str:
    """The seeds a row's means are over ("0, 1, 2"), from its ``seeds``."""
    return ", ".join(str(r["seeds"]).split(";"))


def contenders_text(r) -> str:
    """The learning rates the budget left that could still beat a row's number: "none", or their
    count and the highest mean over every seed any could still reach ("2 (<= 93.0)")."""
    n = int(r.get("n_contenders", 0) or 0)
    b = r.get("contender_bound")
    if not n:
        return "none"
    return f"{n} (<= {acc(b)})" if b is not None and b == b else str(n)


def _basis(r) -> dict:
    """The columns that say what a row's number rests on."""
    return {"LR": _lr(r["best_lr"]), "candidate LRs": candidates_text(r), "seeds": seeds_text(r),
            "cells": int(r["n_cells"]), "contenders left": contenders_text(r)}


def _save(df: pd.DataFrame, csv_path, tex_path, caption_note: str, scale: str) -> None:
    df.to_csv(csv_path, index=False)
    if "seeds" in df.columns and df["seeds"].nunique() == 1:  # one set of seeds: said once, for every row
        caption_note += f" Every row's seeds: {df['seeds'].iloc[0]}."
        df = df.drop(columns="seeds")
    cols = "l" * len(df.columns)
    body = df.to_latex(index=False, escape=True, column_format=cols, float_format="%.2f")
    body = literal_tex(body)
    body = body.replace("±", r"$\pm$")
    lines = textwrap.wrap(f"{caption_note} Scale: {scale}.", 80)  # rows of the note: no wider than the table needs
    note = "\n".join(rf"\multicolumn{{{len(df.columns)}}}{{l}}{{\footnotesize {tex_escape(x)}}}\\"
                     for x in lines)
    body = body.replace(r"\end{tabular}", note + "\n" + r"\end{tabular}")
    with open(tex_path, "w") as f:
        f.write(body)


def _model_label(models: dict, name: str) -> str:
    """A model as the tables print it: its card's label (arrepro.config.cards)."""
    return card_of(models, name).label


def accuracy_table(best: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Tables 2 and 3: one row per model (in the config's order of the experiment)."""
    order = {m: i for i, m in enumerate(models)}
    rows = []
    for _, r in best.sort_values("model", key=lambda c: c.map(order)).iterrows():
        rows.append({"Model": _model_label(models, r["model"]), "Layers": int(r["layers"]),
                     "Width": int(r["width"]), "Seq. len": int(r["seq_len"]),
                     "Accuracy (%)": _pm(r["mean"], r["std"]), **_basis(r)})
    return pd.DataFrame(rows)


def positional_table(best: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Table 4: rows = architecture, columns = positional scheme of the model variant."""
    names = {"none": "No PE", "sinusoidal": "Absolute PE", "rope": "Relative PE (RoPE)", "learned": "Learned PE"}
    best = best.assign(
        arch=[_model_label(models, card_of(models, m).base) for m in best["model"]],  # a variant: the model it varies
        pos=[names[defaults.model(models[m])["position"]] for m in best["model"]],
        cell=[f"{_pm(r['mean'], r['std'])} (LR {_lr(r['best_lr'])} of {candidates_text(r)})" for _, r in best.iterrows()],
    )
    t = best.pivot_table(index="arch", columns="pos", values="cell", aggfunc="first", sort=False)
    t = t[[n for n in names.values() if n in t.columns]]
    return t.reset_index().rename(columns={"arch": "Architecture"})


def copy_table(best: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Table 1: string-level exact-match accuracy of equal-parameter configurations."""
    rows = []
    for _, r in best.iterrows():
        rows.append({"Architecture": _model_label(models, r["model"]), "# Layers": int(r["layers"]),
                     "Width": int(r["width"]), "# Parameters (M)": f"{r['parameters'] / 1e6:.2f}",
                     "Accuracy (%)": _pm(r["mean"], r["std"]), **_basis(r), "LRs tried": int(r["n_lrs"])})
    return pd.DataFrame(rows)


def recipe_name(recipes: dict, name: str) -> str:
    """A recipe as the tables print it: its name, what it decays and its first weights' rule."""
    d = defaults.recipe(recipes[name])
    return f"{d.get('name', name)} (decay {d['decay']}, init {d['init']})"


def lr_window(best: pd.DataFrame, recipes: dict | None = None) -> pd.DataFrame:
    """Beyond the paper: each model's window of good learning rates per setting, as its search
    resolved it (arrepro.search.protocol.window, the one definition): the good learning rates' span, the
    range its true edges can lie in, its width in decades (at least / at most), and why an edge is
    open ("range": the search range stops it; "edge": nothing tried beyond), and its gaps (rates
    tried inside the span that are not good). No window where no learning rate reaches the good
    mark; "not learned" where none reaches the learned threshold. With ``recipes`` (the scale's): a
    recipe column, a setting's recipes on adjacent rows (the ``recipe_window`` table: what a recipe
    does to a window)."""
    from arrepro.report.claim_kinds import window_of

    rows = []
    keys = ["task_name", "seq_len", "model", "width", "layers"] + (["recipe"] if recipes else [])
    for _, r in best.sort_values(keys).iterrows():
        w = window_of(r)
        row = {"task": r["task_name"], "model": r["model"], "width": int(r["width"]), "layers": int(r["layers"]),
               **({"recipe": recipe_name(recipes, r["recipe"])} if recipes else {}),
               "best accuracy (%)": acc(r["mean"]), "LR (of candidates)": f"{_lr(r['best_lr'])} (of {candidates_text(r)})",
               "seeds": seeds_text(r), "good LRs": "--", "lower edge in": "--", "upper edge in": "--",
               "width (decades)": w.status, "LRs / cells tried": f"{int(r['n_lrs'])} / {int(r['n_cells'])}",
               "search": r.get("outcome", ""), "contenders left": contenders_text(r)}
        if w.status == "window":
            row.update({"good LRs": f"{_lr(w.lo)} - {_lr(w.hi)}{w.gaps_text()}",
                        "lower edge in": f"[{_lr(w.below)}, {_lr(w.lo)}]" if w.below else f"<= {_lr(w.lo)} ({w.open_lo})",
                        "upper edge in": f"[{_lr(w.hi)}, {_lr(w.above)}]" if w.above else f">= {_lr(w.hi)} ({w.open_hi})",
                        "width (decades)": f"{w.width:.2f} to {'open' if w.width_max is None else f'{w.width_max:.2f}'}"})
        rows.append(row)
    return pd.DataFrame(rows)


def _seeds_note(best: pd.DataFrame) -> str:
    seeds = best["seeds"].astype(str).unique()
    if len(seeds) == 1:
        return f" Every entry's seeds: {', '.join(seeds[0].split(';'))}."
    return " Seeds: " + "; ".join(f"{r['model']} {seeds_text(r)}" for _, r in best.iterrows()) + "."


BASIS = ("Accuracy (%): the best, over the candidate learning rates, of the mean over the seeds (± their std); "
         "cells: the training runs the setting's search spent; contenders left: learning rates the budget left that "
         "could still beat the number (with the most they could reach).")


def render_table(kind: str, best_csv: str, cells_csv: str, models: dict, metric: str, scale: str,
                 csv_path: str, tex_path: str, recipes: dict | None = None) -> None:
    """One experiment's table (``recipes``: the scale's, which the recipe_window table names)."""
    from arrepro.report.aggregate import read_best_table

    best = read_best_table(best_csv)
    if kind == "accuracy":
        df, note = accuracy_table(best, models), f"{BASIS} LR: the best candidate."
    elif kind == "positional":
        df, note = positional_table(best, models), f"{BASIS} In brackets: the best candidate of the candidates.{_seeds_note(best)}"
    elif kind == "copy":
        df, note = copy_table(best, models), f"Copy task, string exact match. {BASIS} LR: the best candidate."
    elif kind == "lr_window":
        from arrepro.search.thresholds import GOOD

        df = lr_window(best)
        note = (f"{BASIS} LR: the best candidate. Good learning rates: mean accuracy over every seed at least {100 * GOOD:g}%; an edge lies between "
                "the outermost good learning rate tried and the next one tried.")
    elif kind == "recipe_window":
        from arrepro.search.thresholds import GOOD

        df = lr_window(best, recipes)
        note = (f"{BASIS} LR: the best candidate. Good learning rates: mean accuracy over every seed at least {100 * GOOD:g}%. "
                "Recipes: decay all, weight decay on every parameter (the sources' trainers); matrices, on the matrices only; "
                "init zoology, Zoology's first weights (mamba-ssm's rule for Mamba's blocks); normal, N(0, 0.02) for every block.")
    else:
        raise ValueError(f"unknown table kind {kind!r}")
    _save(df, csv_path, tex_path, note, scale)
