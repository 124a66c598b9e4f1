"""What the workflow checks when Snakemake reads the Snakefile, before it builds the DAG (which
takes a minute at the paper scale) and before any job: so that a problem is named first, in
one or a few lines, and a damaged derived file is rebuilt instead of being used.

* config.yaml and ``--config`` before Snakemake reads them, and their refusals: arrepro.cluster.configfile;
* ``missing_software``: conda (when rules deploy with it) and sbatch (for the Slurm executor);
* ``other_run`` / ``record_run``: another Snakemake run in this folder (its pid), which Snakemake
  itself reports only as "incomplete files: use --rerun-incomplete", advice that would start
  a second trainer on the cells the first one is training;
* ``check_data``: the datasets of the scale (results/data/<task>/*.npz) against the checksums
  recorded beside them (``manifest.json``); a damaged one is regenerated in place (the
  generator is deterministic) and, when it matches the recorded checksum again, gets its
  recorded modification time back, so that no cell trained on it is planned again;
* ``damaged_tables``: the derived tables against the checksum their writer stored beside them
  (``arrepro.files.write_table``), or, without one, against what their readers need; one that
  fails (truncated, edited) is rebuilt (``internals.force_rebuild``), with what the targets need of it; so
  are the learning-rate search's stale or damaged plans and decision files (``arrepro.search.plans``) and
  a ``results/NAME`` that is not the workflow's link (``foreign_links``);
* ``stop_if_unwritable`` (the Snakefile's onstart, once the DAG is built): a folder a job about
  to run must write in and cannot, in one line (Snakemake would crash removing old outputs there).

Which Snakemake command runs (a dry run, a real run, or no run at all: --lint, --unlock, ...)
is not part of Snakemake's API when the Snakefile is read: arrepro.cluster.internals reads it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import zipfile
from pathlib import Path

from arrepro.cluster import internals
from arrepro.config.paths import DATA_ROOT, SPLITS
from arrepro.files import checksum_path, file_sha256, table_problem, write_text_atomic

MANIFEST = "manifest.json"  # beside a task's train.npz and test.npz: {file: {sha256, size, mtime_ns}}
RUN_RECORD = ".snakemake/arrepro-run.json"  # the Snakemake run that last started jobs in this folder


def share_package(root) -> None:
    """This checkout's ``src/`` on every job's PYTHONPATH (a job may run in a conda env that does
    not install the package), and the interpreter running the workflow first on PATH (an
    activated conda env comes first anyway): the one way the workflow's jobs find the package."""
    import os
    import sys
    from pathlib import Path

    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(root) / "src"), os.environ.get("PYTHONPATH", "")])
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])


def say(message: str) -> None:
    """A line for the user, before Snakemake's own output."""
    print(f"arrepro: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- software
def missing_software(deployment_methods, run: dict | None) -> str | None:
    """What this run needs and PATH lacks: conda when rules deploy their software with it (the
    Slurm profile's ``software-deployment-method: conda``), sbatch for the Slurm executor (not
    for a dry run). None if nothing is missing."""
    if run is None:
        return None
    problems = []
    if any(getattr(m, "name", str(m)).upper() == "CONDA" for m in deployment_methods or ()) and not shutil.which("conda"):
        problems.append(
            "`conda` is not on PATH, and this run deploys every rule's software with conda (software-deployment-method: "
            "conda, which `--profile slurm` sets). Put conda on PATH (`module load` it, or install Miniforge), or, where "
            "this Python environment is on a file system the nodes share, add `--sdm env-modules` to run the rules with it")
    if run["executor"] == "slurm" and not run["dryrun"] and not shutil.which("sbatch"):
        problems.append("`sbatch` is not on PATH: `--profile slurm` submits every job to Slurm; run it on a login node "
                        "of the cluster (or run locally: `snakemake all`)")
    return "; and ".join(problems) or None


# --------------------------------------------------------------------------- another run
def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell it from a later
    process that reuses its pid; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return ticks is None or _start_ticks(pid) in (None, ticks)


def other_run(workdir: str | Path = ".") -> dict | None:
    """The record of another Snakemake run that started jobs in ``workdir`` and is still alive,
    else None."""
    path = Path(workdir) / RUN_RECORD
    try:
        rec = json.loads(path.read_text())
        pid = int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid() or not _alive(pid, rec.get("start_ticks")):
        return None
    return rec


def record_run(workdir: str | Path = ".") -> None:
    """Record this process as the run that holds ``workdir`` (written atomically)."""
    path = Path(workdir) / RUN_RECORD
    rec = {"pid": os.getpid(), "start_ticks": _start_ticks(os.getpid()),
           "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(["snakemake", *sys.argv[1:]])}
    write_text_atomic(path, json.dumps(rec))


def holder_message(rec: dict, workdir: str | Path = ".") -> str:
    return (f"another Snakemake run holds this folder ({Path(workdir).resolve()}): pid {rec['pid']}, started "
            f"{rec.get('started', '?')} (`{rec.get('command', 'snakemake')}`). Its jobs in progress look "
            f"incomplete to a second run: do not follow a --rerun-incomplete or --unlock advice while it runs. Wait "
            f"for it, or stop it first (`kill {rec['pid']}`; an interrupted training cell resumes from its checkpoint)")


# --------------------------------------------------------------------------- datasets
def _entry(path: Path) -> dict:
    st = path.stat()
    return {"sha256": file_sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_manifest(folder: Path) -> dict:
    try:
        m = json.loads((folder / MANIFEST).read_text())
        return m if isinstance(m, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_manifest(folder: Path, manifest: dict) -> None:
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def npz_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable .npz (a zip of .npy arrays, every member's CRC intact),
    or None."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                return f"member {bad} fails its CRC check"
            if not z.namelist():
                return "no arrays"
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def data_problem(path: Path, entry: dict | None) -> str | None:
    """Why a dataset file cannot be trusted, or None. With a recorded entry: same size and
    modification time (cheap), else the same checksum; without one: an intact .npz."""
    st = path.stat()
    if entry:
        if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns"):
            return None
        if st.st_size != entry.get("size"):
            return f"{st.st_size} bytes where {entry.get('size')} were written"
        if file_sha256(path) != entry.get("sha256"):
            return "its content differs from the checksum recorded when it was written"
        return None
    return npz_problem(path)


def record_data(folders) -> None:
    """Record the checksum of every intact dataset file in ``folders`` that has no record yet
    (at the end of a run and at the start of the next: what was written in between), and the
    new time of a recorded one whose bytes are the recorded ones (a copied results folder), so
    that the next start needs no checksum. Only for files that passed ``data_problem``."""
    for folder in map(Path, folders):
        manifest = _read_manifest(folder)
        changed = False
        for split in SPLITS:
            f = folder / f"{split}.npz"
            if not f.exists():
                continue
            entry = manifest.get(f.name)
            if entry is None and npz_problem(f) is None:
                manifest[f.name] = _entry(f)
                changed = True
            elif entry is not None and f.stat().st_mtime_ns != entry.get("mtime_ns") and data_problem(f, entry) is None:
                entry["mtime_ns"] = f.stat().st_mtime_ns
                changed = True
        if changed:
            _write_manifest(folder, manifest)


def check_data(tasks: dict[str, dict], dryrun: bool, root: str = DATA_ROOT) -> list[str]:
    """Check the dataset files of ``tasks`` ({task id: definition}) that exist; regenerate a
    damaged one (not in a dry run). Returns what it found and did, one line per file."""
    from arrepro.data import save_task

    notes = []
    for tid, task in tasks.items():
        folder = Path(root) / tid
        manifest = _read_manifest(folder)
        bad = {}
        for split in SPLITS:
            f = folder / f"{split}.npz"
            if f.exists():
                why = data_problem(f, manifest.get(f.name))
                if why:
                    bad[f] = why
        if not bad:
            record_data([folder])
            continue
        if dryrun:
            notes += [f"{f}: damaged ({why}); a run without -n regenerates it before any job (and, if it comes out "
                      "identical to the recorded checksum, trains none of the cells this plan lists because of it)"
                      for f, why in bad.items()]
            continue
        tmp = folder / f".regenerate-{os.getpid()}"
        try:
            save_task({k: v for k, v in task.items() if k != "name"}, tmp)
            for f, why in bad.items():
                new, entry = tmp / f.name, manifest.get(f.name)
                same = entry is not None and file_sha256(new) == entry.get("sha256")
                new.replace(f)
                if same:  # byte-identical to what the cells trained on: its old time, nothing reruns
                    os.utime(f, ns=(f.stat().st_atime_ns, entry["mtime_ns"]))
                    notes.append(f"{f}: damaged ({why}); regenerated it, identical to the checksum recorded when "
                                 "it was written: no cell is retrained")
                else:
                    manifest[f.name] = _entry(f)
                    notes.append(f"{f}: damaged ({why}); regenerated it, but "
                                 + ("no checksum was recorded" if entry is None else "it differs from the recorded checksum")
                                 + ": Snakemake may plan the cells trained on it again (the file is newer than them)")
            _write_manifest(folder, manifest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return notes


# --------------------------------------------------------------------------- derived tables
def damaged_tables(paths) -> dict[Path, str]:
    """The existing tables in ``paths`` that fail their check, each with why: the checksum their
    writer stored beside them or, without one (made by hand, or before tables had one), what
    their readers need (arrepro.report.aggregate.table_content_problem)."""
    bad = {}
    for path in map(Path, paths):
        if not path.exists():
            continue
        if checksum_path(path).exists():
            why = table_problem(path)
        else:
            from arrepro.report.aggregate import table_content_problem

            why = table_content_problem(path)
        if why:
            bad[path] = why
    return bad


# --------------------------------------------------------------------------- the workflow's hook
def unwritable_folders(paths) -> dict[str, str]:
    """The existing folders of ``paths`` (the outputs of the jobs about to run) that refuse a new
    file (permissions, a read-only mount, an immutable folder), each with why: Snakemake would
    crash removing the old outputs there. Tried, not guessed from permission bits (root ignores
    them)."""
    import errno

    out = {}
    for folder in dict.fromkeys(os.path.dirname(str(p)) or "." for p in paths):
        if not os.path.isdir(folder):
            continue
        probe = os.path.join(folder, f".arrepro-write-test.{os.getpid()}")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                out[folder] = e.strerror
    return out


def stop_if_unwritable(jobs) -> None:
    """Before any job (the Snakefile's onstart): a WorkflowError naming each folder where a job
    about to run must write and cannot."""
    from snakemake.exceptions import WorkflowError

    bad = unwritable_folders(f for job in jobs for f in job.output)
    if bad:
        raise WorkflowError("stopping before any job: " + "; ".join(f"{d}: cannot write in this folder ({why})"
                                                                   for d, why in bad.items())
                            + ". Make the folder(s) writable, then run again")


def foreign_links(names, root: str = "results") -> dict[str, str]:
    """``results/NAME`` (figures, tables, the paper of the config's scale: workflow/rules/current.smk)
    that exist and are not the link the workflow makes (``SCALE/NAME``): a regular file (an old
    copy) or a link elsewhere, each with why (the workflow replaces it when it is asked for). A
    folder there is named when it is asked for (common.smk's current_input)."""
    out = {}
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) or not os.path.lexists(path):
            continue
        if not os.path.islink(path):
            out[path] = "a regular file, not the link to this scale's output that the workflow makes"
        elif not re.fullmatch(rf"[A-Za-z0-9][A-Za-z0-9_-]*/{re.escape(name)}", os.readlink(path)):
            out[path] = f"a link to {os.readlink(path)}, not to this scale's output"
    return out


def before_dag(workflow, tasks: dict[str, dict], tables, workdir: str | Path = ".", rebuild=None) -> None:
    """Everything above, for the run Snakemake is about to start (nothing for --lint, --unlock
    and other commands that run no job, nor inside a job): raise a WorkflowError naming what
    stops the run; regenerate damaged datasets, rebuild damaged tables and whatever
    ``rebuild()`` returns ({path: why}: the search's stale plans, damaged decision files,
    foreign links), and say so."""
    from snakemake.exceptions import WorkflowError

    run = internals.invocation()
    if run is None or getattr(workflow.exec_mode, "name", "DEFAULT") != "DEFAULT":
        return
    problem = missing_software(workflow.deployment_settings.deployment_method, run)
    if problem:
        raise WorkflowError(f"stopping before any job: {problem}")
    holder = other_run(workdir)
    if holder and not run["dryrun"]:
        raise WorkflowError(f"stopping before any job: {holder_message(holder, workdir)}")
    if holder:
        say(f"note: {holder_message(holder, workdir)}")
        return  # a dry run beside a running one: its files are in flux, leave them alone
    if not run["dryrun"]:
        record_run(workdir)
    for note in check_data(tasks, run["dryrun"]):
        say(note)
    bad = {**damaged_tables(tables), **(rebuild() if rebuild else {})}
    if bad and not internals.force_rebuild(bad):
        raise WorkflowError("stopping before any job: " + "; ".join(f"{p}: {why}" for p, why in bad.items())
                            + ". Delete the file(s) and rerun")
    for path, why in bad.items():
        say(f"{path}: {why}; it is rebuilt")
