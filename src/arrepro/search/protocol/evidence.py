"""The evidence: what the rounds so far trained (``Evidence``: each learning rate's seeds and
accuracies, a diverged cell counted as 0), its scores and bounds, and the best of a set of means."""
from __future__ import annotations

import math
from dataclasses import dataclass

from arrepro.search.protocol.spec import SearchSpec, Round, EXACT


def _mean(xs) -> float:
    return sum(xs) / len(xs)


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
