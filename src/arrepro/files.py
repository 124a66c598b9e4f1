"""Reading result files so that an error names the file, and Snakemake script jobs that write
their log (pure Python; no torch)."""
from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

import pandas as pd


class UnreadableFile(ValueError):
    """A result file that could not be read or parsed; the message starts with its path."""


@contextlib.contextmanager
def naming(path):
    """Re-raise any error reading ``path`` as UnreadableFile naming it."""
    try:
        yield
    except (OSError, ValueError, pd.errors.ParserError) as err:
        if isinstance(err, UnreadableFile):
            raise
        raise UnreadableFile(f"{path}: cannot read it: {type(err).__name__}: {err}") from err


def read_json(path) -> dict:
    with naming(path):
        return json.loads(Path(path).read_text())


def read_csv(path, **kwargs) -> pd.DataFrame:
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
