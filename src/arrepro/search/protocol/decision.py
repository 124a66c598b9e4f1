"""The decision: the next round from the rounds so far and their results (``decide``, pure),
the state and outcome after them, and a whole search run against an accuracy function (``run``)."""
from __future__ import annotations

import math

from arrepro.search.protocol.evidence import Evidence, best
from arrepro.search.protocol.ladder import _finish_reserve, _ladder_cost, _lift, climb, contenders, explore_level
from arrepro.search.protocol.refine import _peak, _plateau, _thin_neighbours, curve_edges, explore
from arrepro.search.protocol.scan import curve_scan_round, scan_round, scan_untried
from arrepro.search.protocol.spec import Round, SearchSpec, State, _lrs


def start(spec: SearchSpec) -> Round:
    why = (f"start grid {_lrs(sorted(spec.start))} on seed(s) {', '.join(map(str, spec.search_seeds))}"
           + ("" if spec.rounds else " (a fixed grid: no refinement)"))
    return Round("start", [(lr, s) for lr in sorted(spec.start) for s in spec.search_seeds], why)


def outcome(spec: SearchSpec, ev: Evidence, chosen: float) -> tuple[str, str]:
    """The search's outcome at the chosen learning rate, and why (the module's docstring)."""
    if not ev.learned_any:
        top = max(ev.scores().values())
        untried = scan_untried(spec, ev)
        if untried:  # the scan did not finish: not "not learned", which is said only after it
            budget = f"{spec.budget} cells" if spec.budget else f"the default of {spec.max_cells()} cells (base_cells)"
            return "budget", (f"nothing learned on the {len(ev.tried)} learning rates tried (the best score {top:.3f}), "
                              f"but the scan left {len(untried)} of its {len(spec.scan_points())} lattice points "
                              f"untried: {_lrs(untried)} (the budget, {budget}, or the rounds ran out)")
        return "not learned", (f"nothing learned: no cell of any seed reaches the learned threshold {spec.learned:.3f} "
                               f"(the best score {top:.3f})")
    if not spec.rounds:
        return "fixed", f"a fixed grid; the best mean over every seed at {chosen:.3g}"
    if spec.close:  # a curve: its edges, not its peak
        _, why, sides = curve_edges(spec, ev)
        state = "open" if "open" in sides.values() else "range" if "range" in sides.values() else "closed"
        return state if state != "open" else "budget", "; ".join(why)
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
    scans = sum(r.kind == "scan" for r in rounds)
    if (spec.scan and not ev.learned_any and not ev.all_diverged and rounds_left >= 1 + bool(spec.ladder)
            and scans < spec.scan_rounds):
        scan = curve_scan_round if spec.close else scan_round  # a curve's on every seed
        cells, why = scan(spec, ev, left, scans)
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
