"""Curves close their windows (issue 36): a curve search (``close``) extends each edge where a seed
learned, one lattice step a round, until every seed there is below the learned threshold or the
range ends; the demo's curve experiments (Figs. 1, 5, 7, 13) end with every window closed or
bounded by the range, whatever the world."""
import math

import pytest
import yaml

from arrepro.config.checks import load_grid
from arrepro.search import protocol as P
from arrepro.search.rounds import Searches, search_spec
from arrepro.search.thresholds import GOOD

from conftest import ROOT

LEARNED = 0.4375
CURVE = {"start": [1e-3, 3.16e-3, 1e-2], "range": [1e-4, 1e-1], "resolution": 0.5, "search_seeds": "all",
         "rounds": 0, "close": True}


def spec(**kw):
    return search_spec({**CURVE, **kw}, CURVE["start"], (0, 1, 2), LEARNED, GOOD)


def world(lo, hi, peak=0.99, floor=0.25, seed_fail=()):
    """Accuracy 0.99 inside [lo, hi] (log-space), chance outside; ``seed_fail``: seeds at chance everywhere."""
    def acc(lr, seed):
        if seed in seed_fail:
            return floor
        return peak if lo * 0.999 <= lr <= hi * 1.001 else floor
    return acc


def test_a_curve_derives_its_rounds_from_the_lattice_to_its_farther_bound():
    s = spec()
    assert s.close and s.rounds == 2 and s.per_round == 2  # 1e-3 -> 1e-4 and 1e-2 -> 1e-1: two half-decade steps
    assert spec(range=[1e-5, 1e-1]).rounds == 4


def test_an_open_upper_edge_extends_until_every_seed_there_is_below_learned():
    rounds, state, _ = P.run(spec(), world(3.16e-3, 3.16e-2))
    tried = sorted(state.scores)
    assert tried == [1e-3, 3.16e-3, 1e-2, 3.16e-2, 1e-1]
    assert all(k == 3 for k, _ in state.scores.values())  # every seed at every rate: a curve
    w = P.state_window(spec(), state)
    assert (w.below, w.lo, w.hi, w.above) == (1e-3, 3.16e-3, 3.16e-2, 1e-1)
    assert state.outcome == "closed" and "closed above" in state.why and "closed below" in state.why
    assert [r.kind for r in rounds] == ["start", "refine", "refine"]


def test_a_window_reaching_the_range_is_bounded_by_it_and_says_so():
    _, state, _ = P.run(spec(), world(1e-4, 1e-1))
    w = P.state_window(spec(), state)
    assert (w.lo, w.hi, w.open_lo, w.open_hi) == (1e-4, 1e-1, "range", "range")
    assert state.outcome == "range" and "bounded below by the range" in state.why


def test_one_seed_that_learned_at_an_edge_keeps_it_open():
    """The edge closes only when EVERY seed there is below the learned threshold."""
    def acc(lr, seed):
        if lr >= 1e-2:
            return 0.9 if seed == 2 else 0.25  # one seed of three learns at the top edge: mean 0.47
        return 0.99 if lr >= 3.16e-3 else 0.25
    _, state, _ = P.run(spec(), acc)
    assert 3.16e-2 in state.scores


def test_a_curve_without_a_scan_that_learns_nowhere_trains_its_start_grid_only():
    rounds, state, _ = P.run(spec(), world(1.0, 1.0))
    assert len(rounds) == 1 and state.outcome == "not learned"


SCAN = {"scan": 0.5, "scan_range": [1e-4, 1e-1], "scan_seeds": 3}


def test_a_curve_at_chance_on_its_start_grid_scans_a_ring_a_round_on_every_seed():
    """Nothing learned at 1e-3..1e-2: the next lattice step out on both sides, every seed; a window
    found there is closed as any other."""
    rounds, state, _ = P.run(spec(**SCAN), world(3.16e-2, 3.16e-2))
    assert [(r.kind, len(r.cells)) for r in rounds] == [("start", 9), ("scan", 6), ("refine", 3)]
    assert sorted(rounds[1].cells) == [(lr, s) for lr in (3.16e-4, 3.16e-2) for s in (0, 1, 2)]
    assert all(k == 3 for k, _ in state.scores.values())  # still every seed at every rate
    w = P.state_window(spec(**SCAN), state)
    assert (w.below, w.lo, w.hi, w.above) == (1e-2, 3.16e-2, 3.16e-2, 1e-1) and state.outcome == "closed"


def test_a_scanning_curve_that_learns_nowhere_says_so_after_the_literal_grid_of_its_span():
    rounds, state, results = P.run(spec(**SCAN), world(1.0, 1.0))
    assert [r.kind for r in rounds] == ["start", "scan", "scan"] and state.outcome == "not learned"
    assert sorted(results) == [(lr, s) for lr in (1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2, 3.16e-2, 1e-1) for s in (0, 1, 2)]


# --------------------------------------------------------------------------- the demo's curves
CURVE_EXPERIMENTS = ("fig1", "fig5", "fig7", "fig13")


def demo_curves():
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    grid = load_grid(cfg, "demo")
    searches = Searches(grid)
    out = {}
    for exp in CURVE_EXPERIMENTS:
        assert exp in grid.experiments, f"the demo has no {exp}"
        for _, s in searches.of_experiment(exp):
            out[s.key] = (exp, s)
    return out


def worlds():
    """Windows anywhere on and off the demo's lattice, narrow and wide, one seed failing or not."""
    edges = [10 ** (x / 4) for x in range(-16, -3)]  # 1e-4 .. 1e-1, a quarter decade apart
    for i, lo in enumerate(edges):
        for hi in edges[i:i + 6]:
            for fail in ((), (1,)):
                yield lo, hi, fail


def test_every_demo_curve_ends_with_its_window_closed_or_bounded_by_its_range():
    curves = demo_curves()
    assert curves and all(s.spec.close for _, s in curves.values()), "a demo curve that does not close its window"
    bad = []
    for key, (exp, s) in curves.items():
        for lo, hi, fail in worlds():
            _, state, _ = P.run(s.spec, world(lo, hi, floor=0.2, seed_fail=fail))
            w = P.state_window(s.spec, state)
            if w.status != "window":
                continue
            ok_lo = w.below is not None or w.open_lo == "range"
            ok_hi = w.above is not None or w.open_hi == "range"
            if not (ok_lo and ok_hi):
                bad.append(f"{exp} {key}: world [{lo:.3g}, {hi:.3g}] seeds failing {fail}: {w.short()}")
    assert not bad, "windows left open:\n" + "\n".join(bad[:20])


def test_every_demo_curve_finds_every_window_the_literal_grid_of_its_scan_finds():
    """A window anywhere on 1e-4..1e-1 (the scan's span) that the literal grid there finds (a mean
    over the seeds at or above the learned threshold at one of its rates) the curve finds too: a
    curve at chance on its start grid scans (before, it said "not learned" after three rates)."""
    missed = []
    for key, (exp, s) in demo_curves().items():
        lo_s, hi_s = s.spec.scan_span
        lattice = [p for p, _ in s.spec.scan_points()]
        assert s.spec.scan and lattice and min(lattice) == lo_s and max(lattice) == hi_s, f"{exp}: a curve without a scan"
        for lo, hi, fail in worlds():
            acc = world(lo, hi, floor=0.2, seed_fail=fail)
            grid = any(sum(acc(lr, x) for x in s.spec.seeds) / len(s.spec.seeds) >= LEARNED for lr in lattice)
            _, state, _ = P.run(s.spec, acc)
            if grid and state.outcome == "not learned":
                missed.append(f"{exp} {key}: world [{lo:.3g}, {hi:.3g}] seeds failing {fail}")
    assert not missed, "windows the literal grid finds and the curve misses:\n" + "\n".join(missed[:20])


def test_a_closed_curves_good_window_has_its_edges_bracketed_to_its_resolution():
    """With ``window``, a closed curve brackets each edge of its good window by the midpoint to its
    nearest tried neighbour outside (one round, both edges at once, every seed), so the window's
    bounds tighten from the lattice's half decade to a quarter."""
    s = spec(window=True, resolution=0.25)
    assert s.rounds == spec().rounds + 1
    rounds, state, _ = P.run(s, world(3.16e-3, 1e-2))  # good at 3.16e-3 and 1e-2 on the lattice
    assert [r.kind for r in rounds] == ["start", "refine", "refine"]  # closed above (3.16e-2), then the window
    last = rounds[-1]
    assert sorted({lr for lr, _ in last.cells}) == [1.78e-3, 1.78e-2] and len(last.cells) == 6
    assert "lower edge" in last.reason and "upper edge" in last.reason
    w = P.state_window(s, state)
    assert (w.below, w.lo, w.hi, w.above) == (1.78e-3, 3.16e-3, 1e-2, 1.78e-2)
    assert abs(w.width_max - 1.0) < 0.01  # 1.5 decades at most before
    without = P.state_window(spec(), P.run(spec(), world(3.16e-3, 1e-2))[1])
    assert (without.below, without.above) == (1e-3, 3.16e-2)
    # a midpoint that is good moves the edge out; a curve with no good rate brackets nothing
    _, state, _ = P.run(s, world(1.7e-3, 1e-2))
    assert P.state_window(s, state).lo == 1.78e-3
    rounds, state, _ = P.run(s, world(3.16e-3, 1e-2, peak=0.8))
    assert [r.kind for r in rounds] == ["start", "refine"] and state.outcome == "closed"


def test_every_demo_curves_good_window_is_resolved_to_a_quarter_decade():
    """The demo's curves: wherever the world puts a window, its good edges end within a quarter
    decade of the nearest rate that is not good (or at the range's bound)."""
    bad = []
    for key, (exp, s) in demo_curves().items():
        assert s.spec.window and s.spec.resolution == 0.25, f"{exp}: its curve does not resolve its window"
        for lo, hi, fail in worlds():
            _, state, _ = P.run(s.spec, world(lo, hi, floor=0.2, seed_fail=fail))
            w = P.state_window(s.spec, state)
            if w.status != "window":
                continue
            for edge, nb in ((w.lo, w.below), (w.hi, w.above)):
                if nb is not None and abs(math.log10(nb / edge)) > 0.25 + 1e-3:
                    bad.append(f"{exp} {key}: world [{lo:.3g}, {hi:.3g}] seeds failing {fail}: {w.short()}")
    assert not bad, "windows not resolved:\n" + "\n".join(bad[:20])


def test_the_check_can_fail_on_a_curve_that_does_not_close():
    s = next(iter(demo_curves().values()))[1]
    import dataclasses
    fixed = dataclasses.replace(s.spec, close=False, rounds=0)
    _, state, _ = P.run(fixed, world(3.16e-3, 1e-1))
    w = P.state_window(fixed, state)
    assert w.status == "window" and w.above is None and w.open_hi == "edge"
    assert not math.isnan(state.chosen)
