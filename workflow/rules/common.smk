# Shared by every stage: the grid of the selected scale and small helpers (no rules here).
import functools
import json
import os
import sys

from snakemake.exceptions import WorkflowError

from arrepro.cellfiles import CellBusy, start_over
from arrepro.digest import source_digest
from arrepro.grid import CELL_PATTERN, ConfigError, DATA_SOURCES, Grid, one_of, prepare_job_environment, train_sources

# Jobs find the package and the interpreter running this workflow (a conda env, when one is
# used, is activated in front of it).
prepare_job_environment(ROOT)

try:
    GRID = Grid(config)
except (ConfigError, KeyError) as err:
    raise WorkflowError(f"config.yaml: {err}")

OUT = GRID.out  # results/{scale}: this scale's figures, tables, paper and logs
EXPERIMENTS = list(GRID.experiments)
FIGURES = [e for e in EXPERIMENTS if "plot" in GRID.experiments[e]]
TABLES = [e for e in EXPERIMENTS if "table" in GRID.experiments[e]]
CELL_RESULT = f"{CELL_PATTERN}/result.json"
CELL_METRICS = f"{CELL_PATTERN}/metrics.jsonl"


def code(*paths):
    """A digest of these source files' code (comments, docstrings, formatting ignored). Rules
    record it as a param instead of declaring the files as inputs: Snakemake reruns a job when
    its params change, so a comment edit reruns nothing and a code edit exactly its jobs."""
    return source_digest(paths, ROOT)


@functools.lru_cache(maxsize=None)
def train_code(mixer):
    """The code digest of a cell of this mixer (once per mixer, not per cell)."""
    return code(*train_sources(mixer, ROOT))


def missing_cell_files():
    """The result and metrics files that do not exist now, of the cells of experiments whose
    tables do (an experiment without its tables is rebuilt anyway, with every missing cell: on a
    fresh run this lists nothing, and the planning stays as fast)."""
    built = [e for e in EXPERIMENTS if all(os.path.exists(f) for f in GRID.tables(e))]
    cells = dict.fromkeys(c for e in built for c in GRID.experiment_cells(e))
    files = (f"{c.path}/{name}" for c in cells for name in ("result.json", "metrics.jsonl"))
    return [f for f in files if not os.path.exists(f)]


def cell_results(cells):
    return [f"{c.path}/result.json" for c in cells]


def mixer_of(wc):
    return GRID.models[wc.model]["mixer"]


def figure_inputs(wc):
    exp = GRID.experiments[wc.exp]
    inputs = {"cells": f"{OUT}/tables/{wc.exp}_cells.csv", "best": f"{OUT}/tables/{wc.exp}_best.csv"}
    if "published" in exp:
        inputs["published"] = exp["published"]
    if exp.get("plot") == "dynamics":  # per-epoch curves come from the cells' metrics (checked against their results)
        inputs["metrics"] = [f"{c.path}/metrics.jsonl" for c in GRID.experiment_cells(wc.exp)]
        inputs["results"] = cell_results(GRID.experiment_cells(wc.exp))
    return inputs


def start_forced_cells_over():
    """A train job the user forced (--forcerun train, --forceall, -R/-f naming a cell) trains from
    scratch: its checkpoint would otherwise be resumed (its fingerprint matches: same spec, data
    and code), giving back the old numbers. The Snakefile's onstart calls this: in the submitting
    process, once, before any job, never in a dry run nor inside a Slurm job (--no-hooks), so a
    retry (a failed or preempted attempt, or a finished cell of a failed Slurm group job whose
    outputs Snakemake deleted) still resumes. --rerun-incomplete forces the outputs of interrupted
    jobs too: those resume."""
    if workflow.touch:
        return
    dag = workflow.dag
    removed = 0
    for job in dag.needrun_jobs():
        if job.rule.name != "train" or not dag.reason(job).forced:
            continue
        # --forcerun train, --forceall; else forced through its files: -R/-f, or --rerun-incomplete
        asked = (job.rule in dag.forcerules and job not in dag.omitforce
                 or not workflow.async_run(workflow.persistence.incomplete(job)))
        if asked:
            try:
                removed += start_over(os.path.dirname(job.output.result), "forced by snakemake")
            except CellBusy as err:
                raise WorkflowError(f"stopping before any job: {err}")
    if removed:
        print(f"{removed} forced cell(s) start over: their checkpoints are removed", file=sys.stderr)
