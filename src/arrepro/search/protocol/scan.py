"""The scan: while nothing has learned on any seed, the range looked at on a lattice (``scan``
decades through the start grid's lowest point), ring by ring and seed by seed; a curve's
(``close``) ring by ring on every seed."""
from __future__ import annotations

from arrepro.search.protocol.evidence import Evidence
from arrepro.search.protocol.spec import LOG_EPS, SearchSpec, _lrs, decades


SCAN_RESERVE = 1  # candidates the scan keeps cells for (on every seed) should it find a learning rate that learns



def _seeds_at(ev: Evidence, lr: float) -> int:
    """Seeds ``lr`` has (0: untried), matching tried learning rates within LOG_EPS decades."""
    return next((ev.n(t) for t in ev.tried if decades(t, lr) <= LOG_EPS), 0)


def scan_untried(spec: SearchSpec, ev: Evidence) -> list[float]:
    """The scan's lattice points that no seed has tried (none where the search cannot scan:
    ``scan_rounds`` 0, or every cell diverged, when it extends towards lower rates instead)."""
    if not spec.scan_rounds or ev.all_diverged:
        return []
    return [p for p, _ in spec.scan_points() if not _seeds_at(ev, p)]


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
    depth = spec.scan_depth
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
    lo, hi = spec.scan_span
    why = (f"nothing learned on the seeds so far: the scan ({spec.scan:.3g} decades apart over [{lo:g}, {hi:g}]), "
           f"round {k + 1}: " + "; ".join(f"seed {s} at {_lrs(sorted(ps))}" for s, ps in by_seed.items())
           + (f" ({len(want) - len(cells)} left out: the budget)" if len(want) > len(cells) else ""))
    return cells, why


def curve_scan_round(spec: SearchSpec, ev: Evidence, left: int, k: int) -> tuple[list[tuple[float, int]], str]:
    """A curve's ``k``-th scan round (``close``: every seed at every learning rate), while nothing
    has learned on any seed: the scan points of rings up to k + 1 not yet trained, each on every
    seed (``scan_seeds`` does not apply: a curve has every seed everywhere), nearest ring first, as
    many points as fit in ``left`` cells. So a curve at chance at its start grid looks one lattice
    step further out on both sides a round, and ends "not learned" only after the scan's whole span,
    as the literal grid over that span would; once a seed learns, the curve closes its edges."""
    n = len(spec.seeds)
    want = sorted((ring, p, had) for p, ring in spec.scan_points() if ring <= k + 1
                  for had in [_seeds_at(ev, p)] if had < n)
    cells, points = [], []
    for _, p, had in want:
        new = [(p, s) for s in spec.seeds[had:]]
        if len(cells) + len(new) > left:
            break
        cells += new
        points.append(p)
    if not cells:
        return [], ""
    lo, hi = spec.scan_span
    why = (f"nothing learned on any seed so far: the curve's scan ({spec.scan:.3g} decades apart over [{lo:g}, {hi:g}]), "
           f"round {k + 1}: {_lrs(sorted(points))} on every seed"
           + (f" ({len(want) - len(points)} left out: the budget)" if len(want) > len(points) else ""))
    return cells, why
