"""Every figure of the paper, from the aggregated tables. One function per figure kind;
each names its scale (demo or paper) on the figure."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

SERIES_STYLE = {  # the paper's Fig. 2 styling: this work solid, replication dotted
    "fine grid (this work)": {"linestyle": "-", "marker": "o"},
    "replication (Zoology grid)": {"linestyle": ":", "marker": "s"},
}


def _label(row, multi_layers: bool) -> str:
    return f"{row['model']} ({row['layers']}L)" if multi_layers else str(row["model"])


def _finish(fig, title: str, scale: str, paths) -> None:
    fig.suptitle(f"{title}\nscale: {scale}", fontsize=11)
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=150 if str(p).endswith(".png") else None, bbox_inches="tight")
    plt.close(fig)


def width_figure(best: pd.DataFrame, title: str, scale: str, paths) -> None:
    """Accuracy vs width, one panel per sequence length; seeds' mean with max-min bars."""
    sns.set_theme(style="whitegrid", context="paper")
    lengths = sorted(best["seq_len"].unique())
    multi_layers = best["layers"].nunique() > 1
    best = best.assign(label=best.apply(_label, axis=1, multi_layers=multi_layers))
    labels = sorted(best["label"].unique())
    colors = dict(zip(labels, sns.color_palette("tab10", len(labels))))
    fig, axes = plt.subplots(1, len(lengths), figsize=(3.6 * len(lengths) + 1.5, 3.4), squeeze=False, sharey=True)
    for ax, L in zip(axes[0], lengths):
        sub = best[best["seq_len"] == L]
        for (label, series), g in sub.groupby(["label", "series"]):
            g = g.sort_values("width")
            style = SERIES_STYLE.get(series, {"linestyle": "--", "marker": "^"})
            ax.errorbar(g["width"], g["mean"], yerr=[g["mean"] - g["min"], g["max"] - g["mean"]],
                        color=colors[label], capsize=3, lw=1.6, ms=4, label=f"{label}, {series}", **style)
        kv = sub["task_name"].iloc[0]
        ax.set_title(f"sequence length {L} ({kv})")
        ax.set_xscale("log", base=2)
        widths = sorted(sub["width"].unique())
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.set_xlabel("model width")
        ax.set_ylim(-0.03, 1.03)
    axes[0][0].set_ylabel("accuracy (best over LR)")
    handles, names = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    _finish(fig, title, scale, paths)


PLOTS = {"width": width_figure}


def render(kind: str, best_csv: str, cells_csv: str, title: str, scale: str, paths) -> None:
    best = pd.read_csv(best_csv)
    if kind not in PLOTS:
        raise ValueError(f"unknown plot kind {kind!r}; known: {sorted(PLOTS)}")
    PLOTS[kind](best, title, scale, paths)
