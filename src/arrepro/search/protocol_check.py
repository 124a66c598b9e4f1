"""The learning-rate protocol checked on real cells: for each setting a scale searches, the literal
grid's statistic (``lr_protocol: grid``: each grid's ``lrs`` on every seed, the best mean) beside
the search's (the best candidate's mean over every seed), with the cells each spent and the seed
spread that a difference must exceed to mean anything (``make protocol-check``; docs/protocol.md quotes
the demo's table).

Pure apart from reading cells and search files; no pandas needed beyond the table it writes.
"""
from __future__ import annotations

from arrepro.config.cellfiles import RESULT
from arrepro.config.grid import Setting
from arrepro.search.protocol import means
from arrepro.search.rounds import Searches, read_accuracy


def _stat(results: dict, lrs, seeds) -> tuple[float, float, float]:
    """(best mean over every seed, its learning rate, its max-min spread over seeds)."""
    m = means(results, lrs, seeds)
    lr = max(sorted(m), key=lambda x: m[x])
    accs = [0.0 if results[(lr, s)] is None else results[(lr, s)] for s in seeds]
    return m[lr], lr, max(accs) - min(accs)


def compare(grid, reports: dict[str, dict]) -> list[dict]:
    """One row per search setting: ``reports`` maps each search key (``rounds.Search.key``) to its
    decision file (``rounds.write_reports``); the literal grid's cells are read from the cells."""
    literal = Searches(grid, "grid")
    by_setting = {}
    for s in literal.searches.values():
        by_setting.setdefault((s.setting, s.metric), []).append(s)
    rows = []
    for key, rep in sorted(reports.items()):
        setting, metric = Setting(**rep["setting"]), rep["metric"]
        seeds = tuple(rep["spec"]["seeds"])
        results = {(lr, seed): a for lr, seed, a in rep["state"]["results"]}
        points = dict(map(tuple, rep["state"]["points"]))
        chosen = rep["state"]["chosen_lr"]
        accs = [results[(chosen, s)] or 0.0 for s in seeds]
        for fixed in by_setting.get((setting, metric), []):
            lrs = fixed.spec.start
            cells = {(lr, s): read_accuracy(f"{setting.cell(lr, s).path}/{RESULT}", metric) for lr in lrs for s in seeds}
            g, g_lr, g_spread = _stat(cells, lrs, seeds)
            rows.append({"task": setting.task, "model": setting.model, "width": setting.width, "layers": setting.layers,
                         "search": points[chosen], "search_lr": chosen, "search_spread": max(accs) - min(accs),
                         "search_cells": len(results), "grid": g, "grid_lr": g_lr, "grid_spread": g_spread,
                         "grid_cells": len(cells), "grid_lrs": ";".join(f"{x:.3g}" for x in lrs),
                         "difference": points[chosen] - g,
                         "within_spread": abs(points[chosen] - g) <= max(max(accs) - min(accs), g_spread)})
    return rows


def markdown(rows: list[dict], task_names: dict | None = None) -> str:
    """The table as docs/protocol.md quotes it."""
    head = ("| setting | search: statistic (lr, cells) | literal grid: statistic (lr, cells) | difference | "
            "within the seed spread |\n|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        name = (task_names or {}).get(r["task"], r["task"])
        lines.append(f"| {r['model']} {r['layers']}x{r['width']} ({name}) | {r['search']:.3f} ({r['search_lr']:.3g}, "
                     f"{r['search_cells']}) | {r['grid']:.3f} ({r['grid_lr']:.3g}, {r['grid_cells']}) | "
                     f"{r['difference']:+.3f} | {'yes' if r['within_spread'] else 'no'} |")
    spent = sum(r["search_cells"] for r in rows), sum(r["grid_cells"] for r in rows)
    short = [r for r in rows if r["difference"] < 0 and not r["within_spread"]]
    lines.append(f"\n{len(rows)} settings; cells: the search {spent[0]}, the literal grid {spent[1]} (shared cells "
                 f"count for both); shortfalls beyond the seed spread: {len(short)}")
    return "\n".join(lines)
