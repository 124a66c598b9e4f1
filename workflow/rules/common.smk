# Shared by every stage: the grid of the selected scale and small helpers (no rules here).
import functools
import hashlib
import json
import os
import sys

from snakemake.exceptions import WorkflowError

from arrepro.cluster import internals, packs
from arrepro.config import costs  # wall time, memory and group of a cell
from arrepro.search.plans import Plan
from arrepro.search import cover, protocol_check
from arrepro.search.rounds import Searches, round_cells, search_cells
from arrepro.report import blocks
from arrepro.train import runfile
from arrepro.digest import source_digest
from arrepro.planned import record_planned
from arrepro.config.catalogue import script_sources, sources_key, train_sources
from arrepro.config.cellfiles import METRICS, RESULT
from arrepro.config.checks import load_grid
from arrepro.config.grid import CELL_PATTERN, ConfigError, Setting, identity, one_of
from arrepro.config.paths import data_dir, data_files
from arrepro.cluster.configfile import config_error

try:
    GRID = load_grid(config)
except (ConfigError, KeyError) as err:
    raise WorkflowError(config_error(err, COMMAND_LINE))

# the learning-rate searches (src/arrepro/search/rounds.py): what every grid trains, round by round
try:
    SEARCHES = Searches(GRID)
except (ConfigError, KeyError) as err:
    raise WorkflowError(config_error(err, COMMAND_LINE))

OUT = GRID.out  # results/{scale}: this scale's figures, tables, paper and logs
EXPERIMENTS = list(GRID.experiments)
FIGURES = [e for e in EXPERIMENTS if "plot" in GRID.experiments[e]]
TABLES = [e for e in EXPERIMENTS if "table" in GRID.experiments[e]]
COVERED = [e for e in EXPERIMENTS if GRID.experiments[e].get("cover", 0)]  # (workflow/rules/cover.smk)
# the paper's Figs. 8-10 (arrepro.report.blocks): the Mamba blocks this scale trains, drawn from their modules
BLOCK_SPECS = blocks.specs(GRID)
BLOCK_FIGURE = [f"{OUT}/{blocks.FIGURE}.{x}" for x in ("pdf", "png")] if BLOCK_SPECS else []
CELL_RESULT = f"{CELL_PATTERN}/{RESULT}"
CELL_METRICS = f"{CELL_PATTERN}/{METRICS}"


def code(*paths):
    """A digest of these source files' code (comments, docstrings, formatting ignored). Rules
    record it as a param instead of declaring the files as inputs: Snakemake reruns a job when
    its params change, so a comment edit reruns nothing and a code edit exactly its jobs. The
    jobs check that their code still has this digest when they start (arrepro.planned:
    record_planned, check_planned_code): an edit while the workflow runs stops them."""
    digest = source_digest(paths, ROOT)
    record_planned(paths, digest, ROOT)
    return digest


def command_param(command):
    """A shell rule's command as its param ``command`` (its sha256, which Snakemake records): the
    workflow's profile leaves Snakemake's own code trigger off (the code digests are the only code
    trigger: profiles/default/config.yaml), so an edit of a command reruns the rule's jobs by
    this param. (A param's text would be formatted with the wildcards: hence the digest.)"""
    return hashlib.sha256(command.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def script_code(script, *extra):
    """The code digest of a rule's script and of every module of the package it imports
    (arrepro.config.catalogue.script_sources: derived from its imports, not listed by hand), and
    of ``extra`` files it reaches without an import (the mixer files a model builder loads by name)."""
    return code(*script_sources(script, ROOT), *extra)


def train_code(model):
    """The code digest of a cell of this model on this scale's device (once per mixer and MLP or
    none, not per cell: arrepro.config.catalogue.sources_key; a GPU scale's leaves the fused CPU
    kernels out, a model without an MLP the kernels only an MLP runs: catalogue.train_sources)."""
    return _train_code(*sources_key(GRID.models[model]))


@functools.lru_cache(maxsize=None)
def _train_code(mixer, mlp):
    return code(*train_sources(mixer, ROOT, GRID.device, mlp))


def missing_cell_files():
    """The result and metrics files that do not exist now of the cells of experiments whose tables
    do (arrepro.search.rounds.Searches.missing_cell_files), their covers' cells included."""
    done = [e for e in EXPERIMENTS if all(os.path.exists(f) for f in GRID.tables(e))]
    covered = []
    for e in done:
        path = cover_path(e)
        if e in COVERED and os.path.exists(path):
            try:
                covered += cells_of_cover(path)
            except ValueError:
                pass  # a damaged cover file: its job reruns, and its cells with it
    files = (f"{c.path}/{name}" for c in covered for name in (RESULT, METRICS))
    return SEARCHES.missing_cell_files(done) + [f for f in files if not os.path.exists(f)]


def cover_path(exp):
    return f"{OUT}/searches/cover/{exp}.json"


def cells_of_cover(path):
    covers, settings = cover.read(path)
    return cover.cells(covers, {k: Setting(**v) for k, v in settings.items()})


def covered_cells(exp):
    """The cells an experiment's cover adds (none without ``cover``); waits for its checkpoint."""
    if exp not in COVERED:
        return []
    return cells_of_cover(checkpoints.cover.get(exp=exp).output.plan)


def missing_final_plans():
    """The last round's plan of each group of searches that does not exist now: a target of `all`
    (Snakemake rebuilds a missing file that only finished jobs read, such as a finished search's
    last plan, only when it is a target; the plans before it are the next round's inputs and
    preflight forces the rounds after a missing one: arrepro.search.plans.stale_plans)."""
    return [p for p in (Plan.path(OUT, g, SEARCHES.final_round(g)) for g in SEARCHES.groups) if not os.path.exists(p)]


def cell_results(cells):
    return [f"{c.path}/{RESULT}" for c in cells]


def figure_inputs(wc):
    """A figure's tables (and the published points it overlays). A dynamics figure also reads its
    cells' metrics.jsonl, which the cells' train jobs wrote with the result.json files the
    aggregate job read: the tables are newer than them."""
    exp = GRID.experiments[wc.exp]
    inputs = {"cells": GRID.table(wc.exp, "cells"), "best": GRID.table(wc.exp, "best")}
    if "published" in exp:
        inputs["published"] = exp["published"]
    return inputs


def plan_of(group, r):
    """The plan of a group's round r (None: round 0, from the config); waits for its checkpoint."""
    if int(r) == 0:
        return None
    return Plan.read(checkpoints.search_round.get(group=group, round=str(r)).output.plan)


def search_round_inputs(wc):
    """A round's inputs: the plan of the round before and the results of every cell so far."""
    r = int(wc.round)
    previous = plan_of(wc.group, r - 1)
    inputs = {"results": cell_results(round_cells(SEARCHES, wc.group, previous))}
    if r > 1:
        inputs["previous"] = Plan.path(OUT, wc.group, r - 1)
    return inputs


def final_plans(groups):
    """group -> the plan of its last round (waits for the group's rounds)."""
    return {g: plan_of(g, SEARCHES.final_round(g)) for g in groups}


def searched_cells(exp):
    """The cells of an experiment's searches, every round's, from its groups' last plans."""
    return SEARCHES.experiment_cells(exp, final_plans(SEARCHES.experiment_groups(exp)))


# results/fig1.pdf etc.: links to the outputs of this scale (workflow/rules/current.smk)
CURRENT = [os.path.basename(f) for e in EXPERIMENTS for f in GRID.outputs(e) if f.startswith(f"{OUT}/{e}.")]
CURRENT += [os.path.basename(f) for f in BLOCK_FIGURE] + ["paper.pdf"]


def current_input(wc):
    link = f"results/{wc.name}"
    if os.path.isdir(link) and not os.path.islink(link):  # (make_link replaces a file or a link, never a folder)
        raise WorkflowError(f"{link}: a folder, where this command makes a link to {OUT}/{wc.name}: move the folder "
                            f"away (mv {link} {link}.old), then run again")
    if wc.name not in CURRENT:  # an output of another scale: say which, rather than "no rule"
        exp = os.path.splitext(wc.name)[0]
        other = [s for s, sc in config["scales"].items() if exp in sc.get("experiments", {})]
        hint = (f"; it is an experiment of scale(s) {', '.join(other)}: `snakemake results/{wc.name} --config "
                f"scale={other[0]}`") if other else ""
        raise WorkflowError(f"results/{wc.name}: scale {GRID.scale_name} (config.yaml's `scale`, or --config scale=...) "
                            f"has no such output; it has: {', '.join(CURRENT)}{hint}")
    return f"{OUT}/{wc.name}"


# the scales whose outputs (results/SCALE/...) this run does not build (not the shared cells and data)
OTHER_SCALES = [s for s in config["scales"] if s not in (GRID.scale_name, "cells", "data")]


def other_scale_input(wc):
    path = f"results/{wc.scale}/{wc.path}"
    raise WorkflowError(f"{path}: an output of scale {wc.scale}, and this run's scale is {GRID.scale_name} (config.yaml's "
                        f"`scale`, or --config scale=...): add --config scale={wc.scale} after the targets "
                        f"(`snakemake {path} --config scale={wc.scale}`)")


def make_link(target, link, log):
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)
    with open(log, "w") as f:
        print(f"{link} -> {target}", file=f)


def dynamics_cells(exp):
    """The result.json and metrics.jsonl files a dynamics figure reads per epoch (every cell of its
    searches; checked against each other when read), as the figure rule's own input function: it
    waits for the experiment's searches without hiding the figure's tables from the DAG."""
    if GRID.experiments[exp].get("plot") != "dynamics":
        return []
    return [f"{c.path}/{name}" for c in searched_cells(exp) for name in (RESULT, METRICS)]


RUN = None  # this run's record for its train jobs (record_run)


def record_run():
    """Before any job (the Snakefile's onstart: the submitting process, never in a dry run nor
    inside a Slurm job): the file this run's train jobs read (arrepro.train.runfile): the cells it
    forces, which train from scratch in every round of the searches, those that checkpoint
    rounds add later included, and whether cells keep their final weights. Says how many forced
    cells it knows now."""
    global RUN
    if workflow.touch:
        return
    RUN = runfile.new(*internals.forced(workflow), config.get("keep_weights", False))
    runfile.write(RUN)
    if RUN["forced_rules"] or RUN["forced_files"]:
        n = internals.forced_train_jobs(workflow, RUN)
        print(f"forced run {RUN['run']}: {n} forced cell(s) train from scratch (their checkpoints are not resumed), "
              "and so will the forced cells the searches' later rounds add; the end of the run says how many did",
              file=sys.stderr)


def report_forced_cells():
    """At the end of a run (onsuccess, onerror): how many forced cells trained from scratch."""
    if RUN is not None and (RUN["forced_rules"] or RUN["forced_files"]):
        n = internals.forced_train_jobs(workflow, RUN, finished=True)
        print(f"forced run {RUN['run']}: {n} forced cell(s) trained from scratch", file=sys.stderr)
