"""The learning-rate search: which learning rates, on which seeds, a setting trains, round by round.

The paper reports, for each configuration, the best over the learning rates tried of the mean
accuracy over all its seeds (A.2). Its finding is that recurrent models succeed only in a narrow
window of learning rates, so a fixed grid either misses the window or pays for every point of a
fine grid on every seed. This protocol reports exactly the paper's statistic, the best over a set
of *candidate* learning rates of the mean over **every reported seed**, each candidate trained on
every reported seed, and spends cells only where they can change that number:

start     round 0: the start grid on the search seed(s);
refine    (at most ``rounds`` rounds of at most ``per_round`` new learning rates, never leaving
          ``[lo, hi]``, on the search seeds): a best learning rate on the edge of what was tried
          extends outward by the start grid's step; otherwise midpoints bracket the best until its
          neighbours lie within ``resolution`` decades; with ``window``, the same for the good
          window's two edges. "Best" here is the best *score*, a learning rate's mean over the
          seeds it has so far. A setting where any seed of any learning rate learned is searched
          as learned; where none has yet, a best on an edge still extends; where every cell
          diverged, the search extends towards lower learning rates;
seeds     successive halving over seeds (``ladder``): the best-scoring learning rates climb to
          more seeds in steps (e.g. the top 3 to 2 seeds, then the top 2 of those to every seed),
          so at least ``ladder[-1].take`` candidates end on every reported seed; then any learning
          rate that could still beat the best candidate climbs too. "Could still beat": accuracy
          is at most 1, so a learning rate with k of n seeds can at best reach
          (its k accuracies + (n - k)) / n, its *bound*; once the best candidate's mean reaches
          it, more seeds there cannot change the reported number.

Refinement and seeds interleave: each round asks first whether the evidence (scores over all the
seeds trained so far) wants another learning rate, then whether a learning rate must climb. It
never spends more than the setting's ``budget`` cells (exploration stops where the ladder's cells
would no longer fit) nor more than ``max_rounds`` rounds after round 0.

The reported learning rate (``State.chosen``) is the candidate with the best mean over every
reported seed (among exactly tied ones the middle, the lower of the two middle ones for an even
count), and the outcome is computed at it: "resolved" (its nearest tried neighbours within the
resolution), "plateau", "range" (it sits on a bound of the search range), "budget" (it wanted
more learning rates), "not learned" (no cell of any seed learned), "fixed" (a fixed grid). A
diverged cell (non-finite loss) is a result: its accuracy counts as 0. Every decision is a pure
function of the results so far (the same results give the same rounds, in whatever order they
arrived), and each round records its reason.

A fixed grid is the special case ``rounds = 0`` with every seed a search seed: every learning
rate on every seed, the best mean reported. This module is pure Python (no project imports, no
torch, no pandas): the thresholds it uses (``learned``, ``good``) come in the spec, from
``arrepro.search.thresholds``. It is also the one definition of a setting's learning-rate window
(``window``), which the tables, the claims and the paper use.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

EXACT = 1e-9  # means closer than this are equal (ties at accuracy 1.0 are common on MQAR)
LOG_EPS = 1e-6  # decades: two learning rates this close in log10 are the same point
# decades: how far a resolution or a lattice point may be missed. The start grids' 3.16 sits
# 0.4997 decades above 1 and 0.5003 below 10; a midpoint snapped to three digits is off by up to
# 4e-4 decades (1.78e-3 is 0.2504 decades from 1e-3): both are the resolution they mean.
RES_TOL = 1e-3
KINDS = ("start", "scan", "refine", "seeds")


def snap(lr: float) -> float:
    """A new learning rate, rounded to three significant digits (readable folder names; a
    midpoint's fourth digit carries no information at the resolutions used)."""
    return float(f"{lr:.3g}")


def decades(a: float, b: float) -> float:
    return abs(math.log10(b) - math.log10(a))


def midpoint(a: float, b: float) -> float:
    """The geometric mean of two learning rates, snapped."""
    return snap(math.sqrt(a * b))


def _mean(xs) -> float:
    return sum(xs) / len(xs)


@dataclass(frozen=True)
class SearchSpec:
    """One setting's search, fully resolved (numbers, not names).

    ``ladder``: the successive-halving steps over seeds, ((seeds, take), ...) with seeds rising
    from above the search seeds' count to every reported seed: at each step the ``take``
    best-scoring learning rates (among those with the step before's seeds) get ``seeds`` seeds.
    Empty when every seed searches (a curve, a fixed grid). ``budget``: cells at most (0: the
    exploration's and the ladder's own cost, ``base_cells``, with nothing left for contenders)."""

    start: tuple[float, ...]  # round 0's learning rates
    lo: float  # the range the search may not leave
    hi: float
    resolution: float  # decades: the best's (and the window edges') neighbours must be this close
    rounds: int  # refinement rounds at most (0: a fixed grid)
    per_round: int  # new learning rates a refinement round adds at most
    search_seeds: tuple[int, ...]  # the seeds every searched learning rate trains
    seeds: tuple[int, ...]  # every reported seed (search seeds first)
    window: bool  # also resolve the edges of the good window
    ladder: tuple[tuple[int, int], ...]  # ((seeds, take), ...): successive halving over seeds
    budget: int  # cells at most (0: base_cells)
    plateau: float  # two or more learning rates at or above this: a plateau (the peak is not refined)
    learned: float  # no cell of any seed reaching this: nothing learned (arrepro.search.thresholds)
    good: float  # a learning rate is in the good window when its mean reaches this
    scan: float = 0.0  # decades: while nothing learned, the range is scanned this finely (0: no scan)
    scan_seeds: int = 2  # the scan covers every scan point on this many seeds, one round a seed
    scan_range: tuple[float, ...] = ()  # (lo, hi): the span the scan covers (empty: the range)

    def __post_init__(self):
        object.__setattr__(self, "ladder", tuple((int(s), int(t)) for s, t in self.ladder))
        if not self.start or any(not (self.lo * (1 - 1e-12) <= x <= self.hi * (1 + 1e-12)) for x in self.start):
            raise ValueError(f"start grid {list(self.start)} must lie inside the range [{self.lo:g}, {self.hi:g}]")
        if tuple(self.seeds[:len(self.search_seeds)]) != tuple(self.search_seeds) or not self.search_seeds:
            raise ValueError(f"the search seeds {list(self.search_seeds)} must be the first of the seeds {list(self.seeds)}")
        if self.resolution <= 0 or self.rounds < 0 or self.per_round < 1 or self.budget < 0:
            raise ValueError("resolution must be > 0, rounds >= 0, per_round >= 1, budget >= 0")
        if self.scan < 0 or self.scan_seeds < 1:
            raise ValueError("scan must be >= 0 (decades; 0: no scan) and scan_seeds >= 1")
        levels = self.levels
        if levels[-1] != len(self.seeds) or any(b <= a for a, b in zip(levels, levels[1:])):
            raise ValueError(f"ladder {[list(x) for x in self.ladder]}: its seeds must rise from the "
                             f"{len(self.search_seeds)} search seed(s) to all {len(self.seeds)} seeds")
        if any(t < 1 for _, t in self.ladder) or any(b > a for (_, a), (_, b) in zip(self.ladder, self.ladder[1:])):
            raise ValueError(f"ladder {[list(x) for x in self.ladder]}: each step takes at least 1 learning rate, "
                             "and no more than the step before")
        if self.budget and self.budget < self.first_cells() + self.ladder_cells():
            raise ValueError(f"budget {self.budget} is less than the start grid's {self.first_cells()} cells plus the "
                             f"ladder's {self.ladder_cells()}")

    @property
    def levels(self) -> tuple[int, ...]:
        """The seed counts a learning rate can have: the search seeds', then each ladder step's."""
        return (len(self.search_seeds),) + tuple(s for s, _ in self.ladder)

    @property
    def candidates(self) -> int:
        """Learning rates that end on every reported seed, at least (where that many were tried)."""
        return self.ladder[-1][1] if self.ladder else len(self.start)

    @property
    def step(self) -> float:
        """Decades between start points (the median gap, to 3 decimals): how far an extension reaches."""
        xs = sorted(self.start)
        gaps = sorted(decades(a, b) for a, b in zip(xs, xs[1:]))
        return round(gaps[len(gaps) // 2], 3) if gaps else 2 * self.resolution

    def first_cells(self) -> int:
        return len(self.start) * len(self.search_seeds)

    def ladder_cells(self) -> int:
        """The ladder's cells when no ranking changes on the way up."""
        return sum(t * (s - a) for (s, t), a in zip(self.ladder, self.levels))

    def base_cells(self) -> int:
        """Every refinement round spent, and the ladder climbed once."""
        return (len(self.start) + self.rounds * self.per_round) * len(self.search_seeds) + self.ladder_cells()

    def max_cells(self) -> int:
        """The most cells this search can train."""
        return self.budget or self.base_cells()

    @property
    def scan_rounds(self) -> int:
        """Scan rounds at most (each a ring further out and a seed deeper in), where a refinement can follow."""
        if not (self.scan and self.rounds):
            return 0
        return min(self.scan_seeds, len(self.seeds) - 1) + max((r for _, r in self.scan_points()), default=0)

    @property
    def max_rounds(self) -> int:
        """Rounds after round 0, at most: the scan's and refinement rounds, twice the ladder's steps
        (the climb, then contenders) and one more (a climb after a refinement that the seeds asked for)."""
        return self.rounds + self.scan_rounds + (2 * len(self.ladder) + 1 if self.ladder else 0)

    @property
    def scan_anchor(self) -> float:
        """log10 of the scan lattice's anchor: the start grid's lowest point (the lattice is
        every ``scan`` decades from it)."""
        return math.log10(min(self.start))

    def scan_points(self) -> list[tuple[float, int]]:
        """The learning rates a scan visits, each with its *ring*: the lattice through the start
        grid's lowest point, ``scan`` decades apart, inside the range; ring 0 inside the start
        grid's span, ring k the k-th lattice point beyond it on either side."""
        if not self.scan:
            return []
        lo, hi = self.scan_range or (self.lo, self.hi)
        a, lo, hi = self.scan_anchor, math.log10(max(lo, self.lo)), math.log10(min(hi, self.hi))
        top = math.log10(max(self.start))
        ks = range(math.ceil((lo - a) / self.scan - RES_TOL), math.floor((hi - a) / self.scan + RES_TOL) + 1)
        out = []
        for k in ks:
            x = a + k * self.scan
            beyond = max(a - x, x - top, 0.0) / self.scan
            out.append((snap(10 ** x), max(0, math.ceil(beyond - RES_TOL))))
        return out

    def as_dict(self) -> dict:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        d["ladder"] = [list(x) for x in self.ladder]
        return d

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
    """Where a search stands after the rounds so far. ``points``: the candidates (learning rates
    trained on every reported seed) -> their mean over those seeds; ``scores``: every learning
    rate tried -> (seeds trained, mean over them); ``chosen``: the best candidate (nan: none yet);
    ``contenders``: learning rates that could still beat it but were left (budget or rounds)."""

    phase: str  # refine | seeds | done
    chosen: float
    outcome: str  # resolved | plateau | range | budget | not learned | fixed | searching
    points: dict[float, float]
    scores: dict[float, tuple[int, float]] = field(default_factory=dict)
    diverged: dict[float, int] = field(default_factory=dict)
    contenders: list[float] = field(default_factory=list)
    why: str = ""  # the outcome's reason


# --------------------------------------------------------------------------- the evidence
def _accuracy(results: dict, lr: float, seed: int) -> float:
    """A cell's accuracy for the search's decisions: a diverged cell (None) counts as 0."""
    if (lr, seed) not in results:
        raise KeyError(f"no result for lr {lr!r} seed {seed}: the round's cells must be trained first")
    a = results[(lr, seed)]
    return 0.0 if a is None or not math.isfinite(a) else float(a)


def means(results: dict, lrs, seeds) -> dict[float, float]:
    """lr -> mean accuracy over ``seeds`` (every cell must have a result)."""
    return {lr: _mean([_accuracy(results, lr, s) for s in seeds]) for lr in lrs}


@dataclass
class Evidence:
    """What the rounds so far trained: each learning rate's seeds (always the first k of the
    spec's seeds) and accuracies."""

    spec: SearchSpec
    acc: dict[float, list[float]]  # lr -> accuracies of seeds[:k], diverged as 0
    diverged: dict[float, int]  # lr -> diverged cells
    learned_any: bool  # some cell of some seed reached the learned threshold
    all_diverged: bool

    @classmethod
    def of(cls, spec: SearchSpec, rounds: list[Round], results: dict) -> "Evidence":
        have: dict[float, set[int]] = {}
        for r in rounds:
            for lr, s in r.cells:
                have.setdefault(lr, set()).add(s)
        acc, div = {}, {}
        for lr in sorted(have):
            seeds = [s for s in spec.seeds if s in have[lr]]
            if seeds != list(spec.seeds[:len(seeds)]) or len(seeds) != len(have[lr]):
                raise ValueError(f"learning rate {lr:g} trained seeds {sorted(have[lr])}: not the first of {list(spec.seeds)}")
            acc[lr] = [_accuracy(results, lr, s) for s in seeds]
            n = sum(results.get((lr, s)) is None for s in seeds)
            if n:
                div[lr] = n
        cells = [(lr, s) for lr in have for s in have[lr]]
        learned = any(a >= spec.learned for xs in acc.values() for a in xs)
        return cls(spec, acc, div, learned, bool(cells) and all(results.get(c) is None for c in cells))

    @property
    def tried(self) -> list[float]:
        return sorted(self.acc)

    def n(self, lr: float) -> int:
        return len(self.acc.get(lr, ()))

    def score(self, lr: float) -> float:
        return _mean(self.acc[lr])

    def scores(self) -> dict[float, float]:
        return {lr: self.score(lr) for lr in self.tried}

    def bound(self, lr: float) -> float:
        """The highest mean over every reported seed this learning rate can still reach."""
        n = len(self.spec.seeds)
        return (sum(self.acc[lr]) + (n - self.n(lr))) / n

    def full(self) -> dict[float, float]:
        """The candidates: learning rates on every reported seed -> their mean."""
        n = len(self.spec.seeds)
        return {lr: self.score(lr) for lr in self.tried if self.n(lr) == n}

    def ranked(self, lrs) -> list[float]:
        """Best score first; equal scores: the lower learning rate first."""
        return sorted(lrs, key=lambda lr: (-self.score(lr), lr))

    def promise(self, lr: float) -> float:
        """How good ``lr`` may be, for choosing which learning rates get seeds (never for what is
        reported): its score, or, where both its nearest tried neighbours score higher, the lower
        of theirs. A rate between two that learn is as likely to learn as they are; its own few
        seeds may have failed where the others' did not (the winner's curse of one seed)."""
        tried = self.tried
        i = tried.index(lr)
        if 0 < i < len(tried) - 1:
            return max(self.score(lr), min(self.score(tried[i - 1]), self.score(tried[i + 1])))
        return self.score(lr)

    def by_promise(self, lrs) -> list[float]:
        """Most promising first (``promise``); ties: the better score, then the lower learning rate."""
        return sorted(lrs, key=lambda lr: (-self.promise(lr), -self.score(lr), lr))

    def cells(self) -> int:
        return sum(map(len, self.acc.values()))


def best(points: dict[float, float]) -> float:
    """The learning rate with the best mean; among exactly tied ones the middle (the lower of the
    two middle ones for an even count), so the reported learning rate is not an edge of a plateau."""
    top = max(points.values())
    tied = sorted(lr for lr, m in points.items() if m >= top - EXACT)
    return tied[(len(tied) - 1) // 2]


# --------------------------------------------------------------------------- the refinement rule
def _on_lattice(t: float, step: float) -> float:
    """log10 ``t`` snapped to the start grid's lattice (multiples of ``step`` decades) when within
    RES_TOL of it: extending 3.16e-4 by half a decade gives 1e-4, not 9.99e-5."""
    q = round(t / step) * step
    return q if abs(t - q) <= RES_TOL else t


def _to_scan_lattice(spec: SearchSpec, lr: float) -> float:
    """``lr`` on the scan's lattice (``scan`` decades through the start grid's lowest point) when
    within 0.02 decades of it, so that a search on the literal grid's lattice tries its rates
    exactly (extending 1e-2 by two thirds of a decade gives 4.64e-2, not 4.65e-2)."""
    if not spec.scan:
        return lr
    a = spec.scan_anchor
    q = a + round((math.log10(lr) - a) / spec.scan) * spec.scan
    return snap(10 ** q) if abs(math.log10(lr) - q) <= 0.02 else lr


def _extend(x: float, direction: int, spec: SearchSpec, n: int) -> list[float]:
    """Up to ``n`` learning rates beyond ``x`` by the start grid's step (with a scan, by the scan's
    finer lattice step: a search on the literal grid's lattice skips none of its rates), clipped to
    the range."""
    out, bound = [], spec.lo if direction < 0 else spec.hi
    for k in range(1, n + 1):
        if spec.scan:
            y = _to_scan_lattice(spec, snap(10 ** (math.log10(x) + direction * k * spec.scan)))
        else:
            y = snap(10 ** _on_lattice(math.log10(x) + direction * k * spec.step, spec.step))
        y = max(y, spec.lo) if direction < 0 else min(y, spec.hi)
        if not out or decades(y, out[-1]) > LOG_EPS:
            out.append(y)
        if decades(y, bound) <= LOG_EPS:
            break
    return out


def _at_bound(x: float, bound: float) -> bool:
    return decades(x, bound) <= LOG_EPS


def _side(x: float, tried: list[float], direction: int, spec: SearchSpec, n: int) -> tuple[list[float], str]:
    """What resolving the point ``x`` on one side needs: ([], "resolved" | "range") or new learning
    rates ("edge": beyond everything tried; "gap": a midpoint to the nearest tried neighbour)."""
    beyond = [t for t in tried if (t < x if direction < 0 else t > x)]
    if not beyond:
        if _at_bound(x, spec.lo if direction < 0 else spec.hi):
            return [], "range"
        return _extend(x, direction, spec, n), "edge"
    nb = max(beyond) if direction < 0 else min(beyond)
    if decades(x, nb) <= spec.resolution + RES_TOL:
        return [], "resolved"
    return [_to_scan_lattice(spec, midpoint(x, nb))], "gap"


def _why(kind: str, subject: str, direction: int, new: list[float]) -> str:
    """The reason for one side of a point (the best, or a window edge) in words."""
    side = "below" if direction < 0 else "above"
    if kind == "edge":
        return f"{subject} is the {'lowest' if direction < 0 else 'highest'} learning rate tried: extend {side} to {_lrs(new)}"
    if kind == "gap":
        return f"bracket {subject} {side}: {_lrs(new)}"
    if kind == "range":
        return f"{subject} is at the range's {'lower' if direction < 0 else 'upper'} bound: unresolved {side}"
    return ""


def _plateau(spec: SearchSpec, points: dict[float, float]) -> list[float]:
    on = sorted(lr for lr, m in points.items() if m >= spec.plateau)
    return on if len(on) >= 2 else []


def _peak(spec: SearchSpec, ev: Evidence, x: float, n: int) -> tuple[list[float], list[str], str]:
    """Learning rates that resolve the point ``x`` on both sides (an extension outward first),
    their reasons, and the point's outcome: resolved | range | open."""
    tried, s = ev.tried, ev.score(x)
    extend, gaps, why, outcome = [], [], [], "resolved"
    for direction in (-1, 1):
        new, kind = _side(x, tried, direction, spec, n)
        why.append(_why(kind, f"the best, {x:.3g} (score {s:.3f} on {ev.n(x)} seed(s)),", direction, new))
        outcome = "range" if kind == "range" else outcome
        (extend if kind == "edge" else gaps).extend(new)
    if extend or gaps:
        outcome = "open"
    return extend + gaps, [w for w in why if w], outcome


def explore(spec: SearchSpec, ev: Evidence, left: int | None = None) -> tuple[list[float], str]:
    """The learning rates the evidence wants next on the search seeds (at most ``per_round``,
    nothing tried twice), and why; ([], why) when it wants none."""
    tried, scores = ev.tried, ev.scores()
    b = best(scores)
    if ev.all_diverged:
        if _at_bound(tried[0], spec.lo):
            return [], "every cell diverged, down to the range's lower bound"
        new = _extend(tried[0], -1, spec, spec.per_round)
        return new, f"every cell diverged: extend below the lowest, {tried[0]:.3g}, to {_lrs(new)}"
    if not ev.learned_any and spec.scan:
        # nothing learned on any seed yet: the scan looks everywhere (``scan_round``); an edge is
        # never chosen by scores at chance
        return [], f"nothing learned on the seeds so far (the best score {scores[b]:.3f}, at {b:.3g})"
    if not ev.learned_any:
        # nothing learned on any seed yet: the ladder first asks the next seed everywhere (a dead
        # search seed sees nothing anywhere); then a best on the start grid's edge extends (once),
        # before the setting is called "not learned"
        edge = -1 if b == tried[0] else 1 if b == tried[-1] else 0
        asked = not spec.ladder or (all(ev.n(lr) > len(spec.search_seeds) for lr in tried)
                                    and not _can_widen(spec, ev, left))
        if edge and asked and b in spec.start and len(tried) > 1:
            new, kind = _side(b, tried, edge, spec, 1)
            if kind == "edge":
                return new, (f"nothing learned on the seeds so far; the best score, {b:.3g} ({scores[b]:.3f}), is on "
                             f"the start grid's edge: extend {'below' if edge < 0 else 'above'} to {_lrs(new)}")
        return [], f"nothing learned on the seeds so far (the best score {scores[b]:.3f}, at {b:.3g})"
    why: list[str] = []
    peak: list[float] = []
    flat = _plateau(spec, scores)
    if flat:
        why.append(f"plateau: {len(flat)} learning rates score at or above {spec.plateau:g} ({_lrs(flat)}): the peak "
                   "is not refined")
    else:
        peak, w, _ = _peak(spec, ev, b, spec.per_round)
        why += w or [f"the best, {b:.3g}, has its neighbours within {spec.resolution:g} decades"]
    edges: list[float] = []
    good = [lr for lr in tried if scores[lr] >= spec.good]
    if spec.window and good:
        for x, direction in ((good[0], -1), (good[-1], 1)):
            new, kind = _side(x, tried, direction, spec, 1)
            w = _why(kind, f"the good window's {'lower' if direction < 0 else 'upper'} edge, {x:.3g},", direction, new)
            why += [w] if w else []
            edges += new
    new = []
    for x in peak + edges:  # the peak first, then the window's edges; nothing tried twice
        if all(decades(x, t) > LOG_EPS for t in tried + new):
            new.append(x)
    return new[:spec.per_round], "; ".join(why)


def _thin_neighbours(spec: SearchSpec, ev: Evidence, e: int) -> list[float]:
    """With a scan (where a seed may fail at some rates and not others): the nearest tried
    neighbours of the most promising learning rate that have fewer than ``e`` seeds, the seeds up
    to the first that learned: a neighbour seen only by a seed that learned nothing anywhere
    does not resolve the best (it is as good as untried)."""
    if not spec.scan or not ev.learned_any or e <= len(spec.search_seeds):
        return []
    tried = ev.tried
    b = ev.by_promise(tried)[0]
    i = tried.index(b)
    return [tried[j] for j in (i - 1, i + 1) if 0 <= j < len(tried) and ev.n(tried[j]) < e]


# --------------------------------------------------------------------------- seeds
def _lift(spec: SearchSpec, ev: Evidence, lr: float, to: int) -> list[tuple[float, int]]:
    return [(lr, s) for s in spec.seeds[ev.n(lr):to]]


def _next_level(spec: SearchSpec, n: int) -> int:
    return next(x for x in spec.levels if x > n)  # a learning rate between levels climbs to the next


def explore_level(spec: SearchSpec, ev: Evidence) -> int:
    """Seeds a newly explored learning rate trains: the search seeds, or, where they learned
    nothing and a later seed did, the seeds up to that one."""
    first = min((i for lr in ev.tried for i, a in enumerate(ev.acc[lr]) if a >= spec.learned), default=0)
    return max(len(spec.search_seeds), first + 1)


def _ladder_gap(spec: SearchSpec, ev: Evidence) -> tuple[int, list[float]]:
    """The lowest ladder step whose ``take`` best-scoring learning rates (among those with the
    step before's seeds) do not all have its seeds yet: (its seeds, those learning rates);
    (0, []) when the ladder holds. While nothing has learned on any seed, the ranking is noise:
    instead, every learning rate tried gets the next seed (one at a time, before the last step),
    so that the setting is called "not learned" only after its seeds looked everywhere."""
    n = len(spec.seeds)
    if not ev.learned_any and not spec.scan:
        k = min(ev.n(lr) for lr in ev.tried)
        if k + 1 < n:
            return k + 1, [lr for lr in ev.tried if ev.n(lr) == k]
    for (seeds, take), before in zip(spec.ladder, spec.levels):
        pool = [lr for lr in ev.tried if ev.n(lr) >= before]
        # nothing learned anywhere (after a scan): the ranking is noise, so the cheapest to complete
        top = ((ev.by_promise(pool) if spec.scan else ev.ranked(pool)) if ev.learned_any or not spec.scan
               else sorted(pool, key=lambda lr: (-ev.n(lr), -ev.score(lr), lr)))[:take]
        lift = [lr for lr in top if ev.n(lr) < seeds]
        if lift:
            return seeds, lift
    return 0, []


def _ladder_cost(spec: SearchSpec, ev: Evidence, new: int = 0) -> int:
    """Cells the ladder still needs if ``new`` untried learning rates joined at the exploration
    level, all at the top, and no ranking changed on the way up."""
    counts = [explore_level(spec, ev)] * new + [ev.n(lr) for lr in ev.ranked(ev.tried)]
    cost = 0
    for (seeds, take), before in zip(spec.ladder, spec.levels):
        for i in [i for i, c in enumerate(counts) if c >= before][:take]:
            cost += max(0, seeds - counts[i])
            counts[i] = max(counts[i], seeds)
    return cost


def _finish_reserve(spec: SearchSpec, ev: Evidence, new: int = 0, lifted: dict[float, int] | None = None) -> int:
    """The most cells the ladder's last step can still need, whatever the ranking becomes: the
    candidates still missing, each from the fewest seeds any learning rate has (``new`` untried
    learning rates at the exploration level, ``lifted`` at those seed counts)."""
    n, full = len(spec.seeds), len(ev.full())
    counts = [explore_level(spec, ev)] * new + [max(ev.n(lr), (lifted or {}).get(lr, 0)) for lr in ev.tried]
    missing = sorted((n - c for c in counts if c < n), reverse=True)
    k = spec.candidates - sum(1 for c in counts if c >= n)
    return sum(missing[:max(0, k)]) if spec.ladder else 0


def _can_widen(spec: SearchSpec, ev: Evidence, left: int | None) -> bool:
    """Whether the next seed can still look everywhere (nothing learned yet) within ``left`` cells,
    the ladder's last step kept."""
    if left is None or ev.learned_any or spec.scan:
        return False
    k = min(ev.n(lr) for lr in ev.tried)
    if k + 1 >= len(spec.seeds):
        return False
    lifted = {lr: k + 1 for lr in ev.tried if ev.n(lr) == k}
    tried, scores = ev.tried, ev.scores()
    b = best(scores)
    edge = b in spec.start and (b == tried[0] and not _at_bound(b, spec.lo) or b == tried[-1] and not _at_bound(b, spec.hi))
    extension = len(spec.search_seeds) if edge else 0  # the start grid's edge still to extend: keep its cell
    return len(lifted) + extension + _finish_reserve(spec, ev, lifted=lifted) <= left


def contenders(spec: SearchSpec, ev: Evidence) -> list[float]:
    """Learning rates not on every seed whose bound beats the best candidate's mean, best score first."""
    full = ev.full()
    if not full or not ev.learned_any:  # nothing learned on any seed: nothing to beat
        return []
    top = max(full.values())
    left = [lr for lr in ev.tried if lr not in full and ev.bound(lr) > top + EXACT]
    return ev.by_promise(left) if spec.scan else ev.ranked(left)


def _maybe_good(spec: SearchSpec, ev: Evidence) -> list[float]:
    """For a window: learning rates not on every seed that score as good so far, best score first."""
    full = ev.full()
    return ev.ranked([lr for lr in ev.tried if lr not in full and ev.score(lr) >= spec.good])


def climb(spec: SearchSpec, ev: Evidence, left: int, last: bool) -> tuple[list[tuple[float, int]], str]:
    """The seeds round, within ``left`` cells: the ladder's next step (in the ``last`` round
    allowed, or where the budget no longer affords the steps between, straight to the candidates
    on every seed), else contenders (then, for a window, learning rates that may still be good)
    one step each (in the last round, to every seed), best score first."""
    n = len(spec.seeds)
    seeds, lift = _ladder_gap(spec, ev)
    why = ""
    if lift:
        todo = [(lr, seeds) for lr in lift]
        cost = sum(len(_lift(spec, ev, lr, to)) for lr, to in todo)
        after = _finish_reserve(spec, ev, lifted={lr: to for lr, to in todo})
        if seeds < n and (last or cost + after > left):
            # nothing learned anywhere: the ranking is noise, so the cheapest to complete
            rank = ev.ranked(ev.tried) if ev.learned_any else sorted(ev.tried, key=lambda lr: (-ev.n(lr), -ev.score(lr), lr))
            top = rank[:spec.candidates]
            todo = [(lr, n) for lr in top if ev.n(lr) < n]
            why = f"the ladder's last step (the {'round' if last else 'cell'} budget): the best {len(todo)} by score climb to {n} seeds"
        elif seeds < n and not ev.learned_any:
            why = f"nothing learned yet: every learning rate tried climbs to {seeds} seeds"
        else:
            why = f"the ladder: the best {len(lift)} learning rate(s) by score climb to {seeds} seeds"
    else:
        todo = [(lr, n if last else _next_level(spec, ev.n(lr))) for lr in contenders(spec, ev)]
        if todo:
            top = max(ev.full().values())
            why = (f"contenders: {len(todo)} learning rate(s) could still beat the best candidate's mean {top:.3f} "
                   "(their bound: the accuracies so far, and 1 on every seed not yet trained)")
        elif spec.window:
            todo = [(lr, n if last else _next_level(spec, ev.n(lr))) for lr in _maybe_good(spec, ev)]
            why = f"the window: {len(todo)} learning rate(s) that score at or above {spec.good:g} climb" if todo else ""
    cells, skipped = [], []
    for lr, to in todo:
        c = _lift(spec, ev, lr, to)
        if len(cells) + len(c) <= left:
            cells += c
        else:
            skipped.append(lr)
    if cells and skipped:
        why += f" ({len(skipped)} left out: the budget)"
    lrs = list(dict.fromkeys(lr for lr, _ in cells))
    return cells, (f"{why}: {_lrs(lrs)}" if cells else "")


# --------------------------------------------------------------------------- the scan
SCAN_RESERVE = 1  # candidates the scan keeps cells for (on every seed) should it find a learning rate that learns


def _seeds_at(ev: Evidence, lr: float) -> int:
    """Seeds ``lr`` has (0: untried), matching tried learning rates within LOG_EPS decades."""
    return next((ev.n(t) for t in ev.tried if decades(t, lr) <= LOG_EPS), 0)


def scan_round(spec: SearchSpec, ev: Evidence, left: int, k: int) -> tuple[list[tuple[float, int]], str]:
    """The ``k``-th scan round (k = 0, 1, ...), while nothing has learned on any seed. The scan
    points (``SearchSpec.scan_points``) lie in rings: ring 0 inside the start grid's span, ring r
    the r-th lattice point beyond it on either side. The first round trains every scan point on
    the search seed (the whole span, as finely as the literal grid); round k trains ring r on the
    i-th seed where i + r <= k (at most ``scan_seeds`` seeds): each round looks one ring further
    out and one seed deeper in, so a dead search seed is looked past inside the start grid's span
    first. In that order (ring + seed, then the earlier seed), as many cells as fit beside those
    that would put ``SCAN_RESERVE`` candidates on every seed should the scan find something (from
    the fewest seeds a new cell leaves a learning rate on). No score at chance chooses where."""
    n = len(spec.seeds)
    depth = min(spec.scan_seeds, n - 1)
    want = sorted((i + ring if i else 0, i, ring, p) for p, ring in spec.scan_points()
                  for i in range(_seeds_at(ev, p), depth) if i == 0 or i + ring <= k)
    per = min(SCAN_RESERVE, spec.candidates) if spec.ladder else 0
    cells, low = [], n
    for _, i, ring, p in want:
        if len(cells) + 1 + per * (n - min(low, i + 1)) > left:
            break
        cells.append((p, spec.seeds[i]))
        low = min(low, i + 1)
    if not cells:
        return [], ""
    by_seed: dict[int, list[float]] = {}
    for p, s in cells:
        by_seed.setdefault(s, []).append(p)
    lo, hi = spec.scan_range or (spec.lo, spec.hi)
    why = (f"nothing learned on the seeds so far: the scan ({spec.scan:.3g} decades apart over [{lo:g}, {hi:g}]), "
           f"round {k + 1}: " + "; ".join(f"seed {s} at {_lrs(sorted(ps))}" for s, ps in by_seed.items())
           + (f" ({len(want) - len(cells)} left out: the budget)" if len(want) > len(cells) else ""))
    return cells, why


# --------------------------------------------------------------------------- the rounds
def _lrs(xs) -> str:
    return ", ".join(f"{x:.3g}" for x in xs)


def start(spec: SearchSpec) -> Round:
    why = (f"start grid {_lrs(sorted(spec.start))} on seed(s) {', '.join(map(str, spec.search_seeds))}"
           + ("" if spec.rounds else " (a fixed grid: no refinement)"))
    return Round("start", [(lr, s) for lr in sorted(spec.start) for s in spec.search_seeds], why)


def outcome(spec: SearchSpec, ev: Evidence, chosen: float) -> tuple[str, str]:
    """The search's outcome at the chosen learning rate, and why (the module's docstring)."""
    if not ev.learned_any:
        top = max(ev.scores().values())
        return "not learned", (f"nothing learned: no cell of any seed reaches the learned threshold {spec.learned:.3f} "
                               f"(the best score {top:.3f})")
    if not spec.rounds:
        return "fixed", f"a fixed grid; the best mean over every seed at {chosen:.3g}"
    flat = _plateau(spec, ev.full()) or _plateau(spec, ev.scores())
    if flat and chosen in flat:
        return "plateau", (f"plateau: {len(flat)} learning rates at or above {spec.plateau:g} ({_lrs(flat)}); the "
                           f"best mean over every seed is at {chosen:.3g}")
    new, why, peak = _peak(spec, ev, chosen, 1)
    if peak == "open":
        return "budget", f"the budget (rounds or cells) was spent before {chosen:.3g} was resolved: {'; '.join(why)}"
    left = contenders(spec, ev)
    if left:
        n = len(spec.seeds)
        bounds = ", ".join(f"{lr:.3g} (on {ev.n(lr)} of {n} seeds, at most {ev.bound(lr):.3f})" for lr in left)
        return "contenders", (f"{len(left)} learning rate(s) could still beat the reported mean "
                              f"{ev.full()[chosen]:.3f} at {chosen:.3g} with more seeds (the budget): {bounds}")
    if peak == "range":
        return "range", "; ".join(why)
    return "resolved", f"the chosen {chosen:.3g} has its nearest tried neighbours within {spec.resolution:g} decades"


def state_of(spec: SearchSpec, ev: Evidence, phase: str) -> State:
    full = ev.full()
    scores = {lr: (ev.n(lr), ev.score(lr)) for lr in ev.tried}
    if not full:
        return State(phase, math.nan, "searching", {}, scores, ev.diverged)
    chosen = best(full)
    if phase != "done":
        return State(phase, chosen, "searching", full, scores, ev.diverged)
    out, why = outcome(spec, ev, chosen)
    return State(phase, chosen, out, full, scores, ev.diverged, contenders(spec, ev), why)


def decide(spec: SearchSpec, rounds: list[Round], results: dict) -> tuple[Round | None, State]:
    """The next round (None when the search is done) and the state after ``rounds``, whose
    cells' accuracies are in ``results`` ((lr, seed) -> accuracy, None for a diverged cell).
    Pure: the same rounds and results always give the same answer."""
    if not rounds:
        return start(spec), State("refine", math.nan, "searching", {})
    ev = Evidence.of(spec, rounds, results)
    left = spec.max_cells() - ev.cells()
    rounds_left = spec.max_rounds - (len(rounds) - 1)
    if (spec.scan and not ev.learned_any and not ev.all_diverged and rounds_left >= 1 + bool(spec.ladder)
            and sum(r.kind == "scan" for r in rounds) < spec.scan_rounds):
        cells, why = scan_round(spec, ev, left, sum(r.kind == "scan" for r in rounds))
        if cells:
            return Round("scan", cells, why), state_of(spec, ev, "refine")
    if rounds_left >= 1 + bool(spec.ladder) and sum(r.kind == "refine" for r in rounds) < spec.rounds:
        new, why = explore(spec, ev, left)
        e = explore_level(spec, ev)
        lift = _thin_neighbours(spec, ev, e)
        extra = sum(e - ev.n(lr) for lr in lift)
        while new and len(new) * e + extra + max(_ladder_cost(spec, ev, len(new)), _finish_reserve(spec, ev, len(new))) > left:
            new = new[:-1]  # what still fits beside the ladder's cells
        if lift and not new and extra + _ladder_cost(spec, ev) > left:
            lift = []  # a thin neighbour is lifted while the ladder's expected cells still fit
        if new or lift:
            if new and e > len(spec.search_seeds):
                why += f" (on seeds {', '.join(map(str, spec.seeds[:e]))}: the search seeds learned nothing)"
            if lift:
                why = ("; ".join(x for x in (why if new else "", f"the best's neighbour(s) {_lrs(lift)} tried on fewer "
                       f"seeds than the seeds that learn ({e}): lifted to them") if x))
            cells = [(lr, s) for lr in new for s in spec.seeds[:e]] + [c for lr in lift for c in _lift(spec, ev, lr, e)]
            return Round("refine", cells, why), state_of(spec, ev, "refine")
    if rounds_left >= 1:
        cells, why = climb(spec, ev, left, last=rounds_left == 1)
        if cells:
            return Round("seeds", cells, why), state_of(spec, ev, "seeds")
    return None, state_of(spec, ev, "done")


def run(spec: SearchSpec, accuracy) -> tuple[list[Round], State, dict]:
    """A whole search against ``accuracy(lr, seed)`` (a number, or None for a diverged cell), as
    the workflow runs it round by round: (its rounds, its final state, every cell's accuracy).
    For tests and benchmarks of the protocol."""
    rounds, results = [], {}
    while True:
        nxt, state = decide(spec, rounds, results)
        if nxt is None:
            return rounds, state, results
        for lr, seed in nxt.cells:
            if (lr, seed) in results:
                raise AssertionError(f"cell ({lr}, {seed}) planned twice")
            results[(lr, seed)] = accuracy(lr, seed)
        rounds.append(nxt)


def cells_of(rounds: list[Round]) -> list[tuple[float, int]]:
    """Every cell the rounds trained, in order, once."""
    return list(dict.fromkeys(c for r in rounds for c in r.cells))


# --------------------------------------------------------------------------- the good window
@dataclass(frozen=True)
class Window:
    """A setting's window of good learning rates (mean over every reported seed >= good), as the
    tried points bound it.

    ``status``: "not learned" (no candidate's mean reaches the learned threshold: no window at
    all), "none" (learned, but no learning rate is good), or "window". For a window, ``lo``/``hi``
    are the lowest and highest learning rates shown good, ``below``/``above`` the nearest tried
    ones beyond them shown not good (None: none on that side), so the true edges lie in [below, lo]
    and [hi, above]; ``width`` = log10(hi/lo) is the window's width at least and ``width_max`` =
    log10(above/below) at most (None: unbounded, the window is open on that side);
    ``open_lo``/``open_hi`` say why a side is open ("range": the search range stops it, "edge":
    nothing tried beyond). A learning rate is shown good by its mean over every seed, shown not
    good by that mean or, with fewer seeds, by its bound (its accuracies so far and 1 on every
    seed not trained: below ``good``); the rest are ``unknown`` and widen the uncertainty.
    ``gaps``: not-good learning rates tried inside [lo, hi]."""

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
    unknown: int = 0

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
                   txt("open_lo"), txt("open_hi"), int(num("n_good") or 0), int(num("n_tried") or 0),
                   int(num("gaps") or 0), int(num("unknown") or 0))

    def text(self) -> str:
        if self.status != "window":
            return self.status
        lo = f"[{self.below:.3g}, {self.lo:.3g}]" if self.below else f"<= {self.lo:.3g} ({self.open_lo})"
        hi = f"[{self.hi:.3g}, {self.above:.3g}]" if self.above else f">= {self.hi:.3g} ({self.open_hi})"
        return f"lower edge {lo}, upper edge {hi}"


def window(points: dict[float, float], learned: float, good: float, lo: float | None = None,
           hi: float | None = None, bounds: dict[float, float] | None = None) -> Window:
    """The one definition of a learning-rate window (see ``Window``): from ``points`` (lr ->
    mean accuracy over every seed), the ``learned`` and ``good`` thresholds, the search range
    [lo, hi] (None: unknown, an open side is then "edge"), and ``bounds``: learning rates tried on
    fewer seeds -> the best mean they can still reach."""
    bounds = {lr: b for lr, b in (bounds or {}).items() if lr not in points}
    if not points:
        return Window("not learned")
    b = best(points)
    top = points[b]
    tried = sorted(set(points) | set(bounds))
    if top < learned:
        return Window("not learned", b, top, n_tried=len(tried))
    good_lrs = sorted(lr for lr, m in points.items() if m >= good)
    if not good_lrs:
        return Window("none", b, top, n_tried=len(tried), unknown=sum(v >= good for v in bounds.values()))
    g_lo, g_hi = good_lrs[0], good_lrs[-1]
    not_good = [lr for lr in tried if points.get(lr, bounds.get(lr)) < good]
    below = max((t for t in not_good if t < g_lo), default=None)
    above = min((t for t in not_good if t > g_hi), default=None)
    unknown = sum(1 for t, v in bounds.items() if v >= good and not g_lo < t < g_hi)

    def why_open(x, bound):
        return None if bound is None else ("range" if _at_bound(x, bound) else "edge")

    return Window("window", b, top, g_lo, g_hi, below, above,
                  None if below is not None else (why_open(g_lo, lo) or "edge"),
                  None if above is not None else (why_open(g_hi, hi) or "edge"),
                  len(good_lrs), len(tried), sum(1 for t in not_good if g_lo < t < g_hi), unknown)


def state_window(spec: SearchSpec, state: State) -> Window:
    """A search's window, from its state: candidates' means, and the others' bounds."""
    n = len(spec.seeds)
    bounds = {lr: (k * m + (n - k)) / n for lr, (k, m) in state.scores.items() if k < n}
    return window(state.points, spec.learned, spec.good, spec.lo, spec.hi, bounds)


def wider(a: Window, b: Window) -> int:
    """+1 if ``a`` is conclusively wider than ``b``, -1 if the reverse, 0 if it is open. ``a`` spans
    at least ``a.width``; ``b``'s true edges lie strictly inside its nearest tried learning rates
    shown not good, so it spans less than ``b.width_max``: ``a`` is wider when a.width >=
    b.width_max. A model that learned without a good learning rate ("none") has an empty window,
    narrower than any; "not learned" (at chance) is no window at all: 0, for the claims to judge
    (a failure is evidence only where the claim predicts it)."""
    if "not learned" in (a.status, b.status):
        return 0
    def lo_hi(w: Window):
        hi = w.width_max
        return w.width, (math.inf if hi is None else hi)

    (a_lo, a_hi), (b_lo, b_hi) = lo_hi(a), lo_hi(b)
    if a.status == "window" and a_lo >= b_hi - LOG_EPS:
        return 1
    if b.status == "window" and b_lo >= a_hi - LOG_EPS:
        return -1
    return 0
