"""The command line of a training job (scripts/train_cell.py): one cell, its logs, its errors.

    train_cell.py --cell-json '{...}' --data DIR --out DIR [--threads N]
                  [--train-log FILE] [--die-with-parent] [--run-file FILE] [--server]

Every progress line goes to standard output (the train rule sends it to the job's ``job.log``)
and, with ``--train-log``, is appended to the cell's ``train.log`` (every attempt's history), by
this process itself: no ``tee`` that a Ctrl-C (SIGINT to the whole process group) kills before
the "checkpoint written" line, or whose own error on a full disk hides the script's. An error
(a TrainError: the spec, the data, the machine, a full disk, another trainer of the cell) is one
line, ``train_cell.py: error: ...``, written to the logs when they can still be written, and
always to standard error, which Snakemake shows; an unexpected one adds its traceback the same
way. Exit status 1; 3 after a SIGTERM or SIGINT checkpoint (Slurm retries the job).

``--die-with-parent`` (the train rule's): the process asks the kernel for a SIGTERM when its
parent dies (Linux ``PR_SET_PDEATHSIG``), and the rule runs it with ``exec`` so that its parent
is the Snakemake that runs the job. A ``kill -9`` of a local Snakemake then stops its training
jobs (each checkpoints, as on any SIGTERM) instead of leaving orphans that train on beside the
next run's jobs. On a cluster the parent is the Snakemake inside the Slurm job, not the one that
submitted it: a submitting process that dies (a closed login session) leaves its Slurm jobs
running, as it should. Not on by default: a trainer started by hand (``nohup ... &``) keeps
running when its shell exits.

``--run-file`` (the train rule's): the file in which the Snakemake run says which cells it forces
and whether cells keep their final weights (arrepro.train.runfile). A forced cell trains from scratch,
once per run (a retry resumes the forced attempt's checkpoint). Without it, nothing is forced and
no weights are kept.

``--server`` (the train rule's): a CPU cell trains in a child of the training server, which has
started up once for every cell (``arrepro.train.server``: the same code and numbers; this process
stays as the job, forwarding signals and passing on the exit status); where there is no server
(Slurm, a GPU cell, ``ARREPRO_TRAIN_SERVER=0``) the cell trains in this process.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import traceback

PROG = "train_cell.py"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class JobLog:
    """A callable writing each line to standard output and appending it to ``train_log``. A
    destination that fails (a full disk) is reported once on standard error and skipped; training
    goes on (its own writes fail loudly, naming the file)."""

    def __init__(self, train_log: str | None):
        self.train_log = train_log
        self.broken: set[str] = set()

    def _write(self, where: str, write) -> None:
        if where in self.broken:
            return
        try:
            write()
        except OSError as e:
            self.broken.add(where)
            print(f"{PROG}: warning: cannot write {where} ({e.strerror or e}); the log goes on elsewhere",
                  file=sys.stderr, flush=True)

    def __call__(self, line: str) -> None:
        def out():
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

        def append():
            with open(self.train_log, "a") as f:
                f.write(line + "\n")

        self._write("standard output (job.log)", out)
        if self.train_log:
            self._write(self.train_log, append)

    def error(self, message: str) -> None:
        """``message`` to the logs (where they can be written) and to standard error."""
        self(message)
        print(message, file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux only; elsewhere nothing). If the parent
    died before the request took effect, exit now."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # already orphaned
        sys.exit(f"{PROG}: error: the process that started this job (pid {parent}) has exited")


def check_code(spec: dict) -> None:
    """The cell's code, once imported, is the code the workflow planned the cell with
    (arrepro.planned.check_planned_code; nothing to check for a cell trained by hand)."""
    from arrepro.config.catalogue import ROOT, cell_sources
    from arrepro.planned import check_planned_code
    from arrepro.models import get_mixer

    model_def = spec.get("model_def") if isinstance(spec, dict) else None
    mixer = model_def.get("mixer") if isinstance(model_def, dict) else None
    if isinstance(mixer, str):
        try:
            get_mixer(mixer)  # its module imported: the code that runs is the code checked
        except (KeyError, ValueError, ImportError):
            return  # (the trainer names an unknown mixer itself)
        check_planned_code(paths=cell_sources(model_def, ROOT, spec.get("device", "cpu")))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=f"Train one cell of the grid (see {__spec__.name}).")
    ap.add_argument("--cell-json", required=True, help="the resolved cell spec (the train rule's param)")
    ap.add_argument("--data", required=True, help="folder with the task's train.npz and test.npz")
    ap.add_argument("--out", required=True, help="the cell's folder")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--train-log", default=None, help="also append every line to this file")
    ap.add_argument("--die-with-parent", action="store_true",
                    help="stop (SIGTERM: checkpoint and exit) when the parent process dies (Linux)")
    ap.add_argument("--run-file", default=None,
                    help="the Snakemake run's file: whether it forces this cell, whether to keep its weights")
    ap.add_argument("--server", action="store_true",
                    help="train in a child of the training server (one start-up for many CPU cells)")
    return ap


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parser().parse_args(argv)
    if a.die_with_parent:
        die_with_parent()
    log = JobLog(a.train_log)
    if a.server:
        from arrepro.train.client import run_via_server, why_not

        why = why_not(a.cell_json)
        try:
            code = run_via_server(argv, log) if why is None else None
        except Exception:  # noqa: BLE001 - said in the job's own logs, not only on stderr
            _traceback(log, f"{PROG}: error: the training server's client failed")
            sys.exit(1)
        if code is not None:
            sys.exit(code)
        if why:
            log(f"training in this process, not the training server's: {why}")
    sys.exit(_train(a, log))


def train_here(argv: list[str]) -> int:
    """Train the cell of ``argv`` in this process (a training server's child; ``--server`` is
    ignored here): the exit status."""
    a = _parser().parse_args(argv)
    if a.die_with_parent:  # in a server's child: its parent is the server
        die_with_parent()
    return _train(a, JobLog(a.train_log))


def _train(a: argparse.Namespace, log: JobLog) -> int:
    """The cell of ``a``, trained here: 0, or 1 after an error (printed), or 3 after a signal."""
    from arrepro.train import numerics, runfile
    from arrepro.config.cellfiles import METRICS, RESULT

    try:  # what the Snakemake run asks of this cell
        run = runfile.read(a.run_file) if a.run_file else None
    except runfile.BadRunFile as e:
        log.error(f"{PROG}: error: {e}")
        return 1
    forced = run["run"] if run and runfile.forces(run, runfile.TRAIN_RULE, [os.path.join(a.out, RESULT),
                                                                             os.path.join(a.out, METRICS)]) else None
    numerics.pin_environment()  # before torch's first import (arrepro.train.loop imports it)
    from arrepro.planned import CodeChanged
    from arrepro.files import CannotWrite
    from arrepro.train.loop import train_cell  # torch: once the arguments are read
    from arrepro.train.prepare import TrainError

    try:
        try:
            spec = json.loads(a.cell_json)
        except ValueError as e:
            raise TrainError(f"--cell-json: not valid JSON ({e})") from None
        check_code(spec)
        train_cell(spec, a.data, a.out, a.threads, log=log, forced_run=forced,
                   keep_weights=bool(run and run["keep_weights"]))
    except (TrainError, CannotWrite, CodeChanged) as e:  # a clear message naming the file or key: no traceback
        log.error(f"{PROG}: error: {e}")
        return 1
    except SystemExit as e:  # Preempted: a checkpoint after a signal
        return e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001
        _traceback(log)
        return 1
    return 0


def _traceback(log: JobLog, headline: str | None = None) -> None:
    """The exception being handled, its traceback, in the logs and on standard error."""
    text = ((headline + ":\n") if headline else "") + traceback.format_exc()
    for line in text.rstrip().splitlines():
        log(line)
    print(text, file=sys.stderr, end="", flush=True)
