"""The seeds: successive halving over seeds (the ladder), the learning rates that could still
beat the best candidate (contenders), and the round that climbs them (``climb``), within the budget."""
from __future__ import annotations

from arrepro.search.protocol.evidence import Evidence, best
from arrepro.search.protocol.spec import EXACT, SearchSpec, _at_bound, _lrs


def _lift(spec: SearchSpec, ev: Evidence, lr: float, to: int) -> list[tuple[float, int]]:
    return [(lr, s) for s in spec.seeds[ev.n(lr):to]]


def _next_level(spec: SearchSpec, n: int) -> int:
    return next(x for x in spec.levels if x > n)  # a learning rate between levels climbs to the next


def explore_level(spec: SearchSpec, ev: Evidence) -> int:
    """Seeds a newly explored learning rate trains: the search seeds, or, where they learned
    nothing and a later seed did, the seeds up to that one."""
    first = min((i for lr in ev.tried for i, a in enumerate(ev.acc[lr]) if a >= spec.learned), default=0)
    return max(len(spec.search_seeds), first + 1)


def seed_order(spec: SearchSpec, ev: Evidence, lrs) -> list[float]:
    """The one order in which learning rates get seeds (the ladder's steps, its last step taken
    at once, contenders, a window's good rates, the ladder's expected cost): the most promising
    first with a scan (``Evidence.by_promise``), the best score first without (``Evidence.ranked``);
    where nothing has learned on any seed after a scan (which looked everywhere on its seeds), the
    ranking is noise: the cheapest to complete first (the most seeds, then the better score, then
    the lower learning rate)."""
    if not ev.learned_any and spec.scan:
        return sorted(lrs, key=lambda lr: (-ev.n(lr), -ev.score(lr), lr))
    return ev.by_promise(lrs) if spec.scan else ev.ranked(lrs)


def _ladder_gap(spec: SearchSpec, ev: Evidence) -> tuple[int, list[float]]:
    """The lowest ladder step whose ``take`` first learning rates in ``seed_order`` (among those
    with the step before's seeds) do not all have its seeds yet: (its seeds, those learning rates);
    (0, []) when the ladder holds. While nothing has learned on any seed, the ranking is noise:
    instead, every learning rate tried gets the next seed (one at a time, before the last step),
    so that the setting is called "not learned" only after its seeds looked everywhere."""
    n = len(spec.seeds)
    if not ev.learned_any and not spec.scan:
        k = min(ev.n(lr) for lr in ev.tried)
        if k + 1 < n:
            return k + 1, [lr for lr in ev.tried if ev.n(lr) == k]
    for (seeds, take), before in zip(spec.ladder, spec.levels):
        top = seed_order(spec, ev, [lr for lr in ev.tried if ev.n(lr) >= before])[:take]
        lift = [lr for lr in top if ev.n(lr) < seeds]
        if lift:
            return seeds, lift
    return 0, []


def _ladder_cost(spec: SearchSpec, ev: Evidence, new: int = 0) -> int:
    """Cells the ladder still needs if ``new`` untried learning rates joined at the exploration
    level, all at the top, and no ranking (``seed_order``) changed on the way up."""
    counts = [explore_level(spec, ev)] * new + [ev.n(lr) for lr in seed_order(spec, ev, ev.tried)]
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
    """Learning rates not on every seed whose bound beats the best candidate's mean, in ``seed_order``."""
    full = ev.full()
    if not full or not ev.learned_any:  # nothing learned on any seed: nothing to beat
        return []
    top = max(full.values())
    return seed_order(spec, ev, [lr for lr in ev.tried if lr not in full and ev.bound(lr) > top + EXACT])


def _maybe_good(spec: SearchSpec, ev: Evidence) -> list[float]:
    """For a window: learning rates not on every seed that score as good so far, in ``seed_order``."""
    full = ev.full()
    return seed_order(spec, ev, [lr for lr in ev.tried if lr not in full and ev.score(lr) >= spec.good])


def climb(spec: SearchSpec, ev: Evidence, left: int, last: bool) -> tuple[list[tuple[float, int]], str]:
    """The seeds round, within ``left`` cells: the ladder's next step (in the ``last`` round
    allowed, or where the budget no longer affords the steps between, straight to the candidates
    on every seed), else contenders (then, for a window, learning rates that may still be good)
    one step each (in the last round, to every seed), in ``seed_order``."""
    n = len(spec.seeds)
    seeds, lift = _ladder_gap(spec, ev)
    why = ""
    if lift:
        todo = [(lr, seeds) for lr in lift]
        cost = sum(len(_lift(spec, ev, lr, to)) for lr, to in todo)
        after = _finish_reserve(spec, ev, lifted={lr: to for lr, to in todo})
        if seeds < n and (last or cost + after > left):
            top = seed_order(spec, ev, ev.tried)[:spec.candidates]
            todo = [(lr, n) for lr in top if ev.n(lr) < n]
            why = f"the ladder's last step (the {'round' if last else 'cell'} budget): {len(todo)} learning rate(s) climb to {n} seeds"
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
