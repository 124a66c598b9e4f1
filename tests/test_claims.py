"""Every claim of arrepro.report.claims on small hand-made tables, for each of its three verdicts, and
the rules they follow (arrepro.report.verdicts, arrepro.report.claim_kinds)."""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from arrepro.config.cards import cards
from arrepro.report import claim_kinds as K
from arrepro.report import claims as C
from arrepro.report import verdicts as V
from arrepro.report import interval as I
from arrepro.report.results import Results
from arrepro.search.thresholds import GOOD, chance_level, learned_threshold

TASKS = {"L64": {"kind": "mqar", "num_kv_pairs": 4}, "copy": {"kind": "copy"}}
MODELS = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())["models"]
CARDS = cards(MODELS)  # what each model is: config.yaml's cards
ROOT = Path(__file__).resolve().parents[1]


MIN_DIFF_TEST = 0.10  # the rule's MIN_DIFF, written out: a test of the rule does not read it back


def mixer(m):
    return MODELS[m]["mixer"] if m in MODELS else m  # (a made-up model of a rule's test: its own mixer)


def results(best_rows=(), cell_rows=(), zoo_rows=(), metric="final_accuracy", exp="e"):
    """best_rows: (model, width, layers, mean, min, max[, params][, task]); cell_rows: (model, width,
    layers, lr, seed, acc[, task]); zoo_rows: best rows of the Zoology replication series."""
    def best(rows, series):
        out = []
        for r in rows:
            model, w, n, mean, lo, hi = r[:6]
            params = r[6] if len(r) > 6 else 1000 * w * n
            task = r[7] if len(r) > 7 else "L64"
            out.append({"series": series, "task": task, "task_name": task, "seq_len": 64, "model": model,
                        "mixer": mixer(model), "width": w, "layers": n, "recipe": "r", "metric": metric,
                        "best_lr": 1e-3, "mean": mean, "std": 0.0, "min": lo, "max": hi, "parameters": params,
                        "candidates": "0.001;0.00316", "n_seeds": 3})
        return out
    cells = []
    for r in cell_rows:
        model, w, n, lr, seed, acc = r[:6]
        task = r[6] if len(r) > 6 else "L64"
        cells.append({"series": "main", "task": task, "task_name": task, "seq_len": 64, "model": model,
                      "mixer": mixer(model), "width": w, "layers": n, "lr": lr, "seed": seed, metric: acc,
                      "diverged": False, "parameters": 1, "cell_dir": f"{model}/{w}/{n}/{lr}/{seed}/{task}"})
    add_windows(out_best := best(best_rows, "main"), cells)
    grids = [{"series": "main", "lrs": [1e-3]}] + ([{"series": "replication (Zoology code and grid)", "lrs": "zoology",
                                                     "replication": True}]
                                                   if zoo_rows else [])
    return Results(exp, {"title": exp, "grids": grids},
                   pd.DataFrame(out_best + best(zoo_rows, "replication (Zoology code and grid)")),
                   pd.DataFrame(cells), [], TASKS, cards=CARDS)


def add_windows(best_rows, cells):
    """Each best row's window columns, as the aggregation writes them: arrepro.search.protocol.window over
    the row's cells' per-learning-rate means (learned and good at the claims' thresholds)."""
    from arrepro.report.aggregate import WINDOW
    from arrepro.search.protocol import window
    from arrepro.search.rounds import window_dict

    for b in best_rows:
        mine = pd.DataFrame([c for c in cells if (c["model"], c["width"], c["layers"], c["task"])
                             == (b["model"], b["width"], b["layers"], b["task"])])
        points = mine.groupby("lr")[b["metric"]].mean().to_dict() if len(mine) else {}
        chance = chance_level(TASKS[b["task"]], b["metric"])
        w = window_dict(window(points, learned_threshold(chance), GOOD))
        b.update({f"window_{k}": w[k] for k in WINDOW})


def verdict(cid, e):
    fn = next(f for i, _, _, f in C.CLAIMS if i == cid)
    j = fn(e)
    assert j is not None
    return j.verdict


def one(m, mean, w=64, n=1, spread=0.0, params=None, task="L64"):
    row = (m, w, n, mean, mean - spread / 2, mean + spread / 2)
    return row + ((params,) if params else (1000 * w * n,)) + (task,)


# --------------------------------------------------------------------------- the rules
def test_chance_and_learned_threshold():
    assert chance_level({"kind": "mqar", "num_kv_pairs": 4}, "final_accuracy") == 0.25
    assert chance_level({"kind": "copy"}, "final_exact_match") == 0.0
    assert learned_threshold(0.25) == pytest.approx(0.4375)
    s = V.Stat("m", 0.43, 0.43, 0.43, 0.25)
    assert not s.learned and V.Stat("m", 0.44, 0.44, 0.44, 0.25).learned


def test_the_interval_edges_are_where_scipys_welch_test_gives_p_005():
    """The interval (scipy's t quantile at Welch-Satterthwaite's degrees of freedom) against scipy's
    own Welch test from the same statistics: shifted by its half-width, the difference has the
    two-sided p-value 1 - LEVEL, for equal and unequal spreads and seed counts."""
    from scipy import stats

    for ma, sa, na, mb, sb, nb in ((0.8, 0.1, 3, 0.65, 0.1, 3), (0.9, 0.1, 5, 0.3, 0.02, 3), (0.5, 0.3, 10, 0.45, 0.05, 4)):
        iv = I.welch(ma, sa, na, mb, sb, nb)
        for edge in (iv.lo, iv.hi):  # the difference at which the interval's edge sits on 0
            p = stats.ttest_ind_from_stats(ma - edge, sa, na, mb, sb, nb, equal_var=False).pvalue
            assert p == pytest.approx(1 - I.LEVEL, rel=1e-6)
        assert iv.diff == pytest.approx(ma - mb) and iv.lo < iv.diff < iv.hi


def test_welch_interval_by_hand():
    """Two sides of three seeds each: d = 0.15, se = sqrt(0.01/3 + 0.01/3), df = 4 (equal sds)."""
    a, b = [0.70, 0.80, 0.90], [0.55, 0.65, 0.75]
    iv = V.interval(V.Stat.of("a", a, 0.25), V.Stat.of("b", b, 0.25))
    se = math.sqrt(0.01 / 3 + 0.01 / 3)
    assert iv.diff == pytest.approx(0.15) and iv.df == pytest.approx(4.0)
    assert iv.lo == pytest.approx(0.15 - 2.7764 * se, abs=1e-4) and iv.hi == pytest.approx(0.15 + 2.7764 * se, abs=1e-4)
    # unequal variances: Welch-Satterthwaite's df, between the smaller side's n - 1 and n_a + n_b - 2
    iv = I.welch(0.9, 0.1, 5, 0.3, 0.01, 3)
    va, vb = 0.01 / 5, 0.0001 / 3
    assert iv.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 2)) and 2 < iv.df < 6
    # under two seeds on a side: no interval, nothing conclusive
    assert not I.welch(0.9, 0.0, 1, 0.3, 0.0, 1).excludes_zero()


def test_more_seeds_with_the_same_difference_and_noise_sharpen_a_verdict():
    """Issue 31: the verdict must not get stricter as seeds are added. The same three accuracies a
    side, repeated: the mean difference (15 points) and the spread stay, the interval narrows."""
    a3, b3 = [0.70, 0.80, 0.90], [0.55, 0.65, 0.75]
    a, b = V.Stat.of("a", a3, 0.25), V.Stat.of("b", b3, 0.25)
    assert V.interval(a, b).lo < 0 and not V.conclusive(a, b) and V.compare(a, b) == 0  # 3 seeds: inconclusive
    a, b = V.Stat.of("a", a3 * 3, 0.25), V.Stat.of("b", b3 * 3, 0.25)
    assert a.spread == pytest.approx(0.2) and a.mean - b.mean == pytest.approx(0.15)
    assert V.interval(a, b).lo > 0 and V.conclusive(a, b) and V.compare(a, b) == 1 and V.compare(b, a) == -1
    # the old rule (beyond both sides' max-min spread, 0.2) would call it inconclusive at any seed count
    assert a.mean - b.mean < max(a.spread, b.spread)
    # and a claim that the two are alike: inconclusive on 3 seeds, contradicted on 9
    e3 = results([("m", 64, 1, 0.8, 0.7, 0.9), ("ref", 64, 1, 0.65, 0.55, 0.75)])
    e3.best["std"] = 0.1
    assert K.alike(e3, "ref", ["m"]).verdict == "inconclusive"
    e9 = results([("m", 64, 1, 0.8, 0.7, 0.9), ("ref", 64, 1, 0.65, 0.55, 0.75)])
    e9.best["std"], e9.best["n_seeds"] = float(np.std(a3 * 3, ddof=1)), 9
    assert K.alike(e9, "ref", ["m"]).verdict == "contradicted"


def test_more_seeds_sharpen_a_claim_of_no_difference():
    """Alike: consistent only when the interval on the difference lies within +-MIN_DIFF, which
    more seeds of the same mean difference (3 points) and noise earn."""
    a3, b3 = [0.80, 0.90, 0.95], [0.78, 0.86, 0.92]
    for k, want in ((1, False), (4, True)):
        a, b = V.Stat.of("a", a3 * k, 0.25), V.Stat.of("b", b3 * k, 0.25)
        assert V.alike_within(a, b) is want and not V.conclusive(a, b)
    # noise alone does not make two models alike: means 3 points apart, 3 noisy seeds
    e = results([("m", 64, 1, 0.83, 0.60, 1.0), ("ref", 64, 1, 0.80, 0.60, 1.0)])
    e.best["std"] = 0.2
    assert K.alike(e, "ref", ["m"]).verdict == "inconclusive"
    e.best["std"] = 0.0
    assert K.alike(e, "ref", ["m"]).verdict == "consistent"


def test_a_difference_within_the_noise_stays_inconclusive():
    # a difference under MIN_DIFF is never conclusive, however many seeds pin it down
    a, b = V.Stat.of("a", [0.90, 0.91, 0.92] * 10, 0.25), V.Stat.of("b", [0.83, 0.84, 0.85] * 10, 0.25)
    assert V.interval(a, b).lo > 0 and not V.conclusive(a, b) and V.compare(a, b) == 0
    # a large difference of the means within the seeds' noise: one seed learns, two do not
    a, b = V.Stat.of("a", [0.95, 0.30, 0.35], 0.25), V.Stat.of("b", [0.26, 0.25, 0.27], 0.25)
    assert a.mean - b.mean > MIN_DIFF_TEST and V.interval(a, b).lo < 0 and V.compare(a, b) == 0
    # with no noise (the interval at its floor, +-2.3 points on three seeds a side) MIN_DIFF is the bar
    assert V.compare(V.Stat("a", 0.60, 0.60, 0.60, 0.25, n=3), V.Stat("b", 0.51, 0.51, 0.51, 0.25, n=3)) == 0
    assert V.compare(V.Stat("a", 0.62, 0.62, 0.62, 0.25, n=3), V.Stat("b", 0.51, 0.51, 0.51, 0.25, n=3)) == 1
    # one seed a side: no interval, no verdict
    assert V.compare(V.Stat("a", 0.99, 0.99, 0.99, 0.25, n=1), V.Stat("b", 0.30, 0.30, 0.30, 0.25, n=3)) == 0
    # neither learned: below the margin over chance nothing beats anything
    assert V.compare(V.Stat("a", 0.40, 0.40, 0.40, 0.25, n=3), V.Stat("b", 0.02, 0.02, 0.02, 0.25, n=3)) == 0


def test_a_side_with_no_spread_is_not_a_point():
    """Issue 38: three identical seeds a side gave a point interval ("+75.0 points, 95% interval
    +75.0 to +75.0"), though they are no evidence of no variance. Each side's standard deviation is
    taken as at least 1 percentage point: the interval has a width, a large difference keeps its
    verdict, two flat sides 8 points apart are no longer "alike", and a noisier side keeps its own
    spread."""
    floor = 0.01  # the rule's SD_FLOOR, written out
    a, b = V.Stat.of("a", [1.0] * 3, 0.25), V.Stat.of("b", [0.25] * 3, 0.25)
    iv = V.interval(a, b)
    half = 2.7764 * math.sqrt(2 * floor ** 2 / 3)  # t(0.975, 4 degrees of freedom)
    assert iv.df == pytest.approx(4.0) and iv.hi - iv.lo == pytest.approx(2 * half, abs=1e-4)
    assert V.diff_text(a, b) == "+75.0 points, 95% interval +72.7 to +77.3"
    assert V.conclusive(a, b) and V.beats(a, b)
    flat_a, flat_b = V.Stat.of("a", [0.90] * 3, 0.25), V.Stat.of("b", [0.82] * 3, 0.25)
    assert not V.alike_within(flat_a, flat_b) and not V.conclusive(flat_a, flat_b)
    noisy = I.welch(0.9, 0.1, 3, 0.3, 0.0, 3)  # the flat side at the floor, the noisy one as measured
    va, vb = 0.1 ** 2 / 3, floor ** 2 / 3
    assert noisy.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2))
    # the paper's rules say so, with the value
    assert "at least 1 percentage point" in V.rules_text()


def test_a_side_at_chance_stays_no_evidence_however_sure_the_interval():
    """The at-chance rules (issue 26) hold under the interval: thirty seeds each, a difference of
    70 points with an interval far from 0, and still no evidence where the claim does not predict
    the failure, or the loser never trained the winner's learning rate on every seed, or no model
    of its depth learns."""
    win = V.Stat.of("a", [0.97, 0.98, 0.99] * 10, 0.25, best_lr=1e-2, candidates=(1e-2,), peer_learns=True)
    lose = V.Stat.of("b", [0.26, 0.27, 0.28] * 10, 0.25, best_lr=1e-3, candidates=(1e-3, 3.16e-3), peer_learns=True)
    assert V.interval(win, lose).lo > 0.6 and V.beats(win, lose)
    c, why = V.compare_why(win, lose, predicted=False)
    assert c == 0 and "at chance, which the claim does not predict" in why
    c, why = V.compare_why(win, lose, predicted=True)
    assert c == 0 and "without having trained a's learning rate 0.01" in why
    covered = V.Stat.of("b", [0.26, 0.27, 0.28] * 10, 0.25, best_lr=1e-3, candidates=(1e-3, 1e-2), peer_learns=False)
    c, why = V.compare_why(win, covered, predicted=True)
    assert c == 0 and "no model of its depth and recipe learns" in why
    real = V.Stat.of("b", [0.26, 0.27, 0.28] * 10, 0.25, best_lr=1e-3, candidates=(1e-3, 1e-2), peer_learns=True)
    assert V.compare_why(win, real, predicted=True) == (1, "")


# --------------------------------------------------------------------------- window claims
def window_cells(a, b, accs_a, accs_b, lrs=(1e-3, 1e-2, 1e-1), seeds=(0,)):
    rows = []
    for m, accs in ((a, accs_a), (b, accs_b)):
        for lr, acc in zip(lrs, accs):
            rows += [(m, 64, 2, lr, s, acc) for s in seeds]
    best = [one(a, max(accs_a), n=2), one(b, max(accs_b), n=2)]
    return best, rows


@pytest.mark.parametrize("cid,a,bs", [("lrwindow", "attention", ["hyena", "mamba"]),
                                      ("copylr", "transformer_rope", ["mamba"]),
                                      ("deltanet", "deltanet", ["mamba2", "mamba"]),
                                      ("depth12", "attention", ["mamba"])])
def test_window_claims(cid, a, bs):
    task = "copy" if cid == "copylr" else "L64"
    metric = "final_exact_match" if cid == "copylr" else "final_accuracy"

    def make(accs_a, accs_b):
        best, cells = [], []
        for b in bs:
            bb, cc = window_cells(a, b, accs_a, accs_b)
            best += bb
            cells += cc
        best = [r[:7] + (task,) for r in dict.fromkeys(best)]
        cells = [r + (task,) for r in dict.fromkeys(cells)]
        return results(best, cells, metric=metric)

    assert verdict(cid, make([0.95, 0.99, 0.97], [0.02, 0.96, 0.10])) == "consistent"
    assert verdict(cid, make([0.02, 0.96, 0.10], [0.95, 0.99, 0.97])) == "contradicted"
    # every model good at the same single LR: windows of the same possible widths, undecided
    assert verdict(cid, make([0.02, 0.96, 0.10], [0.05, 0.97, 0.12])) == "inconclusive"


def test_window_claim_uses_the_mean_over_seeds_and_the_edges_uncertainty():
    best, cells = window_cells("attention", "mamba", [0.95, 0.99, 0.95], [0.02, 0.96, 0.88], seeds=(0, 1))
    cells = [c if not (c[0] == "mamba" and c[3] == 1e-1 and c[4] == 1) else c[:5] + (0.30,) for c in cells]
    # mamba at 1e-1: seeds 0.88 and 0.30, mean 0.59: not good; its window is 1e-2 alone, narrower
    # than 2 decades, while attention's spans at least 2; hyena, good everywhere tried, is undecided
    e = results(best + [one("hyena", 0.96, n=2)], cells + [("hyena", 64, 2, lr, 0, 0.96) for lr in (1e-3, 1e-2, 1e-1)])
    assert verdict("lrwindow", e) == "inconclusive"
    j = K.window_wider(e, "attention", ["mamba"])
    assert j.verdict == "consistent" and "wider in 1, narrower in 0" in j.compared
    # a window resolved only coarsely is no evidence: mamba good at 1e-2 and 1e-1, tried at
    # 1e-3 and 1: it may span up to 3 decades, attention's two at least (1e-3 to 1e-1, open)
    best, cells = window_cells("attention", "mamba", [0.95, 0.99, 0.95, 0.1], [0.02, 0.96, 0.95, 0.1],
                               lrs=(1e-3, 1e-2, 1e-1, 1.0))
    assert K.window_wider(results(best, cells), "attention", ["mamba"]).verdict == "inconclusive"


# --------------------------------------------------------------------------- fig2
def test_finegrid():
    zoo = [one("mamba", 0.30, w=64, n=2), one("hyena", 0.30, w=64, n=2)]
    assert verdict("finegrid", results([one("mamba", 0.95, n=2), one("hyena", 0.35, n=2)], zoo_rows=zoo)) == "consistent"
    # the fine grid at chance where Zoology's learned: contradicted, as a model of its depth and
    # recipe (attention) learns; with none learning, the failure may be the recipe's: no evidence
    assert verdict("finegrid", results([one("mamba", 0.05, n=2), one("hyena", 0.35, n=2), one("attention", 0.99, n=2)],
                                       zoo_rows=[one("mamba", 0.80, n=2), zoo[1]])) == "contradicted"
    assert verdict("finegrid", results([one("mamba", 0.05, n=2), one("hyena", 0.35, n=2)],
                                       zoo_rows=[one("mamba", 0.80, n=2), zoo[1]])) == "inconclusive"
    assert verdict("finegrid", results([one("mamba", 0.35, n=2)], zoo_rows=zoo)) == "inconclusive"


def test_attn2():
    assert verdict("attn2", results([one("attention", 0.99, w=w, n=2) for w in (64, 128)])) == "consistent"
    assert verdict("attn2", results([one("attention", 0.99, n=2), one("attention", 0.30, w=128, n=2)])) == "contradicted"
    assert verdict("attn2", results([one("attention", 0.99, n=2), one("attention", 0.70, w=128, n=2)])) == "inconclusive"


def test_attn2_is_judged_on_the_two_layer_rows_only():
    """Issue 38: a fig2 whose grid also trains 1-layer attention (at chance, as Sec. 4 finds for it)
    was "contradicted" by those rows; the claim is about 2-layer attention."""
    e = results([one("attention", 0.99, n=2), one("attention", 0.99, w=128, n=2), one("attention", 0.26, n=1)])
    fn = next(f for i, _, _, f in C.CLAIMS if i == "attn2")
    j = fn(e)
    assert j.verdict == "consistent" and j.compared.startswith("2 settings"), j.compared
    assert fn(results([one("attention", 0.26, n=1)])) is None  # no 2-layer attention trained: not judged


# --------------------------------------------------------------------------- fig3 / fig4
def test_attn1():
    assert verdict("attn1", results([one("attention", 0.26), one("mamba", 0.93)])) == "consistent"
    assert verdict("attn1", results([one("attention", 0.95), one("mamba", 0.93)])) == "contradicted"
    # neither learned (the demo's 0.24 vs 0.26): inconclusive
    assert verdict("attn1", results([one("attention", 0.26), one("mamba", 0.30)])) == "inconclusive"


def test_a_side_at_chance_is_evidence_only_where_its_search_covered_the_winners_learning_rate():
    """Issue 26: attention at chance counts against it only if its search trained Mamba's learning
    rate on every seed (its candidates' span) and a model of its depth and recipe learns."""
    e = results([one("attention", 0.26), one("mamba", 0.93)])
    e.best.loc[e.best["model"] == "attention", "candidates"] = "0.01;0.0316"  # never trained 1e-3 on every seed
    j = C.CLAIMS[[c[0] for c in C.CLAIMS].index("attn1")][3](e)
    assert j.verdict == "inconclusive" and "without having trained mamba's learning rate 0.001" in j.compared
    alone = results([one("attention", 0.26, n=2), one("mamba", 0.93, n=1)])  # no 2-layer model learns
    assert K.a_beats_b(alone, "mamba", "attention", predicted=True) is None or \
        V.failure_counts(V.Stat("mamba", 0.93, 0.93, 0.93, 0.25, 1e-3, (1e-3,), True),
                         V.Stat("attention", 0.26, 0.26, 0.26, 0.25, 1e-3, (1e-3,), False), True) != ""


def test_a_span_of_candidates_around_the_winners_rate_is_not_covering_it():
    """Issue 36: "at chance" is evidence only where the loser trained the winner's rate itself on
    every seed (a search candidate or the experiment's cover), not merely rates on either side of
    it (a narrow window may lie between them)."""
    e = results([one("attention", 0.26), one("mamba", 0.93)])
    e.best.loc[e.best["model"] == "mamba", "best_lr"] = 1.78e-3  # between attention's 1e-3 and 3.16e-3
    j = C.CLAIMS[[c[0] for c in C.CLAIMS].index("attn1")][3](e)
    assert j.verdict == "inconclusive" and "without having trained mamba's learning rate 0.00178" in j.compared
    e.best.loc[e.best["model"] == "attention", "candidates"] = "0.001;0.00178;0.00316"  # the cover's rate joined
    assert C.CLAIMS[[c[0] for c in C.CLAIMS].index("attn1")][3](e).verdict == "consistent"


def test_width():
    rows = [one("mamba", 0.30, w=16), one("hyena", 0.30, w=16), one("attention", 0.26, w=16)]
    assert verdict("width", results(rows + [one("mamba", 0.93, w=32), one("hyena", 0.35, w=32),
                                            one("attention", 0.26, w=32)])) == "consistent"
    assert verdict("width", results([one("mamba", 0.93, w=16), one("mamba", 0.30, w=32)])) == "contradicted"
    assert verdict("width", results([one("mamba", 0.20, w=16), one("mamba", 0.24, w=32)])) == "inconclusive"


def test_depth():
    assert verdict("depth", results([one("attention", 0.19, w=16, n=2), one("attention", 0.90, w=16, n=4),
                                     one("attention", 0.99, w=32, n=2)])) == "consistent"
    # the deep one at chance is evidence against only where a 4-layer model learns (the recipe can)
    assert verdict("depth", results([one("attention", 0.90, w=16, n=2), one("attention", 0.10, w=16, n=4)])) \
        == "inconclusive"
    assert verdict("depth", results([one("attention", 0.90, w=16, n=2), one("attention", 0.10, w=16, n=4),
                                     one("mamba", 0.95, w=16, n=4)])) == "contradicted"
    assert verdict("depth", results([one("attention", 0.19, w=16, n=2), one("attention", 0.20, w=16, n=4)])) \
        == "inconclusive"


@pytest.mark.parametrize("cid,task", [("widthdepth", "L64"), ("copywidth", "copy")])
def test_wide_against_deep(cid, task):
    metric = "final_exact_match" if task == "copy" else "final_accuracy"

    def make(wide, deep, deep_params=150, peer=0.0, deep_peer=None):
        deep_peer = [] if deep_peer is None else [one("attention", deep_peer, w=512, n=24, params=75e6, task=task)]
        return results([one("mamba", wide, w=1408, n=12, params=150e6, task=task),
                        one("mamba", deep, w=1024, n=24, params=deep_params * 1e6, task=task),
                        one("mamba", 0.0, w=1024, n=12, params=80e6, task=task),
                        one("attention", peer, w=1024, n=12, params=300e6, task=task)] + deep_peer, metric=metric)

    assert verdict(cid, make(1.00, 0.55)) == "consistent"
    # the deep one at chance: no evidence where no model of its depth learns (the scale may not let
    # any), nor where the claim does not predict the failure (issue 26): Fig. 4's claim on MQAR says
    # only that Mamba prefers width; Table 1's (Sec. 5) that the deep one "fails to copy"
    assert verdict(cid, make(1.00, 0.16)) == "inconclusive"
    assert "no evidence" in K.wide_beats_deep(make(1.00, 0.16), "mamba").compared
    assert verdict(cid, make(1.00, 0.16, deep_peer=0.0)) == "inconclusive"
    predicted = cid == "copywidth"
    assert verdict(cid, make(1.00, 0.16, deep_peer=0.99)) == ("consistent" if predicted else "inconclusive")
    why = K.wide_beats_deep(make(1.00, 0.16, deep_peer=0.99), "mamba", predicted=predicted).compared
    assert ("no evidence" in why) != predicted, why
    # the wide one at chance is against the claim where a model of its depth learns
    assert verdict(cid, make(0.16, 1.00)) == "inconclusive"
    assert verdict(cid, make(0.16, 1.00, peer=0.99)) == "contradicted"
    assert verdict(cid, make(0.60, 0.55)) == "inconclusive"
    # the demo's case: 0.24 against 0.04 at K=4, neither learned
    if task == "L64":
        assert verdict(cid, make(0.24, 0.04)) == "inconclusive"
    # no pair within a factor 1.5 of parameters: nothing to compare
    j = K.wide_beats_deep(make(1.0, 0.0, deep_params=400), "mamba")
    assert j.verdict == "inconclusive" and "factor 1.5" in j.compared


# --------------------------------------------------------------------------- tables 2-4
def test_conv():
    base = [one("attention", 0.02), one("attention_conv_qkv", 0.99), one("mamba", 0.99), one("mamba_noconv", 0.02)]
    assert verdict("conv", results(base)) == "consistent"
    assert verdict("conv", results(base[:3] + [one("mamba_noconv", 0.99), one("mamba", 0.40, w=128),
                                               one("mamba_noconv", 0.95, w=128)])) == "inconclusive"
    assert verdict("conv", results([one("attention", 0.99), one("attention_conv_qkv", 0.20)] + base[2:])) \
        == "contradicted"


def test_backbone():
    assert verdict("backbone", results([one("mamba", 0.99), one("mamba_nogate", 0.98), one("s6_mlp", 0.95)])) \
        == "consistent"
    assert verdict("backbone", results([one("mamba", 0.99), one("mamba_nogate", 0.30), one("s6_mlp", 0.98)])) \
        == "contradicted"
    # nothing learned (the demo's Table 2: all <= 0.26): alike, but not evidence
    assert verdict("backbone", results([one("mamba", 0.20), one("mamba_nogate", 0.17), one("s6_mlp", 0.22)])) \
        == "inconclusive"


def test_convkv():
    good = [one("attention", 0.02), one("attention_conv_qkv", 0.99), one("attention_conv_k", 0.99)]
    assert verdict("convkv", results(good + [one("attention_conv_v", 0.98), one("attention_conv_q", 0.02)])) \
        == "consistent"
    # the demo's Table 3: a causal conv on V alone cannot carry a key's value back to the key
    assert verdict("convkv", results(good + [one("attention_conv_v", 0.24), one("attention_conv_q", 0.25)])) \
        == "contradicted"
    assert verdict("convkv", results(good + [one("attention_conv_v", 0.99), one("attention_conv_q", 0.99)])) \
        == "inconclusive"
    # nothing learned: alike, but no evidence
    none = [one(m, 0.30) for m in ("attention_conv_qkv", "attention_conv_k", "attention_conv_v", "attention_conv_q")]
    assert verdict("convkv", results(none)) == "inconclusive"


def test_convkv_is_judged_under_each_reading_on_its_own_models():
    """Issue 36: Table 3 judged twice, causal and centred, each on its own models and labelled."""
    causal = [one("attention_conv_qkv", 0.99), one("attention_conv_k", 0.99), one("attention_conv_v", 0.24),
              one("attention_conv_q", 0.25)]
    centred = [one(f"{m}_centred", a) for m, a in (("attention_conv_qkv", 0.99), ("attention_conv_k", 0.99),
                                                     ("attention_conv_v", 0.99), ("attention_conv_q", 0.26))]
    e = results(causal + centred)
    assert verdict("convkv", e) == "contradicted" and verdict("convkvcentred", e) == "consistent"
    text = {cid: t for cid, _, t, _ in C.CLAIMS}
    assert "causal" in text["convkv"] and "centred" in text["convkvcentred"]
    fn = next(f for i, _, _, f in C.CLAIMS if i == "convkvcentred")
    assert fn(results(causal)) is None  # a scale without the centred models: not judged


def test_pe():
    ok = [one("mamba", 0.99), one("mamba_pe_rope", 0.97), one("hyena", 0.30), one("hyena_pe_rope", 0.32)]
    assert verdict("pe", results(ok)) == "consistent"
    assert verdict("pe", results(ok[:1] + [one("mamba_pe_rope", 0.40)])) == "contradicted"
    # the demo's Table 4: all 0.02-0.12, nothing learned
    assert verdict("pe", results([one("mamba", 0.12), one("mamba_pe_rope", 0.02), one("rwkv", 0.05),
                                  one("rwkv_pe_learned", 0.08)])) == "inconclusive"


def test_every_claim_is_tested_here():
    src = open(__file__).read()
    assert all(f'"{cid}"' in src for cid, *_ in C.CLAIMS)


def test_a_verdict_on_fewer_than_three_seeds_is_inconclusive():
    """The project's rule: never trust a verdict that rests on one seed."""
    e = results([one("attention", 0.26), one("mamba", 0.93)])
    assert C.judge({"fig3": e})[0]["verdict"] == "consistent"
    for n in (1, 2):  # two seeds with no noise: 67 points apart, an interval far from 0; still no verdict
        e.best["n_seeds"] = n
        row = next(r for r in C.judge({"fig3": e}) if r["id"] == "attn1")
        assert row["verdict"] == "inconclusive" and "fewer than 3" in row["compared"]
    assert V.compare_why(*[K.stat(e, r) for _, r in e.best.sort_values("mean", ascending=False).iterrows()],
                         predicted=True)[0] == 1  # the interval alone would have called it


def test_the_summary_counts_the_papers_claims_not_its_rows():
    # Table 3's claim is judged under two readings (two rows): the abstract counts the paper's 15
    from arrepro.report.prose import claims_summary
    assert set(C.READINGS) | set(C.READINGS.values()) <= {cid for cid, *_ in C.CLAIMS}
    n_claims = len({C.paper_claim(cid) for cid, *_ in C.CLAIMS})
    assert n_claims == len(C.CLAIMS) - len(C.READINGS)
    text = claims_summary(["consistent"] * 12 + ["contradicted"] + ["inconclusive"] * 3, 15, n_claims)
    assert text.startswith(f"This scale tests 15 of the paper's {n_claims} claims, in 16 rows")
    assert text.endswith("consistent with 12, contradict 1 and are inconclusive on 3")
    assert claims_summary(["consistent", "inconclusive"], 2, n_claims) == (
        f"This scale tests 2 of the paper's {n_claims} claims: our results are consistent with 1 and are inconclusive on 1")


def test_the_claims_of_an_experiment_judged_again_under_each_recipe():
    """judge_by_recipe: a claim_of experiment's rows of each recipe, at the named experiment's
    settings, judged by that experiment's claims; rows of another setting (Mamba 1x48) left out."""
    def recipe_rows(e, recipe, series):
        for df in (e.best, e.cells):
            df["recipe"], df["series"] = recipe, series
        return e

    def with_seeds(accs_a, accs_b):
        best, cells = window_cells("attention", "mamba", accs_a, accs_b, seeds=(0, 1, 2))
        return results(best, cells)

    fig1 = with_seeds([0.95, 0.99, 0.97], [0.02, 0.96, 0.10])
    sources = recipe_rows(with_seeds([0.95, 0.99, 0.97], [0.02, 0.96, 0.10]), "demo-aaa", "the sources' recipe")
    earlier = recipe_rows(with_seeds([0.02, 0.96, 0.10], [0.95, 0.99, 0.97]), "demo_prior-bbb", "the earlier recipe")
    other = recipe_rows(results([one("mamba", 0.9, w=48, n=1)], [("mamba", 48, 1, 1e-2, s, 0.9) for s in (0, 1, 2)]),
                        "demo-aaa", "the sources' recipe")
    both = Results("tablerecipe", {"title": "t", "grids": [{"series": "the sources' recipe"}, {"series": "the earlier recipe"}],
                                   "claims_of": ["fig1"]},
                   pd.concat([sources.best, earlier.best, other.best], ignore_index=True),
                   pd.concat([sources.cells, earlier.cells, other.cells], ignore_index=True), [], TASKS, cards=CARDS)
    rows = C.judge_by_recipe({"fig1": fig1, "tablerecipe": both}, {"demo-aaa": "demo", "demo_prior-bbb": "demo_prior"})
    assert [(r["recipe"], r["id"], r["verdict"]) for r in rows] == [("demo", "lrwindow", "consistent"),
                                                                    ("demo_prior", "lrwindow", "contradicted")]
    assert all(r["by"] == "tablerecipe" and r["exp"] == "fig1" for r in rows)
    assert C.judge_by_recipe({"fig1": fig1}, {}) == []  # no experiment asks for it


def test_a_verdict_counts_the_seeds_of_the_rows_it_compares():
    """Issue 55: judge took the fewest seeds over the whole experiment, so a one-seed row that no
    claim reads (here a 2-layer Hyena) made every claim of the experiment inconclusive "(on 1
    seed, fewer than 3: no verdict)". A claim counts the seeds of the rows it compares."""
    e = results([one("attention", 0.26), one("mamba", 0.93), one("hyena", 0.5, n=2)])
    e.best.loc[e.best["model"] == "hyena", "n_seeds"] = 1
    row = next(r for r in C.judge({"fig3": e}) if r["id"] == "attn1")
    assert row["verdict"] == "consistent", row["compared"]
    e.best.loc[e.best["model"] == "mamba", "n_seeds"] = 2  # a row the claim compares: no verdict
    row = next(r for r in C.judge({"fig3": e}) if r["id"] == "attn1")
    assert row["verdict"] == "inconclusive" and "(on 2 seeds, fewer than 3: no verdict)" in row["compared"]
    # every kind of claim says which seeds its rows rest on
    w = results([one("attention", 0.95, n=2), one("mamba", 0.95, n=2), one("hyena", 0.5, n=2)],
                [("attention", 64, 2, lr, 0, a) for lr, a in ((1e-3, 0.95), (1e-2, 0.95))]
                + [("mamba", 64, 2, 1e-3, 0, 0.95)])
    w.best.loc[w.best["model"] == "hyena", "n_seeds"] = 1
    assert K.window_wider(w, "attention", ["mamba"]).seeds == 3
    assert K.window_wider(w, "attention", ["mamba", "hyena"]).seeds == 1
    assert K.solves_everywhere(w, "attention").seeds == 3


def test_an_interval_on_accuracies_stays_within_100_points_and_a_nan_spread_is_refused():
    """Issue 55: 100% against 0% on three seeds a side read "+97.7 to +102.3" points, and a NaN
    standard deviation got no floor ("95% interval +NaN to +NaN")."""
    top, zero = V.Stat.of("a", [1.0] * 3, 0.25), V.Stat.of("b", [0.0] * 3, 0.25)
    assert V.diff_text(top, zero) == "+100.0 points, 95% interval +97.7 to +100.0"
    assert V.diff_text(zero, top) == "-100.0 points, 95% interval -100.0 to -97.7"
    assert V.beats(top, zero) and V.interval(top, zero).df == pytest.approx(4.0)
    with pytest.raises(ValueError, match="sd of a nan is not a finite number"):
        V.diff_text(V.Stat("a", 0.9, 0.9, 0.9, 0.25, sd=math.nan, n=3), zero)
    with pytest.raises(ValueError, match="mean of b inf"):
        I.welch(0.9, 0.1, 3, math.inf, 0.1, 3)


def test_the_floor_decides_two_flat_sides_8_points_apart_by_their_seeds_as_the_docs_say():
    """The 1-point floor: two flat sides 8 points apart are not alike on 3 seeds a side, alike from 4
    on; the docs state the case with its seed count and its intervals (computed here)."""
    texts = []
    for n, alike_ in ((3, False), (4, True), (5, True)):
        a, b = V.Stat.of("a", [0.90] * n, 0.25), V.Stat.of("b", [0.82] * n, 0.25)
        assert V.alike_within(a, b) == alike_, n
        iv = V.interval(a, b)
        texts.append(f"{100 * iv.lo:+.1f} to {100 * iv.hi:+.1f}")
    demo = " ".join((ROOT / "docs" / "reference" / "claims.md").read_text().split())
    doc = " ".join(I.__doc__.split())
    for text in (demo, doc):
        assert f"on 3 seeds a side the interval is {texts[0]}" in text and f"from 4 seeds on" in text
        assert f"{texts[1]} on 4" in text
