"""The learning-rate searches of a scale, and their rounds as files the workflow runs.

Every grid of an experiment either names a search (``search: NAME``, a key of config.yaml's
``lr_searches``) or is a fixed grid (its ``lrs`` on every seed). ``lr_protocol: grid`` (the
literal reading of the paper's A.2) turns every grid into its fixed grid. A *setting* is (task,
model, width, layers, recipe); each setting a grid covers gets a search (``arrepro.search.protocol``), its
spec resolved from the config. A setting that several grids search with the same start grid,
range and resolution is searched ONCE, with the most demanding of their specs: the most search
seeds, the window resolved if any asks for it, the most rounds (a best-over-LR figure then
reports the search that a learning-rate curve of the same setting ran on every seed). Different
start grids (two fixed grids, say) are different searches; their cells are shared where they
coincide.

Searches run in rounds, per *group* of settings: of similar cost (the resource tiers of
``arrepro.config.costs``: a round waits for its slowest cell, so a 10-minute cell does not wait for
an 18-hour one) and serving the same experiments (so that one figure's target trains only its
own searches' cells). Round 0 is known from the config; round r >= 1 of a group is decided by one job
(the workflow's checkpoint ``search_round``) from the results of every earlier cell of the
group's searches, and written to ``{out}/searches/rounds/{group}/round{r}.json``: each search's
spec, its rounds so far (cells and the reason for each) and its state. The group's last round
(``final_round``) adds no cells: it holds every search's outcome. ``write_reports`` writes one
file per search (every round's learning rates, accuracies and reasons).

Pure Python (no torch): the Snakefile imports it.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass

from arrepro.config.cellfiles import METRICS, RESULT, read_result
from arrepro.config.costs import GROUP_TIERS, group, setting_spec
from arrepro.config.grid import CELL_ROOT, Cell, ConfigError, Grid, Setting, schema_defaults, short_hash
from arrepro.files import UnreadableFile
from arrepro.search.plans import Plan, write_report
from arrepro.search.protocol import Round, SearchSpec, SpecError, State, cells_of, decide, state_window
from arrepro.search.protocol.spec import close_rounds, start_step, window_rounds
from arrepro.search.thresholds import GOOD, chance_level, learned_threshold

PROTOCOLS = ("search", "grid")
SEARCH_DEFAULTS = schema_defaults("search")  # an lr_searches entry's defaults: the config schema's
MERGEABLE = ("search_seeds", "window", "rounds", "per_round", "ladder", "budget", "scan", "scan_seeds", "scan_range")  # merged to the most demanding (the scan: the lead spec's)
BIG = "big"  # the group of cells too big to share a Slurm job (arrepro.config.costs.group is None)


@dataclass(frozen=True)
class Search:
    setting: Setting
    spec: SearchSpec
    metric: str
    group: str

    @functools.cached_property
    def id(self) -> str:
        return "s" + short_hash({"spec": self.spec.as_dict(), "metric": self.metric})

    @functools.cached_property
    def key(self) -> str:
        """Unique within a scale: the setting's folder (below results/cells) and the search id."""
        return f"{self.setting.path.removeprefix(CELL_ROOT + '/')}/{self.id}"

    def report_path(self, out: str) -> str:
        return f"{out}/searches/{self.key}.json"


class Searches:
    """Every search of a grid's scale, its groups and rounds."""

    def __init__(self, grid: Grid, protocol: str | None = None):
        self.grid = grid
        self.protocol = protocol or grid.config.get("lr_protocol", schema_defaults()["lr_protocol"])
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"lr_protocol: {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        self.by_grid: dict[tuple[str, int], list[Search]] = {}
        wanted: dict[tuple[Setting, str], list[tuple[SearchSpec, str]]] = {}
        for exp, e in grid.experiments.items():
            metric = grid.metric(exp)
            for i, g in enumerate(e["grids"]):
                where = f"scales.{grid.scale_name}.experiments.{exp}.grids[{i}]"
                for setting in settings_of(grid, g):
                    wanted.setdefault((setting, metric), []).append((self._spec(g, setting, metric, where), where))
        resolved: dict[tuple[Setting, str, str], Search] = {}  # (setting, metric, core) -> its search
        for (setting, metric), specs in wanted.items():
            for spec in merge([s for s, _ in specs]):
                resolved[(setting, metric, _core_key(spec))] = Search(setting, spec, metric, "")
        for exp, e in grid.experiments.items():  # each grid's searches: the merged one of its own spec
            metric = grid.metric(exp)
            for i, g in enumerate(e["grids"]):
                where = f"scales.{grid.scale_name}.experiments.{exp}.grids[{i}]"
                self.by_grid[(exp, i)] = [resolved[(st, metric, _core_key(self._spec(g, st, metric, where)))].key
                                          for st in settings_of(grid, g)]
        # groups: settings of one cost tier serving the same experiments (so that a figure's target
        # runs the rounds of its own searches only)
        serves: dict[str, set[str]] = {}
        for (exp, _), keys in self.by_grid.items():
            for k in keys:
                serves.setdefault(k, set()).add(exp)
        self.searches: dict[str, Search] = {}
        for s in resolved.values():
            group = f"{self._tier(s.setting)}-{'+'.join(sorted(serves[s.key]))}"
            self.searches[s.key] = dataclasses.replace(s, group=group)
        self.by_grid = {k: [self.searches[key] for key in keys] for k, keys in self.by_grid.items()}
        self.groups: dict[str, list[Search]] = {}
        for s in self.searches.values():
            self.groups.setdefault(s.group, []).append(s)

    # -- resolving the config --------------------------------------------------------------
    def _spec(self, g: dict, setting: Setting, metric: str, where: str) -> SearchSpec:
        return _cached_spec(self, json.dumps(g, sort_keys=True, default=str), setting, metric, where)

    def _spec_uncached(self, g: dict, setting: Setting, metric: str, where: str) -> SearchSpec:
        cfg = self.grid.config
        seeds = tuple(int(s) for s in g["seeds"])
        task = self.grid.tasks[setting.task]
        chance = chance_level(task, metric)
        learned = learned_threshold(chance)
        lrs = self.grid.lrs(g, where)
        name = g.get("search") if self.protocol == "search" else None
        if name is None:  # a fixed grid: every learning rate on every seed
            return search_spec({"rounds": 0, "search_seeds": "all"}, lrs, seeds, learned, GOOD)
        key = f"lr_searches.{name}"
        if name not in cfg.get("lr_searches", {}):
            raise ConfigError(f"{where}.search: unknown search {name!r}; known: {sorted(cfg.get('lr_searches', {}))}")
        d = cfg["lr_searches"][name]
        start = self.grid.lrs({"lrs": d["start"]}, f"{key}.start") if "start" in d else lrs
        if d.get("close") and not d.get("scan", SEARCH_DEFAULTS["scan"]):  # at chance it would stop at its start rates
            raise ConfigError(f"{key}.scan: a curve (close: true) needs a scan: without one, a curve at chance on its start "
                              "grid ends 'not learned' after its start rates, though a window may lie elsewhere in its range; "
                              f"give scan (decades: e.g. {start_step(start, d.get('resolution', SEARCH_DEFAULTS['resolution'])):g}, its start grid's "
                              f"step) and scan_range (used by {where})")
        n = d.get("search_seeds", SEARCH_DEFAULTS["search_seeds"])
        if n != "all" and n > len(seeds):
            raise ConfigError(f"{key}.search_seeds: {n} is more than the {len(seeds)} seed(s) of {where}")
        tiers = [t.name for t in GROUP_TIERS] + [BIG]
        unknown = sorted(set(d.get("tier_budget", {})) - set(tiers))
        if unknown:
            raise ConfigError(f"{key}.tier_budget: unknown cost tier(s) {unknown}; known: {tiers}")
        try:
            return search_spec(d, start, seeds, learned, GOOD, self._tier(setting))
        except SpecError as err:
            raise ConfigError(f"{key}.{err.field}: {err.message} (used by {where})") from None
        except ValueError as err:
            raise ConfigError(f"{key}: {err} (used by {where})") from None

    def _tier(self, setting: Setting) -> str:
        return group(setting_spec(self.grid, setting)) or BIG

    # -- what the workflow asks ------------------------------------------------------------
    def of_experiment(self, exp: str) -> list[tuple[str, Search]]:
        """(series, search) of every grid of an experiment, in config order."""
        out = []
        for i, g in enumerate(self.grid.experiments[exp]["grids"]):
            out += [(g.get("series", "main"), s) for s in self.by_grid[(exp, i)]]
        return out

    def experiment_groups(self, exp: str) -> list[str]:
        return sorted({s.group for _, s in self.of_experiment(exp)})

    def experiment_cells(self, exp: str, plans: dict[str, Plan]) -> list[Cell]:
        """The cells of an experiment's searches, every round's, from the last plan of each of its
        groups (``plans``: group -> Plan)."""
        return list(dict.fromkeys(c for _, s in self.of_experiment(exp)
                                  for c in search_cells(s, plans[s.group].rounds(s.key))))

    def experiment_series(self, exp: str) -> list[dict]:
        """Each series of an experiment and the keys of its grids' searches, in config order (the
        aggregate rule's param)."""
        series: dict[str, list[str]] = {}
        for name, s in self.of_experiment(exp):
            series.setdefault(name, []).append(s.key)
        return [{"series": k, "searches": list(dict.fromkeys(v))} for k, v in series.items()]

    def missing_cell_files(self, experiments) -> list[str]:
        """The result and metrics files that do not exist now, of the cells of ``experiments`` (the
        Snakefile gives those whose tables exist) as their searches' last plans list them: on a
        fresh run this lists nothing, and the planning stays as fast. An unreadable plan lists
        nothing here (it is rebuilt, and its cells with it)."""
        plans: dict[str, Plan | None] = {}
        cells: dict[Cell, None] = {}
        for e in experiments:
            for _, s in self.of_experiment(e):
                path = Plan.path(self.grid.out, s.group, self.final_round(s.group))
                if path not in plans:
                    try:
                        plans[path] = Plan.read(path) if os.path.exists(path) else None
                    except UnreadableFile:
                        plans[path] = None
                if plans[path] is not None and s.key in plans[path].searches:
                    cells.update(dict.fromkeys(search_cells(s, plans[path].rounds(s.key))))
        files = (f"{c.path}/{name}" for c in cells for name in (RESULT, METRICS))
        return [f for f in files if not os.path.exists(f)]

    def final_round(self, group: str) -> int:
        """The round whose plan adds no cell to any search of the group: start, every round a
        search may take after it (``SearchSpec.max_rounds``), then this one."""
        return max(s.spec.max_rounds for s in self.groups[group]) + 1

    def round0_cells(self) -> list[Cell]:
        """Every cell of round 0, once (what a dry run can list before any result exists)."""
        return list(dict.fromkeys(c for s in self.searches.values() for c in search_cells(s, [start_round(s)])))

    def max_cells(self) -> int:
        """An upper bound on the cells of every search, round budgets spent (cells that two
        searches of one setting share count twice after round 0)."""
        r0 = len(self.round0_cells())
        later = sum(s.spec.max_cells() - len(start_round(s).cells) for s in self.searches.values())
        return r0 + later

    def summary(self) -> str:
        """What the searches train: round 0 now, the rest as results come in."""
        if not self.searches:
            return "learning-rate searches: none"
        refined = sum(1 for s in self.searches.values() if s.spec.rounds)
        rounds = max(s.spec.max_rounds for s in self.searches.values())
        return (f"learning-rate searches (lr_protocol: {self.protocol}): {len(self.searches):,} settings in "
                f"{len(self.groups)} group(s) (by cost and by the experiments they serve); {refined:,} refine. Round 0 trains "
                f"{len(self.round0_cells()):,} cells; each group's later rounds (up to {rounds}: new learning rates where "
                f"the results point, more seeds for the candidates and contenders, until every reported number is "
                f"the best candidate's mean over every seed) are planned by its search_round jobs as results come "
                f"in: at most {self.max_cells():,} cells in all. Decisions: {self.grid.out}/searches/.")

    @functools.lru_cache(maxsize=None)
    def params(self, group: str) -> str:
        """A group's searches as the round jobs' param: a config change that changes them reruns
        the group's rounds (the cells that stay the same are not retrained)."""
        return json.dumps({s.key: {"spec": s.spec.as_dict(), "metric": s.metric, "setting": vars(s.setting)}
                           for s in self.groups[group]}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def _cached_spec(searches: Searches, g_json: str, setting: Setting, metric: str, where: str) -> SearchSpec:
    return searches._spec_uncached(json.loads(g_json), setting, metric, where)


def settings_of(grid: Grid, g: dict) -> list[Setting]:
    return [Setting(grid.task_names[t], m, int(w), int(n), grid.recipe_names[g["recipe"]])
            for t in g["tasks"] for m in g["models"] for w in g["widths"] for n in g["layers"]]


def search_spec(entry: dict, start, seeds, learned: float, good: float, tier: str | None = None) -> SearchSpec:
    """An ``lr_searches`` entry (its defaults: the config schema's) as the spec of a setting with
    these start learning rates and reported seeds, whose cells are of the cost ``tier``
    (``arrepro.config.costs.group``, or "big": its ``tier_budget`` overrides ``budget``). The
    ladder's ``all`` is every seed; a step at or above the seeds' count (a 3-seed scale with a
    5-seed ladder) is dropped; with every seed searching there is no ladder."""
    d = {**SEARCH_DEFAULTS, **entry}
    if tier in d.get("tier_budget", {}):
        d["budget"] = d["tier_budget"][tier]
    seeds = tuple(int(s) for s in seeds)
    n = d["search_seeds"]
    search = seeds if n == "all" else seeds[:int(n)]
    ladder = []
    if len(search) < len(seeds):
        for s, take in d["ladder"]:
            s = len(seeds) if s == "all" else int(s)
            if len(search) < s < len(seeds):
                ladder.append((s, int(take)))
        ladder.append((len(seeds), int(d["ladder"][-1][1])))
    lo, hi = (float(x) for x in d.get("range", (min(start), max(start))))
    rounds, per_round = int(d["rounds"]), int(d["per_round"])
    if d.get("close"):  # a curve closes its edges: a round per lattice step to the farther bound, both sides at once;
        # with a window, then its good window's edges, a halving of the gap a round, both at once
        first = [float(x) for x in start]
        rounds, per_round = close_rounds(first, lo, hi, float(d["resolution"])), 2
        rounds += window_rounds(first, float(d["resolution"])) if d["window"] else 0
    return SearchSpec(tuple(sorted(float(x) for x in start)), lo, hi, float(d["resolution"]), rounds,
                      per_round, search, seeds, bool(d["window"]), tuple(ladder), int(d["budget"]),
                      float(d["plateau"]), learned, good, float(d["scan"]), int(d["scan_seeds"]),
                      tuple(float(x) for x in d.get("scan_range") or ()), bool(d.get("close", False)))


def _core_key(spec: SearchSpec) -> str:
    """A spec without its MERGEABLE fields: specs with the same core are one search."""
    d = spec.as_dict()
    for k in MERGEABLE:
        d.pop(k)
    return json.dumps(d, sort_keys=True)


def merge(specs: list[SearchSpec]) -> list[SearchSpec]:
    """One spec per distinct core (everything but MERGEABLE): the most demanding of its specs (the
    most search seeds, and with them that spec's rounds, ladder and budget; between equal search
    seeds the larger budget and the most rounds; the window if any asks for it)."""
    out: dict[str, SearchSpec] = {}
    for sp in specs:
        k = _core_key(sp)
        if k not in out:
            out[k] = sp
            continue
        o = out[k]
        lead = max((o, sp), key=lambda x: (len(x.search_seeds), x.max_cells()))
        peers = [x for x in (o, sp) if len(x.search_seeds) == len(lead.search_seeds)]
        merged = dataclasses.replace(lead, window=o.window or sp.window, rounds=max(x.rounds for x in peers),
                                     per_round=max(x.per_round for x in peers), budget=0)
        budget = max(x.budget for x in peers) if lead.budget else 0
        out[k] = dataclasses.replace(merged, budget=budget)
    return list(out.values())


# --------------------------------------------------------------------------- rounds as files
def start_round(search: Search) -> Round:
    return decide(search.spec, [], {})[0]


def search_cells(search: Search, rounds: list[Round]) -> list[Cell]:
    return [search.setting.cell(lr, s) for lr, s in cells_of(rounds)]


def round_cells(searches: Searches, group: str, plan: Plan | None) -> list[Cell]:
    """Every cell the group's searches have planned so far (plan None: round 0 only)."""
    out = []
    for s in searches.groups[group]:
        rounds = [start_round(s)] if plan is None else plan.rounds(s.key)
        out += search_cells(s, rounds)
    return list(dict.fromkeys(out))


def read_accuracy(result_path, metric: str) -> float | None:
    """A finished cell's number for the search: ``metric`` from its result.json (checked against
    its seal and its metrics.jsonl: a decision never rests on an edited result); None if it
    diverged or the number is not finite (a result, not an error)."""
    r = read_result(result_path)
    if metric not in r:
        raise ValueError(f"{result_path}: no {metric!r} in the result")
    v = r[metric]
    if r.get("diverged") or v is None or not math.isfinite(float(v)):
        return None
    return float(v)


def run_round(searches_json: str, group: str, r: int, previous: Plan | None, out_path, log=print,
              made_from: dict | None = None) -> Plan:
    """Decide round ``r`` of a group from the plan of round r-1 (None: round 0, from the config)
    and the results of its cells; write and return the new plan (sealed, with ``made_from``:
    arrepro.search.plans). Pure apart from reading the cells' result files: the same results give the
    same plan."""
    defs = json.loads(searches_json)
    plan = {"group": group, "round": r, "searches": {}}
    counts: dict[str, int] = {}
    new_cells = 0
    for key, d in sorted(defs.items()):
        spec, metric = SearchSpec.from_dict(d["spec"]), d["metric"]
        setting = Setting(**d["setting"])
        if previous is None or key not in previous.searches:
            rounds = [decide(spec, [], {})[0]]  # round 0 (a search new to the config starts now)
        else:
            rounds = previous.rounds(key)
        results = {(lr, s): read_accuracy(f"{setting.cell(lr, s).path}/{RESULT}", metric)
                   for lr, s in cells_of(rounds)}
        nxt, state = decide(spec, rounds, results)
        if nxt is not None:
            rounds = rounds + [nxt]
            new_cells += len(nxt.cells)
        counts[state.phase] = counts.get(state.phase, 0) + 1
        plan["searches"][key] = {"setting": d["setting"], "metric": metric, "spec": d["spec"],
                                 "rounds": [x.as_dict() for x in rounds], "state": state_dict(state, spec, results)}
    plan["summary"] = {"searches": len(defs), "phases": counts, "new_cells": new_cells}
    log(f"group {group}, round {r}: {len(defs)} searches ({', '.join(f'{n} {p}' for p, n in sorted(counts.items()))}); "
        f"{new_cells} new cells")
    return Plan(plan).write(out_path, made_from)


def state_dict(state: State, spec: SearchSpec, results: dict) -> dict:
    """A search's state as its plan stores it: the chosen learning rate and its outcome, the
    candidates' means over every reported seed (``points``), every learning rate's seeds and
    mean so far (``scores``: [lr, seeds, mean]), the contenders left, the cells' accuracies and
    the window (arrepro.search.protocol.state_window)."""
    w = state_window(spec, state) if state.points else None
    return {"phase": state.phase, "chosen_lr": None if math.isnan(state.chosen) else state.chosen,
            "outcome": state.outcome, "why": state.why, "points": [[lr, m] for lr, m in sorted(state.points.items())],
            "scores": [[lr, n, m] for lr, (n, m) in sorted(state.scores.items())],
            "contenders": sorted(state.contenders),
            "diverged": [[lr, n] for lr, n in sorted(state.diverged.items())],
            "results": [[lr, s, a] for (lr, s), a in sorted(results.items())],
            "window": None if w is None else window_dict(w)}


def window_dict(w) -> dict:
    return {"status": w.status, "lo": w.lo, "hi": w.hi, "below": w.below, "above": w.above,
            "open_lo": w.open_lo, "open_hi": w.open_hi, "width": w.width, "width_max": w.width_max,
            "resolution": w.resolution, "n_good": w.n_good, "n_tried": w.n_tried, "gaps": w.gaps,
            "unknown": w.unknown, "text": w.text()}


def write_reports(plans: list[Plan], paths: list[str]) -> None:
    """One file per search (``paths``: ``.../searches/<search key>.json``, one per search of the
    plans): its setting, spec, every round (learning rates, seeds, accuracies, reason) and its
    state (outcome, chosen learning rate, window)."""
    by_key = {p.split("/searches/", 1)[1].removesuffix(".json"): p for p in paths}
    for plan in plans:
        for key, entry in plan.searches.items():
            acc = {(lr, seed): a for lr, seed, a in entry["state"]["results"]}
            rounds = [{**rd, "accuracies": [[lr, seed, acc.get((lr, seed))] for lr, seed in rd["cells"]]}
                      for rd in entry["rounds"]]
            write_report(by_key.pop(key), {"search": key, "group": plan.data["group"], **entry, "rounds": rounds})
    if by_key:
        raise ValueError(f"no plan has the search(es) {sorted(by_key)}")

