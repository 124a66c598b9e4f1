"""The learning-rate search: which learning rates (and seeds) a setting trains, round by round.

The paper's finding is that recurrent models succeed only in a narrow window of learning rates.
A fixed grid either misses the window or pays for every point of a fine grid five times. This
protocol instead finds and resolves the window adaptively, deterministically, in rounds that a
workflow can run without a human in between:

round 0   the start grid, on the search seed(s);
refine    (at most ``rounds`` rounds, each adding at most ``per_round`` learning rates, never
          leaving ``[lo, hi]``), on the search seeds: a best learning rate on the edge of what
          was tried extends the search outward by the start grid's step; otherwise new learning
          rates bracket the best (log-space midpoints) until its neighbours are within
          ``resolution`` decades; with ``window``, the same for the two edges of the good window
          (the learning rates whose mean reaches ``good``), after the peak;
settle    if the two best learning rates are within ``tie`` of each other on the search seeds
          (a near tie, below a ``plateau``), both train ``tie_seeds`` more seeds and the better
          mean over all their seeds wins: a near tie is settled on seeds, not by a coin;
report    the chosen learning rate trains every reported seed it has not trained yet.

It stops refining on resolution, on the round budget, on a plateau (two or more learning rates
at or above ``plateau``: the optimum is anywhere on it), and when nothing learns (no learning
rate's mean reaches the ``learned`` threshold). A diverged cell (non-finite loss) is a result:
its accuracy counts as 0. Every decision is a pure function of the results so far (the same
results give the same rounds, whatever order they arrived in), and each round records its reason.

A fixed grid is the special case ``rounds = 0``: its start grid is the grid; with every seed a
search seed it is exactly "every learning rate on every seed, report the best mean".

This module is pure Python (no project imports, no torch, no pandas): the thresholds it uses
(``learned``, ``good``) come in the spec, from ``arrepro.claims``. It is also the one definition
of a setting's learning-rate window (``window``), which the tables, the claims and the paper use.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

EXACT = 1e-9  # means closer than this are equal (ties at accuracy 1.0 are common on MQAR)
LOG_EPS = 1e-6  # decades: two learning rates this close in log10 are the same point
KINDS = ("start", "refine", "settle", "report")


def snap(lr: float) -> float:
    """A new learning rate, rounded to three significant digits (readable folder names; a
    midpoint's fourth digit carries no information at the resolutions used)."""
    return float(f"{lr:.3g}")


def decades(a: float, b: float) -> float:
    return abs(math.log10(b) - math.log10(a))


def midpoint(a: float, b: float) -> float:
    """The geometric mean of two learning rates, snapped."""
    return snap(math.sqrt(a * b))


@dataclass(frozen=True)
class SearchSpec:
    """One setting's search, fully resolved (numbers, not names)."""

    start: tuple[float, ...]  # round 0's learning rates
    lo: float  # the range the search may not leave
    hi: float
    resolution: float  # decades: the best's (and the window edges') neighbours must be this close
    rounds: int  # refinement rounds at most (0: a fixed grid)
    per_round: int  # new learning rates a refinement round adds at most
    search_seeds: tuple[int, ...]  # the seeds every searched learning rate trains
    seeds: tuple[int, ...]  # the seeds reported at the chosen learning rate (search seeds first)
    window: bool  # also resolve the edges of the good window
    tie: float  # on the search seeds, the two best within this are a near tie (settled on seeds)
    tie_seeds: int  # seeds a near tie is settled on (taken from the reported seeds)
    plateau: float  # two or more learning rates at or above this: a plateau (nothing to refine or settle)
    learned: float  # a mean below this everywhere: nothing learned (from arrepro.claims)
    good: float  # a learning rate is in the good window when its mean reaches this

    def __post_init__(self):
        if not self.start or any(not (self.lo * (1 - 1e-12) <= x <= self.hi * (1 + 1e-12)) for x in self.start):
            raise ValueError(f"start grid {list(self.start)} must lie inside the range [{self.lo:g}, {self.hi:g}]")
        if tuple(self.seeds[:len(self.search_seeds)]) != tuple(self.search_seeds):
            raise ValueError(f"the search seeds {list(self.search_seeds)} must be the first of the seeds {list(self.seeds)}")
        if self.resolution <= 0 or self.rounds < 0 or self.per_round < 1 or self.tie_seeds < 0:
            raise ValueError("resolution must be > 0, rounds >= 0, per_round >= 1, tie_seeds >= 0")

    @property
    def step(self) -> float:
        """Decades between start points (the median gap): how far an extension reaches."""
        xs = sorted(self.start)
        gaps = sorted(decades(a, b) for a, b in zip(xs, xs[1:]))
        return gaps[len(gaps) // 2] if gaps else 2 * self.resolution

    @property
    def settle_seeds(self) -> tuple[int, ...]:
        rest = self.seeds[len(self.search_seeds):]
        return tuple(rest[:self.tie_seeds])

    def max_cells(self) -> int:
        """The most cells this search can train, its whole round budget spent."""
        searched = (len(self.start) + self.rounds * self.per_round) * len(self.search_seeds)
        return searched + len(self.seeds) - len(self.search_seeds) + len(self.settle_seeds)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "SearchSpec":
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


@dataclass
class Round:
    """One round's cells (learning rate, seed) and why they were chosen."""

    kind: str
    cells: list[tuple[float, int]]
    reason: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "cells": [[lr, s] for lr, s in self.cells], "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> "Round":
        return cls(d["kind"], [(float(lr), int(s)) for lr, s in d["cells"]], d["reason"])


@dataclass
class State:
    """Where a search stands after the rounds so far: the chosen learning rate, the outcome of
    the refinement, the search's points (learning rate -> mean over the search seeds)."""

    phase: str  # refine | settle | report | done
    chosen: float
    outcome: str  # resolved | plateau | range | budget | not learned | fixed | refining
    points: dict[float, float]
    diverged: dict[float, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- reading results
def _accuracy(results: dict, lr: float, seed: int) -> float:
    """A cell's accuracy for the search's decisions: a diverged cell (None) counts as 0."""
    if (lr, seed) not in results:
        raise KeyError(f"no result for lr {lr!r} seed {seed}: the round's cells must be trained first")
    a = results[(lr, seed)]
    return 0.0 if a is None or not math.isfinite(a) else float(a)


def means(results: dict, lrs, seeds) -> dict[float, float]:
    """lr -> mean accuracy over ``seeds`` (every cell must have a result)."""
    return {lr: sum(_accuracy(results, lr, s) for s in seeds) / len(seeds) for lr in lrs}


def _tried(rounds: list[Round], seeds) -> list[float]:
    """Learning rates trained on every one of ``seeds``, sorted."""
    have: dict[float, set[int]] = {}
    for r in rounds:
        for lr, s in r.cells:
            have.setdefault(lr, set()).add(s)
    return sorted(lr for lr, ss in have.items() if set(seeds) <= ss)


def best(points: dict[float, float]) -> float:
    """The learning rate with the best mean; among exactly tied ones the middle (the lower of the
    two middle ones for an even count), so the reported learning rate is not an edge of a plateau."""
    top = max(points.values())
    tied = sorted(lr for lr, m in points.items() if m >= top - EXACT)
    return tied[(len(tied) - 1) // 2]


# --------------------------------------------------------------------------- the refinement rule
def _extend(x: float, direction: int, spec: SearchSpec, n: int) -> list[float]:
    """Up to ``n`` learning rates beyond ``x`` by the start grid's step, clipped to the range."""
    out, bound = [], spec.lo if direction < 0 else spec.hi
    for k in range(1, n + 1):
        y = snap(x * 10 ** (direction * k * spec.step))
        y = max(y, spec.lo) if direction < 0 else min(y, spec.hi)
        if not out or decades(y, out[-1]) > LOG_EPS:
            out.append(y)
        if decades(y, bound) <= LOG_EPS:
            break
    return out


def _at_bound(x: float, bound: float) -> bool:
    return decades(x, bound) <= LOG_EPS


def _edge_proposals(x: float, tried: list[float], direction: int, spec: SearchSpec, n: int) -> tuple[list[float], str]:
    """What resolving the point ``x`` on one side needs: ([], 'resolved'|'range') or new learning rates."""
    beyond = [t for t in tried if (t < x if direction < 0 else t > x)]
    if not beyond:
        if _at_bound(x, spec.lo if direction < 0 else spec.hi):
            return [], "range"
        return _extend(x, direction, spec, n), "edge"
    nb = max(beyond) if direction < 0 else min(beyond)
    if decades(x, nb) <= spec.resolution + LOG_EPS:
        return [], "resolved"
    return [midpoint(x, nb)], "gap"


def _why(kind: str, subject: str, direction: int, new: list[float]) -> list[str]:
    """The reason for one side of a point (the best, or a window edge) in words."""
    side = "below" if direction < 0 else "above"
    if kind == "edge":
        return [f"{subject} is the {'lowest' if direction < 0 else 'highest'} learning rate tried: extend {side} to "
                f"{_lrs(new)}"]
    if kind == "gap":
        return [f"bracket {subject} {side}: {_lrs(new)}"]
    if kind == "range":
        return [f"{subject} is at the range's {'lower' if direction < 0 else 'upper'} bound: unresolved {side}"]
    return []


def refine(spec: SearchSpec, points: dict[float, float]) -> tuple[list[float], str, str]:
    """What the next refinement round should add, before the round budget: (new learning rates,
    the peak's outcome, the reason). ``points``: lr -> mean over the search seeds. The peak's
    outcome is "not learned", "plateau", "range" (the best sits on a bound of the search range:
    unresolved on that side), "resolved", or "open" (the peak still wants learning rates)."""
    tried = sorted(points)
    top = max(points.values())
    if top < spec.learned:
        return [], "not learned", (f"nothing learned: the best mean {top:.3f} is under the learned threshold "
                                   f"{spec.learned:.3f} at every learning rate tried")
    on_plateau = sorted(lr for lr, m in points.items() if m >= spec.plateau)
    b = best(points)
    peak: list[float] = []
    why: list[str] = []
    outcome = "resolved"
    if len(on_plateau) >= 2:
        outcome = "plateau"
        why.append(f"plateau: {len(on_plateau)} learning rates at or above {spec.plateau:g} "
                   f"({_lrs(on_plateau)}); the best is their middle, {b:.3g}")
    else:
        extend: list[float] = []  # an extension outward comes before bracketing the other side
        for direction in (-1, 1):
            new, kind = _edge_proposals(b, tried, direction, spec, spec.per_round)
            why += _why(kind, f"the best, {b:.3g} (mean {points[b]:.3f}),", direction, new)
            outcome = "range" if kind == "range" else outcome
            (extend if kind == "edge" else peak).extend(new)
        peak = extend + peak
        if peak:
            outcome = "open"
        elif outcome == "resolved":
            why.append(f"the best, {b:.3g} (mean {points[b]:.3f}), has its neighbours within {spec.resolution:g} decades")
    edges: list[float] = []
    if spec.window and top >= spec.good:
        good = sorted(lr for lr, m in points.items() if m >= spec.good)
        for x, direction in ((good[0], -1), (good[-1], 1)):
            new, kind = _edge_proposals(x, tried, direction, spec, 1)
            why += _why(kind, f"the good window's {'lower' if direction < 0 else 'upper'} edge, {x:.3g},", direction, new)
            edges += new
    new = []
    for x in peak + edges:  # the peak first, then the window's edges; nothing tried twice
        if all(decades(x, t) > LOG_EPS for t in tried + new):
            new.append(x)
    return new[:spec.per_round], outcome, "; ".join(why)


def outcome_after(spec: SearchSpec, points: dict[float, float]) -> tuple[str, str]:
    """The search's outcome once refinement has stopped (budget spent or nothing left to add),
    and the reason: the peak's outcome; "budget" if the peak still wanted learning rates;
    "fixed" for a fixed grid (rounds 0) that learned."""
    new, outcome, why = refine(spec, points)
    if outcome == "open":
        outcome, why = "budget", f"round budget ({spec.rounds}) spent: {why}"
    elif new:
        why = f"round budget ({spec.rounds}) spent before the window's edges were resolved: {why}"
    if not spec.rounds and outcome != "not learned":
        outcome = "fixed"
    return outcome, why


def _lrs(xs) -> str:
    return ", ".join(f"{x:.3g}" for x in xs)


def start(spec: SearchSpec) -> Round:
    kind = "start"
    why = (f"start grid {_lrs(sorted(spec.start))} on seed(s) {', '.join(map(str, spec.search_seeds))}"
           + ("" if spec.rounds else " (a fixed grid: no refinement)"))
    return Round(kind, [(lr, s) for lr in sorted(spec.start) for s in spec.search_seeds], why)


def decide(spec: SearchSpec, rounds: list[Round], results: dict) -> tuple[Round | None, State]:
    """The next round (None when the search is done) and the state after ``rounds``, whose
    cells' accuracies are in ``results`` ((lr, seed) -> accuracy, None for a diverged cell).
    Pure: the same rounds and results always give the same answer."""
    if not rounds:
        return start(spec), State("refine", math.nan, "refining", {})
    kinds = [r.kind for r in rounds]
    tried = _tried(rounds, spec.search_seeds)
    points = means(results, tried, spec.search_seeds)
    diverged = {lr: sum(results.get((lr, s)) is None for s in spec.search_seeds) for lr in tried}
    diverged = {lr: n for lr, n in diverged.items() if n}
    n_refine = kinds.count("refine")

    if "settle" not in kinds and "report" not in kinds:
        new, _, why = refine(spec, points)
        if new and n_refine < spec.rounds:
            cells = [(lr, s) for lr in new for s in spec.search_seeds]
            return Round("refine", cells, why), State("refine", best(points), "refining", points, diverged)
        outcome, why = outcome_after(spec, points)
        state = State("settle", best(points), outcome, points, diverged)
        settle = _settle(spec, points, outcome)
        if settle is not None:
            a, b = settle
            cells = [(lr, s) for lr in (a, b) for s in spec.settle_seeds]
            return (Round("settle", cells, f"{why}; near tie of {a:.3g} ({points[a]:.3f}) and {b:.3g} "
                                          f"({points[b]:.3f}) on the search seeds: both train seeds "
                                          f"{', '.join(map(str, spec.settle_seeds))}"), state)
        return _report(spec, rounds, state, why)

    state = State("report", _chosen(spec, rounds, results, points), outcome_after(spec, points)[0], points, diverged)
    if "report" in kinds:
        state.phase = "done"
        return None, state
    return _report(spec, rounds, state, "settled")


def _settle(spec: SearchSpec, points: dict[float, float], outcome: str) -> tuple[float, float] | None:
    """The two learning rates of a near tie worth settling on more seeds, or None."""
    if not spec.settle_seeds or outcome in ("not learned", "plateau") or len(points) < 2:
        return None
    ranked = sorted(points, key=lambda lr: (-points[lr], lr))
    a, b = ranked[0], ranked[1]
    if points[a] - points[b] > spec.tie:
        return None
    return tuple(sorted((a, b)))


def _chosen(spec: SearchSpec, rounds: list[Round], results: dict, points: dict[float, float]) -> float:
    """After a settle round: the better of its two learning rates by the mean over every seed it
    trained (exactly equal means: the lower one, as ``best`` takes the lower middle)."""
    settle = next((r for r in rounds if r.kind == "settle"), None)
    if settle is None:
        return best(points)
    pair = sorted({lr for lr, _ in settle.cells})
    seeds = tuple(spec.search_seeds) + spec.settle_seeds
    return best(means(results, pair, seeds))


def _report(spec: SearchSpec, rounds: list[Round], state: State, why: str) -> tuple[Round | None, State]:
    """The chosen learning rate on every reported seed it has not trained yet; None when done."""
    chosen = state.chosen
    have = {s for r in rounds for lr, s in r.cells if lr == chosen}
    todo = [s for s in spec.seeds if s not in have]
    if not todo:
        state.phase = "done"
        return None, state
    state.phase = "report"
    return Round("report", [(chosen, s) for s in todo], f"{why}; chosen {chosen:.3g}: report seeds "
                                                        f"{', '.join(map(str, todo))}"), state


def cells_of(rounds: list[Round]) -> list[tuple[float, int]]:
    """Every cell the rounds trained, in order, once."""
    return list(dict.fromkeys(c for r in rounds for c in r.cells))


# --------------------------------------------------------------------------- the good window
@dataclass(frozen=True)
class Window:
    """A setting's window of good learning rates, as the tried points bound it.

    ``status``: "not learned" (no mean reaches the learned threshold: no window at all), "none"
    (learned, but no learning rate is good), or "window". For a window, ``lo``/``hi`` are the
    lowest and highest good learning rates tried, ``below``/``above`` the nearest tried ones
    beyond them that are not good (None: none tried on that side), so the true edges lie in
    [below, lo] and [hi, above]; ``width`` = log10(hi/lo) is the window's width at least and
    ``width_max`` = log10(above/below) at most (None: unbounded, the window is open on that side);
    ``open_lo``/``open_hi`` say why a side is open ("range": the search range stops it, "edge":
    nothing tried beyond). ``gaps``: not-good learning rates tried inside [lo, hi]."""

    status: str
    best: float | None = None
    best_mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    below: float | None = None
    above: float | None = None
    open_lo: str | None = None
    open_hi: str | None = None
    n_good: int = 0
    n_tried: int = 0
    gaps: int = 0

    @property
    def width(self) -> float:
        return decades(self.lo, self.hi) if self.status == "window" else 0.0

    @property
    def width_max(self) -> float | None:
        if self.status != "window":
            return 0.0
        if self.below is None or self.above is None:
            return None
        return decades(self.below, self.above)

    @property
    def resolution(self) -> float | None:
        """The larger uncertainty of the two edges, in decades (None: an open edge)."""
        if self.status != "window" or self.below is None or self.above is None:
            return None
        return max(decades(self.below, self.lo), decades(self.hi, self.above))

    def short(self) -> str:
        """E.g. "1e-4 to 3.16e-3 (1.5 to 2 decades)", "3.16e-3 (0 to 0.5 decades)", "none"."""
        if self.status != "window":
            return self.status
        span = f"{self.lo:.3g}" if self.lo == self.hi else f"{self.lo:.3g} to {self.hi:.3g}"
        hi = "open" if self.width_max is None else f"{self.width_max:.2g}"
        return f"{span} ({self.width:.2g} to {hi} decades)"

    @classmethod
    def from_dict(cls, d: dict | None) -> "Window":
        """From ``window_dict``'s keys (or a best table's ``window_*`` columns, prefix removed)."""
        if not d or d.get("status") in (None, "") or d.get("status") != d.get("status"):  # missing or NaN
            return cls("not learned")
        def num(k):
            v = d.get(k)
            return None if v is None or v != v else float(v)
        def txt(k):
            v = d.get(k)
            return None if v is None or v != v else str(v)
        return cls(str(d["status"]), None, None, num("lo"), num("hi"), num("below"), num("above"),
                   txt("open_lo"), txt("open_hi"), int(num("n_good") or 0), int(num("n_tried") or 0))

    def text(self) -> str:
        if self.status != "window":
            return self.status
        lo = f"[{self.below:.3g}, {self.lo:.3g}]" if self.below else f"<= {self.lo:.3g} ({self.open_lo})"
        hi = f"[{self.hi:.3g}, {self.above:.3g}]" if self.above else f">= {self.hi:.3g} ({self.open_hi})"
        return f"lower edge {lo}, upper edge {hi}"


def window(points: dict[float, float], learned: float, good: float, lo: float | None = None,
           hi: float | None = None) -> Window:
    """The one definition of a learning-rate window (see ``Window``): from ``points`` (lr ->
    mean accuracy over seeds), the ``learned`` and ``good`` thresholds and the search range
    [lo, hi] (None: unknown, an open side is then "edge")."""
    if not points:
        return Window("not learned")
    tried = sorted(points)
    b = best(points)
    top = points[b]
    if top < learned:
        return Window("not learned", b, top, n_tried=len(tried))
    good_lrs = [lr for lr in tried if points[lr] >= good]
    if not good_lrs:
        return Window("none", b, top, n_tried=len(tried))
    g_lo, g_hi = good_lrs[0], good_lrs[-1]
    below = max((t for t in tried if t < g_lo), default=None)
    above = min((t for t in tried if t > g_hi), default=None)

    def why_open(x, bound):
        return None if bound is None else ("range" if _at_bound(x, bound) else "edge")

    return Window("window", b, top, g_lo, g_hi, below, above,
                  None if below is not None else (why_open(g_lo, lo) or "edge"),
                  None if above is not None else (why_open(g_hi, hi) or "edge"),
                  len(good_lrs), len(tried), sum(1 for t in tried if g_lo < t < g_hi and points[t] < good))


def wider(a: Window, b: Window) -> int:
    """+1 if ``a`` is conclusively wider than ``b``, -1 if the reverse, 0 if the edges'
    uncertainty leaves it open. ``a`` spans at least ``a.width``; ``b``'s true edges lie strictly
    inside its nearest tried learning rates that are not good, so it spans less than
    ``b.width_max``: ``a`` is wider when a.width >= b.width_max. No window (nothing good): none wide."""
    def lo_hi(w: Window):
        hi = w.width_max
        return w.width, (math.inf if hi is None else hi)

    (a_lo, a_hi), (b_lo, b_hi) = lo_hi(a), lo_hi(b)
    if a.status == "window" and a_lo >= b_hi - LOG_EPS:
        return 1
    if b.status == "window" and b_lo >= a_hi - LOG_EPS:
        return -1
    if a.status == "window" and b.status != "window":
        return 1
    if b.status == "window" and a.status != "window":
        return -1
    return 0
