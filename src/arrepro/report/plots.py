"""Every figure of the paper, from the aggregated tables. One function per figure kind;
each names its scale (demo or paper) on the figure."""
from __future__ import annotations

import math

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from arrepro.report.tex import fmt_count, lr_label  # noqa: E402
from arrepro.search.thresholds import GOOD  # noqa: E402

# Series styles by role (the paper's Fig. 2: this work solid, the replication dotted). The
# replication's cells are often the search's own (its coarse grid inside the search's), so its
# points can coincide with the search's: open squares, larger, beside the filled circles (each
# series is shifted sideways a little: ``DODGE``) stay visible either way.
MAIN_STYLE = {"linestyle": "-", "marker": "o", "ms": 4.5}
REPLICATION_STYLE = {"linestyle": ":", "marker": "s", "ms": 6.5, "mfc": "none", "mew": 1.3}
OTHER_SERIES_STYLE = {"linestyle": "--", "marker": "^", "ms": 5}
DODGE = 0.045  # sideways shift of each further series, in units of log2(width)
LR_DODGE = 0.13  # the same on the learning-rate axis, in units of log2(lr) (0.04 decades)


def series_styles(series, replication=()) -> dict[str, dict]:
    """Each series' style: the first other than the replication solid with filled circles, the
    replication (the series of ``replication``: grids that say ``replication: true``) dotted with
    open squares, any further one dashed with triangles."""
    out, main = {}, False
    for name in sorted(set(series)):  # (any order of the same series: the same styles)
        if name in set(replication):
            out[name] = REPLICATION_STYLE
        elif not main:
            out[name], main = MAIN_STYLE, True
        else:
            out[name] = OTHER_SERIES_STYLE
    return out


def dodges(styles: dict[str, dict], step: float = DODGE) -> dict[str, float]:
    """Each series' sideways factor on a log axis (``step``: in units of log2 of the axis): the main
    series in place, the replication to its left, any other to its right (a point that coincides
    with another's shows beside it)."""
    out, right = {}, 0
    for name, style in styles.items():
        if style is REPLICATION_STYLE:
            out[name] = 2 ** -step
        elif style is MAIN_STYLE:
            out[name] = 1.0
        else:
            right += 1
            out[name] = 2 ** (step * right)
    return out


def style_text(style: dict) -> str:
    """A series style in words, for captions: "solid line, filled circles"."""
    line = {"-": "solid", ":": "dotted", "--": "dashed"}[style["linestyle"]]
    marker = {"o": "circles", "s": "squares", "^": "triangles"}[style["marker"]]
    return f"{line} lines, {'open' if style.get('mfc') == 'none' else 'filled'} {marker}"


def _label(row, multi_layers: bool, cards: dict) -> str:
    """A line's name and colour: the label of the model's card, a replication's that of the model
    it replicates (Zoology's form of it shares its colour; the series' line style tells them
    apart), with the depth where depths differ."""
    card = cards[row["model"]]
    arch = literal(cards[card.base].label if card.role == "replication" else card.label)
    return f"{arch} ({row['layers']}L)" if multi_layers else arch


def _legend_entries(axes):
    """Every distinct legend entry of all panels (a model missing from one panel still shows)."""
    entries = {}
    for ax in axes:
        for h, name in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(name, h)
    return list(entries.values()), list(entries)


def literal(text) -> str:
    """``text`` as matplotlib draws it literally: every '$' escaped (an even number of them
    would start mathtext, where ``$\\foo$`` is an error)."""
    return str(text).replace("$", r"\$")


def _finish(fig, title: str, scale: str, paths) -> None:
    fig.suptitle(f"{title}\nscale: {scale}", fontsize=11)
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=150 if str(p).endswith(".png") else None, bbox_inches="tight")
    plt.close(fig)


def width_figure(best, cells, title, scale, paths, published=None, cards=None, replication=(), **_):
    """Accuracy vs width, one panel per sequence length; seeds' mean with max-min bars;
    Zoology's published points (read off its Figure 2) as stars where given."""
    sns.set_theme(style="whitegrid", context="paper")
    lengths = sorted(best["seq_len"].unique())
    multi_layers = best["layers"].nunique() > 1
    best = best.assign(label=best.apply(_label, axis=1, multi_layers=multi_layers, cards=cards))
    labels = sorted(best["label"].unique())
    colors = dict(zip(labels, sns.color_palette("tab10", len(labels))))
    styles = series_styles(best["series"], [literal(x) for x in replication])
    shift = dodges(styles)
    fig, axes = plt.subplots(1, len(lengths), figsize=(3.6 * len(lengths) + 1.5, 3.4), squeeze=False, sharey=True)
    for ax, L in zip(axes[0], lengths):
        sub = best[best["seq_len"] == L]
        for (label, series), g in sub.groupby(["label", "series"]):
            g = g.sort_values("width")
            ax.errorbar(g["width"] * shift[series], g["mean"], yerr=[g["mean"] - g["min"], g["max"] - g["mean"]],
                        color=colors[label], capsize=3, lw=1.4, label=f"{label}, {series}", **styles[series])
        if published is not None:
            pub = published[(published["seq_len"] == L) & published["model"].isin(best["model"])]
            for model, g in pub.groupby("model"):
                lab = next((x for x in labels if x.split(" (")[0] == literal(cards[model].label)), None) \
                    if model in cards else None
                ax.scatter(g["width"], g["accuracy"], marker="*", s=90, color=colors.get(lab, "green"),
                           edgecolor="green", zorder=5, label=f"{model}, Zoology published")
        kv = sub["task_name"].iloc[0]
        ax.set_title(f"sequence length {L} ({kv})")
        ax.set_xscale("log", base=2)
        ax.margins(x=0.12)  # the end points' markers clear the frame
        widths = sorted(sub["width"].unique())
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.set_xlabel("model width")
        ax.set_ylim(-0.03, 1.03)
    axes[0][0].set_ylabel("accuracy (best over LR)")
    handles, names = _legend_entries(axes[0])
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    _finish(fig, title, scale, paths)


def lr_ticks(lrs) -> tuple[list[float], list[float]]:
    """Labelled ticks: every decade from the lowest to the highest learning rate tried, and every
    half-decade tried (3.16e-3); unlabelled ones: the other learning rates tried (a search's
    refinements)."""
    lrs = sorted({float(x) for x in lrs})
    lo, hi = math.log10(lrs[0]), math.log10(lrs[-1])
    major = [10.0 ** e for e in range(math.ceil(lo - 0.01), math.floor(hi + 0.01) + 1)]
    for x in lrs:
        half = 2 * math.log10(x)
        if abs(half - round(half)) < 0.01 and not any(abs(math.log10(x / m)) < 0.01 for m in major):
            major.append(x)
    minor = [x for x in lrs if not any(abs(math.log10(x / m)) < 0.01 for m in major)]
    return sorted(major), minor


def card_label(model: str, cards: dict | None) -> str:
    """A model's line in a legend: its card's label (the model's name where no card is given)."""
    return literal(cards[model].label) if cards and model in cards else literal(model)


def lr_figure(best, cells, title, scale, paths, metric="final_accuracy", reference_lrs=(), cards=None, replication=(),
              **_):
    """Accuracy vs learning rate (seeds' mean, max-min bars), one panel per (task, width,
    layers), at the learning rates each model's search tried, a diverged cell at 0 as the tables
    count it (``aggregate.cell_accuracy``); a ring marks the one it chose (the best table's);
    Zoology's 4-point grid as dashed vertical lines. Every series is drawn, each in its style
    (``series_styles``; named in the legend where there are several), a little beside the others."""
    from arrepro.report.aggregate import cell_accuracy

    sns.set_theme(style="whitegrid", context="paper")
    keys = ["series", "task_name", "seq_len", "model", "width", "layers", "lr"]
    per_lr = (cells.assign(acc=cell_accuracy(cells, metric)).groupby(keys)["acc"]
              .agg(["mean", "min", "max"]).reset_index())
    panels = per_lr[["seq_len", "task_name", "width", "layers"]].drop_duplicates().sort_values(["seq_len", "width", "layers"])
    models = list(dict.fromkeys(cells["model"]))
    colors = dict(zip(models, sns.color_palette("tab10", len(models))))
    styles = series_styles(per_lr["series"], [literal(x) for x in replication])
    shift, several = dodges(styles, LR_DODGE), len(styles) > 1
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + 1.6, 3.3), squeeze=False, sharex=True, sharey=True)
    for ax, (_, p) in zip(axes[0], panels.iterrows()):
        sub = per_lr[(per_lr["seq_len"] == p["seq_len"]) & (per_lr["width"] == p["width"]) & (per_lr["layers"] == p["layers"])]
        for (model, series), g in sub.groupby(["model", "series"], sort=False):
            g = g.sort_values("lr")
            bars = [(g["mean"] - g["min"]).clip(lower=0), (g["max"] - g["mean"]).clip(lower=0)]  # (equal seeds: rounding)
            ax.errorbar(g["lr"] * shift[series], g["mean"], yerr=bars, color=colors[model],
                        lw=1.6, capsize=3, label=card_label(model, cards) + (f", {series}" if several else ""),
                        **styles[series])
            chosen = best[(best["model"] == model) & (best["seq_len"] == p["seq_len"]) & (best["width"] == p["width"])
                          & (best["layers"] == p["layers"]) & (best["series"] == series)]
            for lr in chosen["best_lr"]:
                at = g[g["lr"] == lr]
                if len(at):
                    ax.plot(lr * shift[series], at["mean"].iloc[0], marker="o", ms=11, mfc="none",
                            mec=colors[model], mew=1.4, zorder=4)
        for lr in reference_lrs:
            ax.axvline(lr, color="0.4", ls="--", lw=0.9, zorder=0)
        ax.axhline(GOOD, color="0.55", ls=":", lw=1.0, zorder=0)  # a window: the rates whose mean reaches it
        ax.set_xscale("log")
        major, minor = lr_ticks(per_lr["lr"])
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(major))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter([lr_label(x) for x in major]))
        ax.xaxis.set_minor_locator(matplotlib.ticker.FixedLocator(minor))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.tick_params(axis="x", which="major", labelsize=7, rotation=45 if len(major) > 5 else 0)
        ax.tick_params(axis="x", which="minor", length=3, bottom=True)
        ax.set_xlabel("learning rate (unlabelled ticks: other rates tried)" if minor else "learning rate")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"L={p['seq_len']} ({p['task_name']}), width {p['width']}, {p['layers']} "
                     f"layer{'s' if p['layers'] != 1 else ''}", fontsize=9)
    axes[0][0].set_ylabel(metric.replace("_", " ") + " (diverged: 0)")
    handles, names = _legend_entries(axes[0])
    handles.append(plt.Line2D([], [], color="0.3", marker="o", ms=11, mfc="none", ls="none"))
    names.append("learning rate reported (the best candidate)")
    handles.append(plt.Line2D([], [], color="0.55", ls=":"))
    names.append(f"good ({GOOD:g}): a window's learning rates reach it")
    if reference_lrs:
        handles.append(plt.Line2D([], [], color="0.4", ls="--"))
        names.append("coarse (Zoology-style) LR grid")
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    _finish(fig, title, scale, paths)


def params_figure(best, cells, title, scale, paths, cards=None, **_):
    """Fig. 4: accuracy vs parameter count; marker = scaling axis (series), colour = model."""
    sns.set_theme(style="whitegrid", context="paper")
    models = list(dict.fromkeys(best["model"]))
    colors = dict(zip(models, sns.color_palette("tab10", len(models))))
    markers = dict(zip(dict.fromkeys(best["series"]), ["o", "s", "^", "D"]))
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for (model, series), g in best.groupby(["model", "series"], sort=False):
        g = g.sort_values("parameters")
        ax.errorbar(g["parameters"], g["mean"], yerr=[g["mean"] - g["min"], g["max"] - g["mean"]],
                    color=colors[model], marker=markers[series], ms=5, lw=1.4, capsize=3,
                    ls="-" if series == list(markers)[0] else "--", label=f"{card_label(model, cards)}, {series}")
    ax.set_xscale("log")
    ax.margins(x=0.15)  # room for the labels of the outermost points
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: fmt_count(x)))
    if best["parameters"].max() < 10 * best["parameters"].min():  # within a decade: label 2, 3 and 5 x 10^k too
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda x, _: fmt_count(x) if f"{x:.0e}"[0] in "235" else ""))
        ax.tick_params(axis="x", which="both", labelsize=7)
    ax.set_xlabel("parameters")
    ax.set_ylabel("accuracy (best over LR)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"sequence length {best['seq_len'].iloc[0]} ({best['task_name'].iloc[0]}); labels: width x layers", fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    place_labels(fig, ax, [((r["parameters"], r["mean"]), (r["min"], r["max"]), f"{r['width']}x{r['layers']}")
                           for _, r in best.iterrows()])
    _finish(fig, title, scale, paths)


# a point's label: beside its marker (right, left, above, below, then the diagonals), 8 points
# away, at the first place that covers no marker, error bar or other label
LABEL_PLACES = [((8, 0), "left", "center"), ((-8, 0), "right", "center"), ((0, 8), "center", "bottom"),
                ((0, -8), "center", "top"), ((6, 6), "left", "bottom"), ((6, -6), "left", "top"),
                ((-6, 6), "right", "bottom"), ((-6, -6), "right", "top")]


def place_labels(fig, ax, points, clear: float = 2.0, fontsize: float = 6.5) -> None:
    """Label each point ((x, y), (bar low, bar high), text) where the label covers no marker (a
    square ``clear`` points wider than it), no error bar and no label placed before; where every
    place covers something, the place that covers least."""
    fig.tight_layout()  # (the layout the figure is saved with, near enough)
    renderer = fig.canvas.get_renderer()
    pt = fig.dpi / 72
    marker = max((line.get_markersize() / 2 + line.get_markeredgewidth() for line in ax.get_lines()), default=3)
    obstacles = []
    for (x, y), (lo, hi), _ in points:
        (px, py), (_, plo), (_, phi) = ax.transData.transform([(x, y), (x, lo), (x, hi)])
        r = (marker + clear) * pt
        obstacles.append((px - r, py - r, px + r, py + r))
        obstacles.append((px - 2 * pt, plo, px + 2 * pt, phi))

    def covered(box) -> float:
        return sum(max(0.0, min(box.x1, o[2]) - max(box.x0, o[0])) * max(0.0, min(box.y1, o[3]) - max(box.y0, o[1]))
                   for o in obstacles)
    for xy, _, text in points:
        best = None
        for offset, ha, va in LABEL_PLACES:
            a = ax.annotate(text, xy, fontsize=fontsize, xytext=offset, textcoords="offset points", ha=ha, va=va,
                            zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})
            box = a.get_window_extent(renderer)
            cost = covered(box)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, a, box)
            else:
                a.remove()
            if cost == 0:
                break
        obstacles.append((best[2].x0, best[2].y0, best[2].x1, best[2].y1))


def dynamics_figure(best, cells, title, scale, paths, metrics=None, solve_at=0.9, cards=None, **_):
    """Fig. 6: per-epoch train (faint) and test loss, and test accuracy, of each model at its
    best LR; for each model the smallest width whose best accuracy reaches ``solve_at``, or
    else the largest width tried (named in brackets). Curves: mean over seeds."""
    sns.set_theme(style="whitegrid", context="paper")
    models = list(dict.fromkeys(best["model"]))
    colors = dict(zip(models, sns.color_palette("tab10", len(models))))
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    for model in models:
        b = best[best["model"] == model].sort_values("width")
        solved = b[b["mean"] >= solve_at]
        row = solved.iloc[0] if len(solved) else b.iloc[-1]
        sel = cells[(cells["model"] == model) & (cells["width"] == row["width"]) & (cells["lr"] == row["best_lr"])]
        curves = pd.concat([metrics[d].assign(seed=s) for d, s in zip(sel["cell_dir"], sel["seed"])])
        mean = curves.groupby("epoch")[["train_loss", "test_loss", "test_accuracy"]].mean()
        label = f"{card_label(model, cards)} [{row['width']}], lr {row['best_lr']:.3g}"
        ax_loss.plot(mean.index, mean["train_loss"], color=colors[model], alpha=0.35, lw=1.4)
        ax_loss.plot(mean.index, mean["test_loss"], color=colors[model], lw=1.8, label=label)
        ax_acc.plot(mean.index, mean["test_accuracy"], color=colors[model], lw=1.8, label=label)
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss (faint: train, solid: test)")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy")
    ax_acc.set_ylim(-0.03, 1.03)
    ax_acc.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    _finish(fig, title, scale, paths)


PLOTS = {"width": width_figure, "lr": lr_figure, "params": params_figure, "dynamics": dynamics_figure}


def render(kind: str, best_csv: str, cells_csv: str, title: str, scale: str, paths, models=None, **extra) -> None:
    """Draw one figure; ``models``: the config's models (their cards name the lines; default:
    config.yaml's), ``replication``: the replication's series."""
    if kind not in PLOTS:
        raise ValueError(f"unknown plot kind {kind!r}; known: {sorted(PLOTS)}")
    from arrepro.config.cards import cards

    if models is None:
        import yaml

        from arrepro.config.paths import REPO_ROOT

        models = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())["models"]
    extra["cards"] = cards(models)
    from arrepro.report.aggregate import read_best_table, read_cells_table
    from arrepro.config.cellfiles import read_metrics
    from arrepro.files import read_csv

    best, cells = read_best_table(best_csv), read_cells_table(cells_csv)
    # config text (a title, a series' name) is drawn as written: a '$' does not start mathtext
    title = literal(title)
    for df in (best, cells):
        df["series"] = df["series"].map(literal)
    if extra.get("published"):
        extra["published"] = read_csv(extra["published"])
    if kind == "dynamics":
        extra["metrics"] = {d: pd.DataFrame(read_metrics(d)) for d in cells["cell_dir"].unique()}
    PLOTS[kind](best, cells, title, scale, paths, **extra)
