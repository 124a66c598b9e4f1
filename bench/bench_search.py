"""A benchmark of the learning-rate protocol itself, on synthetic settings with the paper's shapes.

Each setting is an accuracy curve over log10(learning rate) with per-cell seed noise, seen by the
project's own search code (``arrepro.search.protocol.run``, round by round as the workflow runs it) with
the spec config.yaml gives the paper's best-over-LR searches (``lr_searches.best``), and by the
protocol of an earlier commit (default c6e7164, "today's" when issue 26 was filed: search on one
seed, settle near ties on two more, report the five at the chosen rate), loaded from git.

The world (``--settings`` of them, drawn from ``--seed``): MQAR with K = 4 (chance 0.25); windows
of good learning rates 0.2-0.5 decades wide (mean >= 0.9 at the peak), peaks anywhere in
[1e-5, 1e-1]; also peaks that learn without being good, two peaks, plateaus, cells that diverge
above a learning rate, settings where every cell diverges, settings that learn nothing. Every
cell's accuracy has seed noise; in ``--fail`` of the cells (default a fifth) the seed fails and
stays at chance. The same world answers both protocols and the literal grid.

Printed per protocol: cells per setting (mean, max), and two gaps of the reported number (the
protocol's own statistic): to the five-seed statistic over every learning rate the search tried
(max over them of the mean over all five seeds, as if each had them), and to the statistic the
literal paper grid reports (config.yaml's ``lr_grids.fine``, every rate on every seed). Gaps
count shortfalls only (an adaptive search may beat the grid). Target (issue 26): mean gap to the
literal grid <= 0.01 and over 0.10 in under 2% of settings.

    python bench/bench_search.py [--settings 600] [--seed 0] [--fail 0.2] [--set budget=17 ...]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import random
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arrepro.search import protocol, thresholds  # noqa: E402
from arrepro.search.rounds import search_spec  # noqa: E402

SEEDS = (42, 123, 777, 456, 789)  # the paper's five
CHANCE = 0.25  # MQAR, K = 4
KINDS = ("narrow", "learned", "two peaks", "plateau", "diverge above", "all diverged", "not learned")
WEIGHTS = (0.40, 0.12, 0.12, 0.12, 0.12, 0.04, 0.08)


@dataclass(frozen=True)
class World:
    """One synthetic setting: the mean accuracy at each log10 learning rate, and its cells."""

    ident: int
    kind: str
    bumps: tuple[tuple[float, float, float], ...]  # (centre, sigma, height) in log10 lr
    diverge_above: float  # log10 lr above which a cell diverges (inf: never)
    fail: float  # a seed's (or a cell's) chance of failing at chance
    noise: float  # seed noise (sd)
    fail_mode: str = "seed"  # seed: a failed seed stays at chance at every learning rate; cell: each cell on its own

    def mean(self, lr: float) -> float:
        x = math.log10(lr)
        return CHANCE + max(((h - CHANCE) * math.exp(-0.5 * ((x - c) / s) ** 2) for c, s, h in self.bumps),
                            default=0.0)

    def cell(self, lr: float, seed: int) -> float | None:
        """A cell's accuracy (None: diverged); deterministic in (setting, lr, seed)."""
        if math.log10(lr) > self.diverge_above:
            return None
        rng = _rng(f"{self.ident}/{lr:.6g}/{seed}")
        failed = _rng(f"{self.ident}/{seed}").random() < self.fail if self.fail_mode == "seed" else rng.random() < self.fail
        if failed:
            return max(0.0, CHANCE + rng.gauss(0, 0.02))
        return min(1.0, max(0.0, self.mean(lr) + rng.gauss(0, self.noise)))

    def statistic(self, lrs) -> float:
        """max over ``lrs`` of the mean over every seed (the paper's A.2)."""
        return max(sum(0.0 if (a := self.cell(lr, s)) is None else a for s in SEEDS) / len(SEEDS) for lr in lrs)


def _rng(key: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


def sigma_for(width: float, height: float, good: float = thresholds.GOOD) -> float:
    """The bump's sigma whose mean reaches ``good`` over ``width`` decades."""
    return (width / 2) / math.sqrt(2 * math.log((height - CHANCE) / (good - CHANCE)))


def draw(i: int, rng: random.Random, fail: float, peaks=(-4.0, -1.0), fail_mode: str = "seed") -> World:
    kind = rng.choices(KINDS, WEIGHTS)[0]
    centre = lambda: rng.uniform(*peaks)  # noqa: E731
    noise = rng.uniform(0.02, 0.08)
    h = rng.uniform(0.95, 1.0)
    narrow = (centre(), sigma_for(rng.uniform(0.2, 0.5), h), h)
    bumps, above = (narrow,), math.inf
    if kind == "learned":  # learns, never good
        bumps = ((centre(), rng.uniform(0.15, 0.4), rng.uniform(0.5, 0.85)),)
    elif kind == "two peaks":
        h2 = rng.uniform(0.6, 1.0)
        other = (narrow[0] + rng.choice((-1, 1)) * rng.uniform(0.6, 1.5), sigma_for(rng.uniform(0.2, 0.5), max(h2, 0.92)), h2)
        bumps = (narrow, other)
    elif kind == "plateau":
        bumps = ((centre(), rng.uniform(0.5, 1.0), 1.0),)
    elif kind == "diverge above":
        above = narrow[0] + rng.uniform(0.1, 1.0)
    elif kind == "all diverged":
        bumps, above = (), -9.0
    elif kind == "not learned":
        bumps = ()
    return World(i, kind, bumps, above, fail, noise, fail_mode)


def old_protocol(commit: str):
    """arrepro.search as it was at ``commit`` (from git), and its paper spec."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:src/arrepro/search.py"], check=True,
                         capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"search_{commit}", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{commit}:src/arrepro/search.py", "exec"), mod.__dict__)
    sp = mod.SearchSpec(start=(3.16e-4, 1e-3, 3.16e-3, 1e-2), lo=1e-5, hi=1e-1, resolution=0.25, rounds=2,
                        per_round=2, search_seeds=SEEDS[:1], seeds=SEEDS, window=False, tie=0.1, tie_seeds=2,
                        plateau=0.99, learned=thresholds.learned_threshold(CHANCE), good=thresholds.GOOD)

    def run(world: World):
        rounds, results = [], {}
        while True:
            nxt, state = mod.decide(sp, rounds, results)
            if nxt is None:
                break
            for c in nxt.cells:
                results[c] = world.cell(*c)
            rounds.append(nxt)
        at = [0.0 if (a := results[(state.chosen, s)]) is None else a for s in SEEDS]
        return sum(at) / len(at), sorted({lr for lr, _ in results}), len(results)
    return run


def new_protocol(overrides: dict, tier: str | None = None):
    """The project's search with config.yaml's ``lr_searches.best`` (``overrides`` on top) for a
    setting of cost ``tier`` (its ``tier_budget``)."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    entry = {**cfg["lr_searches"]["best"], **overrides}
    sp = search_spec(entry, entry["start"], SEEDS, thresholds.learned_threshold(CHANCE), thresholds.GOOD, tier)

    def run(world: World):
        rounds, state, results = protocol.run(sp, world.cell)
        reported = state.points[state.chosen] if state.points else 0.0
        return reported, sorted({lr for lr, _ in results}), len(results)
    return run, sp


LEARNED = thresholds.learned_threshold(CHANCE)


def measure(run, worlds, grid_stat) -> dict:
    cells, gap_tried, gap_grid, learned, by_kind = [], [], [], [], {}
    for w, g in zip(worlds, grid_stat):
        reported, tried, n = run(w)
        cells.append(n)
        gap_tried.append(max(0.0, w.statistic(tried) - reported))
        gap_grid.append(max(0.0, g - reported))
        learned.append(max(g, reported) >= LEARNED)  # else both at chance: their difference is noise
        by_kind.setdefault(w.kind, []).append(gap_grid[-1])
    n, gl = len(cells), [x for x, ok in zip(gap_grid, learned) if ok]
    return {"cells": sum(cells) / n, "cells_max": max(cells), "tried": sum(gap_tried) / n,
            "tried_over": sum(x > 0.1 for x in gap_tried) / n, "grid": sum(gap_grid) / n,
            "grid_over": sum(x > 0.1 for x in gap_grid) / n, "by_kind": by_kind,
            "learned": sum(gl) / len(gl), "learned_over": sum(x > 0.1 for x in gl) / len(gl), "n_learned": len(gl)}


def met(m: dict) -> bool:
    return m["grid"] <= 0.01 and m["grid_over"] < 0.02


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fail", type=float, default=0.2, help="a seed's chance of failing (default 0.2)")
    ap.add_argument("--fail-mode", choices=("seed", "cell"), default="seed",
                    help="seed (default): a failed seed stays at chance at every learning rate; cell: each cell fails on its own")
    ap.add_argument("--peaks", type=float, nargs=2, default=(1e-4, 1e-2), metavar=("LO", "HI"),
                    help="the peaks' centres, uniform in log10 between these (default Zoology's sweep, 1e-4 to 1e-2)")
    ap.add_argument("--old", default="c6e7164", help="the commit whose protocol is today's (default c6e7164)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=YAML",
                    help="override keys of lr_searches.best for the new protocol (e.g. budget=17)")
    a = ap.parse_args(argv)
    overrides = {k: yaml.safe_load(v) for k, v in (x.split("=", 1) for x in a.set)}
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    grid = [float(x) for x in cfg["lr_grids"]["fine"]]
    rng = random.Random(a.seed)
    peaks = (math.log10(a.peaks[0]), math.log10(a.peaks[1]))
    worlds = [draw(i, rng, a.fail, peaks, a.fail_mode) for i in range(a.settings)]
    new, sp = new_protocol(overrides)
    big, sp_big = new_protocol(overrides, "big")
    curve, _ = new_protocol({**overrides, "search_seeds": "all", "budget": 0})
    protocols = {f"today ({a.old})": old_protocol(a.old), f"new, budget {sp.max_cells()}": new,
                 f"new, big tier {sp_big.max_cells()}": big, "every seed (a curve)": curve}
    print(f"{a.settings} synthetic settings (seed {a.seed}; {', '.join(f'{k} {w:.0%}' for k, w in zip(KINDS, WEIGHTS))}); "
          f"peaks between {a.peaks[0]:g} and {a.peaks[1]:g}; a {a.fail_mode} fails at chance with probability {a.fail:g}; "
          f"five seeds; the literal grid: lr_grids.fine ({len(grid)} rates x 5 seeds = {5 * len(grid)} cells)")
    print(f"the new protocol (config.yaml lr_searches.best{', ' + str(overrides) if overrides else ''}): "
          f"start {list(sp.start)}, range [{sp.lo:g}, {sp.hi:g}], {sp.rounds} rounds of {sp.per_round}, "
          f"ladder {[list(x) for x in sp.ladder]}, budget {sp.max_cells()} (big tier {sp_big.max_cells()})")
    grid_stat = [w.statistic(grid) for w in worlds]
    rows = {name: measure(run, worlds, grid_stat) for name, run in protocols.items()}
    nl = rows[next(iter(rows))]["n_learned"]
    head = (f"{'protocol':>24} | {'cells mean':>10} {'max':>4} | {'gap to tried: mean':>18} {'>0.10':>6} | "
            f"{'gap to grid: mean':>17} {'>0.10':>6} | target | {f'where either learns ({nl}): mean':>28} {'>0.10':>6}")
    print(head)
    print("-" * len(head))
    for name, m in rows.items():
        print(f"{name:>24} | {m['cells']:10.2f} {m['cells_max']:4d} | {m['tried']:18.4f} {m['tried_over']:6.1%} | "
              f"{m['grid']:17.4f} {m['grid_over']:6.1%} | {'met' if met(m) else 'not met':>6} | "
              f"{m['learned']:28.4f} {m['learned_over']:6.1%}")
    print("gap to the literal grid by kind of setting (mean; share over 0.10):")
    for kind in KINDS:
        parts = [f"{name.split(',')[0].split(' (')[0]} {sum(xs) / len(xs):.4f} ({sum(x > 0.1 for x in xs) / len(xs):.0%})"
                 for name, m in rows.items() if (xs := m["by_kind"].get(kind))]
        print(f"  {kind:>14} ({len(rows[next(iter(rows))]['by_kind'].get(kind, []))}): " + "; ".join(parts))
    print("target (issue 26): mean gap to the literal grid <= 0.01, over 0.10 in under 2% of settings. The last two "
          "columns leave out settings where both the grid's number and the protocol's are under the learned threshold "
          f"({LEARNED:.4f}): a difference between two numbers at chance is noise (the grid's max over more rates is "
          "higher by chance alone)")


if __name__ == "__main__":
    main()
