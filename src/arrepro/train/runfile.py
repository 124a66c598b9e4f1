"""What a Snakemake run asks of its train jobs, in a file they read (pure Python: the Snakefile
imports it).

**Forced cells start over, in every round.** Snakemake decides in its submitting process which
jobs a run forces (``--forcerun train``, ``--forceall``, ``-R``/``-f`` naming a cell's file),
also for the train jobs that each ``search_round`` checkpoint adds to the DAG while the run goes
on; the job itself, maybe on another machine (Slurm), is not told. Resuming a forced cell's
checkpoint would give back the old numbers (its fingerprint matches: same spec, data and code).
So the Snakefile's ``onstart`` (the submitting process, before any job; never in a dry run, nor
in the Snakemake inside a Slurm job, which runs with ``--no-hooks``) writes ``PATH``::

    {"run": a new id, "forced_rules": [...], "forced_files": [...], "keep_weights": false}

``forced_rules`` and ``forced_files`` are the criteria Snakemake applies to every job, those
added later included (``DAG.forcerules`` and ``DAG.forcefiles`` of Snakemake 9: a job is forced
if its rule is, or one of its outputs is), less the outputs of interrupted jobs that
``--rerun-incomplete`` forces (those resume). Each train job reads the file on the shared file
system (``scripts/train_cell.py --run-file``): a forced cell trains from scratch, once per run:
its checkpoints carry the run's id, so a retry within the run (a preempted or failed attempt)
resumes what the forced attempt wrote. Every run rewrites the file, so a later run never sees an
earlier run's forcing; a cell trained by hand (no ``--run-file``) is never forced.

**Final weights.** ``keep_weights`` (the config key) asks each cell that finishes to keep its
final weights (``weights.pt``, the model's parameters only: arrepro.train.loop).
"""
from __future__ import annotations

import json
import os
import uuid
from datetime import datetime

PATH = ".snakemake/arrepro/run.json"  # relative to the workflow's working directory
TRAIN_RULE = "train"


class BadRunFile(ValueError):
    """The run file is unreadable or not one this module wrote; the message names it."""


def new(forced_rules, forced_files, keep_weights: bool) -> dict:
    """A run's record: a new id and what it asks (rule names; output paths as Snakemake names them)."""
    stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S")
    return {"run": f"{stamp}-{uuid.uuid4().hex[:8]}", "forced_rules": sorted(set(forced_rules)),
            "forced_files": sorted({os.path.normpath(str(f)) for f in forced_files}), "keep_weights": bool(keep_weights)}


def write(run: dict, path: str = PATH) -> None:
    from arrepro.files import write_json_atomic

    write_json_atomic(path, run)


def read(path: str) -> dict:
    """The run file at ``path``; BadRunFile naming it and what is wrong."""
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        raise BadRunFile(f"{path}: cannot read this Snakemake run's file ({type(e).__name__}: {e}); its onstart "
                         "writes it before any job") from e
    if not isinstance(run, dict) or not {"run", "forced_rules", "forced_files", "keep_weights"} <= set(run):
        raise BadRunFile(f"{path}: not a run file of this workflow (keys run, forced_rules, forced_files, keep_weights)")
    return run


def forces(run: dict, rule: str, outputs) -> bool:
    """Whether the run forces a job of ``rule`` with these outputs (Snakemake's own test)."""
    return rule in run["forced_rules"] or any(os.path.normpath(str(o)) in run["forced_files"] for o in outputs)
