"""What a scale of config.yaml asks a cluster for, in all: the learning-rate protocol's cells,
Slurm jobs, GPU-hours (CPU-hours for a CPU scale) and disk (round 0, and the most its round budgets allow), beside the fixed
grid's, from the cost model of each cell (arrepro.config.costs) and its packs (arrepro.cluster.packs)::

    python -m arrepro.cluster.budget [SCALE] [--cells] [--json] [--cells-per-gpu N] ...
"""
from __future__ import annotations

import math

from arrepro.config.costs import CELL_FILE_BYTES, CHECKPOINT_BYTES_PER_PARAMETER, EPOCH_FILE_BYTES, SHARE_SLOWDOWN, WEIGHTS_BYTES_PER_PARAMETER, _size, cells_per_gpu_of, estimate_seconds, group, group_components, mem_mb, parameters, runtime_min, setting_spec, sharing
from arrepro.config.catalogue import ROOT
from arrepro.config.checks import load_grid
from arrepro.search.cover import max_cells as cover_max_cells
from arrepro.search.rounds import Searches, search_cells, start_round
from arrepro.cluster.packs import packs


# ------------------------------------------------------------------------------ the plan
def plan(grid, cells=None, cells_per_gpu: int = 1) -> dict:
    """Cells, Slurm jobs of the train rule, and hours for an ``arrepro.config.grid.Grid`` (all its
    cells, or the given ones), with ``cells_per_gpu`` cells sharing a GPU in grouped jobs.

    ``requested_hours``: the wall time Slurm is asked for, summed over cells as they run (a pack
    of shared cells counts once, at its longest cell); ``gpu_hours``: the same for CUDA cells;
    ``estimated_gpu_hours``: the estimates without safety factor, a shared cell counting for
    1/N of its GPU's time (``_mps``: if the shared cells' kernels run side by side, under MPS);
    ``cpu_hours`` and ``estimated_cpu_hours``: requested and estimated for the other cells (one
    CPU core each)."""
    cells = grid.all_cells() if cells is None else list(cells)
    pack_list = list(packs(grid, cells_per_gpu, cells).values())
    in_pack = {c: members for members in pack_list for c in members}
    per_group: dict[str | None, int] = {}
    minutes = gpu_minutes = estimated = estimated_mps = grouped = grouped_mps = cpu_minutes = estimated_cpu = 0.0
    for c in cells:
        spec = grid.spec_of(c)
        n = sharing(spec, cells_per_gpu)
        members = in_pack.get(c, [c])
        g = group(spec)
        per_group[g] = per_group.get(g, 0) + 1
        # a pack's time is its longest cell's, counted once: each member adds its 1/len share
        m = max(runtime_min(grid.spec_of(x), 1, cells_per_gpu) for x in members) / len(members)
        minutes += m
        if spec.get("device") == "cuda":
            gpu_minutes += m
            estimated += estimate_seconds(spec, n) / 60 / n
            estimated_mps += estimate_seconds(spec, n, mps=True) / 60 / n
            if g is not None:
                grouped += estimate_seconds(spec, n) / 60 / n
                grouped_mps += estimate_seconds(spec, n, mps=True) / 60 / n
        else:
            cpu_minutes += m
            estimated_cpu += estimate_seconds(spec) / 60
    bundles = group_components()
    packs_per_group: dict[str, int] = {}
    for members in pack_list:
        g = group(grid.spec_of(members[0]))
        packs_per_group[g] = packs_per_group.get(g, 0) + 1
    components = {g: packs_per_group.get(g, n) if cells_per_gpu > 1 else n for g, n in per_group.items() if g}
    jobs = per_group.get(None, 0) + sum(math.ceil(n / bundles[g]) for g, n in components.items())
    return {"cells": len(cells), "train_jobs": jobs, "cells_by_group": per_group, "cells_per_gpu": cells_per_gpu,
            "requested_hours": minutes / 60, "gpu_hours": gpu_minutes / 60, "estimated_gpu_hours": estimated / 60,
            "estimated_gpu_hours_mps": estimated_mps / 60, "grouped_gpu_hours": grouped / 60,
            "grouped_gpu_hours_mps": grouped_mps / 60, "cpu_hours": cpu_minutes / 60,
            "estimated_cpu_hours": estimated_cpu / 60}


def unit(grid) -> str:
    """What a scale's cells run on, as its hours are counted: "CPU" for a CPU scale (one core a
    cell), else "GPU"."""
    return "CPU" if grid.scale.get("device") == "cpu" else "GPU"


def search_kind(spec) -> str:
    """A search's kind for the plan's breakdown (how many seeds search, window or not, rounds)."""
    if not spec.rounds:
        return f"fixed grid, {'every seed' if spec.search_seeds == spec.seeds else f'{len(spec.search_seeds)} seed(s)'}"
    seeds = "every seed" if spec.search_seeds == spec.seeds else f"{len(spec.search_seeds)} seed(s)"
    return f"search on {seeds}{', window' if spec.window else ''}"


def protocol_plan(grid, cells_per_gpu: int = 1, protocol: str | None = None) -> dict:
    """The learning-rate protocol's cost (arrepro.search.rounds): round 0 (its cells are known: the
    train jobs and hours of ``plan``) and the most the searches' round budgets allow (every
    search spends its whole budget; a cell's estimate does not depend on its learning rate or
    seed), with a breakdown by search kind; and the fixed grid's (lr_protocol: grid) for
    comparison. Hours as in ``plan``: requested (with the safety factor) and estimated, in the
    scale's ``unit``: the keys say ``gpu_hours`` for a GPU scale, ``cpu_hours`` for a CPU scale."""
    u = unit(grid)
    h = f"{u.lower()}_hours"
    searches = Searches(grid, protocol)
    r0 = plan(grid, searches.round0_cells(), cells_per_gpu)
    fixed = plan(grid, grid.all_cells(), cells_per_gpu)
    r0_cells = {s.key: len(set(search_cells(s, [start_round(s)]))) for s in searches.searches.values()}
    kinds: dict[str, dict] = {}
    max_cells = est_max = req_max = 0.0
    for s in searches.searches.values():
        spec = setting_spec(grid, s.setting)
        n = s.spec.max_cells()
        est, req = estimate_seconds(spec) / 3600, runtime_min(spec, 1, cells_per_gpu) / 60
        k = kinds.setdefault(search_kind(s.spec), {"settings": 0, "cells_round0": 0, "cells_max": 0,
                                                     f"{h}_estimated_max": 0.0})
        k["settings"] += 1
        k["cells_round0"] += r0_cells[s.key]
        k["cells_max"] += n
        k[f"{h}_estimated_max"] += est * n
        max_cells += n
        est_max += est * n
        req_max += req * n
    # the covers (arrepro.search.cover): in an experiment with `cover: N`, each setting at most N
    # learning rates on its seeds, at its own cost (every setting at chance: a bound, not a forecast)
    cover_cells = cover_est = cover_req = 0.0
    for exp, e in grid.experiments.items():
        for s in dict.fromkeys(s for _, s in searches.of_experiment(exp)) if e.get("cover", 0) else ():
            spec, n = setting_spec(grid, s.setting), cover_max_cells([len(s.spec.seeds)], e["cover"])
            cover_cells += n
            cover_est += n * estimate_seconds(spec) / 3600
            cover_req += n * runtime_min(spec, 1, cells_per_gpu) / 60
    if cover_cells:
        kinds["cover (settings at chance at their rivals' best rates)"] = {
            "settings": 0, "cells_round0": 0, "cells_max": int(cover_cells), f"{h}_estimated_max": cover_est}
        max_cells += cover_cells
        est_max += cover_est
        req_max += cover_req
    shared = sum(r0_cells.values()) - r0["cells"]  # round-0 cells two searches share, counted once
    est_key, req_key = ("estimated_gpu_hours", "gpu_hours") if u == "GPU" else ("estimated_cpu_hours", "cpu_hours")
    return {"scale": grid.scale_name, "unit": u, "protocol": searches.protocol, "searches": len(searches.searches),
            "groups": {g: len(v) for g, v in sorted(searches.groups.items())},
            "cells_round0": r0["cells"], "train_jobs_round0": r0["train_jobs"],
            f"{h}_estimated_round0": r0[est_key], f"{h}_requested_round0": r0[req_key],
            "cells_max": int(max_cells - shared), f"{h}_estimated_max": est_max,
            f"{h}_requested_max": req_max, "by_kind": kinds,
            "cells_fixed_grid": fixed["cells"], f"{h}_estimated_fixed_grid": fixed[est_key],
            f"{h}_requested_fixed_grid": fixed[req_key], "cells_per_gpu": cells_per_gpu,
            "ratio_cells_to_fixed_grid": (max_cells - shared) / max(fixed["cells"], 1),
            f"ratio_{h}_to_fixed_grid": est_max / max(fixed[est_key], 1e-9)}


def disk_plan(grid, in_flight: int, protocol: str | None = None) -> dict:
    """The most disk the learning-rate protocol's cells take, in bytes, when every search spends
    its whole round budget: their files (``files``); the checkpoints of the ``in_flight`` largest
    cells training at once, each twice while it is rewritten (``checkpoints``: a cell's model
    and optimiser state is replaced by a record of a few KB once its result is sealed); every
    cell's final weights (``weights``: only with the config's keep_weights)."""
    files = weights = 0
    sizes = []
    for s in Searches(grid, protocol).searches.values():
        spec = setting_spec(grid, s.setting)
        n, p = s.spec.max_cells(), parameters(spec)
        files += n * (CELL_FILE_BYTES + EPOCH_FILE_BYTES * int(spec["recipe_def"]["epochs"]))
        weights += n * p * WEIGHTS_BYTES_PER_PARAMETER
        sizes += [2 * p * CHECKPOINT_BYTES_PER_PARAMETER] * min(n, in_flight)
    checkpoints = sum(sorted(sizes, reverse=True)[:in_flight])
    return {"files": files, "checkpoints": checkpoints, "weights": weights, "in_flight": in_flight}


def _at_least_one(text: str) -> int:
    """argparse type of --cells-per-gpu: the same rule as the config key (``cells_per_gpu_of``)."""
    import argparse

    try:
        return cells_per_gpu_of({"cells_per_gpu": int(text)})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1") from None


def disk_line(d: dict, keep_weights: bool) -> str:
    """``disk_plan``'s report line: the most disk the plan needs, with its parts."""
    total = d["files"] + d["checkpoints"] + (d["weights"] if keep_weights else 0)
    kept = "kept" if keep_weights else "not kept (keep_weights: false)"
    return (f"disk at most (every round budget spent): {_size(total / 1e6)} = the cells' files {_size(d['files'] / 1e6)}"
            f" + the checkpoints of the {d['in_flight']} largest cells training at once {_size(d['checkpoints'] / 1e6)}"
            f" + final weights {_size(d['weights'] / 1e6)}, {kept}")


def _main(argv=None) -> None:  # pragma: no cover - a report for people
    import argparse
    import json
    from pathlib import Path

    import yaml

    ap = argparse.ArgumentParser(prog="python -m arrepro.cluster.budget",
                                 description="Print what a scale of config.yaml asks a cluster for: the learning-rate "
                                             "protocol's cells and GPU-hours (round 0, and the most its round budgets "
                                             "allow), and the fixed grid's for comparison.")
    ap.add_argument("scale", nargs="?", default="paper")
    ap.add_argument("--config", default=str(ROOT / "config.yaml"))
    ap.add_argument("--protocol", choices=("search", "grid"), help="override the config's lr_protocol")
    ap.add_argument("--cells", action="store_true", help="one line per distinct cell shape")
    ap.add_argument("--json", action="store_true", help="the protocol's plan as one JSON object (1 cell per GPU)")
    ap.add_argument("--cells-per-gpu", type=_at_least_one, default=4, metavar="N",
                    help="also plan N grouped cells sharing a GPU (the profile's CELLS_PER_GPU; default 4)")
    ap.add_argument("--in-flight", type=_at_least_one, default=200, metavar="N",
                    help="cells training at once, for the disk their checkpoints take (default 200: the Slurm "
                         "profile's jobs)")
    ap.add_argument("--keep-weights", action="store_true", help="count every cell's final weights (config keep_weights)")
    a = ap.parse_args(argv)
    cfg = yaml.safe_load(Path(a.config).read_text())
    grid = load_grid(cfg, a.scale)
    if a.json:
        print(json.dumps(protocol_plan(grid, 1, a.protocol), indent=1))
        return
    if a.cells:
        seen = set()
        print(f"{'task':>28} {'model':>16} {'w':>5} {'l':>2} {'est min':>8} {'req min':>8} {'mem MB':>7} group")
        for c in grid.all_cells():
            spec = grid.spec_of(c)
            key = (c.task, c.model, c.width, c.layers, c.recipe)
            if key in seen:
                continue
            seen.add(key)
            print(f"{c.task:>28} {c.model:>16} {c.width:>5} {c.layers:>2} {estimate_seconds(spec) / 60:8.1f} "
                  f"{runtime_min(spec):8d} {mem_mb(spec):7d} {group(spec) or '-'}")
    pp = protocol_plan(grid, 1, a.protocol)
    u = pp["unit"]
    h = f"{u.lower()}_hours"
    f = ".0f" if u == "GPU" else ".3g"  # a CPU scale's hours are small
    print(f"scale {a.scale}, lr_protocol {pp['protocol']}: {pp['searches']} settings searched in groups {pp['groups']}")
    print(f"  round 0: {pp['cells_round0']} cells ({pp['train_jobs_round0']} Slurm jobs), "
          f"{pp[h + '_estimated_round0']:{f}} {u}-hours estimated ({pp[h + '_requested_round0']:{f}} requested)")
    print(f"  at most (every round budget spent): {pp['cells_max']} cells, {pp[h + '_estimated_max']:{f}} {u}-hours "
          f"estimated ({pp[h + '_requested_max']:{f}} requested)")
    for kind, k in pp["by_kind"].items():
        print(f"    {kind:>32}: {k['settings']:4d} settings, round 0 {k['cells_round0']:5d} cells, at most "
              f"{k['cells_max']:5d} cells, {k[h + '_estimated_max']:6{f}} {u}-hours")
    print(f"  the fixed grid (lr_protocol: grid, every lr on every seed): {pp['cells_fixed_grid']} cells, "
          f"{pp[h + '_estimated_fixed_grid']:{f}} {u}-hours estimated ({pp[h + '_requested_fixed_grid']:{f}} requested)")
    if pp[h + "_estimated_fixed_grid"] > 0:
        print(f"  the protocol at most, against the fixed grid: {pp['ratio_cells_to_fixed_grid']:.2f} of its cells, "
              f"{pp['ratio_' + h + '_to_fixed_grid']:.2f} of its {u}-hours")
    searches_r0 = Searches(grid, a.protocol).round0_cells()
    if u == "CPU":  # one core a cell: no GPU to share
        p = plan(grid, searches_r0)
        print(f"round 0: {p['cells']} cells -> {p['train_jobs']} jobs for training ({p['cells_by_group']}); "
              f"{p['requested_hours']:.3g} hours requested; estimated use {p['estimated_cpu_hours']:.3g} CPU-hours "
              "(one core a cell)")
    for n in dict.fromkeys((1, a.cells_per_gpu)) if u == "GPU" else ():
        p = plan(grid, searches_r0, cells_per_gpu=n)
        mps = f", {p['estimated_gpu_hours_mps']:.0f} if their kernels overlap (MPS)" if n > 1 else ""
        mps_small = f", {p['grouped_gpu_hours_mps']:.0f} with MPS" if n > 1 else ""
        print(f"round 0, {n} cell(s) per GPU: {p['cells']} cells -> {p['train_jobs']} Slurm jobs for training "
              f"({p['cells_by_group']}); {p['requested_hours']:.0f} hours requested ({p['gpu_hours']:.0f} GPU-hours); "
              f"estimated use {p['estimated_gpu_hours']:.0f} GPU-hours{mps}; of these, the grouped (small) cells "
              f"{p['grouped_gpu_hours']:.0f}{mps_small}")
    print(disk_line(disk_plan(grid, a.in_flight, a.protocol), a.keep_weights or cfg.get("keep_weights", False)))
    if u == "CPU":
        print("All estimates: the wall-time model of src/arrepro/config/costs.py (CPU constants measured on a 2-core "
              "machine; requests add its safety factor).")
    else:
        print("All estimates, none measured (no GPU here): the wall-time model of src/arrepro/config/costs.py (GPU constants "
              "for one A100/H100-class GPU, calibrated to the paper's '10 minutes to 18 hours' per run; requests add its "
              f"safety factor); with N > 1 also its sharing model (time slicing, or MPS; SHARE_SLOWDOWN = {SHARE_SLOWDOWN}).")


if __name__ == "__main__":  # pragma: no cover
    _main()
