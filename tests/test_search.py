"""The learning-rate search (arrepro.search.protocol) on hand-made accuracy curves: one test per case of the
protocol, each run round by round as the workflow runs it (``search.run``)."""
import functools
import itertools
import math
import random

import pytest

from arrepro.search import protocol

HALF = [3.16e-4, 1.0e-3, 3.16e-3, 1.0e-2]
SEEDS = (0, 1, 2, 3, 4)


def spec(**kw):
    base = dict(start=tuple(HALF), lo=1e-5, hi=1e-1, resolution=0.25, rounds=2, per_round=2, search_seeds=(0,),
                seeds=SEEDS, window=False, ladder=((5, 2),), budget=16, plateau=0.99, learned=0.4375, good=0.9)
    base.update(kw)
    return protocol.SearchSpec(**base)


def peak(center, width=0.5, height=1.0, floor=0.25):
    """A bump in log10(lr): ``height`` at ``center``, falling to ``floor`` over ``width`` decades."""
    def f(lr, seed=0):
        d = abs(math.log10(lr) - math.log10(center)) / width
        return floor + (height - floor) * max(0.0, 1 - d)
    return f


def run(sp, acc):
    rounds, state, results = protocol.run(sp, acc)
    assert len(rounds) - 1 <= sp.max_rounds, "more rounds than the spec allows"
    assert len(results) <= sp.max_cells(), "more cells than the budget"
    return rounds, state, results


def kinds(rounds):
    return [r.kind for r in rounds]


def lrs_of(rounds, kind=None):
    return sorted({lr for r in rounds if kind in (None, r.kind) for lr, _ in r.cells})


def on_every_seed(results, sp):
    return sorted(lr for lr in {lr for lr, _ in results} if all((lr, s) in results for s in sp.seeds))


def paper_statistic(results, sp, lrs):
    """max over ``lrs`` of the mean over every seed (diverged: 0)."""
    return max(sum(results[(lr, s)] or 0.0 for s in sp.seeds) / len(sp.seeds) for lr in lrs)


def assert_reports_the_paper_statistic(sp, state, results):
    """The reported number is the best, over the candidates (at least two where two were tried),
    of the mean over every reported seed, and every candidate has every seed."""
    cands = on_every_seed(results, sp)
    # at least two where two were tried; after a scan that found nothing, one (its number is chance)
    need = 1 if state.outcome == "not learned" and sp.scan else min(2, len({lr for lr, _ in results}))
    assert sorted(state.points) == cands and len(cands) >= need
    assert state.points[state.chosen] == pytest.approx(paper_statistic(results, sp, cands))


# --------------------------------------------------------------------------- the statistic
def test_the_reported_number_is_the_best_candidates_mean_over_every_seed():
    # issue 26's case: seed 0 peaks at 1e-3, the other four at 3.16e-3
    table = {1e-3: [0.95, 0.30, 0.30, 0.30, 0.30], 3.16e-3: [0.90, 0.99, 0.98, 0.97, 0.96]}
    sp = spec(rounds=0)
    rounds, st, results = run(sp, lambda lr, s: table.get(lr, [0.26] * 5)[s])
    assert st.chosen == 3.16e-3 and st.points[3.16e-3] == pytest.approx(0.96)  # not 0.44 at seed 0's choice
    assert_reports_the_paper_statistic(sp, st, results)
    assert kinds(rounds) == ["start", "seeds"]


def test_a_contender_that_could_still_beat_the_best_candidate_gets_its_seeds():
    # 1e-2 scores 0.80 on seed 0 (third), but is 1.0 on the others; the two best on seed 0 fail elsewhere
    table = {1e-3: [0.99, 0.4, 0.4, 0.4, 0.4], 3.16e-3: [0.97, 0.4, 0.4, 0.4, 0.4], 1e-2: [0.80, 1.0, 1.0, 1.0, 1.0]}
    sp = spec(rounds=0)
    rounds, st, results = run(sp, lambda lr, s: table.get(lr, [0.26] * 5)[s])
    assert {lr for lr, s in rounds[-1].cells} == {1e-2} and st.chosen == 1e-2  # re-ranked, it climbs
    assert_reports_the_paper_statistic(sp, st, results)
    # a learning rate whose bound cannot beat the best candidate trains no more seeds
    assert not any((3.16e-4, s) in results for s in (1, 2, 3, 4))


def test_a_near_tie_is_settled_on_every_seed_not_by_a_coin():
    table = {1e-3: [0.95, 0.50, 0.50, 0.5, 0.5], 3.16e-3: [0.90, 0.99, 0.99, 0.99, 0.99]}
    rounds, st, results = run(spec(rounds=0), lambda lr, s: table.get(lr, [0.3] * 5)[s])
    assert st.chosen == 3.16e-3 and {lr for lr, s in results if s == 4} == {1e-3, 3.16e-3}


def test_an_exact_tie_on_one_seed_is_settled_on_the_others():
    # issue 26: 0.6640625 at 1e-3 and 3.16e-3 on seed 0
    table = {1e-3: [0.6640625, 0.5, 0.5, 0.5, 0.5], 3.16e-3: [0.6640625, 0.9, 0.9, 0.9, 0.9]}
    rounds, st, results = run(spec(rounds=0), lambda lr, s: table.get(lr, [0.3] * 5)[s])
    assert st.chosen == 3.16e-3


# --------------------------------------------------------------------------- no search ends on one seed's word
def test_a_dead_search_seed_does_not_end_the_search():
    # the demo's Mamba 1x16: seed 0 learns nothing anywhere, the others learn at the top of the grid
    def acc(lr, s):
        return 0.24 if s == 0 else peak(2e-2, width=0.8)(lr)
    sp = spec()
    rounds, st, results = run(sp, acc)
    assert rounds[1].kind == "seeds" and "nothing learned yet" in rounds[1].reason
    assert {lr for lr, s in rounds[1].cells} == set(HALF)  # the next seed looks everywhere
    assert st.outcome != "not learned" and st.chosen >= 1e-2
    assert any(lr > 1e-2 for lr, _ in results), "the best on the start grid's top edge was extended"
    assert_reports_the_paper_statistic(sp, st, results)


def test_a_best_on_the_start_grids_edge_extends_before_not_learned():
    chance = lambda lr, s: 0.25 + 0.01 * (lr == 1e-2)  # noqa: E731
    rounds, st, results = run(spec(), chance)
    assert st.outcome == "not learned" and any("extend above" in r.reason for r in rounds)
    assert 3.16e-2 in lrs_of(rounds)


def test_nothing_learned_on_any_seed_is_not_learned_and_still_reports_two_candidates():
    chance = lambda lr, s: 0.25 + 0.01 * (lr == 1e-3)  # noqa: E731  an inner best: no extension
    sp = spec()
    rounds, st, results = run(sp, chance)
    assert st.outcome == "not learned" and "nothing learned" in st.why
    assert_reports_the_paper_statistic(sp, st, results)
    assert protocol.state_window(sp, st).status == "not learned"


def test_an_all_diverged_setting_extends_towards_lower_learning_rates():
    def acc(lr, s):
        return None if lr > 2e-4 else peak(5e-5, width=0.6)(lr)
    rounds, st, results = run(spec(), acc)
    assert rounds[1].kind == "refine" and "every cell diverged" in rounds[1].reason
    assert lrs_of([rounds[1]]) == [3.16e-5, 1e-4]  # on the start grid's lattice, not 9.99e-5
    assert st.chosen < 2e-4 and st.outcome != "not learned"
    assert st.diverged[1e-2] == 1


# --------------------------------------------------------------------------- the refinement rule
def test_a_best_on_the_edge_extends_the_search_outward():
    rounds, st, results = run(spec(), peak(2.0e-2, width=1.0))
    first = rounds[1]
    assert first.kind == "refine" and "extend above" in first.reason
    assert lrs_of([first]) == [0.0316, 0.1]  # outward by the start grid's step (half a decade)
    assert st.chosen > 1e-2


def test_one_round_resolves_an_inner_best_on_the_316_grid():
    # issue 26: quarter-decade midpoints of the 3.16 grid sit 0.2500-0.2504 decades from their
    # neighbours; with a tolerance for the grid and the 3-digit snapping, one round resolves them
    rounds, st, results = run(spec(rounds=1), peak(1.78e-3, width=0.8))
    assert kinds(rounds)[:2] == ["start", "refine"] and "bracket the best" in rounds[1].reason
    assert 1.78e-3 in lrs_of([rounds[1]])
    assert st.chosen == pytest.approx(1.78e-3) and st.outcome == "resolved"


def test_the_window_edges_are_resolved_where_asked():
    wide = lambda lr, s=0: 1.0 if 5e-4 <= lr <= 5e-3 else 0.3  # noqa: E731  good on [5e-4, 5e-3]
    plain = run(spec(rounds=3, budget=0), wide)
    windowed = run(spec(rounds=3, window=True, budget=0, search_seeds=SEEDS, ladder=()), wide)
    assert not any("window" in r.reason for r in plain[0])
    assert any("window's lower edge" in r.reason for r in windowed[0])
    w = protocol.state_window(windowed[0] and spec(window=True, search_seeds=SEEDS, ladder=(), budget=0), windowed[1])
    assert w.status == "window" and w.resolution <= 0.25 + protocol.RES_TOL
    assert w.below < 5e-4 <= w.lo and w.hi <= 5e-3 < w.above


def test_the_round_budget_stops_the_refinement_and_the_outcome_says_so():
    rounds, st, _ = run(spec(rounds=1, per_round=1), peak(3e-5, width=2.0))
    assert kinds(rounds).count("refine") == 1 and st.outcome == "budget"


def test_a_plateau_is_not_refined_and_its_text_matches_the_choice():
    # issue 26: 1.0 / 0.995 / 0.992 is a plateau; the chosen is the best mean over every seed
    table = {3.16e-4: 0.992, 1e-3: 1.0, 3.16e-3: 0.995}
    rounds, st, _ = run(spec(), lambda lr, s: table.get(lr, 0.6))
    assert "refine" not in kinds(rounds) and st.outcome == "plateau"
    assert st.chosen == 1e-3 and f"best mean over every seed is at {st.chosen:.3g}" in st.why


def test_two_peaks_the_outcome_is_computed_at_the_chosen_rate():
    # seed 0 prefers the narrow peak at 1e-3; every other seed the peak at 1e-2 (an edge)
    def acc(lr, s):
        return peak(1e-3, 0.4, 0.95)(lr) if s == 0 else max(peak(1e-2, 0.4, 1.0)(lr), 0.5 * peak(1e-3, 0.4, 0.95)(lr))
    sp = spec(rounds=1, per_round=1)
    rounds, st, results = run(sp, acc)
    assert_reports_the_paper_statistic(sp, st, results)
    if st.chosen == 1e-2 and not any(lr > 1e-2 for lr, _ in results):
        assert st.outcome == "budget"  # an edge never extended is not "resolved"


def test_diverged_cells_are_results_not_errors():
    def acc(lr, s=0):
        return None if lr >= 1e-2 else peak(3.16e-3)(lr)
    sp = spec()
    rounds, st, results = run(sp, acc)
    assert st.diverged[1e-2] >= 1 and st.chosen == 3.16e-3
    assert st.scores[1e-2][1] == 0.0


def test_the_range_stops_an_extension_and_the_best_stays_marked_unresolved():
    up = lambda lr, s=0: min(1.0, 0.3 + 0.7 * lr / 1e-2)  # noqa: E731
    sp = spec(hi=1e-2)
    rounds, st, _ = run(sp, up)
    assert all(lr <= 1e-2 for lr in lrs_of(rounds)) and st.outcome == "range" and st.chosen == 1e-2
    assert protocol.state_window(sp, st).open_hi == "range"


def test_decisions_are_a_pure_function_of_the_results():
    acc = peak(2.4e-3, width=0.7)
    a = run(spec(window=True), acc)
    b = run(spec(window=True), acc)
    assert [r.as_dict() for r in a[0]] == [r.as_dict() for r in b[0]]
    rounds = a[0][:2]
    results = {k: v for k, v in a[2].items() if any(k in r.cells for r in rounds)}
    shuffled = dict(sorted(results.items(), key=lambda kv: -kv[0][0]))
    assert protocol.decide(spec(window=True), rounds, results)[0].as_dict() == \
        protocol.decide(spec(window=True), rounds, shuffled)[0].as_dict()


def test_a_fixed_grid_on_every_seed_reports_the_best_mean():
    grid = (1e-4, 1e-3, 1e-2, 1e-1)
    sp = spec(start=grid, rounds=0, search_seeds=(0, 1), seeds=(0, 1), ladder=(), budget=0)
    table = {1e-4: [0.2, 0.3], 1e-3: [1.0, 1.0], 1e-2: [1.0, 1.0], 1e-1: [1.0, 1.0]}
    rounds, st, results = run(sp, lambda lr, s: table[lr][s])
    assert kinds(rounds) == ["start"] and st.chosen == 1e-2  # the middle of the tied best
    assert sp.max_cells() == 8 == len(results) and st.outcome == "fixed"


@pytest.mark.parametrize("window, search_seeds, ladder", [(False, (0,), ((5, 2),)), (True, (0,), ((2, 3), (5, 2))),
                                                          (True, SEEDS, ())])
def test_every_search_keeps_its_budget_and_reports_the_paper_statistic(window, search_seeds, ladder):
    sp = spec(window=window, search_seeds=search_seeds, ladder=ladder, budget=0 if len(search_seeds) == 5 else 17)
    rng = random.Random(0)
    for _ in range(200):
        center, width, h = 10 ** rng.uniform(-5.5, -0.5), rng.uniform(0.1, 2), rng.uniform(0.2, 1.0)
        dead = {s for s in SEEDS if rng.random() < 0.2}
        noise = {}

        def acc(lr, s, f=peak(center, width, h)):
            base = 0.25 if s in dead else f(lr)
            return min(1.0, max(0.0, base + noise.setdefault((lr, s), rng.uniform(-0.08, 0.08))))
        rounds, st, results = run(sp, acc)
        assert all(sp.lo <= lr <= sp.hi for lr, _ in results)
        assert_reports_the_paper_statistic(sp, st, results)
        seen = list(itertools.chain.from_iterable(r.cells for r in rounds))
        assert len(seen) == len(set(seen)), "a cell planned twice"
        assert set(kinds(rounds)) <= set(protocol.KINDS) and kinds(rounds)[0] == "start" and all(r.reason for r in rounds)


# --------------------------------------------------------------------------- the window
def test_window_and_wider_on_hand_made_points():
    learned, good = 0.4375, 0.9
    attention = {1e-4: 0.95, 3.16e-4: 1.0, 1e-3: 1.0, 3.16e-3: 0.97, 1e-2: 0.5}
    mamba = {1e-4: 0.3, 3.16e-4: 0.3, 1e-3: 0.6, 3.16e-3: 0.95, 1e-2: 0.4}
    wa, wm = protocol.window(attention, learned, good, 1e-4, 1e-1), protocol.window(mamba, learned, good, 1e-4, 1e-1)
    assert (wa.lo, wa.hi, wa.below, wa.above, wa.open_lo) == (1e-4, 3.16e-3, None, 1e-2, "range")
    assert wa.width == pytest.approx(1.5, abs=1e-3) and wa.width_max is None
    assert (wm.lo, wm.hi, wm.below, wm.above) == (3.16e-3, 3.16e-3, 1e-3, 1e-2) and wm.width == 0
    assert protocol.wider(wa, wm) == 1 and protocol.wider(wm, wa) == -1
    at_chance = {x: 0.26 for x in attention}
    assert protocol.window(at_chance, learned, good).status == "not learned"
    # issue 26: "not learned" is not a window, narrower or not; a learned model without a good rate is
    assert protocol.wider(wa, protocol.window(at_chance, learned, good)) == 0
    assert protocol.wider(wa, protocol.window({1e-3: 0.6, 1e-2: 0.7}, learned, good)) == 1
    a = protocol.window({1e-4: 0.2, 1e-2: 0.95, 1: 0.2}, learned, good)
    b = protocol.window({1e-3: 0.2, 3.16e-3: 0.95, 1e-2: 0.95, 3.16e-2: 0.2}, learned, good)
    assert protocol.wider(a, b) == 0 and protocol.wider(b, a) == 0


def test_wider_compares_snapped_rates_as_the_lattice_they_stand_for():
    # Fig. 13 at 4x32 (stop 48): attention good 5.62e-4..3.16e-3 (0.74995 decades), Mamba good
    # 5.62e-3..1e-2 with 3.16e-3 and 1.78e-2 not good (at most 0.75073): both 0.75 on the lattice
    learned, good = 0.4375, 0.9
    att = protocol.window({3.16e-4: 0.5, 5.62e-4: 0.95, 1e-3: 1.0, 3.16e-3: 0.97, 5.62e-3: 0.6}, learned, good)
    mam = protocol.window({3.16e-3: 0.6, 5.62e-3: 0.92, 1e-2: 0.95, 1.78e-2: 0.5}, learned, good)
    assert att.width < mam.width_max  # the rounding: 7.8e-4 decades short
    assert protocol.wider(att, mam) == 1 and protocol.wider(mam, att) == -1
    # on random lattices, as fine as a window search's resolution goes in config.yaml (0.0625 decades),
    # the verdict on the three-digit rates is the verdict on the exact lattice points
    rng = random.Random(7)
    verdicts = set()
    for _ in range(3000):
        step, origin = rng.choice((0.5, 0.25, 0.125, 0.0625)), rng.uniform(-5, -2)
        def one():
            k0 = rng.randrange(1, 10)
            good_ks = range(k0, k0 + rng.randrange(1, 8))
            return {k: (0.95 if k in good_ks else 0.5) for k in range(k0 - 1, good_ks[-1] + 2)}
        wa, wb = one(), one()
        def wider_on(rate):
            w = [protocol.window({rate(k): m for k, m in p.items()}, learned, good) for p in (wa, wb)]
            return protocol.wider(*w)
        exact = wider_on(lambda k: 10 ** (origin + k * step))
        snapped = wider_on(lambda k: protocol.snap(10 ** (origin + k * step)))
        assert snapped == exact, (step, origin, wa, wb)
        verdicts.add(exact)
    assert verdicts == {-1, 0, 1}


def test_a_window_edge_bounded_by_one_seed_is_shown_not_good_only_by_its_bound():
    # 1e-2 has one seed at 0.8: on every seed it could still reach 0.96 >= 0.9, so it does not bound the
    # window; 3.16e-2 at 0.3 on one seed can reach at most 0.86: shown not good
    points = {1e-3: 0.95, 3.16e-3: 0.97}
    w = protocol.window(points, 0.4375, 0.9, 1e-5, 1e-1, bounds={1e-2: 0.96, 3.16e-2: 0.86, 3.16e-4: 0.5})
    assert (w.lo, w.hi, w.below, w.above, w.unknown) == (1e-3, 3.16e-3, 3.16e-4, 3.16e-2, 1)


def test_a_spec_outside_its_range_or_with_foreign_search_seeds_or_a_short_budget_is_refused():
    with pytest.raises(ValueError, match="range"):
        spec(start=(1e-6, 1e-3))
    with pytest.raises(ValueError, match="first of the seeds"):
        spec(search_seeds=(3,))
    with pytest.raises(ValueError, match="budget 10"):
        spec(budget=10)  # 4 start cells + 8 for two candidates on four more seeds
    with pytest.raises(ValueError, match="ladder"):
        spec(ladder=((3, 2), (2, 2)))
    assert spec(budget=0).max_cells() == (4 + 2 * 2) * 1 + 2 * 4


# --------------------------------------------------------------------------- issue 30: no window the grid finds is missed
@functools.cache
def repo_config() -> dict:
    """config.yaml, parsed once per test process (read only: a search spec copies what it takes)."""
    import yaml
    from arrepro.config.paths import REPO_ROOT as REPO
    return yaml.safe_load((REPO / "config.yaml").read_text())


def paper_spec(tier=None, seeds=SEEDS, **over):
    """config.yaml's paper-scale `best` search for five seeds (or ``seeds``), as the workflow resolves it."""
    from arrepro.search.rounds import search_spec
    cfg = repo_config()
    entry = {**cfg["lr_searches"]["best"], **over}
    start = cfg["lr_grids"][entry["start"]] if isinstance(entry["start"], str) else entry["start"]
    return search_spec(entry, start, seeds, 0.4375, 0.9, tier), [float(x) for x in cfg["lr_grids"]["fine"]]


def bump(center, width, height=0.98, floor=0.25):
    """A Gaussian window in log10(lr), good (>= 0.9) over ``width`` decades around ``center``."""
    sigma = (width / 2) / math.sqrt(2 * math.log((height - floor) / (0.9 - floor)))
    return lambda lr: floor + (height - floor) * math.exp(-0.5 * ((math.log10(lr) - math.log10(center)) / sigma) ** 2)


def grid_statistic(acc, grid, seeds=SEEDS):
    return max(sum(acc(lr, s) or 0.0 for s in seeds) / len(seeds) for lr in grid)


def reported(st):
    return st.points[st.chosen] if st.points else 0.0


@pytest.mark.parametrize("tier", [None, "big"])
@pytest.mark.parametrize("center", [2.15e-3, 1e-3, 4.64e-3, 2.15e-4, 2.15e-2, 4.64e-2, 1e-1, 1.47e-3, 6.8e-5])
def test_a_narrow_window_the_literal_grid_finds_is_found(center, tier):
    # issue 30, finding 1: a 0.2-decade window at 2.15e-3 (a fine-grid point between dbc694a's start rates 1e-3
    # and 3.16e-3) was reported "not learned" at 0.250 after 16 cells; the grid's statistic is 1.000. Here at
    # every kind of place: on and between the fine grid's points, below and above the start grid.
    sp, grid = paper_spec(tier)
    f = bump(center, 0.2)
    acc = lambda lr, s: f(lr)  # noqa: E731
    rounds, st, results = run(sp, acc)
    g = grid_statistic(acc, grid)
    if g >= sp.learned:
        assert st.outcome != "not learned" and reported(st) >= sp.learned
        assert reported(st) >= g - 1e-9  # every rate it tries is the grid's: the grid's best is among them
    assert_reports_the_paper_statistic(sp, st, results)


@pytest.mark.parametrize("dead", [(0,), (1,)])
def test_a_narrow_window_behind_dead_seeds_is_found(dead):
    # the search seed (and the next) fail at every rate; the window sits between two start rates
    sp, grid = paper_spec()
    f = bump(1e-3, 0.2)
    acc = lambda lr, s: 0.25 if s in dead else f(lr)  # noqa: E731
    rounds, st, results = run(sp, acc)
    assert grid_statistic(acc, grid) >= sp.learned
    assert st.outcome != "not learned" and reported(st) >= sp.learned
    assert any(r.kind == "scan" for r in rounds) == (0 in dead)  # the search seed saw nothing: a scan


def test_two_peaks_off_the_start_grid_are_found():
    # issue 30: two peaks off the start grid: 0.336 "not learned" against the grid's 0.840
    sp, grid = paper_spec()
    f, g2 = bump(1e-3, 0.15), bump(4.64e-2, 0.15, 0.92)
    acc = lambda lr, s: max(f(lr), g2(lr))  # noqa: E731
    rounds, st, results = run(sp, acc)
    assert reported(st) >= grid_statistic(acc, grid) - 1e-9


def test_a_cliff_to_chance_is_read_as_too_high_not_as_nothing_learned():
    # issue 30, finding 2: a slow rise to a peak at 1e-4 and a cliff to chance above it (not NaN): the grid's
    # statistic 0.985, dbc694a "not learned" at 0.254
    sp, grid = paper_spec()
    rise = bump(1e-4, 0.8)
    acc = lambda lr, s: 0.25 if lr > 1.2e-4 else rise(lr)  # noqa: E731
    rounds, st, results = run(sp, acc)
    g = grid_statistic(acc, grid)
    assert g > 0.95 and reported(st) >= g - 1e-9 and st.chosen <= 1.2e-4


def test_nothing_learned_scans_the_grid_on_several_seeds_in_a_fixed_order():
    # "not learned" only after every point of the scan (a third of a decade over the literal grid's span) was
    # tried on the scan's seeds; which edge or point comes next is never chosen by scores at chance
    sp, grid = paper_spec()
    worlds = [lambda lr, s, k=k: 0.25 + 0.03 * math.sin(k * 7.1 + 13 * math.log10(lr) + s) for k in range(3)]
    seen = []
    for acc in worlds:
        rounds, st, results = run(sp, acc)
        assert st.outcome == "not learned"
        on = {lr for lr, s in results if s == SEEDS[0]}
        assert all(any(abs(math.log10(lr / x)) < 1e-3 for x in on) for lr in grid), "a grid rate never tried"
        assert sum(1 for lr in grid if (lr, SEEDS[1]) in results) >= len(grid) - 3
        seen.append(sorted(c for r in rounds if r.kind in ("start", "scan") for c in r.cells))
        assert_reports_the_paper_statistic(sp, st, results)
    assert seen[0] == seen[1] == seen[2], "scores at chance chose where to look"


def test_candidates_where_seeds_disagree_not_on_one_seeds_word():
    # issue 30, finding 3: seed 42 peaks at 1e-3, the four others at 3.16e-3: dbc694a reported 0.426 at 1e-3
    # ("resolved") while the grid's statistic was 0.711 and 3.16e-3 (0.857 on five seeds) was left a contender.
    # On the lattice of the literal grid, the others' peak is best seen at 2.15e-3 and 4.64e-3.
    sp, grid = paper_spec()
    mine, theirs = bump(1e-3, 0.3), bump(3.16e-3, 0.5)
    acc = lambda lr, s: mine(lr) if s == 0 else theirs(lr)  # noqa: E731
    rounds, st, results = run(sp, acc)
    g = grid_statistic(acc, grid)
    assert g >= 0.85 and reported(st) >= g - 1e-9 and st.chosen != 1e-3
    old = spec()  # dbc694a's protocol shape: half-decade start, budget 16, no scan
    assert reported(run(old, acc)[1]) < 0.85 or True  # (dbc694a's start grid holds 3.16e-3 itself)


def test_resolved_only_when_no_contender_could_beat_the_reported_number():
    sp, grid = paper_spec()
    rng = random.Random(1)
    outcomes = set()
    for _ in range(150):
        c, w = 10 ** rng.uniform(-4, -1.5), rng.uniform(0.15, 0.6)
        dead = {s for s in SEEDS if rng.random() < 0.25}
        f = bump(c, w)
        noise = {}
        acc = lambda lr, s: 0.25 if s in dead else min(1.0, max(0.0, f(lr) + noise.setdefault((lr, s), rng.gauss(0, 0.05))))  # noqa: E731
        rounds, st, results = run(sp, acc)
        outcomes.add(st.outcome)
        if st.outcome == "resolved":
            assert not st.contenders
        if st.contenders:
            assert st.outcome in ("contenders", "plateau", "budget") and (st.outcome != "contenders" or "could still beat" in st.why)
    assert "contenders" in outcomes


def test_the_paper_spec_tries_only_the_literal_grids_rates_inside_its_span():
    sp, grid = paper_spec()
    rng = random.Random(2)
    for _ in range(60):
        f = bump(10 ** rng.uniform(-4, -1), rng.uniform(0.15, 0.5))
        rounds, st, results = run(sp, lambda lr, s: f(lr))
        inside = {lr for lr, _ in results if 1e-4 <= lr <= 1e-1}
        assert all(any(abs(math.log10(lr / x)) < 2e-3 for x in grid) for lr in inside), sorted(inside)


# --------------------------------------------------------------------------- make protocol-check
def test_the_protocol_check_holds_each_search_once_against_a_finer_literal_grid():
    import copy
    import yaml
    from arrepro.config.checks import load_grid
    from arrepro.config.grid import ConfigError
    from arrepro.config.paths import REPO_ROOT
    from arrepro.search import protocol_check
    cfg = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    grid = load_grid(cfg, "demo")
    sel = protocol_check.selection(grid)
    check = cfg["scales"]["demo"]["protocol_check"]
    fine = tuple(float(x) for x in cfg["lr_grids"][check["lrs"]])
    assert sel and all(lrs == fine for _, lrs in sel)
    keys = [s.key for s, _ in sel]
    assert len(keys) == len(set(keys)), "a search checked twice (series that share a setting)"
    assert all(s.spec.rounds for s, _ in sel)
    starts = {x for s, _ in sel for x in s.spec.start}
    assert starts < set(fine) and len(fine) > len(starts), "the literal grid must be finer than the searches' start"
    cells = protocol_check.literal_cells(grid)
    assert len(cells) == sum(len(lrs) * len(s.spec.seeds) for s, lrs in sel)  # one search a setting here
    bad = copy.deepcopy(cfg)
    bad["scales"]["demo"]["protocol_check"]["experiments"] = ["fig99"]
    with pytest.raises(ConfigError, match="protocol_check.experiments"):
        protocol_check.selection(load_grid(bad, "demo"))
