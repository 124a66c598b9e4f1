"""Reading result files so that an error names the file, and Snakemake script jobs that write
their log (pure Python; no torch)."""
from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path


class UnreadableFile(ValueError):
    """A result file that could not be read or parsed; the message starts with its path."""


@contextlib.contextmanager
def naming(path):
    """Re-raise any error reading ``path`` as UnreadableFile naming it."""
    try:
        yield
    except (OSError, ValueError) as err:  # (pandas' ParserError is a ValueError)
        if isinstance(err, UnreadableFile):
            raise
        raise UnreadableFile(f"{path}: cannot read it: {type(err).__name__}: {err}") from err


# -- sealed JSON files: their own checksum inside ----------------------------------------------
SEAL = "sha256"


def json_sha256(obj: dict) -> str:
    """The sha256 of ``obj``'s canonical JSON (sorted keys, no spaces) without its ``SEAL`` key:
    what a sealed file's seal is. It tells the file its writer wrote from a truncated, damaged or
    hand-edited one; it is not a signature (anyone can recompute it: see cellfiles for what the
    readers check beyond it)."""
    body = {k: v for k, v in obj.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_sha256(path) -> str:
    """The sha256 of a file's bytes, read in blocks (``hashlib.file_digest``)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def seal_json(obj: dict) -> dict:
    return {**obj, SEAL: json_sha256(obj)}


def sealed_problem(path) -> tuple[dict | None, str | None]:
    """(the object, None) for a sealed JSON file that is intact; (None, why) for one that cannot
    be read, is not JSON, has no seal or a seal that does not match its contents."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as e:
        return None, f"cannot read it ({type(e).__name__}: {e})"
    except ValueError as e:
        return None, f"not valid JSON (half-written or damaged: {e})"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    if SEAL not in obj:
        return None, "no checksum (not written by this version of the workflow)"
    if obj[SEAL] != json_sha256(obj):
        return None, "its contents differ from what its job wrote (sha256 mismatch: edited or damaged since)"
    return obj, None


def write_sealed_json(path, obj: dict) -> dict:
    """Write ``obj`` with its seal, atomically; returns what was written."""
    sealed = seal_json(obj)
    write_json_atomic(path, sealed)
    return sealed


def read_csv(path, **kwargs):
    import pandas as pd  # (the search's round jobs import this module and need no pandas)

    with naming(path):
        return pd.read_csv(path, **kwargs)


# -- derived tables: written with a checksum beside them, checked by every reader --------------
def checksum_path(path) -> Path:
    """Where a table's checksum lives: ``NAME.sha256`` beside it, in ``sha256sum`` format (so
    ``sha256sum -c NAME.sha256`` checks it by hand, from its folder)."""
    return Path(f"{path}.sha256")


def write_table(df, path) -> None:
    """Write ``df`` as CSV at ``path`` atomically, and its SHA-256 beside it: a reader (and the
    workflow at start-up) can tell the table its writer wrote from a truncated or edited one."""
    path = Path(path)
    data = df.to_csv(index=False).encode()
    atomic_write(path, lambda tmp: tmp.write_bytes(data))
    write_text_atomic(checksum_path(path), f"{hashlib.sha256(data).hexdigest()}  {path.name}\n")


def table_problem(path) -> str | None:
    """Why the table at ``path`` is not the one its writer wrote, or None: no checksum beside it
    (written by hand, or before tables had one), or a checksum that does not match."""
    try:
        recorded = checksum_path(path).read_text().split()[0]
    except (OSError, IndexError):
        return "no checksum beside it (it was not written by the workflow's aggregate step)"
    if hashlib.sha256(Path(path).read_bytes()).hexdigest() != recorded:
        return "its content does not match the checksum written with it (truncated or edited since)"
    return None


def read_table(path, required=(), not_null=()):
    """A derived table, checked: its checksum where one is beside it (a table without one, made
    by hand, is read as it is), the ``required`` columns present and the ``not_null`` ones
    without a missing value. Any failure is an UnreadableFile naming the file."""
    checksum = checksum_path(path)
    if checksum.exists():
        problem = table_problem(path)
        if problem:
            raise UnreadableFile(f"{path}: {problem}; rerun the workflow, which rebuilds it")
    df = read_csv(path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UnreadableFile(f"{path}: missing column(s) {', '.join(missing)}; it has {', '.join(map(str, df.columns))}")
    for col in not_null:
        if col in df.columns and df[col].isna().any():
            row = int(df.index[df[col].isna()][0]) + 2  # the line in the file: 1-based, after the header
            raise UnreadableFile(f"{path}: column {col!r} has no value on line {row} (a truncated or edited table?)")
    return df


@contextlib.contextmanager
def job_log(sm):
    """Run a Snakemake ``script:`` job's body with its stdout, stderr (warnings included) and
    any traceback written to the job's log (``sm.log[0]``), plus what it read and wrote."""
    t0 = time.perf_counter()
    refused = None
    with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"rule {sm.rule}{dict(sm.wildcards.items()) or ''}: {len(sm.input)} input file(s)", flush=True)
        from arrepro.planned import CodeChanged, check_planned_code

        try:
            code = getattr(sm.params, "code", None)
            if isinstance(code, str):
                check_planned_code(code)  # the sources are still those the job was planned with
            yield
        except (CannotWrite, CodeChanged) as e:  # a full disk, a read-only folder, edited code: one line
            refused = e
            print(f"error: {e}", file=log)
        except BaseException:
            traceback.print_exc(file=log)
            log.flush()
            raise
        else:
            print(f"wrote {', '.join(map(str, sm.output))} in {time.perf_counter() - t0:.2f} s", file=log)
    sys.stdout.flush()
    if refused is not None:
        sys.exit(f"error: {refused}")


class CannotWrite(RuntimeError):
    """A write the file system refused (a full disk, a read-only folder); the message is one line
    naming the file. Jobs print it without a traceback."""


class NoSpace(CannotWrite):
    """A write that found the disk (or the quota) full; the message names the file."""


class NotWritable(CannotWrite):
    """A write into a folder that is read-only (permissions, a read-only mount, an immutable
    folder); the message names the file."""


def atomic_write(path, write) -> None:
    """``write(tmp)``, then rename ``tmp`` to ``path``: a reader sees the old file or the new one,
    never half of one. If anything fails, the ``.tmp`` file is removed; a full disk is NoSpace
    and a read-only folder NotWritable, each naming ``path``. The one way this project writes a
    file that others read."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cannot_write(path, e) or e
    tmp = temporary_path(path)
    remove_stale_temporaries(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # (a folder that became read-only keeps no .tmp file of ours anyway)
            pass
        refused = _cannot_write(path, e)
        if refused:
            raise refused from e
        raise


TEMPORARY = ".{name}.{host}.{pid}.tmp"  # atomic_write's temporary file beside NAME: hidden, one per writer


def temporary_path(path) -> Path:
    """Where this process writes ``path`` before its rename (``TEMPORARY``)."""
    path = Path(path)
    return path.with_name(TEMPORARY.format(name=path.name, host=socket.gethostname(), pid=os.getpid()))


def _writer(tmp: Path, name: str) -> tuple[str | None, int] | None:
    """(host, pid) of the writer of a temporary file of ``name`` (host None: a file of the
    ``.NAME.PID.tmp`` form that writers before this one used), or None for another file."""
    prefix = f".{name}."
    if not (tmp.name.startswith(prefix) and tmp.name.endswith(".tmp")):
        return None
    host, _, pid = tmp.name[len(prefix):-len(".tmp")].rpartition(".")
    return (host or None, int(pid)) if pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process: it runs)
        return True
    return True


def remove_stale_temporaries(path) -> list[Path]:
    """Remove the temporary files of ``path`` that a writer killed between its write and its rename
    left behind (``kill -9``, a lost node): those of a process of this machine that no longer
    runs. A temporary file of another machine's process is left (whether it still writes cannot
    be seen from here); a cell's folder is swept of those too, under the cell's lock
    (``remove_temporaries``). Returns what was removed."""
    path = Path(path)
    here, removed = socket.gethostname(), []
    try:
        candidates = list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        writer = _writer(tmp, path.name)
        if writer is None or writer[0] not in (None, here) or writer[1] == os.getpid() or _running(writer[1]):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def remove_temporaries(folder) -> list[Path]:
    """Remove every temporary file of ``atomic_write`` in ``folder``, whichever process and machine
    wrote it: for a caller that knows no other writer of the folder runs (a cell's trainer under
    the cell's lock). Returns what was removed."""
    removed = []
    for tmp in Path(folder).glob(".*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _cannot_write(path: Path, e: BaseException | None) -> CannotWrite | None:
    """NoSpace or NotWritable for a write error that is (or was raised while handling: torch.save
    reports a full disk as its own RuntimeError) a full disk or a refused folder; else None."""
    for _ in range(10):
        if e is None:
            return None
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return NoSpace(f"no space left on {path} ({e.strerror}): nothing written, no .tmp file left")
        if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return NotWritable(f"cannot write {path}: its folder {path.parent} is read-only ({e.strerror}); nothing "
                               "written. Make the folder writable again, then run the workflow again")
        e = e.__cause__ or e.__context__
    return None


def write_text_atomic(path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")
