"""Cells per GPU (src/arrepro/cluster/packs.py, src/arrepro/config/costs.py,
workflow/rules/gpushare.smk, slurm/profile.yaml).

The plan: `python -m arrepro.cluster.budget paper` prints GPU-hours for 1 and N cells per GPU that
add up from the per-cell estimates; a pack holds at most N grouped cells of one setting; a shared
cell asks for its GPU as the string gres "gpu:1", a big cell keeps gpu=1; with N = 1 nothing
changes. The numbers: two tiny cells trained at once, as a pack runs them inside a Slurm job
(one local Snakemake with as many cores as cells), end with exactly the numbers of the same cells
trained apart, each its own job (the test session's finished tiny run).
"""
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_slurm import SNAKEMAKE, assert_as_trained_apart, assert_ran_at_once
from workflow_copy import copy_workflow

from arrepro.cluster import budget, packs
from arrepro.config import costs
from arrepro.config.grid import Grid
from arrepro.search.rounds import Searches

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper(config):
    grid = Grid(config, "paper")
    return grid, [(c, grid.cell_spec(**vars(c))) for c in grid.all_cells()]


def setting(cell) -> str:
    return cell.path.rsplit("/", 1)[0]


# ============================================================================ the plan
def test_one_cell_per_gpu_is_the_sum_of_the_cells(paper):
    grid, cells = paper
    p = budget.plan(grid)
    assert p["cells"] == len(cells)
    assert p["requested_hours"] == pytest.approx(sum(costs.runtime_min(s) for _, s in cells) / 60)
    assert p["gpu_hours"] == pytest.approx(sum(costs.runtime_min(s) for _, s in cells if s["device"] == "cuda") / 60)
    assert p["estimated_gpu_hours"] == pytest.approx(sum(costs.estimate_seconds(s) for _, s in cells) / 3600)
    groups = [costs.group(s) for _, s in cells]
    bundles = costs.group_components()
    assert p["train_jobs"] == groups.count(None) + sum(
        math.ceil(groups.count(g) / bundles[g]) for g in set(groups) - {None})


@pytest.mark.parametrize("n", [2, 4])
def test_n_cells_per_gpu_adds_up_from_the_packs(paper, n):
    """Requested: a big cell its own time; a pack its longest cell's time, once. Used: a shared
    cell 1/N of its (longer) shared time."""
    grid, cells = paper
    by_setting = {}
    for c, s in cells:
        by_setting.setdefault(setting(c), []).append((c, s))
    requested = estimated = estimated_mps = 0.0
    n_packs = jobs = 0
    bundles = costs.group_components()
    packs_by_group = {}
    for members in by_setting.values():
        g = costs.group(members[0][1])
        if g is None:
            requested += sum(costs.runtime_min(s) for _, s in members)
            estimated += sum(costs.estimate_seconds(s) for _, s in members)
            estimated_mps += sum(costs.estimate_seconds(s) for _, s in members)
            jobs += len(members)
            continue
        k = math.ceil(len(members) / n)
        n_packs += k
        packs_by_group[g] = packs_by_group.get(g, 0) + k
        requested += k * costs.runtime_min(members[0][1], 1, n)  # one setting: one estimate
        estimated += sum(costs.estimate_seconds(s, n) for _, s in members) / n
        estimated_mps += sum(costs.estimate_seconds(s, n, mps=True) for _, s in members) / n
    jobs += sum(math.ceil(k / bundles[g]) for g, k in packs_by_group.items())

    p, p1 = budget.plan(grid, cells_per_gpu=n), budget.plan(grid)
    assert len(packs.packs(grid, n)) == n_packs
    assert p["requested_hours"] == pytest.approx(requested / 60)
    assert p["gpu_hours"] == pytest.approx(requested / 60)  # the paper grid is all on CUDA
    assert p["estimated_gpu_hours"] == pytest.approx(estimated / 3600)
    assert p["estimated_gpu_hours_mps"] == pytest.approx(estimated_mps / 3600)
    assert p["train_jobs"] == jobs < p1["train_jobs"]
    # sharing only changes the small cells; with MPS their GPU time drops, time-sliced it cannot
    assert p["estimated_gpu_hours"] - p["grouped_gpu_hours"] == pytest.approx(
        p1["estimated_gpu_hours"] - p1["grouped_gpu_hours"])
    assert p["grouped_gpu_hours_mps"] < p1["grouped_gpu_hours"] <= p["grouped_gpu_hours"]


def test_the_printed_plan_is_the_plan(paper):
    grid, _ = paper
    out = subprocess.run([sys.executable, "-m", "arrepro.cluster.budget", "paper", "--cells-per-gpu", "3"], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    lines = {int(m[1]): m for m in re.finditer(
        r"(\d+) cell\(s\) per GPU: (\d+) cells -> (\d+) Slurm jobs .*?; (\d+) hours requested \((\d+) GPU-hours\); "
        r"estimated use (\d+) GPU-hours", out)}
    assert sorted(lines) == [1, 3], out
    round0 = Searches(grid).round0_cells()  # the printed Slurm plan is the learning-rate search's round 0
    for n, m in lines.items():
        p = budget.plan(grid, round0, cells_per_gpu=n)
        assert [int(x) for x in m.groups()[1:]] == [p["cells"], p["train_jobs"], round(p["requested_hours"]),
                                                     round(p["gpu_hours"]), round(p["estimated_gpu_hours"])]
    assert "none measured" in out and f"{budget.plan(grid, round0, cells_per_gpu=3)['estimated_gpu_hours_mps']:.0f} if" in out
    assert budget.disk_line(budget.disk_plan(grid, in_flight=200), keep_weights=False) in out  # the disk (issue 23)


def test_the_disk_plan_counts_checkpoints_in_flight_and_weights_only_if_kept(paper):
    """Issue 23: a finished cell keeps its files and a record of a few KB, not its model and
    optimiser state. The most disk the plan needs: every cell's files, the checkpoints of the
    largest cells training at once (twice while one is rewritten), and every cell's final weights
    with keep_weights."""
    grid, _ = paper
    settings = [(s.spec.max_cells(), costs.parameters(grid.cell_spec(s.setting.task, s.setting.model, s.setting.width,
                                                                 s.setting.layers, s.setting.recipe, "1e-3", 0)))
                for s in Searches(grid).searches.values()]
    biggest = max(p for _, p in settings)
    one, many = budget.disk_plan(grid, in_flight=1), budget.disk_plan(grid, in_flight=200)
    assert one["checkpoints"] == 2 * 12 * biggest
    assert 2 * 12 * biggest < many["checkpoints"] <= 200 * 2 * 12 * biggest
    assert many["weights"] == sum(4 * n * p for n, p in settings) == one["weights"]
    assert one["files"] == many["files"] < 1e9  # the cells' own files: a few KB each
    assert "final weights" in budget.disk_line(many, True) and "not kept" in budget.disk_line(many, False)


# ============================================================================ the model
def test_a_shared_cell_is_never_faster_and_only_overhead_is_won_back(paper):
    _, cells = paper
    small = next(s for _, s in cells if costs.group(s) == "cells_10min")
    for s in (small, max((s for _, s in cells), key=costs.estimate_seconds)):
        alone = costs.estimate_seconds(s)
        for n in (2, 4, 8):
            assert costs.estimate_seconds(s, n) >= alone
            assert alone <= costs.estimate_seconds(s, n, mps=True) <= costs.estimate_seconds(s, n)
    # launch-bound (tiny model, many steps): N of them take little more than one
    launch_bound = {**small, "width": 16, "layers": 1}
    assert costs.estimate_seconds(launch_bound, 4) / 4 < 0.5 * costs.estimate_seconds(launch_bound)
    # arithmetic-bound on a full-width model: time slicing wins nothing
    wide = {**small, "width": 2048}
    assert costs.estimate_seconds(wide, 4) / 4 >= costs.estimate_seconds(wide)


def test_shared_cells_ask_for_one_gpu_as_a_string(paper):
    _, cells = paper
    small = next(s for _, s in cells if costs.group(s) is not None)
    big = next(s for _, s in cells if costs.group(s) is None)
    for s in (small, big):  # one cell per GPU: as before
        assert (costs.gpus(s), costs.gres(s), costs.sharing(s), costs.runtime_min(s, 1, 1)) == (1, "", 1, costs.runtime_min(s))
    assert (costs.gpus(small, 4), costs.gres(small, 4), costs.sharing(small, 4)) == (0, "gpu:1", 4)
    dev = costs.DEVICES["cuda"]
    assert costs.runtime_min(small, 1, 4) == max(dev.floor_min, 5 * math.ceil(costs.estimate_seconds(small, 4) * dev.safety / 300))
    assert (costs.gpus(big, 4), costs.gres(big, 4), costs.sharing(big, 4), costs.runtime_min(big, 2, 4)) == (1, "", 1, costs.runtime_min(big, 2))
    cpu = {**small, "device": "cpu"}
    assert (costs.gpus(cpu, 4), costs.gres(cpu, 4)) == (0, "")


@pytest.mark.parametrize("n", [2, 5])
def test_packs_hold_at_most_n_small_cells_of_one_setting(paper, n):
    grid, cells = paper
    by_marker = packs.packs(grid, n)
    packed = [c for members in by_marker.values() for c in members]
    assert len(packed) == len(set(packed)) == sum(1 for _, s in cells if costs.group(s) is not None)
    for marker, members in by_marker.items():
        assert 1 <= len(members) <= n and {setting(c) for c in members} == {marker.rsplit("/", 1)[0]}
        assert re.fullmatch(rf"{re.escape(setting(members[0]))}/gpu-pack{n}-\d+\.done", marker)
        assert members == sorted(members, key=lambda c: (float(c.lr), c.seed))
    assert packs.packs(grid, 1) == {}


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5, True, None])
def test_cells_per_gpu_must_be_a_whole_number(bad):
    with pytest.raises(ValueError, match="cells_per_gpu"):
        costs.cells_per_gpu_of({"cells_per_gpu": bad})
    assert costs.cells_per_gpu_of({}) == 1 and costs.cells_per_gpu_of({"cells_per_gpu": 3}) == 3


# ============================================================================ the numbers
def test_cells_trained_at_once_end_as_cells_trained_apart(config, tmp_path, tmp_path_factory):
    grid = Grid(config, "tiny")
    marker, cells = next((m, c) for m, c in packs.packs(grid, 2).items() if len(c) == 2)
    together = copy_workflow(tmp_path / "together", whole=True)
    # at once: the pack's component in one local Snakemake with two cores, as in a Slurm job's step
    run = subprocess.run(SNAKEMAKE + [marker, "--cores", "2", "--config", "scale=tiny", "cells_per_gpu=2"],
                         cwd=together, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert_ran_at_once(run.stderr + run.stdout, 2)
    assert_as_trained_apart(together, cells, tmp_path_factory)


# --------------------------------------------------------------------------- the learning-rate protocol
def test_the_paper_scale_on_the_search_protocol_stays_within_its_budget(config):
    """Issue 30's budget holds for the searches: every budget spent, at most 11,000 cells and
    13,500 estimated GPU-hours. The covers (issue 36: a setting at chance also trained at its
    rivals' best rates) come on top, bounded as if every covered setting stayed at chance; with
    them the whole plan stays under 0.55 of the literal grid's GPU-hours under the same cost model
    (README: 0.51). The fixed grid (lr_protocol: grid) is the literal grid."""
    grid = Grid(config, "paper")
    pp = budget.protocol_plan(grid)
    cover = next(v for k, v in pp["by_kind"].items() if k.startswith("cover"))
    assert cover["cells_max"] > 0
    search_cells = pp["cells_max"] - cover["cells_max"]
    search_hours = pp["gpu_hours_estimated_max"] - cover["gpu_hours_estimated_max"]
    assert pp["protocol"] == "search" and pp["cells_round0"] < search_cells <= 11_000
    assert search_hours <= 13_500
    assert pp["gpu_hours_estimated_max"] < 0.55 * pp["gpu_hours_estimated_fixed_grid"]
    assert pp["ratio_gpu_hours_to_fixed_grid"] == pytest.approx(
        pp["gpu_hours_estimated_max"] / pp["gpu_hours_estimated_fixed_grid"])
    assert pp["cells_fixed_grid"] == len(grid.all_cells()) > pp["cells_max"]
    fixed = budget.protocol_plan(grid, protocol="grid")
    fixed_cover = next(v for k, v in fixed["by_kind"].items() if k.startswith("cover"))["cells_max"]
    # the literal grid, and on top its covers' bound (a rival's best rate that is not a grid point
    # of the setting at chance): the covers are planned under either protocol
    assert fixed["cells_round0"] == fixed["cells_max"] - fixed_cover == pp["cells_fixed_grid"]


def test_the_plan_prints_as_json_for_scripts():
    import json

    p = subprocess.run([sys.executable, "-m", "arrepro.cluster.budget", "paper", "--json"], capture_output=True, text=True,
                       cwd=ROOT, check=True)
    plan = json.loads(p.stdout)
    assert {"cells_round0", "cells_max", "gpu_hours_estimated_round0", "gpu_hours_estimated_max",
            "gpu_hours_requested_max", "by_kind", "cells_fixed_grid"} <= set(plan)
    assert sum(k["cells_max"] for k in plan["by_kind"].values()) >= plan["cells_max"]


def test_a_cpu_scale_counts_cpu_hours_and_prints_no_gpu_figure():
    """Issue 32: `budget demo` printed 4.09 "GPU-hours" and a ratio of 4.1e9 for a CPU scale."""
    import yaml

    from arrepro.config.checks import load_grid

    out = subprocess.run([sys.executable, "-m", "arrepro.cluster.budget", "demo"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=300).stdout
    assert "CPU-hours" in out and "GPU" not in out, out
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    pp = budget.protocol_plan(load_grid(cfg, "demo"))
    assert pp["unit"] == "CPU" and not any(k.startswith("gpu_hours") for k in pp)
    assert 0 < pp["cpu_hours_estimated_fixed_grid"] and 0.1 < pp["ratio_cpu_hours_to_fixed_grid"] < 10
    assert f"{pp['cpu_hours_estimated_max']:.3g} CPU-hours estimated" in out
