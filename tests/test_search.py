"""The learning-rate search's refinement rule (arrepro.search) on hand-made accuracy curves: one
test per case of the protocol, run round by round as the workflow runs it."""
import itertools
import math
import random

import pytest

from arrepro import search as S

HALF = [3.16e-4, 1.0e-3, 3.16e-3, 1.0e-2]


def spec(**kw):
    base = dict(start=tuple(HALF), lo=1e-5, hi=1e-1, resolution=0.25, rounds=2, per_round=2, search_seeds=(0,),
                seeds=(0, 1, 2, 3, 4), window=False, tie=0.1, tie_seeds=2, plateau=0.99, learned=0.4375, good=0.9)
    base.update(kw)
    return S.SearchSpec(**base)


def peak(center, width=0.5, height=1.0, floor=0.25):
    """A bump in log10(lr): ``height`` at ``center``, falling to ``floor`` over ``width`` decades."""
    def f(lr, seed=0):
        d = abs(math.log10(lr) - math.log10(center)) / width
        return floor + (height - floor) * max(0.0, 1 - d)
    return f


def run(sp, acc):
    """Run the search to its end: the rounds, the final state, and every cell's accuracy."""
    rounds, results = [], {}
    while True:
        nxt, state = S.decide(sp, rounds, results)
        if nxt is None:
            return rounds, state, results
        assert nxt.cells, "a round without cells must end the search"
        assert len(rounds) <= sp.rounds + 3, "more rounds than the budget allows"
        for lr, seed in nxt.cells:
            assert (lr, seed) not in results, f"cell {lr}, {seed} trained twice"
            results[(lr, seed)] = acc(lr, seed)
        rounds.append(nxt)


def kinds(rounds):
    return [r.kind for r in rounds]


def lrs_of(rounds, kind=None):
    return sorted({lr for r in rounds if kind in (None, r.kind) for lr, _ in r.cells})


def test_a_best_on_the_edge_extends_the_search_outward():
    # 1-layer Mamba in the demo: best at the top of its grid (0.222 / 0.469 / 0.903 at 1e-3 / 3.16e-3 / 1e-2)
    rounds, st, _ = run(spec(), peak(2.0e-2, width=1.0))
    first = rounds[1]
    assert first.kind == "refine" and "extend above" in first.reason
    assert lrs_of([first]) == [0.0316, 0.1]  # outward by the start grid's step (half a decade)
    assert st.chosen > 1e-2  # the peak beyond the start grid was found
    assert min(S.decades(st.chosen, x) for x in lrs_of(rounds) if x != st.chosen) <= 0.25 + 1e-6


def test_an_inner_best_is_bracketed_until_its_neighbours_are_within_the_resolution():
    rounds, st, _ = run(spec(), peak(1.78e-3, width=0.8))
    assert kinds(rounds)[:2] == ["start", "refine"] and "bracket the best" in rounds[1].reason
    assert lrs_of([rounds[1]]) == [S.midpoint(1e-3, 3.16e-3), S.midpoint(3.16e-4, 1e-3)] or \
        set(lrs_of([rounds[1]])) <= {S.midpoint(1e-3, 3.16e-3), S.midpoint(3.16e-4, 1e-3), S.midpoint(3.16e-3, 1e-2)}
    assert st.outcome == "resolved" and st.chosen == pytest.approx(1.78e-3)
    tried = lrs_of(rounds, "start") + lrs_of(rounds, "refine")
    below = max(x for x in tried if x < st.chosen)
    above = min(x for x in tried if x > st.chosen)
    assert S.decades(below, st.chosen) <= 0.25 + 1e-6 and S.decades(st.chosen, above) <= 0.25 + 1e-6
    # then every reported seed at the chosen learning rate, and nothing else
    assert rounds[-1].kind == "report" and rounds[-1].cells == [(st.chosen, s) for s in (1, 2, 3, 4)]


def test_the_window_edges_are_resolved_where_asked():
    wide = lambda lr, s=0: 1.0 if 5e-4 <= lr <= 5e-3 else 0.3  # noqa: E731  good on [5e-4, 5e-3]
    plain = run(spec(rounds=3), wide)
    windowed = run(spec(rounds=3, window=True), wide)
    assert not any("window" in r.reason for r in plain[0])
    assert any("window's lower edge" in r.reason for r in windowed[0])
    w = S.window(windowed[1].points, 0.4375, 0.9, 1e-5, 1e-1)
    assert w.status == "window" and w.resolution <= 0.25 + 1e-6  # both edges within the resolution
    assert w.below < 5e-4 <= w.lo and w.hi <= 5e-3 < w.above
    w0 = S.window(plain[1].points, 0.4375, 0.9, 1e-5, 1e-1)
    assert w0.resolution > 0.25  # without the window search its edges stay coarse


def test_the_round_budget_stops_the_refinement_and_says_so():
    # a peak far outside the start grid (but inside the range): two rounds of extension are not enough
    rounds, st, _ = run(spec(rounds=1, per_round=1), peak(3e-5, width=2.0))
    assert kinds(rounds).count("refine") == 1
    assert st.outcome == "budget"
    assert len(lrs_of(rounds, "start") + lrs_of(rounds, "refine")) == 5


def test_a_plateau_at_the_top_stops_the_peak_search_and_is_not_settled():
    flat = lambda lr, s=0: 1.0 if lr <= 3.16e-3 else 0.6  # noqa: E731
    rounds, st, _ = run(spec(), flat)
    assert st.outcome == "plateau" and "settle" not in kinds(rounds)
    assert kinds(rounds) == ["start", "report"]  # nothing to refine: the optimum is anywhere on it
    assert st.chosen == 1e-3  # the middle of the three at 1.0 (3.16e-4, 1e-3, 3.16e-3)


def test_nothing_learned_stops_after_the_start_grid_and_still_reports_its_best():
    chance = lambda lr, s=0: 0.25 + 0.01 * (lr == 1e-3)  # noqa: E731
    rounds, st, _ = run(spec(), chance)
    assert kinds(rounds) == ["start", "report"] and st.outcome == "not learned"
    assert st.chosen == 1e-3 and "nothing learned" in rounds[-1].reason
    assert S.window(st.points, 0.4375, 0.9).status == "not learned"


def test_a_near_tie_is_settled_on_more_seeds_not_by_a_coin():
    # on seed 0, 1e-3 (0.95) narrowly beats 3.16e-3 (0.90); on seeds 1 and 2, 3.16e-3 is far better
    table = {1e-3: [0.95, 0.50, 0.50, 0.5, 0.5], 3.16e-3: [0.90, 0.99, 0.99, 0.99, 0.99]}
    acc = lambda lr, s: table.get(lr, [0.3] * 5)[s]  # noqa: E731
    sp = spec(rounds=0)
    rounds, st, results = run(sp, acc)
    assert kinds(rounds) == ["start", "settle", "report"]
    assert sorted(rounds[1].cells) == [(1e-3, 1), (1e-3, 2), (3.16e-3, 1), (3.16e-3, 2)]
    assert st.chosen == 3.16e-3  # the better mean over seeds 0-2, not the better seed 0
    assert rounds[2].cells == [(3.16e-3, 3), (3.16e-3, 4)]
    # a clear winner on the search seed is not settled
    clear = run(sp, lambda lr, s: {1e-3: 0.95, 3.16e-3: 0.5}.get(lr, 0.3))
    assert "settle" not in kinds(clear[0])


def test_diverged_cells_are_results_not_errors():
    def acc(lr, s=0):
        return None if lr >= 1e-2 else peak(3.16e-3)(lr)  # non-finite loss at and above 1e-2
    rounds, st, _ = run(spec(), acc)
    assert st.diverged == {1e-2: 1}
    assert st.points[1e-2] == 0.0 and st.chosen == 3.16e-3


def test_the_range_stops_an_extension_and_the_best_stays_marked_unresolved():
    up = lambda lr, s=0: min(1.0, 0.3 + 0.7 * lr / 1e-2)  # noqa: E731  better and better up to the range's end
    rounds, st, _ = run(spec(hi=1e-2), up)
    assert all(lr <= 1e-2 for lr in lrs_of(rounds)), "the search left its range"
    assert st.outcome == "range" and st.chosen == 1e-2
    assert S.window(st.points, 0.4375, 0.9, 1e-5, 1e-2).open_hi == "range"


def test_decisions_are_a_pure_function_of_the_results():
    acc = peak(2.4e-3, width=0.7)
    a = run(spec(window=True), acc)
    b = run(spec(window=True), acc)
    assert [r.as_dict() for r in a[0]] == [r.as_dict() for r in b[0]]
    # the same results in another order (as files arrive) give the same next round
    rounds, results = a[0][:2], {k: v for k, v in a[2].items() if any(k in r.cells for r in a[0][:2])}
    shuffled = dict(sorted(results.items(), key=lambda kv: -kv[0][0]))
    assert S.decide(spec(window=True), rounds, results)[0].as_dict() == \
        S.decide(spec(window=True), rounds, shuffled)[0].as_dict()


def test_a_fixed_grid_on_every_seed_is_todays_grid_and_reports_the_best_mean():
    grid = (1e-4, 1e-3, 1e-2, 1e-1)
    sp = spec(start=grid, rounds=0, search_seeds=(0, 1), seeds=(0, 1))
    table = {1e-4: [0.2, 0.3], 1e-3: [1.0, 1.0], 1e-2: [1.0, 1.0], 1e-1: [1.0, 1.0]}
    rounds, st, _ = run(sp, lambda lr, s: table[lr][s])
    assert kinds(rounds) == ["start"] and st.chosen == 1e-2  # the middle of the tied best, as before
    assert sp.max_cells() == 8 == len(S.cells_of(rounds))


@pytest.mark.parametrize("window, search_seeds", [(False, (0,)), (True, (0,)), (True, (0, 1, 2, 3, 4))])
def test_no_search_trains_more_cells_than_its_budget_allows(window, search_seeds):
    sp = spec(window=window, search_seeds=search_seeds)
    rng = random.Random(0)
    for _ in range(300):
        center, width, h = 10 ** rng.uniform(-5.5, -0.5), rng.uniform(0.1, 2), rng.uniform(0.2, 1.0)
        noise = {}

        def acc(lr, s, f=peak(center, width, h)):
            return min(1.0, max(0.0, f(lr) + noise.setdefault((lr, s), rng.uniform(-0.08, 0.08))))
        rounds, st, results = run(sp, acc)
        assert len(results) <= sp.max_cells()
        assert all(sp.lo <= lr <= sp.hi for lr, _ in results)
        assert {s for lr, s in results if lr == st.chosen} == set(sp.seeds)


def test_window_and_wider_on_hand_made_points():
    learned, good = 0.4375, 0.9
    attention = {1e-4: 0.95, 3.16e-4: 1.0, 1e-3: 1.0, 3.16e-3: 0.97, 1e-2: 0.5}
    mamba = {1e-4: 0.3, 3.16e-4: 0.3, 1e-3: 0.6, 3.16e-3: 0.95, 1e-2: 0.4}
    wa, wm = S.window(attention, learned, good, 1e-4, 1e-1), S.window(mamba, learned, good, 1e-4, 1e-1)
    assert (wa.lo, wa.hi, wa.below, wa.above, wa.open_lo) == (1e-4, 3.16e-3, None, 1e-2, "range")
    assert wa.width == pytest.approx(1.5, abs=1e-3) and wa.width_max is None
    assert (wm.lo, wm.hi, wm.below, wm.above) == (3.16e-3, 3.16e-3, 1e-3, 1e-2) and wm.width == 0
    assert S.wider(wa, wm) == 1 and S.wider(wm, wa) == -1
    at_chance = {x: 0.26 for x in attention}
    assert S.window(at_chance, learned, good).status == "not learned"  # no "window of 1 decade" at chance
    assert S.window({1e-3: 0.6, 1e-2: 0.7}, learned, good).status == "none"
    # edges too uncertain to tell: a single good point between wide gaps vs a 0.5-decade window
    a = S.window({1e-4: 0.2, 1e-2: 0.95, 1: 0.2}, learned, good)
    b = S.window({1e-3: 0.2, 3.16e-3: 0.95, 1e-2: 0.95, 3.16e-2: 0.2}, learned, good)
    assert S.wider(a, b) == 0 and S.wider(b, a) == 0


def test_a_spec_outside_its_range_or_with_foreign_search_seeds_is_refused():
    with pytest.raises(ValueError, match="range"):
        spec(start=(1e-6, 1e-3))
    with pytest.raises(ValueError, match="first of the seeds"):
        spec(search_seeds=(3,))
    assert spec().max_cells() == (4 + 2 * 2) * 1 + 4 + 2


def test_every_round_kind_is_known():
    for sp in (spec(), spec(rounds=0), spec(window=True, search_seeds=(0, 1, 2, 3, 4))):
        for center in (1e-5, 1e-3, 1e-1):
            rounds, _, _ = run(sp, peak(center))
            assert set(kinds(rounds)) <= set(S.KINDS) and kinds(rounds)[0] == "start"
            assert all(r.reason for r in rounds)
            # a round's cells are never repeated later
            cells = list(itertools.chain.from_iterable(r.cells for r in rounds))
            assert len(cells) == len(set(cells))
