"""The code a run planned with: a job checks, before it writes anything, that its sources still
have the code digest (arrepro.digest) the workflow planned it with (pure Python: the Snakefile
imports it)."""
from __future__ import annotations

import os
from pathlib import Path

from arrepro.digest import file_digest, source_digest

# Snakemake plans every job with the code digests (the rules' ``code`` params) when it
# starts; a job starts minutes or hours later, in a new process that imports the code as it is
# *then*. A source edited in between (an edit while a long run trains) would give a run whose
# tables, search decisions and paper mix results of the old and the new code. So the process
# that plans records what it planned with in its environment (``PLANNED``, inherited by every job
# it starts, on a cluster too when the job's environment is exported), and a job checks, after
# importing its code and before it writes anything, that its sources still have the planned
# digest (``check_planned_code``); else it stops with one line naming the files.
PLANNED = "ARREPRO_PLANNED_CODE"


class CodeChanged(RuntimeError):
    """A job's sources differ from those the workflow planned it with; the message is one line."""


def _planned() -> dict:
    import json

    try:
        rec = json.loads(os.environ.get(PLANNED, ""))
        return rec if isinstance(rec, dict) else {}
    except ValueError:
        return {}


def record_planned(paths, digest: str, root: str | Path) -> None:
    """Record in this process's environment that ``paths`` (relative to ``root``) were planned
    with ``digest``, each file with its own digest (to name what changed). The first record of a
    set of paths stays: a process started by the planning one (a Slurm job's Snakemake) keeps the
    plan it inherited."""
    import json

    rec = _planned()
    if rec.get("root", str(root)) != str(root):
        return
    groups, files = rec.setdefault("groups", {}), rec.setdefault("files", {})
    key = "\0".join(map(str, paths))
    if key in groups:
        return
    groups[key] = digest
    for p in paths:
        files.setdefault(str(p), file_digest(Path(root) / p))
    rec["root"] = str(root)
    os.environ[PLANNED] = json.dumps(rec, separators=(",", ":"))


def check_planned_code(digest: str | None = None, paths=None) -> None:
    """CodeChanged if the sources this job runs (``paths``, or those planned with ``digest``, a
    rule's ``code`` param) no longer have the digest the workflow planned them with. Nothing to
    check outside a workflow run (no record in the environment), or for code it did not record."""
    rec = _planned()
    groups, files, root = rec.get("groups", {}), rec.get("files", {}), rec.get("root")
    if not groups or root is None:
        return
    if paths is not None:
        key = "\0".join(map(str, paths))
        planned = groups.get(key)
    else:
        key = next((k for k, d in groups.items() if d == digest), None)
        planned = digest
    if key is None or planned is None:
        return
    paths = key.split("\0")
    try:
        now = source_digest(paths, root)
    except OSError as e:
        raise CodeChanged(f"a source of this job cannot be read now ({e}): it changed since the workflow planned "
                          "this job; stop the run and start it again") from None
    if now != planned:
        changed = [p for p in paths if files.get(p) != file_digest(Path(root) / p)] or paths
        raise CodeChanged(f"the code this job runs changed since the workflow planned it ({', '.join(changed)}): "
                          "its results would mix with those of the old code. Stop the run (Ctrl-C) and start it "
                          "again: Snakemake then reruns every job the change affects")
