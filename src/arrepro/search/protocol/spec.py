"""The search's spec (``SearchSpec``: one setting's search, numbers not names), its rounds
(``Round``) and its state (``State``), and the units every part counts in: decades, snapped
learning rates, and when two means or two learning rates are the same."""
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
# the scan's lattice: no finer than learning rates of three significant digits tell apart (two
# points 0.005 decades apart never snap to one rate; 0.01 with room), and at most this many points
# (each ring beyond the start grid's span is a round of the workflow)
MIN_SCAN = 0.01
MAX_SCAN_POINTS = 50


def snap(lr: float) -> float:
    """A new learning rate, rounded to three significant digits (readable folder names; a
    midpoint's fourth digit carries no information at the resolutions used)."""
    return float(f"{lr:.3g}")


def snap_error(lr: float) -> float:
    """Decades by which a snapped learning rate may miss the rate it stands for: half a unit of its
    third significant digit (at most log10(1.005), 2.2e-3, for a mantissa near 1; 3.9e-4 for
    5.62e-4). A rate with more digits than ``snap`` keeps was not snapped: 0."""
    if lr != snap(lr):
        return 0.0
    mantissa = lr / 10 ** math.floor(math.log10(lr))
    return math.log10(1 + 0.005 / mantissa)


def decades(a: float, b: float) -> float:
    return abs(math.log10(b) - math.log10(a))


def midpoint(a: float, b: float) -> float:
    """The geometric mean of two learning rates, snapped."""
    return snap(math.sqrt(a * b))


def _at_bound(x: float, bound: float) -> bool:
    return decades(x, bound) <= LOG_EPS


def _lrs(xs) -> str:
    return ", ".join(f"{x:.3g}" for x in xs)


def start_step(start, resolution: float) -> float:
    """Decades between the points of a start grid (the median gap, to 3 decimals; twice the
    resolution for a single point)."""
    xs = sorted(start)
    gaps = sorted(decades(a, b) for a, b in zip(xs, xs[1:]))
    return round(gaps[len(gaps) // 2], 3) if gaps else 2 * resolution


def close_rounds(start, lo: float, hi: float, resolution: float) -> int:
    """The rounds a curve (``close``) may need: one lattice step a round, both edges at once, to the
    farther bound of its range."""
    step = start_step(start, resolution)
    return max(math.ceil(decades(x, b) / step - RES_TOL) for x, b in ((min(start), lo), (max(start), hi)))


def window_rounds(start, resolution: float) -> int:
    """The rounds a closed curve's good window (``window``) needs to bring its two edges from the
    start grid's step to ``resolution`` decades: one halving a round, both edges at once."""
    step = start_step(start, resolution)
    return max(0, math.ceil(math.log2(step / resolution) - RES_TOL))


class SpecError(ValueError):
    """A spec that cannot be searched, naming its field at fault (the same key in an ``lr_searches``
    entry of config.yaml)."""

    def __init__(self, field_: str, message: str):
        super().__init__(f"{field_}: {message}")
        self.field, self.message = field_, message


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
    scan_seeds: int = 2  # the scan covers every scan point on this many seeds (at most every seed), one round a seed
    scan_range: tuple[float, ...] = ()  # (lo, hi): the span the scan covers (empty: the range)
    close: bool = False  # a curve: extend each edge where a seed learned until every seed there has not (or the range ends);
    # with ``window``, then bracket the good window's edges to ``resolution`` (``refine.window_edges``)

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
        self._check_scan()
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

    def _check_scan(self) -> None:
        """The scan's span inside the range (the search never leaves it) and its lattice bounded:
        no two points one learning rate, at most ``MAX_SCAN_POINTS`` points."""
        if self.scan_range:
            span = list(self.scan_range)
            if len(span) != 2 or not span[0] < span[1]:
                raise SpecError("scan_range", f"{span} is not a span; give [lo, hi] with lo < hi")
            if not (self.lo * (1 - 1e-12) <= span[0] and span[1] <= self.hi * (1 + 1e-12)):
                raise SpecError("scan_range", f"[{span[0]:g}, {span[1]:g}] is not inside the range [{self.lo:g}, "
                                f"{self.hi:g}], which the search never leaves")
        if not self.scan:
            return
        if self.scan < MIN_SCAN:
            raise SpecError("scan", f"{self.scan:g} decades is finer than {MIN_SCAN:g} (learning rates are kept to "
                            "three significant digits: a finer lattice names one rate twice)")
        n = len(self.scan_points())
        if n > MAX_SCAN_POINTS:
            lo, hi = self.scan_span
            raise SpecError("scan", f"{self.scan:g} decades over [{lo:g}, {hi:g}] is {n} scan points; at most "
                            f"{MAX_SCAN_POINTS} (a coarser scan, or a narrower scan_range)")

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
        """Decades between start points (``start_step``): how far an extension reaches."""
        return start_step(self.start, self.resolution)

    def literal_grid(self) -> list[float]:
        """The literal grid this search stands in for: every ``step`` decades over its range, each
        rate on every seed (what bench/bench_search.py and the tests measure a search against)."""
        n = round(math.log10(self.hi / self.lo) / self.step)
        return [snap(self.lo * 10 ** (k * self.step)) for k in range(n + 1)]

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
        return self.scan_depth + max((r for _, r in self.scan_points()), default=0)

    @property
    def scan_depth(self) -> int:
        """Seeds the scan covers: ``scan_seeds``, at most every seed (one seed: the search seed)."""
        return min(self.scan_seeds, len(self.seeds))

    @property
    def scan_span(self) -> tuple[float, float]:
        """(lo, hi): the learning rates the scan covers, ``scan_range`` or the range."""
        lo, hi = self.scan_range or (self.lo, self.hi)
        return lo, hi

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

    def lattice(self, k: int) -> float:
        """log10 of the scan lattice's ``k``-th point (0: the anchor; the one place it is computed)."""
        return self.scan_anchor + k * self.scan

    def to_scan_lattice(self, lr: float) -> float:
        """``lr`` on the scan's lattice when within 0.02 decades of it (else ``lr``; no scan: ``lr``),
        so that a search on the literal grid's lattice tries its rates exactly (extending 1e-2 by two
        thirds of a decade gives 4.64e-2, not 4.65e-2)."""
        if not self.scan:
            return lr
        x = self.lattice(round((math.log10(lr) - self.scan_anchor) / self.scan))
        return snap(10 ** x) if abs(math.log10(lr) - x) <= 0.02 else lr

    def scan_points(self) -> list[tuple[float, int]]:
        """The learning rates a scan visits, each with its *ring*: the lattice through the start
        grid's lowest point, ``scan`` decades apart, inside the range; ring 0 inside the start
        grid's span, ring k the k-th lattice point beyond it on either side."""
        if not self.scan:
            return []
        a, (lo, hi) = self.scan_anchor, (math.log10(x) for x in self.scan_span)
        top = math.log10(max(self.start))
        ks = range(math.ceil((lo - a) / self.scan - RES_TOL), math.floor((hi - a) / self.scan + RES_TOL) + 1)
        out = []
        for k in ks:
            x = self.lattice(k)
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
