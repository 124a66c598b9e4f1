"""The learning-rate protocol checked on real cells: for each setting a scale searches, the literal
grid's statistic (``lr_protocol: grid``: each grid's ``lrs`` on every seed, the best mean) beside
the search's (the best candidate's mean over every seed), with the cells each spent and the seed
spread that a difference must exceed to mean anything (``make protocol-check``; docs/reference/protocol.md quotes
the demo's table). A search that falls short of the literal grid beyond the seed spread fails the
check (``verdict``: ``make protocol-check`` then exits 1, naming each).

Pure apart from reading cells and search files; no pandas needed beyond the table it writes.
"""
from __future__ import annotations

from arrepro.config.cellfiles import RESULT
from arrepro.config.grid import ConfigError
from arrepro.search.protocol import means
from arrepro.search.rounds import Searches, read_accuracy


def _stat(results: dict, lrs, seeds) -> tuple[float, float, float]:
    """(best mean over every seed, its learning rate, its max-min spread over seeds)."""
    m = means(results, lrs, seeds)
    lr = max(sorted(m), key=lambda x: m[x])
    accs = [0.0 if results[(lr, s)] is None else results[(lr, s)] for s in seeds]
    return m[lr], lr, max(accs) - min(accs)


def selection(grid, searches: Searches | None = None) -> list[tuple]:
    """The searches the check covers and the literal grid each is held against: [(search, lrs)].
    The scale's ``protocol_check`` (config.yaml: ``lrs``, a grid finer than the searches' start so
    that it can catch a missed window; ``experiments``, the experiments whose searches it covers)
    or, without one, every search against its own grid's ``lrs``. One entry per search: a setting
    that several series share is checked once."""
    searches = searches or Searches(grid)
    check = grid.scale.get("protocol_check") or {}
    where = f"scales.{grid.scale_name}.protocol_check"
    wanted = check.get("experiments")
    unknown = sorted(set(wanted or ()) - set(grid.experiments))
    if unknown:
        raise ConfigError(f"{where}.experiments: unknown experiment(s) {unknown}; known: {sorted(grid.experiments)}")
    out: dict[str, tuple] = {}
    for (exp, i), found in searches.by_grid.items():
        if wanted is not None and exp not in wanted:
            continue
        g = grid.experiments[exp]["grids"][i]
        lrs = grid.lrs({"lrs": check["lrs"]} if "lrs" in check else g, f"{where}" if "lrs" in check else
                       f"scales.{grid.scale_name}.experiments.{exp}.grids[{i}]")
        for s in found:
            if s.spec.rounds and s.key not in out:  # a fixed grid is its own literal grid
                out[s.key] = (s, tuple(lrs))
    return [out[k] for k in sorted(out)]


def literal_cells(grid, searches: Searches | None = None) -> list:
    """Every cell the check's literal grids train (for the rule's input)."""
    cells = {}
    for s, lrs in selection(grid, searches):
        for lr in lrs:
            for seed in s.spec.seeds:
                c = s.setting.cell(lr, seed)
                cells[c.path] = c
    return list(cells.values())


def compare(grid, reports: dict[str, dict]) -> list[dict]:
    """One row per search the check covers (``selection``): ``reports`` maps each search key
    (``rounds.Search.key``) to its decision file (``rounds.write_reports``); the literal grid's
    cells are read from the cells."""
    rows = []
    for s, lrs in selection(grid):
        rep = reports[s.key]
        setting, metric = s.setting, s.metric
        seeds = tuple(rep["spec"]["seeds"])
        results = {(lr, seed): a for lr, seed, a in rep["state"]["results"]}
        points = dict(map(tuple, rep["state"]["points"]))
        chosen = rep["state"]["chosen_lr"]
        accs = [results[(chosen, x)] or 0.0 for x in seeds]
        cells = {(lr, x): read_accuracy(f"{setting.cell(lr, x).path}/{RESULT}", metric) for lr in lrs for x in seeds}
        g, g_lr, g_spread = _stat(cells, lrs, seeds)
        rows.append({"task": setting.task, "model": setting.model, "width": setting.width, "layers": setting.layers,
                     "search": points[chosen], "search_lr": chosen, "search_spread": max(accs) - min(accs),
                     "search_cells": len(results), "search_outcome": rep["state"].get("outcome", ""),
                     "grid": g, "grid_lr": g_lr, "grid_spread": g_spread,
                     "grid_cells": len(cells), "grid_lrs": ";".join(f"{x:.3g}" for x in lrs),
                     "shared_cells": len(set(cells) & set(results)),
                     "difference": points[chosen] - g,
                     "within_spread": abs(points[chosen] - g) <= max(max(accs) - min(accs), g_spread)})
    return rows


def markdown(rows: list[dict], task_names: dict | None = None) -> str:
    """The table as docs/reference/protocol.md quotes it."""
    head = ("| setting | search: statistic (lr, cells) | literal grid: statistic (lr, cells) | difference | "
            "within the seed spread |\n|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        name = (task_names or {}).get(r["task"], r["task"])
        lines.append(f"| {r['model']} {r['layers']}x{r['width']} ({name}) | {r['search']:.3f} ({r['search_lr']:.3g}, "
                     f"{r['search_cells']}) | {r['grid']:.3f} ({r['grid_lr']:.3g}, {r['grid_cells']}) | "
                     f"{r['difference']:+.3f} | {'yes' if r['within_spread'] else 'no'} |")
    spent = sum(r["search_cells"] for r in rows), sum(r["grid_cells"] for r in rows)
    shared = sum(r.get("shared_cells", 0) for r in rows)
    short = shortfalls(rows)
    grids = sorted({r["grid_lrs"] for r in rows})
    lines.append(f"\n{len(rows)} search{'' if len(rows) == 1 else 'es'}; cells: the searches {spent[0]}, the literal grid{'s' if len(grids) > 1 else ''} "
                 f"{spent[1]} ({shared} of them shared with the searches); the literal grid: "
                 f"{' | '.join(g.replace(';', ', ') for g in grids)}; shortfalls beyond the seed spread: {len(short)}")
    return "\n".join(lines)


def shortfalls(rows: list[dict]) -> list[dict]:
    """The rows whose search falls short of the literal grid by more than the seed spread."""
    return [r for r in rows if r["difference"] < 0 and not r["within_spread"]]


def verdict(rows: list[dict]) -> tuple[int, str]:
    """The check's exit status and its line: 1 where a search falls short of the literal grid
    beyond the seed spread (each named, with both statistics), else 0."""
    short = shortfalls(rows)
    if not short:
        return 0, f"protocol check passed: no search of {len(rows)} falls short of the literal grid beyond the seed spread"
    named = "; ".join(f"{r['model']} {r['layers']}x{r['width']} on {r['task']}: the search {r['search']:.3f} (lr "
                      f"{r['search_lr']:.3g}), the literal grid {r['grid']:.3f} (lr {r['grid_lr']:.3g}), "
                      f"{r['difference']:+.3f} beyond a spread of {max(r['search_spread'], r['grid_spread']):.3f}"
                      for r in short)
    return 1, f"protocol check failed: {len(short)} of {len(rows)} searches fall short of the literal grid beyond the seed spread: {named}"

