"""Reading result files so that an error names the file, and Snakemake script jobs that write
their log (pure Python; no torch)."""
from __future__ import annotations

import contextlib
import json
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


def read_json(path) -> dict:
    with naming(path):
        return json.loads(Path(path).read_text())


def read_jsonl(path) -> list[dict]:
    with naming(path):
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_csv(path, **kwargs):
    import pandas as pd  # (the search's round jobs import this module and need no pandas)

    with naming(path):
        return pd.read_csv(path, **kwargs)


@contextlib.contextmanager
def job_log(sm):
    """Run a Snakemake ``script:`` job's body with its stdout, stderr (warnings included) and
    any traceback written to the job's log (``sm.log[0]``), plus what it read and wrote."""
    t0 = time.perf_counter()
    with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"rule {sm.rule}{dict(sm.wildcards.items()) or ''}: {len(sm.input)} input file(s)", flush=True)
        try:
            yield
        except BaseException:
            traceback.print_exc(file=log)
            log.flush()
            raise
        print(f"wrote {', '.join(map(str, sm.output))} in {time.perf_counter() - t0:.2f} s", file=log)
    sys.stdout.flush()


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of one; a failed write leaves no temporary file."""
    import os

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")
