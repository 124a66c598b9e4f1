"""The paper's tables (and one beyond it), as CSV and LaTeX, from the aggregated tables.

Every table reports best-over-LR accuracy: the learning rate with the best mean over seeds,
then mean ± std over seeds there.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def _pm(mean: float, std: float) -> str:
    return f"{mean:.2f} ± {std:.2f}"


def _save(df: pd.DataFrame, csv_path, tex_path, caption_note: str, scale: str) -> None:
    df.to_csv(csv_path, index=False)
    cols = "l" * len(df.columns)
    body = df.to_latex(index=False, escape=True, column_format=cols, float_format="%.2f")
    body = literal_tex(body)
    body = body.replace("±", r"$\pm$")
    note = rf"\multicolumn{{{len(df.columns)}}}{{l}}{{\footnotesize {caption_note} Scale: {scale}.}}\\"
    body = body.replace(r"\end{tabular}", note + "\n" + r"\end{tabular}")
    with open(tex_path, "w") as f:
        f.write(body)


def literal_tex(body: str) -> str:
    """pandas' escaped LaTeX with the characters it leaves to the font typeset as written
    (arrepro.paper.TEX_SPECIAL: '$' in the math font, '<', '>', '|')."""
    from .paper import TEX_SPECIAL

    for ch in "<>|":
        body = body.replace(ch, TEX_SPECIAL[ch])
    return body.replace(r"\$", TEX_SPECIAL["$"])


def _model_label(models: dict, name: str) -> str:
    return models.get(name, {}).get("label", name)


def accuracy_table(best: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Tables 2 and 3: one row per model (in the config's order of the experiment)."""
    order = {m: i for i, m in enumerate(models)}
    rows = []
    for _, r in best.sort_values("model", key=lambda c: c.map(order)).iterrows():
        rows.append({"Model": _model_label(models, r["model"]), "Layers": int(r["layers"]),
                     "Width": int(r["width"]), "Seq. len": int(r["seq_len"]),
                     "Accuracy": _pm(r["mean"], r["std"]), "Best LR": f"{r['best_lr']:.3g}",
                     "Seeds": int(r["n_seeds"])})
    return pd.DataFrame(rows)


def positional_table(best: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Table 4: rows = architecture, columns = positional scheme of the model variant."""
    names = {"none": "No PE", "sinusoidal": "Absolute PE", "rope": "Relative PE (RoPE)", "learned": "Learned PE"}
    best = best.assign(
        arch=[models[m].get("label", models[m]["mixer"]).split(" (")[0] for m in best["model"]],
        pos=[names[models[m].get("position", "none")] for m in best["model"]],
        cell=[_pm(a, b) for a, b in zip(best["mean"], best["std"])],
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
                     "Accuracy (%)": f"{100 * r['mean']:.0f} ± {100 * r['std']:.0f}",
                     "Best LR": f"{r['best_lr']:.3g}", "LRs tried": int(r["n_lrs"])})
    return pd.DataFrame(rows)


def lr_window(cells: pd.DataFrame, metric: str, tol: float = 0.05) -> pd.DataFrame:
    """Beyond the paper: each model's good-LR window per setting -- the learning rates whose
    mean accuracy over seeds is within ``tol`` of the best, and its width in decades
    (0 = a single grid point; resolution = the grid's spacing)."""
    keys = ["task_name", "seq_len", "model", "width", "layers"]
    per_lr = cells.groupby(keys + ["lr"])[metric].mean().reset_index()
    rows = []
    for k, g in per_lr.groupby(keys, sort=True):
        top = g[metric].max()
        good = g[g[metric] >= top - tol]["lr"]
        lrs = np.sort(g["lr"].unique())
        spacing = float(np.median(np.diff(np.log10(lrs)))) if len(lrs) > 1 else math.nan
        rows.append({**dict(zip(keys, k)), "best accuracy": round(float(top), 3),
                     "good LRs": f"{good.min():.3g} - {good.max():.3g}",
                     "window (decades)": round(float(np.log10(good.max() / good.min())), 2),
                     "good / tried": f"{len(good)} / {len(lrs)}",
                     "grid step (decades)": round(spacing, 2)})
    return pd.DataFrame(rows)


def render_table(kind: str, best_csv: str, cells_csv: str, models: dict, metric: str, scale: str,
                 csv_path: str, tex_path: str) -> None:
    from .aggregate import read_best_table, read_cells_table

    best = read_best_table(best_csv)
    if kind == "accuracy":
        df, note = accuracy_table(best, models), "Best-over-LR accuracy, mean ± std over seeds."
    elif kind == "positional":
        df, note = positional_table(best, models), "Best-over-LR accuracy, mean ± std over seeds."
    elif kind == "copy":
        df, note = copy_table(best, models), "Copy task, string exact match, best over LR, mean ± std over seeds."
    elif kind == "lr_window":
        df = lr_window(read_cells_table(cells_csv), metric)
        note = "Good-LR window: learning rates within 0.05 of the best mean accuracy."
    else:
        raise ValueError(f"unknown table kind {kind!r}")
    _save(df, csv_path, tex_path, note, scale)
