"""A training cell's files: what its trainer leaves, and the one place they are read back (pure
Python, no torch: the Snakefile and the aggregation import it).

A cell's folder (``arrepro.config.grid.CELL_PATTERN``) holds ``metrics.jsonl`` (one line per epoch,
written when the cell ends),
``result.json`` (written last: the cell is finished iff it exists), ``checkpoint.pt`` (its own
sha256 in its header; train.py: while the cell trains, the model and optimiser state; once it is
finished, only the record that rebuilds its two outputs, a few KB), ``weights.pt`` (the final
weights, with the config's ``keep_weights``), ``train.log`` (every attempt's progress),
``job.log`` (the last attempt's) and ``train.lock``.

**Outputs that agree.** ``result.json`` carries the sha256 of ``metrics.jsonl``'s bytes
(``metrics_sha256``) and of its own content (``sha256``: the canonical JSON of every other key),
and names its cell (task, model, width, layers, recipe, lr, seed), which must be the folder it
lies in; its final numbers (``final_accuracy``, ``final_test_loss``, ``final_exact_match``,
``best_accuracy``, ``epochs_run``) are those of metrics.jsonl's rows. ``read_result`` (the tables,
the search) and ``read_metrics`` (the dynamics figure) check all of it: a result.json edited by
hand, half-written or copied from another cell, or a metrics.jsonl cut or edited after training,
is a ``BadCellFile`` naming the cell, what is wrong and the fix (delete the two files and run
again: the cell's train job rebuilds them from its checkpoint, without training when the
checkpoint is of the finished cell). A cell folder that is a symbolic link is named as one, and
the fix removes the link, never the files of the folder it points to.

What the checksums protect against, and what not: accidents and careless edits (a truncated or
damaged write, a number typed into one file, a file copied into the wrong folder). They are not a
signature: they are plain sha256 of the files' contents, which anyone can recompute. A result
whose number was edited and its own checksum recomputed is still refused, because its number no
longer matches metrics.jsonl; a forger who also rewrites metrics.jsonl and both checksums is not
caught here (the checkpoint beside them still holds the true metrics: deleting both files and
rerunning rebuilds them from it).

**One trainer per cell.** ``CellLock``: an exclusive POSIX record lock (``fcntl`` F_SETLK through
``lockf``) on ``train.lock``, held while a process trains the cell. The kernel releases it when
the holder dies, however it dies (``kill -9`` included), so a dead trainer never blocks its cell;
a second trainer is refused at once, told which process (pid, host, start) holds it. What this
relies on: local file systems and NFS (v3 through the lock manager, v4 natively; a crashed
client's locks are released when its lease expires) give such locks across machines; Lustre does
with the ``flock`` mount option (``localflock`` makes them per node: two nodes could then train
one cell at once) and refuses them without it. Where the file system refuses locks, training
goes on unlocked and its log says so.

A forced job starts over (``--forcerun``, ``--forceall``): arrepro.train.runfile.
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import os
import socket
from pathlib import Path

from arrepro.files import UnreadableFile, json_sha256, seal_json
from arrepro.config.grid import CELL_PATTERN, fmt_lr

CHECKPOINT = "checkpoint.pt"
WEIGHTS = "weights.pt"
RESULT = "result.json"
METRICS = "metrics.jsonl"
LOCK = "train.lock"
TRAIN_LOG = "train.log"
# the keys of result.json that name its cell (its folder: CELL_PATTERN)
IDENTITY = ("task", "model", "width", "layers", "recipe", "lr", "seed")


# ------------------------------------------------------------------------------ outputs that agree
def metrics_text(rows: list[dict]) -> str:
    """metrics.jsonl's contents: one JSON object a line (the one serialisation, so that the
    checksum in result.json is of exactly these bytes)."""
    return "".join(json.dumps(m) + "\n" for m in rows)


def seal(result: dict, metrics: str) -> dict:
    """``result`` with the checksums of ``metrics`` (metrics.jsonl's text) and of itself: the
    last step before result.json is written."""
    return seal_json({**result, "metrics_sha256": hashlib.sha256(metrics.encode()).hexdigest()})


class BadCellFile(UnreadableFile):
    """A cell's file that is unreadable or disagrees with the others; the message starts with the
    file's path and ends with the fix."""


def _link_in(cell: Path) -> Path | None:
    """The first folder of ``cell``'s path below results/cells (task, model, ... the cell itself)
    that is a symbolic link, or None."""
    parts = cell.parts
    root = next((i for i in range(len(parts) - 1) if parts[i:i + 2] == ("results", "cells")), None)
    if root is None:
        return None
    for i in range(root + 3, len(parts) + 1):
        if Path(*parts[:i]).is_symlink():
            return Path(*parts[:i])
    return None


def _fix(cell: Path) -> str:
    link = _link_in(cell)
    if link is not None:  # `rm` through the link would delete the files of the folder it points to
        return (f"{link} is a symbolic link (to {os.readlink(link)}), not a folder the workflow made: to fix, remove "
                f"the link itself (rm {link}), not the files it points to, then run the workflow again: the cell is "
                "trained in a folder of its own")
    how = ("its train job rebuilds both from checkpoint.pt (without training, the checkpoint being of "
           "the finished cell)" if (cell / CHECKPOINT).exists() else "its train job trains the cell again")
    return f"to fix: rm {cell / RESULT} {cell / METRICS}, then run the workflow again: {how}"


def _bad(cell: Path, name: str, problem: str) -> BadCellFile:
    return BadCellFile(f"{cell / name}: {problem}; {_fix(cell)}")


def _folder_of(result: dict) -> str:
    """The cell folder a result names (the last six folders of CELL_PATTERN)."""
    values = {k: result[k] for k in IDENTITY}
    values["lr"] = fmt_lr(values["lr"])
    return CELL_PATTERN.format(**values).split("/", 2)[2]


def read_result(path) -> dict:
    """A cell's result.json, checked: valid JSON, its own checksum, the cell it names is the
    folder it lies in, and its final numbers are metrics.jsonl's (itself checked against the
    checksum result.json recorded). Else BadCellFile naming the file, the problem and the fix."""
    return _read_cell(Path(path))[0]


def _read_cell(path: Path) -> tuple[dict, list[dict]]:
    """(result.json, metrics.jsonl's rows) of the cell whose result is ``path``, checked."""
    cell = path.parent
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise _bad(cell, path.name, f"cannot read it: {type(e).__name__}: {e}") from e
    try:
        r = json.loads(text)
    except ValueError as e:
        raise _bad(cell, path.name, f"not valid JSON (half-written or damaged: {e})") from e
    if not isinstance(r, dict):
        raise _bad(cell, path.name, "not a JSON object")
    if "sha256" not in r or "metrics_sha256" not in r:
        raise _bad(cell, path.name, "no checksum (not written by this version of train.py)")
    if r["sha256"] != json_sha256(r):
        raise _bad(cell, path.name, "its contents differ from what its trainer wrote (sha256 mismatch: "
                                    "edited or damaged after training)")
    try:
        named = _folder_of(r)
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(cell, path.name, f"does not name its cell ({type(e).__name__}: {e})") from e
    if not cell.as_posix().endswith("/" + named):
        link = _link_in(cell)
        where = (f"{link} is a symbolic link to a folder of another cell" if link is not None
                 else "a foreign folder: copied or moved here from that cell's folder")
        raise _bad(cell, path.name, f"is the result of another cell ({named}): {where}")
    try:
        data = (cell / METRICS).read_bytes()
    except OSError as e:
        raise _bad(cell, METRICS, f"cannot read it: {type(e).__name__}: {e}") from e
    if hashlib.sha256(data).hexdigest() != r["metrics_sha256"]:
        raise _bad(cell, METRICS, f"differs from the file its {RESULT} was written with (sha256 mismatch: "
                                  "cut, edited or damaged after training)")
    try:
        rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    except ValueError as e:
        raise _bad(cell, METRICS, f"not valid JSON lines ({e})") from e
    problem = _disagreement(r, rows)
    if problem:
        raise _bad(cell, path.name, f"{problem} (edited after training, its checksum recomputed)")
    return r, rows


# result.json's final numbers: the last metrics row's (train.py's _finish)
FINAL = {"final_accuracy": ("test_accuracy", 0.0), "final_exact_match": ("test_exact_match", 0.0),
         "final_test_loss": ("test_loss", None)}


def _disagreement(r: dict, rows: list[dict]) -> str | None:
    """Where result.json's numbers are not those of its metrics rows, or None."""
    last = rows[-1] if rows else {}
    for key, (column, default) in FINAL.items():
        if key in r and r[key] != last.get(column, default):
            return (f"its {key} is {r[key]!r} where the last epoch of {METRICS} has {column} "
                    f"{last.get(column, default)!r}")
    if "epochs_run" in r and r["epochs_run"] != len(rows):
        return f"its epochs_run is {r['epochs_run']!r} where {METRICS} has {len(rows)} epoch(s)"
    accs = [m.get("test_accuracy") for m in rows]
    if "best_accuracy" in r and all(isinstance(a, (int, float)) for a in accs) \
            and r["best_accuracy"] != max(accs, default=0.0):
        return f"its best_accuracy is {r['best_accuracy']!r} where the best epoch of {METRICS} has {max(accs, default=0.0)!r}"
    return None


def read_metrics(cell_dir) -> list[dict]:
    """A finished cell's metrics.jsonl, checked with its result.json (``read_result``)."""
    return _read_cell(Path(cell_dir) / RESULT)[1]


# ------------------------------------------------------------------------------ one trainer per cell
class CellBusy(RuntimeError):
    """Another live process holds the cell's lock; the message names it."""


class CellLock:
    """``with CellLock(cell_dir) as lock:`` the calling process alone trains the cell (see the
    module's docstring). ``lock.unsupported`` says why no lock could be taken (the file system
    refuses locks), else is None."""

    def __init__(self, cell_dir):
        self.path = Path(cell_dir) / LOCK
        self.fd: int | None = None
        self.unsupported: str | None = None

    def __enter__(self) -> "CellLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "a process that has not said which"
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise CellBusy(f"{self.path.parent}: another process is training this cell ({holder}; "
                               f"lock {self.path}). Wait for it to finish, or stop it, then run again") from None
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self.unsupported = (f"cannot lock {self.path} ({e.strerror}): the file system refuses locks, so "
                                    "nothing stops a second trainer of this cell")
                return self
            raise
        self.fd = fd
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        try:  # who holds it, for a refused second trainer's message (a full disk may refuse the bytes)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n".encode(), 0)
        except OSError:
            pass
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None
