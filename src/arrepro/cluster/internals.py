"""Everything that reaches into Snakemake's internals, in one module behind one version check
(``checked``: Snakemake 9; on another version each use says once that it was not checked there).
The rest of the package and the rule files use Snakemake's API only.

* ``invocation``: which command reads the Snakefile (a run, a dry run, or no run: --lint, ...),
  from the parsed command line in the frame of Snakemake's ``args_to_api`` (snakemake/cli.py):
  Snakemake reads the Snakefile before it tells the workflow what it will do;
* ``force_rebuild``: damaged files added to the command's ``--forcerun`` (its DAGSettings);
* ``forced``, ``forced_train_jobs``: the DAG's forced rules and files, and its forced train jobs
  (arrepro.train.runfile: forced cells start over in every round);
* ``needrun_jobs``, ``uses_conda``: the jobs a run is about to start, and its deployment;
* ``install_group_components``: the Slurm bundles' fix:
  A workaround for Snakemake 9.x's ``group-components``, installed by the Snakefile.

  The Slurm profile bundles small training cells: ``group-components: {cells_10min: 24, ...}``
  asks Snakemake to put that many connected components of a group into one Slurm job. Snakemake
  9.27 forms them in ``DAG._update_group_components`` by merging each chunk's group jobs into the
  first one, in place (``GroupJob.merge``). But its ``GroupJobFactory`` caches every group job under
  the job set it was created with, and the DAG is post-processed several times (after each
  checkpoint, and on a second pass): each time, a cell's lookup returns the group job already grown
  by the previous merge, and chunks are merged again. Bundles then hold 2-4 chunks, and some cells
  land in two bundles (46 of fig1's 480 round-0 cells at the paper scale): two Slurm jobs train the
  same cell (one fails on its lock, and Snakemake removes the outputs of the failed copy).

  ``install()`` replaces that one method by one that merges without mutating: a bundle is a new
  group job made by the factory for the union of its chunk's jobs (so the same chunk gives the same
  object on every pass), chunks taken in a fixed order (by the cells' output paths), never the
  set's iteration order. Nothing else changes. It installs only on the Snakemake versions it was
  checked against, and says so otherwise (tests/test_slurm.py checks the bundles of a paper dry run).
* ``install_one_reevaluation``: the scheduler's fix, installed by the Snakefile:
  Snakemake 9.27's scheduler, after every pass over the ready jobs, starts a timer that wakes it
  again after the job-rate limit's timespan (``--max-jobs-per-timespan``, 100/1s by default), so
  that jobs the limit held back are submitted later. Each pass starts one, the passes the timers
  wake included: every job that ends adds a chain of passes, one a second, that never stops, each
  pass over every ready job. In the demo (440 cells, 610 jobs) its main process held 127 threads,
  then 189 five seconds later, and had used 461 CPU-seconds 41 minutes into the run, most of them
  in those passes (docs/history/demo.md). ``_schedule_reevaluation`` keeps one timer pending at most,
  the one due first (a shorter wake-up asked later replaces a longer one): a pass within the
  timespan after any pass, as Snakemake intends, and no more.
* ``recorded_jobs``: the jobs a finished run recorded (Snakemake's file persistence,
  ``.snakemake/metadata``), read by the run's cost report (arrepro.cluster.runcost).
"""
from __future__ import annotations

import base64
import inspect
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from arrepro.train import runfile

CHECKED = ("9.",)  # the Snakemake major versions whose internals this module was checked against
_WARNED: set[str] = set()


def checked(what: str) -> bool:
    """Whether the running Snakemake is one this module was checked against; else says once, on
    stderr, what ``what`` relies on."""
    import snakemake

    if snakemake.__version__.startswith(CHECKED):
        return True
    _warn(what, f"Snakemake {snakemake.__version__} is not one {__spec__.name} was checked against "
                f"({', '.join(CHECKED)}x)")
    return False


# Snakemake commands that read the Snakefile but run no job (snakemake/cli.py, args_to_api)
NOT_A_RUN = ("lint", "list_target_rules", "list_rules", "print_compilation", "containerize", "generate_unit_tests",
             "dag", "rulegraph", "filegraph", "d3dag", "unlock", "cleanup_metadata", "conda_cleanup_envs",
             "conda_create_envs_only", "list_conda_envs", "cleanup_shadow", "container_cleanup_images", "list_changes",
             "list_input_changes", "list_params_changes", "list_untracked", "summary", "detailed_summary", "archive",
             "delete_all_output", "delete_temp_output")


def invocation() -> dict | None:
    """``{"executor": name, "dryrun": bool}`` while the ``snakemake`` command reads the Snakefile
    to run the workflow (``-n`` included); None for commands that run no job (--lint, --unlock,
    --report, --summary, ...) and where Snakemake is not run from its command line. Read from
    the parsed arguments in the frame of Snakemake's ``args_to_api`` (snakemake/cli.py, 9.x):
    Snakemake reads the Snakefile before it tells the workflow what it will do."""
    checked("the checks before any job find the command in its frame")
    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "args_to_api" and code.co_filename.endswith(os.path.join("snakemake", "cli.py")):
            args = frame.f_locals.get("args")
            if args is None or any(getattr(args, k, None) for k in NOT_A_RUN):
                return None
            if getattr(args, "reporter", None) and not getattr(args, "report_after_run", False):
                return None
            return {"executor": getattr(args, "executor", None) or "local", "dryrun": bool(getattr(args, "dryrun", False))}
        frame = frame.f_back
    return None


def force_rebuild(paths) -> bool:
    """Add ``paths`` to the ``--forcerun`` files of the Snakemake command reading the Snakefile
    (its DAGSettings, in the frame of Snakemake's ``WorkflowApi.dag``): Snakemake then rebuilds
    them, and whatever the targets need downstream of them, in a dry run too. (Moving a damaged
    table away is not enough: Snakemake rebuilds a missing file only for a job that must run
    anyway.) False where there is no such frame."""
    from snakemake.settings.types import DAGSettings

    frame = inspect.currentframe()
    while frame is not None:
        settings = frame.f_locals.get("dag_settings")
        if isinstance(settings, DAGSettings):
            settings.forcerun = frozenset(settings.forcerun or ()) | {str(p) for p in paths}
            return True
        frame = frame.f_back
    return False


def forced(workflow) -> tuple[list[str], set[str]]:
    """What the run ``workflow`` (in its onstart) is about to make forces: its DAG's forced rules
    and files, less the outputs of interrupted train jobs that ``--rerun-incomplete`` forced
    (they resume). For arrepro.train.runfile.new."""
    dag = workflow.dag
    files = {str(f) for f in dag.forcefiles}
    for job in dag.needrun_jobs():
        if job.rule.name == runfile.TRAIN_RULE and files.intersection(map(str, job.output)) \
                and workflow.async_run(workflow.persistence.incomplete(job)):
            files.difference_update(map(str, job.output))
    return [r.name for r in dag.forcerules], files


def forced_train_jobs(workflow, run: dict, finished: bool = False) -> int:
    """How many train jobs of the DAG the run forces: those still to run, or (``finished``) those
    that ran."""
    dag = workflow.dag
    jobs = dag.finished_jobs if finished else dag.needrun_jobs()
    return sum(1 for j in jobs if j.rule.name == runfile.TRAIN_RULE and runfile.forces(run, runfile.TRAIN_RULE, j.output))


def needrun_jobs(workflow) -> list:
    """The jobs the run is about to start (in the Snakefile's onstart)."""
    return list(workflow.dag.needrun_jobs())


def uses_conda(workflow) -> bool:
    """Whether the rules deploy their conda environments (``--sdm conda``)."""
    from snakemake_interface_executor_plugins.settings import DeploymentMethod

    return DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method


def _sort_key(group) -> tuple:
    return tuple(sorted(str(f) for job in group.jobs for f in job.output))


def _update_group_components(self) -> None:
    """Snakemake's DAG._update_group_components, merging chunks into new group jobs."""
    by_id = defaultdict(set)
    for group in self._group.values():
        by_id[group.groupid].add(group)
    for groupid, components in by_id.items():
        n = self.workflow.group_settings.group_components.get(self.workflow.parent_groupids.get(groupid, groupid), 1)
        if n <= 1:
            continue
        ordered = sorted(components, key=_sort_key)
        for i in range(0, len(ordered), n):
            chunk = ordered[i:i + n]
            if len(chunk) == 1:
                continue
            jobs = frozenset(j for g in chunk for j in g.jobs)
            bundle = self.group_job_factory.new(groupid, jobs, self.workflow.global_resources)
            for j in jobs:
                self._group[j] = bundle
    for group in set(self._group.values()):
        group.finalize()


def _warn(what: str, why: str) -> None:
    """Say once, on stderr, that ``what`` stays as Snakemake does it, and why."""
    if what not in _WARNED:
        _WARNED.add(what)
        print(f"arrepro: {why}: {what}", file=sys.stderr)


def _install(owner, name: str, replacement, what: str) -> bool:
    """Replace the method ``owner.name`` by ``replacement`` (once). False, with a warning on stderr
    saying that ``what`` then stays as Snakemake does it and why: an unchecked Snakemake, or one
    whose ``owner`` has no method ``name`` (renamed, removed) or one taking other arguments than
    ``replacement`` (its callers would break)."""
    if getattr(owner, name, None) is replacement:
        return True
    if not checked(what):
        return False
    import snakemake

    where = f"Snakemake {snakemake.__version__}'s {owner.__name__}.{name}"
    original = getattr(owner, name, None)
    if not callable(original):
        _warn(what, f"{where} is not there (renamed or removed), so it was not replaced")
        return False
    try:
        theirs = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        theirs = None
    ours = list(inspect.signature(replacement).parameters)
    if theirs != ours:
        _warn(what, f"{where} takes ({', '.join(theirs or ['?'])}), not ({', '.join(ours)}), so it was not replaced")
        return False
    setattr(owner, name, replacement)
    return True


def install_group_components() -> bool:
    """The Slurm bundles' fix (module docstring); False where it cannot be installed (said on stderr)."""
    from snakemake.dag import DAG

    return _install(DAG, "_update_group_components", _update_group_components,
                    "the group-components workaround: bundles of Slurm jobs are as Snakemake forms them")


_REEVALUATION = threading.Lock()  # guards each scheduler's pending timer (its timer's thread and the scheduler's)


def _schedule_reevaluation(self, delay) -> None:
    """Snakemake's JobScheduler._schedule_reevalutation, with one timer pending at most: the one due
    first. A pending timer due within ``delay`` already wakes the scheduler in time; one due later
    (a 3 s wake-up, then a 0.2 s one asked) is cancelled for a timer due after ``delay``."""
    due = time.monotonic() + delay
    with _REEVALUATION:
        pending = getattr(self, "_arrepro_timer", None)
        if pending is not None and self._arrepro_due <= due:
            return
        if pending is not None:
            pending.cancel()  # (one that fires while it is cancelled only wakes the scheduler once more)

        def fire():
            with _REEVALUATION:
                if self._arrepro_timer is timer:
                    self._arrepro_timer = None
            self._open_jobs.release()

        timer = threading.Timer(delay, fire)
        self._arrepro_timer, self._arrepro_due = timer, due
        timer.start()


def install_one_reevaluation() -> bool:
    """The scheduler's fix (module docstring); False where it cannot be installed (said on stderr)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    return _install(JobScheduler, "_schedule_reevalutation", _schedule_reevaluation,
                    "the scheduler's fix: every pass starts another chain of re-evaluations, as Snakemake does")


METADATA = Path(".snakemake") / "metadata"


def recorded_jobs(workdir) -> list[dict]:
    """Every output file Snakemake recorded as made in ``workdir``, with the job that made it:
    ``{"output", "rule", "input", "log", "starttime", "endtime", "job_hash"}`` (start and end in
    seconds since the epoch). Snakemake 9's file persistence keeps one JSON record per output
    under ``.snakemake/metadata``, named by the output's path in URL-safe base64, cut into parts
    of at most NAME_MAX - 1 characters, every part but the last prefixed with "@"
    (snakemake/persistence/file.py, ``_record_path``). A record that does not parse, or is
    incomplete, is left out (Snakemake ignores those too)."""
    checked("the run's cost report reads its job records")
    root = Path(workdir) / METADATA
    out = []
    for path in sorted(root.rglob("*")) if root.is_dir() else ():
        if not path.is_file():
            continue
        parts = path.relative_to(root).parts
        try:
            output = base64.urlsafe_b64decode("".join(p.removeprefix("@") for p in parts)).decode()
            record = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        if not isinstance(record, dict) or record.get("incomplete") or record.get("rule") is None:
            continue
        out.append({"output": output, "rule": record["rule"], "input": list(record.get("input") or ()),
                    "log": list(record.get("log") or ()), "starttime": record.get("starttime"),
                    "endtime": record.get("endtime"), "job_hash": record.get("job_hash")})
    return out
