"""Refinement: the learning rates the evidence wants next on the search seeds (``explore``): a
best on the edge of what was tried extended, midpoints bracketing the best and the good window's
edges, and the best's outcome on each side (``_peak``); a curve's edges closed (``curve_edges``),
then its good window's edges bracketed (``window_edges``)."""
from __future__ import annotations

import math

from arrepro.search.protocol.evidence import Evidence, best
from arrepro.search.protocol.ladder import _can_widen
from arrepro.search.protocol.spec import LOG_EPS, RES_TOL, SearchSpec, _at_bound, _lrs, decades, midpoint, snap


def _on_lattice(t: float, step: float) -> float:
    """log10 ``t`` snapped to the start grid's lattice (multiples of ``step`` decades) when within
    RES_TOL of it: extending 3.16e-4 by half a decade gives 1e-4, not 9.99e-5."""
    q = round(t / step) * step
    return q if abs(t - q) <= RES_TOL else t


def _extend(x: float, direction: int, spec: SearchSpec, n: int) -> list[float]:
    """Up to ``n`` learning rates beyond ``x`` by the start grid's step (with a scan, by the scan's
    finer lattice step: a search on the literal grid's lattice skips none of its rates), clipped to
    the range."""
    out, bound = [], spec.lo if direction < 0 else spec.hi
    for k in range(1, n + 1):
        if spec.scan:
            y = spec.to_scan_lattice(snap(10 ** (math.log10(x) + direction * k * spec.scan)))
        else:
            y = snap(10 ** _on_lattice(math.log10(x) + direction * k * spec.step, spec.step))
        y = max(y, spec.lo) if direction < 0 else min(y, spec.hi)
        if not out or decades(y, out[-1]) > LOG_EPS:
            out.append(y)
        if decades(y, bound) <= LOG_EPS:
            break
    return out


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
    return [spec.to_scan_lattice(midpoint(x, nb))], "gap"


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


def curve_edges(spec: SearchSpec, ev: Evidence) -> tuple[list[float], list[str], dict[int, str]]:
    """A curve's edges (``close``): the lowest and the highest learning rate tried, each *closed*
    when every seed there is below the learned threshold, *bounded* when it sits on the range's
    bound, else *open* and extended by one step of the start grid's lattice. The new learning
    rates, the reasons, and each side's state (-1: below, +1: above)."""
    tried, new, why, sides = ev.tried, [], [], {}
    for x, direction in ((tried[0], -1), (tried[-1], 1)):
        side, top = ("below" if direction < 0 else "above"), max(ev.acc[x])
        if top < spec.learned:
            sides[direction] = "closed"
            why.append(f"closed {side}: every seed at {x:.3g} is below the learned threshold {spec.learned:.3f} "
                       f"(the best {top:.3f})")
        elif _at_bound(x, spec.lo if direction < 0 else spec.hi):
            sides[direction] = "range"
            why.append(f"bounded {side} by the range: a seed at {x:.3g}, its {'lower' if direction < 0 else 'upper'} "
                       f"bound, learned ({top:.3f})")
        else:
            ys = _extend(x, direction, spec, 1)
            sides[direction] = "open"
            new += ys
            why.append(f"open {side}: a seed at {x:.3g} learned ({top:.3f}): extend to {_lrs(ys)}")
    return new, why, sides


def window_edges(spec: SearchSpec, tried: list[float], good: list[float]) -> tuple[list[float], list[str]]:
    """The good window's two edges (``good``: its learning rates, in order; none: nothing), each
    resolved on its side as ``_side`` resolves a point: extended beyond what was tried, bracketed by
    the midpoint to its nearest tried neighbour farther than ``resolution`` decades, or neither. The
    new learning rates and why. A closed curve's edges lie between tried rates, so it only brackets."""
    new, why = [], []
    for x, direction in ((good[0], -1), (good[-1], 1)) if good else ():
        ys, kind = _side(x, tried, direction, spec, 1)
        w = _why(kind, f"the good window's {'lower' if direction < 0 else 'upper'} edge, {x:.3g},", direction, ys)
        why += [w] if w else []
        new += ys
    return new, why


def explore(spec: SearchSpec, ev: Evidence, left: int | None = None) -> tuple[list[float], str]:
    """The learning rates the evidence wants next on the search seeds (at most ``per_round``,
    nothing tried twice), and why; ([], why) when it wants none."""
    tried, scores = ev.tried, ev.scores()
    b = best(scores)
    good = [lr for lr in tried if scores[lr] >= spec.good]  # (a curve's scores are its means over every seed)
    if ev.all_diverged:
        if _at_bound(tried[0], spec.lo):
            return [], "every cell diverged, down to the range's lower bound"
        new = _extend(tried[0], -1, spec, spec.per_round)
        return new, f"every cell diverged: extend below the lowest, {tried[0]:.3g}, to {_lrs(new)}"
    if spec.close:  # a curve: only its edges, until both are closed or bounded by the range
        new, why, _ = curve_edges(spec, ev)
        if not new and spec.window:  # closed: then the good window's edges
            new, more = window_edges(spec, tried, good)
            why += more
        return new, "; ".join(why)
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
    if spec.window:
        edges, w = window_edges(spec, tried, good)
        why += w
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
