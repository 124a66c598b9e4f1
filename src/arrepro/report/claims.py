"""The paper's claims, each judged against one experiment's results: consistent, contradicted or
inconclusive, with a row that says what was compared.

A claim is a function of one experiment's tables (an object with the interface of
``arrepro.report.results.Results``: ``rows``, ``chance``, ``card``) that returns a
``Judgement``, or None when the experiment does not train the models the claim needs (the claim
is then not listed). The rules, the same for every claim and stated in the paper PDF:

- **chance** is the task's own: 1/K for MQAR with K key-value pairs (a model that only learned to
  emit some value from the context), 0 for the copy task's exact match;
- a model **has learned** iff its accuracy >= chance + LEARNED_MARGIN * (1 - chance)
  (0.4375 at K = 4);
- two sides are compared by Welch's 95% t interval on the difference of their means over seeds
  (arrepro.report.interval; see ``interval`` below for why Welch's and not paired by seed): a
  difference is **conclusive** iff the interval excludes 0 and the difference of the means
  exceeds MIN_DIFF (a difference of under 10 points earns no verdict however sure); a side with
  fewer than 2 seeds has no interval, so nothing is conclusive against it. More seeds with the
  same mean difference and noise narrow the interval, so they can only sharpen a verdict (the
  max-min spread used before could only grow with more seeds);
- A **beats** B iff A - B is conclusive and A has learned; a claim that A beats B is consistent
  when A beats B, contradicted when B beats A and inconclusive otherwise (neither learned, or a
  difference within the noise);
- a claim that A and B are **alike** needs a model that has learned: consistent when the interval
  on their difference lies within +-MIN_DIFF, contradicted when one beats the other, inconclusive
  otherwise;
- a learning rate is **good** for a model when its mean accuracy reaches GOOD; a model's
  **window** in a setting is the span of its good learning rates, whose true edges lie between
  the outermost good learning rates tried and their nearest tried neighbours that are not good
  (arrepro.search.protocol.window, the one definition); "A's window is wider than B's" counts the settings
  both train where A's window is conclusively wider (its narrowest possible span exceeds B's
  widest possible one; no good learning rate: no window) and where B's is: consistent when A's is
  wider in more settings, contradicted when B's is, inconclusive when they tie.

Comparisons are made within one setting (task, width, depth) unless the claim says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from arrepro.report.interval import LEVEL, Interval, welch
from arrepro.search.protocol import Window, wider
from arrepro.search.thresholds import GOOD, LEARNED_MARGIN, learned_threshold
from arrepro.report.tex import acc, points

MIN_DIFF = 0.10        # a difference of means at most this is never conclusive; "alike" within it
MIN_SEEDS = 3          # a verdict resting on fewer seeds is inconclusive, whatever the numbers
PARAM_RATIO = 1.5      # "the same parameter count": within this factor of each other
SETTING = ["task", "width", "layers"]

CONSISTENT, CONTRADICTED, INCONCLUSIVE = "consistent", "contradicted", "inconclusive"
VERDICTS = (CONSISTENT, CONTRADICTED, INCONCLUSIVE)


@dataclass(frozen=True)
class Stat:
    """One model's accuracy in one setting (at one learning rate): mean and min/max over seeds,
    what a failure there would need to count as evidence (``failure_counts``): the learning
    rate reported, the candidates (learning rates trained on every reported seed) and whether a
    model of the same depth and recipe learns in the experiment; and the sample standard deviation
    (ddof 1) and number of seeds the mean is over (``interval``)."""
    label: str
    mean: float
    lo: float
    hi: float
    chance: float
    best_lr: float | None = None
    candidates: tuple[float, ...] = ()
    peer_learns: bool = False
    sd: float = 0.0
    n: int = 1

    @classmethod
    def of(cls, label: str, accs, chance: float, **kw) -> "Stat":
        """From the per-seed accuracies (as the aggregation computes a best row's)."""
        a = np.asarray(accs, dtype=float)
        return cls(label, float(a.mean()), float(a.min()), float(a.max()), chance,
                   sd=float(a.std(ddof=1)) if len(a) > 1 else 0.0, n=len(a), **kw)

    @property
    def spread(self) -> float:
        return self.hi - self.lo

    @property
    def learned(self) -> bool:
        return self.mean >= learned_threshold(self.chance)

    def covers(self, lr: float | None) -> bool:
        """Whether this side trained ``lr`` on every reported seed (within its candidates' span)."""
        if lr is None or not self.candidates:
            return False
        return min(self.candidates) * (1 - 1e-3) <= lr <= max(self.candidates) * (1 + 1e-3)

    def text(self) -> str:
        rng = f" [{acc(self.lo)}–{acc(self.hi)}]" if acc(self.hi) != acc(self.lo) else ""
        return f"{self.label} {acc(self.mean)}%{rng}"


def interval(a: Stat, b: Stat) -> Interval:
    """The 95% interval on mean(a) - mean(b) over seeds: Welch's t interval from each side's mean,
    standard deviation and seed count.

    Why Welch's and not an interval paired by seed: the two sides of a claim are different models,
    often at different learning rates (each its own best), so a seed fixes the data order and
    little else that they share (their initial weights are drawn by different architectures from
    the same stream), and a pairing would buy little; Welch's needs only what a best-table row
    records (mean, std, n_seeds) and does not assume the two sides equally noisy (a model at
    chance varies little over seeds, one that learns on some of them a lot). Sides over different
    seed sets (a one-seed figure against a three-seed one) compare too."""
    return welch(a.mean, a.sd, a.n, b.mean, b.sd, b.n)


def conclusive(a: Stat, b: Stat) -> bool:
    """The interval on the difference excludes 0, and the means differ by more than MIN_DIFF."""
    return abs(a.mean - b.mean) > MIN_DIFF and interval(a, b).excludes_zero()


def alike_within(a: Stat, b: Stat) -> bool:
    """The interval on the difference lies within +-MIN_DIFF (more seeds narrow it: a claim of no
    difference is earned, not granted by noise)."""
    return interval(a, b).within(MIN_DIFF)


def diff_text(a: Stat, b: Stat) -> str:
    """The difference of means and its interval, in points: "+59.0 points, 95% interval +50.2 to +67.8"."""
    iv = interval(a, b)
    if iv.df == 0.0:
        return f"{points(100 * iv.diff)} points, no interval (under 2 seeds)"
    return (f"{points(100 * iv.diff)} points, {100 * LEVEL:g}% interval "
            f"{points(100 * iv.lo)} to {points(100 * iv.hi)}")


def beats(a: Stat, b: Stat) -> bool:
    return a.learned and a.mean > b.mean and conclusive(a, b)


def failure_counts(winner: Stat, loser: Stat, predicted: bool, cover: bool = True) -> str:
    """"" when ``winner`` beating ``loser`` is evidence, else why not. A loser at chance is no
    evidence unless the claim predicts that failure, the loser's search trained the winner's
    learning rate on every reported seed (``cover``; not for a claim about the learning-rate grids
    themselves), and a model of the loser's depth and recipe learns in the experiment (the scale
    can learn at all)."""
    if loser.learned:
        return ""
    if not predicted:
        return f"{loser.label} is at chance, which the claim does not predict"
    if cover and not loser.covers(winner.best_lr):
        return (f"{loser.label} is at chance without having trained {winner.label}'s learning rate "
                f"{winner.best_lr:.3g} on every seed")
    if not loser.peer_learns:
        return f"{loser.label} is at chance and no model of its depth and recipe learns here"
    return ""


def compare_why(a: Stat, b: Stat, predicted: bool = False, cover: bool = True) -> tuple[int, str]:
    """+1 if a beats b, -1 if b beats a, 0 otherwise, for a claim that a does better (``predicted``:
    it predicts b's failure); and why a win was not counted ("" if it was). A's own failure is
    evidence against the claim when it is real (covered, and the scale learns): the claim
    predicted a's success, so the same conditions apply as to a predicted failure."""
    for w, l, sign, pred in ((a, b, 1, predicted), (b, a, -1, True)):
        if beats(w, l):
            why = failure_counts(w, l, pred, cover)
            return (0, why) if why else (sign, "")
    return 0, ""


def compare(a: Stat, b: Stat, predicted: bool = False, cover: bool = True) -> int:
    return compare_why(a, b, predicted, cover)[0]


@dataclass(frozen=True)
class Judgement:
    verdict: str
    compared: str  # plain text (the paper escapes it): the models, settings and numbers compared

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def combine(verdicts: list[str]) -> str:
    """A claim made of several parts: contradicted if one is, consistent if all are."""
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return CONSISTENT if all(v == CONSISTENT for v in verdicts) else INCONCLUSIVE


def tally(ups: int, downs: int) -> str:
    return CONSISTENT if ups > downs else CONTRADICTED if downs > ups else INCONCLUSIVE


def _setting_text(r) -> str:
    return f"{r['task_name']} {int(r['layers'])}×{int(r['width'])}"


def stat(e, r, label: str | None = None) -> Stat:
    """A best-table row as a Stat."""
    cands = str(r.get("candidates") or "")
    rows = e.rows()
    peers = rows[(rows["layers"] == r["layers"]) & (rows["recipe"] == r["recipe"])]
    learns = any(m >= learned_threshold(e.chance(row)) for m, (_, row) in zip(peers["mean"], peers.iterrows()))
    n = int(r["n_seeds"]) if "n_seeds" in r and pd.notna(r["n_seeds"]) else 1
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
                     + (f" ({why}: no evidence)" if why else ""))


def alike(e, ref: str, others: list[str], layers=None) -> Judgement | None:
    """Each of ``others`` is alike ``ref``: the interval on their difference within +-MIN_DIFF
    (where one of the two has learned)."""
    found, parts, verdicts = False, [], []
    for o in others:
        pairs = paired(e, o, ref, layers=layers)
        if not pairs:
            continue
        found = True
        r, so, sr = max(pairs, key=lambda p: p[2].mean)
        parts.append(f"{_setting_text(r)}: {so.text()} vs {sr.text()} ({diff_text(so, sr)})")
        c, why = compare_why(so, sr, predicted=True)  # a failure on either side is against the claim
        parts[-1] += f" ({why}: no evidence)" if why else ""
        if c != 0:
            verdicts.append(CONTRADICTED)
        elif (so.learned or sr.learned) and alike_within(so, sr):
            verdicts.append(CONSISTENT)
        else:
            verdicts.append(INCONCLUSIVE)
    if not found:
        return None
    return Judgement(combine(verdicts), "; ".join(parts))


def all_of(parts: list[Judgement | None]) -> Judgement | None:
    """A claim made of several: contradicted if one is, consistent if all are."""
    if any(p is None for p in parts):
        return None
    return Judgement(combine([p.verdict for p in parts]), "; ".join(p.compared for p in parts))


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
    parts, vs = [], []
    for b in others:
        rb = e.rows(b)
        m = ra.merge(rb, on=SETTING, suffixes=("", "_b"))
        if m.empty:
            continue
        ups = downs = 0
        shown = []
        for _, r in m.iterrows():
            wa = window_of(r)
            wb = window_of({k[:-2]: v for k, v in r.items() if k.endswith("_b")})
            c = wider(wa, wb)
            ups, downs = ups + (c > 0), downs + (c < 0)
            shown.append(f"{_setting_text(r)}: {wa.short()} vs {wb.short()}")
        vs.append(tally(ups, downs))
        parts.append(f"{a} vs {b}, {len(m)} setting{'s' if len(m) != 1 else ''}: {a}'s window wider in {ups}, narrower in {downs}, "
                     f"undecided in {len(m) - ups - downs} ({'; '.join(shown[:3])}{'; ...' if len(shown) > 3 else ''})")
    if not vs:
        return None
    return Judgement(combine(vs), "; ".join(parts))


def wide_beats_deep(e, model: str) -> Judgement | None:
    """At (about) the same parameter count (within PARAM_RATIO), a wider and shallower ``model``
    beats a narrower and deeper one, over every such pair of configurations on one task."""
    r = e.rows(model)
    ups = downs = 0
    parts = []
    for _, g in r.groupby("task"):
        rows = list(g.itertuples(index=False))
        for x in rows:
            for y in rows:
                if not (x.width > y.width and x.layers < y.layers):
                    continue
                if max(x.parameters, y.parameters) > PARAM_RATIO * min(x.parameters, y.parameters):
                    continue
                sx, sy = stat(e, pd.Series(x._asdict()), f"{x.layers}×{x.width}"), stat(e, pd.Series(y._asdict()), f"{y.layers}×{y.width}")
                c, why = compare_why(sx, sy)
                ups, downs = ups + (c > 0), downs + (c < 0)
                parts.append(f"{x.task_name} {sx.text()} vs {sy.text()} "
                             f"({x.parameters / 1e6:.3g}M vs {y.parameters / 1e6:.3g}M params)" + (f" ({why}: no evidence)" if why else ""))
    if not parts:
        if r.drop_duplicates(["width", "layers"]).shape[0] < 2:
            return None
        return Judgement(INCONCLUSIVE, f"{model}: no wider-and-shallower configuration within a factor "
                                       f"{PARAM_RATIO:g} of a deeper one's parameter count")
    return Judgement(tally(ups, downs), f"{model}, wider first: " + "; ".join(parts)
                     + f" (wider wins {ups}, deeper wins {downs})")


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
    parts = []
    for key, g in r.groupby(["model", "task", other]):
        if g[axis].nunique() < 2:
            continue
        g = g.sort_values(axis)
        lo, hi = g.iloc[0], g.iloc[-1]
        s_lo, s_hi = stat(e, lo, f"{lo['layers']}×{lo['width']}"), stat(e, hi, f"{hi['layers']}×{hi['width']}")
        c, why = compare_why(s_hi, s_lo, predicted)
        ups, downs = ups + (c > 0), downs + (c < 0)
        parts.append(f"{key[0]} {lo['task_name']}: {s_hi.text()} vs {s_lo.text()}" + (f" ({why}: no evidence)" if why else ""))
    if not parts:
        return None
    return Judgement(tally(ups, downs), "; ".join(parts) + f" (larger wins {ups}, smaller wins {downs})")


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
                                        f"worse in {downs}, mean difference {points(100 * d)} points")


def solves_everywhere(e, model: str, layers=None) -> Judgement | None:
    """``model`` reaches GOOD in every setting: contradicted by a setting where it has not learned."""
    r = e.rows(model, layers=layers)
    if r.empty:
        return None
    stats = [(row, stat(e, row)) for _, row in r.iterrows()]
    worst_row, worst = min(stats, key=lambda p: p[1].mean)
    failed = [s for _, s in stats if not s.learned]
    v = CONTRADICTED if failed else CONSISTENT if all(s.mean >= GOOD for _, s in stats) else INCONCLUSIVE
    return Judgement(v, f"{len(stats)} setting{'s' if len(stats) != 1 else ''}, {sum(s.mean >= GOOD for _, s in stats)} reach {100 * GOOD:g}%, "
                        f"{len(failed)} not learned; worst {_setting_text(worst_row)}: {worst.text()}")


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
                                       f"(chance {acc(best_weak.chance)}%)")
    return j


def depth_helps(e, model: str) -> Judgement | None:
    """At each width trained at two or more depths, the deepest against the shallowest (comparing
    across widths would credit depth with what width did)."""
    return grows_with(e, "layers", [model], predicted=True)  # a 1-layer attention fails (Sec. 4)


# --------------------------------------------------------------------------- the claims
def first_of(e, family: str) -> str:
    """The first model of ``family`` (its card's) the experiment trains, in the config's order: the
    copy task's Transformer (attention) and Mamba (recurrent), whichever the scale trains ("" if
    none: the claim finds no rows)."""
    return e.first_of(family) or ""


# (id, experiment, the paper's claim, judge)
CLAIMS: list[tuple[str, str, str, Callable]] = [
    ("lrwindow", "fig1", "Attention succeeds over a wider range of learning rates than Hyena and Mamba",
     lambda e: window_wider(e, "attention", ["hyena", "mamba"])),
    ("finegrid", "fig2", "A finer learning-rate grid than Zoology's improves the recurrent models",
     fine_grid_helps),
    ("attn2", "fig2", "2-layer attention solves MQAR in every setting", lambda e: solves_everywhere(e, "attention")),
    ("attn1", "fig3", "1-layer attention fails where 1-layer Mamba succeeds",
     lambda e: fails_where_other_learns(e, "attention", "mamba", layers=1)),
    ("width", "fig3", "1-layer recurrent models improve with width",
     lambda e: grows_with(e, "width", family="recurrent", predicted=True)),
    ("depth", "fig4", "Attention improves with depth", lambda e: depth_helps(e, "attention")),
    ("widthdepth", "fig4", "At equal parameter count, Mamba prefers width to depth",
     lambda e: wide_beats_deep(e, "mamba")),
    ("copylr", "fig5", "On copying, the Transformer succeeds over a wider range of learning rates than Mamba",
     lambda e: window_wider(e, first_of(e, "attention"), [first_of(e, "recurrent")])),
    ("copywidth", "table1", "On copying, at equal parameter count a wide Mamba beats a deep one",
     lambda e: wide_beats_deep(e, first_of(e, "recurrent"))),
    ("conv", "table2", "A convolution lets 1-layer attention recall; Mamba needs its conv1d",
     lambda e: all_of([a_beats_b(e, "attention_conv_qkv", "attention", predicted=True),
                       a_beats_b(e, "mamba", "mamba_noconv", predicted=True)])),
    ("backbone", "table2", "Removing Mamba's gate, or recasting it as S6 + MLP, costs no accuracy",
     lambda e: alike(e, "mamba", ["mamba_nogate", "s6_mlp"])),
    # Table 3's caption: a conv on "either the Key or Value matrix alone is sufficient to achieve the
    # same performance gains" (as on Q, K and V); on Q alone it is not
    ("convkv", "table3", "A convolution on K alone, or on V alone, does as well as on Q, K and V; on Q alone it does not",
     lambda e: all_of([alike(e, "attention_conv_qkv", ["attention_conv_k", "attention_conv_v"]),
                       a_beats_b(e, "attention_conv_qkv", "attention_conv_q", predicted=True)])),
    ("pe", "table4", "Positional encodings change recurrent models' accuracy little", lambda e: pe_alike(e)),
    ("deltanet", "fig7", "DeltaNet has a wider window of good learning rates than Mamba2 and Mamba",
     lambda e: window_wider(e, "deltanet", ["mamba2", "mamba"])),
    ("depth12", "fig13", "At 12 layers, attention still has a wider learning-rate window than Mamba",
     lambda e: window_wider(e, "attention", ["mamba"])),
]


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
    return Judgement(v, "; ".join(p.compared for p in parts))


def judge(results: dict) -> list[dict]:
    """Every claim whose experiment this scale declares and trains: id, exp, claim, verdict, compared."""
    rows = []
    for cid, exp, text, fn in CLAIMS:
        e = results.get(exp)
        if e is None or e.best.empty:
            continue
        j = fn(e)
        if j is not None:
            seeds = int(e.best["n_seeds"].min()) if "n_seeds" in e.best.columns else MIN_SEEDS
            if seeds < MIN_SEEDS:  # one or two seeds' word is no verdict, whatever the interval
                j = Judgement(INCONCLUSIVE, f"{j.compared} (on {seeds} seed{'s' if seeds != 1 else ''}, fewer than "
                                            f"{MIN_SEEDS}: no verdict)")
            rows.append({"id": cid, "exp": exp, "claim": text, "verdict": j.verdict, "compared": j.compared})
    return rows


def rules_text() -> str:
    """The rules in a sentence or three, for the paper's claims table (plain text)."""
    return (f"Chance is 1/K for MQAR with K key-value pairs and 0 for the copy task's exact match. A model has "
            f"learned when its mean accuracy reaches chance + {LEARNED_MARGIN:g} × (1 - chance) "
            f"({100 * learned_threshold(0.25):.2f}% at K = 4). Two models are compared by Welch's "
            f"{100 * LEVEL:g}% t interval on the difference of their mean accuracies over seeds (from each side's "
            f"mean, standard deviation and number of seeds; none with under 2 seeds): a difference is conclusive "
            f"when the interval excludes 0 and the means differ by more than {MIN_DIFF:g} (more seeds with the same "
            f"difference and noise narrow the interval, so they can only sharpen a verdict); a model beats another when it has learned and is conclusively better. A claim "
            f"that one model does better is consistent when it beats the other, contradicted when the other beats "
            f"it, inconclusive otherwise; a claim that two do alike is consistent when one has learned and the "
            f"interval lies within ±{MIN_DIFF:g}. A model at chance is no evidence unless the claim predicts "
            f"its failure, its search trained the other's learning rate on every seed and a model of its depth "
            f"learns here. A learning rate is good at a mean of {100 * GOOD:g}%; a window (the span of good learning rates, its "
            f"edges known to lie between the outermost good learning rate tried and the next one tried) is wider "
            f"than another when its narrowest possible span exceeds the other's widest possible one, setting by "
            f"setting; no good learning rate, no window. Equal parameter counts: within a "
            f"factor {PARAM_RATIO:g}. A verdict resting on fewer than {MIN_SEEDS} seeds is inconclusive.")

