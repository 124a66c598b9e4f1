"""The kinds of claim the paper makes (A beats B, A and B alike, A's window is wider, a model solves
every setting, grows with width or depth, wide beats deep ...), each a function of one
experiment's tables (an object with the interface of ``arrepro.report.results.Results``:
``rows``, ``chance``, ``card``) returning a ``Judgement``, or None when the experiment does not
train the models the claim needs. The rules they apply: arrepro.report.verdicts; the paper's
claims built from them: arrepro.report.claims.

Comparisons are made within one setting (task, width, depth) unless the claim says otherwise.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from arrepro.report.verdicts import (CONSISTENT, CONTRADICTED, INCONCLUSIVE, PARAM_RATIO, Judgement, Stat,
                                     combine, compare, compare_why, diff_text, alike_within, fewest, not_alike,
                                     tally, undecided)
from arrepro.search.protocol import Window, wider
from arrepro.search.thresholds import GOOD, learned_threshold
from arrepro.report.tex import acc, points

SETTING = ["task", "width", "layers"]


def reasons(parts) -> str:
    """An inconclusive claim's reason from its parts' (each a reason, or "" for a part that decided)."""
    return "; ".join(dict.fromkeys(p for p in parts if p))


def _setting_text(r) -> str:
    return f"{r['task_name']} {int(r['layers'])}×{int(r['width'])}"


def row_seeds(r) -> int:
    """The seeds a best-table row's mean is over (1 where the row does not say)."""
    return int(r["n_seeds"]) if "n_seeds" in r and pd.notna(r["n_seeds"]) else 1


def stat(e, r, label: str | None = None) -> Stat:
    """A best-table row as a Stat."""
    cands = str(r.get("candidates") or "")
    rows = e.rows()
    peers = rows[(rows["layers"] == r["layers"]) & (rows["recipe"] == r["recipe"])]
    learns = any(m >= learned_threshold(e.chance(row)) for m, (_, row) in zip(peers["mean"], peers.iterrows()))
    n = row_seeds(r)
    sd = float(r["std"]) if "std" in r and pd.notna(r["std"]) else 0.0
    return Stat(label or r["model"], float(r["mean"]), float(r["min"]), float(r["max"]), e.chance(r),
                float(r["best_lr"]) if "best_lr" in r else None,
                tuple(float(x) for x in cands.split(";") if x), learns, sd, n)


def paired(e, a: str, b: str, part_a="main", part_b="main", layers=None) -> list[tuple]:
    """(setting row, Stat of a, Stat of b) for every setting both train."""
    ra, rb = e.rows(a, layers=layers, part=part_a), e.rows(b, layers=layers, part=part_b)
    m = ra.merge(rb, on=SETTING, suffixes=("", "_b"))
    out = []
    for _, r in m.iterrows():
        rb_ = pd.Series({k[:-2]: v for k, v in r.items() if k.endswith("_b")} | {k: r[k] for k in SETTING})
        out.append((r, stat(e, r), stat(e, rb_, b if part_b == part_a else f"{b} ({part_b})")))
    return out


# --------------------------------------------------------------------------- claim kinds
def a_beats_b(e, a: str, b: str, layers=None, predicted: bool = False) -> Judgement | None:
    """A beats B in the setting where A is best (among those both train); ``predicted``: the claim
    predicts B's failure (``failure_counts``)."""
    pairs = paired(e, a, b, layers=layers)
    if not pairs:
        return None
    r, sa, sb = max(pairs, key=lambda p: p[1].mean)
    c, why = compare_why(sa, sb, predicted)
    return Judgement(tally(c > 0, c < 0), f"{_setting_text(r)}: {sa.text()} vs {sb.text()} ({diff_text(sa, sb)})"
                     + (f" ({why}: no evidence)" if why else ""),
                     "" if c else f"{_setting_text(r)}: {why or undecided(sa, sb)}", fewest([sa, sb]))


def alike(e, ref: str, others: list[str], layers=None) -> Judgement | None:
    """Each of ``others`` is alike ``ref``: the interval on their difference within +-MIN_DIFF
    (where one of the two has learned)."""
    found, parts, verdicts, why_not, compared = False, [], [], [], []
    for o in others:
        pairs = paired(e, o, ref, layers=layers)
        if not pairs:
            continue
        found = True
        r, so, sr = max(pairs, key=lambda p: p[2].mean)
        compared += [so, sr]
        parts.append(f"{_setting_text(r)}: {so.text()} vs {sr.text()} ({diff_text(so, sr)})")
        c, why = compare_why(so, sr, predicted=True)  # a failure on either side is against the claim
        parts[-1] += f" ({why}: no evidence)" if why else ""
        if c != 0:
            verdicts.append(CONTRADICTED)
        elif (so.learned or sr.learned) and alike_within(so, sr):
            verdicts.append(CONSISTENT)
        else:
            verdicts.append(INCONCLUSIVE)
            why_not.append(f"{_setting_text(r)}: {why or not_alike(so, sr)}")
    if not found:
        return None
    return Judgement(combine(verdicts), "; ".join(parts), reasons(why_not), fewest(compared))


def all_of(parts: list[Judgement | None]) -> Judgement | None:
    """A claim made of several: contradicted if one is, consistent if all are."""
    if any(p is None for p in parts):
        return None
    return Judgement(combine([p.verdict for p in parts]), "; ".join(p.compared for p in parts),
                     reasons(p.reason for p in parts if p.verdict == INCONCLUSIVE), fewest(parts))


def window_of(row) -> Window:
    """A best-table row's window of good learning rates (its ``window_*`` columns, written by the
    aggregation from arrepro.search.protocol.window: the one definition)."""
    return Window.from_dict({k[len("window_"):]: v for k, v in dict(row).items() if k.startswith("window_")})


def window_wider(e, a: str, others: list[str]) -> Judgement | None:
    """A's window of good learning rates is wider than each other model's, setting by setting:
    conclusively so where A's narrowest possible window (its good learning rates' span) exceeds
    the other's widest possible one (up to the nearest tried learning rates that are not good),
    a model with no good learning rate having none (arrepro.search.protocol.wider)."""
    ra = e.rows(a)
    if ra.empty:
        return None
    parts, vs, why_not, seeds = [], [], [], []
    for b in others:
        rb = e.rows(b)
        m = ra.merge(rb, on=SETTING, suffixes=("", "_b"))
        if m.empty:
            continue
        ups = downs = 0
        shown = []
        for _, r in m.iterrows():
            wa = window_of(r)
            rb_ = {k[:-2]: v for k, v in r.items() if k.endswith("_b")}
            wb = window_of(rb_)
            seeds += [row_seeds(r), row_seeds(rb_)]
            c = wider(wa, wb)
            ups, downs = ups + (c > 0), downs + (c < 0)
            shown.append(f"{_setting_text(r)}: {wa.short()} vs {wb.short()}")
        vs.append(tally(ups, downs))
        if ups == downs:
            why_not.append(f"{a} vs {b}: " + (f"wider in as many settings as narrower ({ups})" if ups else
                                              "in no setting is one window's narrowest possible width beyond the "
                                              "other's widest"))
        parts.append(f"{a} vs {b}, {len(m)} setting{'s' if len(m) != 1 else ''}: {a}'s window wider in {ups}, narrower in {downs}, "
                     f"undecided in {len(m) - ups - downs} ({'; '.join(shown[:3])}{'; ...' if len(shown) > 3 else ''})")
    if not vs:
        return None
    return Judgement(combine(vs), "; ".join(parts), reasons(why_not), fewest(seeds))


def wide_beats_deep(e, model: str, predicted: bool = False) -> Judgement | None:
    """At (about) the same parameter count (within PARAM_RATIO), a wider and shallower ``model``
    beats a narrower and deeper one, over every such pair of configurations on one task;
    ``predicted``: the claim predicts that the deeper one fails outright (``failure_counts``)."""
    r = e.rows(model)
    ups = downs = 0
    parts, why_not, compared = [], [], []
    for _, g in r.groupby("task"):
        rows = list(g.itertuples(index=False))
        for x in rows:
            for y in rows:
                if not (x.width > y.width and x.layers < y.layers):
                    continue
                if max(x.parameters, y.parameters) > PARAM_RATIO * min(x.parameters, y.parameters):
                    continue
                sx, sy = stat(e, pd.Series(x._asdict()), f"{x.layers}×{x.width}"), stat(e, pd.Series(y._asdict()), f"{y.layers}×{y.width}")
                c, why = compare_why(sx, sy, predicted)
                ups, downs = ups + (c > 0), downs + (c < 0)
                why_not.append("" if c else f"{x.task_name}: {why or undecided(sx, sy)}")
                compared += [sx, sy]
                parts.append(f"{x.task_name} {sx.text()} vs {sy.text()} "
                             f"({x.parameters / 1e6:.3g}M vs {y.parameters / 1e6:.3g}M params)" + (f" ({why}: no evidence)" if why else ""))
    if not parts:
        if r.drop_duplicates(["width", "layers"]).shape[0] < 2:
            return None
        nothing = (f"{model}: no wider-and-shallower configuration within a factor {PARAM_RATIO:g} of a deeper "
                   "one's parameter count")
        return Judgement(INCONCLUSIVE, nothing, nothing)
    return Judgement(tally(ups, downs), f"{model}, wider first: " + "; ".join(parts)
                     + f" (wider wins {ups}, deeper wins {downs})", "" if ups != downs else reasons(why_not),
                     fewest(compared))


def grows_with(e, axis: str, models: list[str] | None = None, family: str | None = None,
               predicted: bool = False) -> Judgement | None:
    """Each model improves from the smallest to the largest value of ``axis`` (width or layers),
    the other axis held fixed: counted over (model, task, other axis); ``predicted``: the claim
    predicts that the smaller may fail outright (``failure_counts``)."""
    r = e.rows() if models is None else e.rows().loc[lambda d: d["model"].isin(models)]
    if family is not None:  # only the models of that family (their cards')
        r = r[[e.card(m).family == family for m in r["model"]]]
    other = "layers" if axis == "width" else "width"
    ups = downs = 0
    parts, why_not, compared = [], [], []
    for key, g in r.groupby(["model", "task", other]):
        if g[axis].nunique() < 2:
            continue
        g = g.sort_values(axis)
        lo, hi = g.iloc[0], g.iloc[-1]
        s_lo, s_hi = stat(e, lo, f"{lo['layers']}×{lo['width']}"), stat(e, hi, f"{hi['layers']}×{hi['width']}")
        c, why = compare_why(s_hi, s_lo, predicted)
        ups, downs = ups + (c > 0), downs + (c < 0)
        why_not.append("" if c else f"{key[0]} {lo['task_name']}: {why or undecided(s_hi, s_lo)}")
        compared += [s_hi, s_lo]
        parts.append(f"{key[0]} {lo['task_name']}: {s_hi.text()} vs {s_lo.text()}" + (f" ({why}: no evidence)" if why else ""))
    if not parts:
        return None
    return Judgement(tally(ups, downs), "; ".join(parts) + f" (larger wins {ups}, smaller wins {downs})",
                     "" if ups != downs else reasons(why_not), fewest(compared))


def zoo_name(e, model: str, zoo_models) -> str:
    """The replication's model for ``model``: the one whose card is a replication of it where the
    replication trains one, else itself."""
    return next((z for z in zoo_models if e.card(z).role == "replication" and e.card(z).of == model), model)


def fine_grid_helps(e) -> Judgement | None:
    """Recurrent models: our fine grid against the replication of Zoology's, setting by setting."""
    pairs = []
    for model in e.rows()["model"].unique():
        if e.card(model).attention:
            continue
        pairs += paired(e, model, zoo_name(e, model, e.rows(part="zoo")["model"].unique()), part_b="zoo")
    if not pairs:
        return None
    cs = [compare(sa, sb, predicted=True, cover=False) for _, sa, sb in pairs]  # the claim: the coarse grid misses
    ups, downs = sum(c > 0 for c in cs), sum(c < 0 for c in cs)
    d = float(np.mean([sa.mean - sb.mean for _, sa, sb in pairs]))
    return Judgement(tally(ups, downs), f"{len(pairs)} (model, setting) pairs: fine grid better in {ups}, "
                                        f"worse in {downs}, mean difference {points(100 * d)} points",
                     "" if ups != downs else f"the fine grid is conclusively better in as many pairs as worse ({ups})"
                     if ups else "in no pair is either grid conclusively better",
                     fewest([s for _, sa, sb in pairs for s in (sa, sb)]))


def solves_everywhere(e, model: str, layers=None) -> Judgement | None:
    """``model`` reaches GOOD in every setting: contradicted by a setting where it has not learned."""
    r = e.rows(model, layers=layers)
    if r.empty:
        return None
    stats = [(row, stat(e, row)) for _, row in r.iterrows()]
    worst_row, worst = min(stats, key=lambda p: p[1].mean)
    failed = [s for _, s in stats if not s.learned]
    v = CONTRADICTED if failed else CONSISTENT if all(s.mean >= GOOD for _, s in stats) else INCONCLUSIVE
    short = sum(s.mean < GOOD for _, s in stats)
    return Judgement(v, f"{len(stats)} setting{'s' if len(stats) != 1 else ''}, {sum(s.mean >= GOOD for _, s in stats)} reach {100 * GOOD:g}%, "
                        f"{len(failed)} not learned; worst {_setting_text(worst_row)}: {worst.text()}",
                     f"{short} setting{'s' if short != 1 else ''} learned but below {100 * GOOD:g}%" if v == INCONCLUSIVE else "",
                     fewest([s for _, s in stats]))


def fails_where_other_learns(e, weak: str, strong: str, layers=None) -> Judgement | None:
    """``weak`` has not learned where ``strong`` beats it (its best setting); contradicted where
    ``weak`` learned or beats ``strong``."""
    j = a_beats_b(e, strong, weak, layers=layers, predicted=True)
    if j is None:
        return None
    learned_weak = [stat(e, row) for _, row in e.rows(weak, layers=layers).iterrows()]
    best_weak = max(learned_weak, key=lambda s: s.mean)
    if best_weak.learned:
        return Judgement(CONTRADICTED, f"{j.compared}; {weak} learned: best {best_weak.text()} "
                                       f"(chance {acc(best_weak.chance)}%)", fewest([j, best_weak]))
    return j


def depth_helps(e, model: str) -> Judgement | None:
    """At each width trained at two or more depths, the deepest against the shallowest (comparing
    across widths would credit depth with what width did)."""
    return grows_with(e, "layers", [model], predicted=True)  # a 1-layer attention fails (Sec. 4)


def pe_alike(e) -> Judgement | None:
    """Each positional variant (a card of role positional) is alike the model it varies; a model
    whose variants have not learned adds no evidence either way."""
    models = list(e.rows()["model"].unique())
    variants = {m: e.card(m) for m in models if e.card(m).role == "positional"}
    parts = [alike(e, base, [m for m, c in variants.items() if c.of == base])
             for base in models if base not in variants]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    vs = [p.verdict for p in parts]
    v = CONTRADICTED if CONTRADICTED in vs else CONSISTENT if CONSISTENT in vs else INCONCLUSIVE
    return Judgement(v, "; ".join(p.compared for p in parts), reasons(p.reason for p in parts) if v == INCONCLUSIVE else "",
                     fewest(parts))
