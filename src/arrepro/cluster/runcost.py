"""What a finished run cost, read from its own records: ``python -m arrepro.cluster.runcost [SCALE]``
prints the scale's total, its critical path and how long it can take on N cores at best.

* **The jobs and what each depends on**: Snakemake's records of the jobs it ran in the folder
  (``arrepro.cluster.internals.recorded_jobs``: each output's rule, inputs, logs, start and end).
  A job depends on the jobs that made its inputs; a cell also on the checkpoint job that asked
  for it (a search round's plan, a cover's): a round's cells are an input of nothing until the
  next round's job reads them beside the plan that listed them (workflow/rules/search.smk), so a
  cell depends on every checkpoint output that its first reader reads and that was made before
  the cell started.
* **What a job costs**: a cell its CPU-seconds, the last "used N CPU-seconds" line of its
  ``job.log`` (the training server's count of the cell's process: arrepro.train.client); a cell
  without one (trained in its own process) and every other job its wall time (end minus start).
  The two are counted apart and said apart.
* **The run of a scale**: every recorded job that an output under ``results/{scale}/`` needs,
  directly or not (cells and datasets are shared by the scales: another scale's own are left out).
* **The critical path**: the longest chain of jobs each depending on the one before, in those
  seconds. Each cell takes one core, so on N cores the run takes at least the longer of its
  critical path and its total over N (Snakemake's own time and the set-up come on top); beyond
  total / critical path cores, more cores stop helping.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from arrepro.cluster.internals import recorded_jobs
from arrepro.train.runfile import TRAIN_RULE

CPU_LINE = re.compile(r"\bused ([0-9]+(?:\.[0-9]+)?) CPU-seconds")
CHECKPOINT = re.compile(r"^checkpoint\s+(\w+)\s*:", re.M)
CORES = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class Job:
    rule: str
    outputs: list[str]
    inputs: list[str]
    logs: list[str]
    start: float
    end: float
    cpu: float | None = None  # a cell's CPU-seconds, from its job.log

    @property
    def cell(self) -> bool:
        return self.rule == TRAIN_RULE

    @property
    def seconds(self) -> float:
        return self.cpu if self.cpu is not None else max(0.0, self.end - self.start)


def cell_cpu(log: Path) -> float | None:
    """The CPU-seconds a cell's ``job.log`` says its process used (its last such line), or None."""
    try:
        found = CPU_LINE.findall(log.read_text(errors="replace"))
    except OSError:
        return None
    return float(found[-1]) if found else None


def read_jobs(workdir) -> list[Job]:
    """The jobs Snakemake recorded in ``workdir``, one per job (its outputs gathered), with each
    cell's CPU-seconds read from its log."""
    workdir = Path(workdir)
    by_key: dict[tuple, Job] = {}
    for r in recorded_jobs(workdir):
        key = (r["rule"], r["job_hash"], tuple(r["log"]))
        job = by_key.get(key)
        if job is None:
            job = by_key[key] = Job(r["rule"], [], r["input"], r["log"], float(r["starttime"] or 0.0),
                                    float(r["endtime"] or 0.0))
        job.outputs.append(r["output"])
        job.start, job.end = min(job.start, float(r["starttime"] or job.start)), max(job.end, float(r["endtime"] or 0.0))
    jobs = sorted(by_key.values(), key=lambda j: (j.start, j.outputs))
    for j in jobs:
        if j.cell:
            logs = [workdir / log for log in j.logs if log.endswith("job.log")]
            j.cpu = next((c for c in map(cell_cpu, logs) if c is not None), None)
    return jobs


def checkpoint_rules(workdir) -> set[str]:
    """The rules the workflow declares as checkpoints (``checkpoint NAME:`` in its rule files)."""
    rules = Path(workdir) / "workflow" / "rules"
    return {m for f in sorted(rules.glob("*.smk")) for m in CHECKPOINT.findall(f.read_text())}


def dependencies(jobs: list[Job], checkpoints: set[str]) -> dict[int, set[int]]:
    """Job index -> the indices of the jobs it depends on (module docstring)."""
    made_by = {f: i for i, j in enumerate(jobs) for f in j.outputs}
    deps = {i: {made_by[f] for f in j.inputs if f in made_by} - {i} for i, j in enumerate(jobs)}
    readers = defaultdict(list)
    for i, j in enumerate(jobs):
        for f in j.inputs:
            if f in made_by:
                readers[made_by[f]].append(i)
    for i, j in enumerate(jobs):
        if not j.cell or not readers[i]:
            continue
        first = jobs[min(readers[i], key=lambda k: jobs[k].start)]
        deps[i] |= {made_by[f] for f in first.inputs
                    if f in made_by and jobs[made_by[f]].rule in checkpoints and jobs[made_by[f]].end <= j.start}
    return deps


def needed_by(targets: set[int], deps: dict[int, set[int]]) -> set[int]:
    """``targets`` and every job they depend on, directly or not."""
    seen, todo = set(targets), list(targets)
    while todo:
        for d in deps[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def critical_path(jobs: list[Job], deps: dict[int, set[int]], among: set[int]) -> tuple[float, list[int]]:
    """The longest chain of dependent jobs of ``among`` in seconds, and the chain (first job first)."""
    best: dict[int, tuple[float, int | None]] = {}  # job -> (its chain's seconds, the job before it)
    for i in sorted(among, key=lambda k: (jobs[k].end, jobs[k].start)):
        if i in best:
            continue
        stack = [i]
        while stack:  # depth first, a job after every job it depends on
            k = stack[-1]
            todo = [d for d in deps[k] if d in among and d not in best and d not in stack]
            if todo:
                stack += todo
                continue
            stack.pop()
            before = max(((best[d][0], d) for d in deps[k] if d in best), default=(0.0, None))
            best[k] = (before[0] + jobs[k].seconds, before[1])
    if not best:
        return 0.0, []
    end = max(best, key=lambda k: best[k][0])
    chain = [end]
    while best[chain[-1]][1] is not None:
        chain.append(best[chain[-1]][1])
    return best[end][0], chain[::-1]


def shown(job: Job) -> str:
    """A job as the report names it: a cell by its folder, another job by its first output."""
    return str(Path(job.outputs[0]).parent) + "/" if job.cell else sorted(job.outputs)[0]


def report(workdir, scale: str) -> dict:
    """The cost of ``scale``'s run in ``workdir`` (module docstring), as a dict."""
    jobs = read_jobs(workdir)
    deps = dependencies(jobs, checkpoint_rules(workdir))
    prefix = f"results/{scale}/"
    run = needed_by({i for i, j in enumerate(jobs) if any(f.startswith(prefix) for f in j.outputs)}, deps)
    cells = [jobs[i] for i in run if jobs[i].cell]
    measured = [j for j in cells if j.cpu is not None]
    others = [jobs[i] for i in run if not (jobs[i].cell and jobs[i].cpu is not None)]
    total = sum(jobs[i].seconds for i in run)
    seconds, chain = critical_path(jobs, deps, run)
    return {"scale": scale, "jobs": len(run), "cells": len(cells), "cells_cpu_seconds": sum(j.cpu for j in measured),
            "cells_without_cpu": len(cells) - len(measured), "other_jobs": len(others),
            "other_wall_seconds": sum(j.seconds for j in others), "total_seconds": total,
            "critical_path_seconds": seconds,
            "critical_path": [{"rule": jobs[i].rule, "output": shown(jobs[i]), "seconds": jobs[i].seconds,
                               "counted": "CPU" if jobs[i].cpu is not None else "wall"} for i in chain],
            "at_least_seconds": {n: max(seconds, total / n) for n in CORES}}


def duration(s: float) -> str:
    s = round(s)
    h, m = divmod(s // 60, 60)
    return f"{h} h {m} min" if h else f"{m} min {s % 60} s" if m else f"{s} s"


def text(r: dict) -> str:
    """The report in words, as the command prints it."""
    if not r["jobs"]:
        return f"results/{r['scale']}: no job of this scale recorded here (run it first, in this folder)"
    path = r["critical_path"]
    on_path = [p for p in path if p["counted"] == "CPU"]
    lines = [f"results/{r['scale']}: {r['jobs']:,} jobs recorded, {r['cells']:,} of them cells",
             f"  total: {r['total_seconds']:,.0f} s ({duration(r['total_seconds'])}): {r['cells_cpu_seconds']:,.0f} "
             f"CPU-seconds in {r['cells'] - r['cells_without_cpu']:,} cells, {r['other_wall_seconds']:,.0f} s of wall "
             f"time in {r['other_jobs']:,} other jobs"
             + (f" ({r['cells_without_cpu']:,} of them cells without a CPU line in their job.log)"
                if r["cells_without_cpu"] else ""),
             f"  critical path: {r['critical_path_seconds']:,.0f} s ({duration(r['critical_path_seconds'])}), "
             f"{len(path)} jobs: {len(on_path)} cells ({sum(p['seconds'] for p in on_path):,.0f} CPU-seconds), "
             f"{len(path) - len(on_path)} other jobs ({sum(p['seconds'] for p in path if p not in on_path):,.0f} s wall)"]
    lines += [f"    {p['seconds']:9.1f} s {p['counted']:4}  {p['rule']:<14} {p['output']}" for p in path]
    lines.append("  on N cores, at least (the longer of the critical path and the total over N; Snakemake and the "
                 "set-up come on top):")
    lines.append("    " + ", ".join(f"{n}: {duration(s)}" for n, s in r["at_least_seconds"].items()))
    if r["critical_path_seconds"] > 0:
        lines.append(f"  more cores stop helping beyond about {r['total_seconds'] / r['critical_path_seconds']:.0f} "
                     "(the total over the critical path)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scale", nargs="?", default="demo", help="the scale whose run to read (default: demo)")
    ap.add_argument("--workdir", default=".", help="the folder the run ran in (default: here)")
    ap.add_argument("--json", action="store_true", help="the report as JSON")
    a = ap.parse_args(argv)
    r = report(a.workdir, a.scale)
    print(json.dumps(r, indent=1) if a.json else text(r))
    return 0 if r["jobs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
