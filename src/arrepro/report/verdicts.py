"""The rules every claim is judged by (the claims: arrepro.report.claims; their kinds:
arrepro.report.claim_kinds): a model's accuracy in one setting (``Stat``), the interval on a
difference and when it is conclusive, who beats whom, when a failure counts as evidence, a
verdict (``Judgement``), and the rules in words for the paper (``rules_text``). The rules, the
same for every claim and stated in the paper PDF:

- **chance** is the task's own: 1/K for MQAR with K key-value pairs (a model that only learned to
  emit some value from the context), 0 for the copy task's exact match;
- a model **has learned** iff its accuracy >= chance + LEARNED_MARGIN * (1 - chance)
  (0.4375 at K = 4);
- two sides are compared by Welch's 95% t interval on the difference of their means over seeds
  (arrepro.report.interval; see ``interval`` below for why Welch's and not paired by seed), each
  side's standard deviation taken as at least SD_FLOOR (1 point: seeds that agree exactly are no
  evidence that a model cannot vary): a difference is **conclusive** iff the interval excludes 0
  and the difference of the means exceeds MIN_DIFF (a difference of under 10 points earns no
  verdict however sure); a side with fewer than 2 seeds has no interval, so nothing is
  conclusive against it. More seeds with the
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

import numpy as np

from arrepro.search.cover import same_lr
from arrepro.report.interval import LEVEL, SD_FLOOR, Interval, welch
from arrepro.search.thresholds import GOOD, LEARNED_MARGIN, learned_threshold
from arrepro.report.tex import acc, points

MIN_DIFF = 0.10        # a difference of means at most this is never conclusive; "alike" within it
MIN_SEEDS = 3          # a verdict resting on fewer seeds is inconclusive, whatever the numbers
PARAM_RATIO = 1.5      # "the same parameter count": within this factor of each other

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
        """Whether this side trained ``lr`` on every reported seed: ``lr`` is one of its candidates
        (its search's, or its experiment's cover's: arrepro.search.cover). A span of candidates
        around ``lr`` is not enough: a narrow window may lie between two of them."""
        return lr is not None and any(same_lr(lr, c) for c in self.candidates)

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
    seed sets (a one-seed figure against a three-seed one) compare too.

    A difference of two accuracies lies in [-1, 1]: where the t interval, symmetric by
    construction, reaches past that (100% against 0% on three seeds a side: +97.7 to +102.3
    points), its edge is clamped there. No verdict changes: 0 and +-MIN_DIFF lie inside."""
    iv = welch(a.mean, a.sd, a.n, b.mean, b.sd, b.n)
    return Interval(iv.diff, max(iv.lo, -1.0), min(iv.hi, 1.0), iv.df) if iv.df else iv


def conclusive(a: Stat, b: Stat) -> bool:
    """The interval on the difference excludes 0, and the means differ by more than MIN_DIFF."""
    return abs(a.mean - b.mean) > MIN_DIFF and interval(a, b).excludes_zero()


def alike_within(a: Stat, b: Stat) -> bool:
    """The interval on the difference lies within +-MIN_DIFF (more seeds narrow it: a claim of no
    difference is earned, not granted by noise)."""
    return interval(a, b).within(MIN_DIFF)


def undecided(a: Stat, b: Stat) -> str:
    """Why neither of two sides beats the other, by the rules above ("" where one does)."""
    hi, lo = (a, b) if a.mean >= b.mean else (b, a)
    iv = interval(hi, lo)
    if iv.df == 0.0:
        return "fewer than 2 seeds a side: no interval"
    if hi.mean - lo.mean <= MIN_DIFF:
        return f"{hi.label} and {lo.label} differ by {100 * (hi.mean - lo.mean):.1f} points, not more than {100 * MIN_DIFF:g}"
    if not iv.excludes_zero():
        return f"the {100 * LEVEL:g}% interval on {hi.label} - {lo.label} includes 0"
    if not hi.learned:
        return f"{hi.label} has not learned"
    return ""


def not_alike(a: Stat, b: Stat) -> str:
    """Why two sides are not shown alike, by the rules above ("" where they are)."""
    if not (a.learned or b.learned):
        return f"neither {a.label} nor {b.label} has learned"
    if alike_within(a, b):
        return ""
    iv = interval(a, b)
    return (f"the {100 * LEVEL:g}% interval on {a.label} - {b.label} ({points(100 * iv.lo)} to {points(100 * iv.hi)} "
            f"points) is not within ±{100 * MIN_DIFF:g}")


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
    reason: str = ""  # an inconclusive verdict's: why the numbers decide nothing (plain text)
    seeds: int | None = None  # the fewest seeds of the rows it compared (None: it compared none)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def fewest(counts) -> int | None:
    """The fewest seeds among ``counts`` (Stats, Judgements, numbers or None), None if none:
    what a verdict built from them rests on."""
    ns = [c if isinstance(c, int) else getattr(c, "n", getattr(c, "seeds", None)) for c in counts]
    ns = [int(n) for n in ns if n is not None]
    return min(ns) if ns else None


def combine(verdicts: list[str]) -> str:
    """A claim made of several parts: contradicted if one is, consistent if all are."""
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return CONSISTENT if all(v == CONSISTENT for v in verdicts) else INCONCLUSIVE


def tally(ups: int, downs: int) -> str:
    return CONSISTENT if ups > downs else CONTRADICTED if downs > ups else INCONCLUSIVE


def rules_text() -> str:
    """The rules in a sentence or three, for the paper's claims table (plain text)."""
    return (f"Chance is 1/K for MQAR with K key-value pairs and 0 for the copy task's exact match. A model has "
            f"learned when its mean accuracy reaches chance + {LEARNED_MARGIN:g} × (1 - chance) "
            f"({100 * learned_threshold(0.25):.2f}% at K = 4). Two models are compared by Welch's "
            f"{100 * LEVEL:g}% t interval on the difference of their mean accuracies over seeds (from each side's "
            f"mean, standard deviation and number of seeds, the t quantile from SciPy; none with under 2 seeds). "
            f"Each side's standard deviation over seeds is taken as at least {100 * SD_FLOOR:g} percentage point "
            f"(seeds that agree exactly are no evidence that a model cannot vary; about the most a model at 100% "
            f"or at chance varied over seeds in the demo). A difference is conclusive "
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
