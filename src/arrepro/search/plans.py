"""The learning-rate search's own files, trusted like a cell's (pure Python: the Snakefile
imports it).

The round plans (``{out}/searches/rounds/{group}/round{r}.json``, ``Plan``) and the
decision files (one per search, ``{out}/searches/<search key>.json``) are results like any cell's:
the tables, figures and paper are built from them. So they are sealed when written (their own
sha256 inside: ``files.write_sealed_json``) and checked wherever they are read (``Plan.read``,
``read_report``): a truncated, garbled or hand-edited one is an UnreadableFile naming it, never a
decision.

A plan also records what it was made from (``made_from``): the digest of its round job's code, the
digest of its group's searches (the job's params, from the config), the seal of the previous
round's plan, and the sha256 of every cell result it read. Before Snakemake builds the DAG,
``stale_plans`` walks each group's rounds in order: the first plan that is damaged, or made from
anything other than what is there now (the config or the search code changed; an earlier plan was
deleted, rebuilt or edited; a cell it read was deleted or retrained), and every later plan of the
group, are rebuilt (the workflow forces their round jobs): the search is a pure function of the
cells' results, so running its rounds again rebuilds it. Snakemake alone does not: it never looks
inside a plan, and once a round job reruns it plans the rounds after it from the plans it had
already read (switching ``lr_protocol`` to grid and back left tables of the grid's numbers).

What the seal protects against is what the cells' checksums protect against (arrepro.config.cellfiles):
accidents and careless edits, not a forger who recomputes it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from arrepro.files import SEAL, file_sha256, UnreadableFile, sealed_problem, write_sealed_json
from arrepro.search.protocol import Round

MADE_FROM = "made_from"
HASH_CHARS = 16  # of a result's sha256 in a plan's record (a plan lists every cell it read)


def file_sha(path) -> str:
    return file_sha256(path)[:HASH_CHARS]


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def _fix(what: str) -> str:
    return (f"run the workflow again: it rebuilds the {what} from the cells' results (a damaged one is found "
            "before any job and its round jobs run again)")


# --------------------------------------------------------------------------- a round's plan
class Plan:
    """A round's plan (``Plan.path``: ``{out}/searches/rounds/{group}/round{r}.json``), the one
    reader and writer of it: its ``group`` and ``round``, each search of the group (``searches``:
    search key -> its setting, metric, spec, rounds so far and state; ``rounds``: a search's rounds
    as ``arrepro.search.protocol.Round``), the round's summary, what it was made from
    (``made_from``) and its seal. The rules, the round jobs and the aggregation read it here."""

    def __init__(self, data: dict):
        self.data = data

    @staticmethod
    def path(out: str, group: str, r: int) -> str:
        return f"{out}/searches/rounds/{group}/round{r}.json"

    @classmethod
    def read(cls, path) -> "Plan":
        """A round's plan, checked (its seal); else UnreadableFile naming it and the fix."""
        data, why = sealed_problem(path)
        if why:
            raise UnreadableFile(f"{path}: {why}; {_fix('plan')}")
        return cls(data)

    def write(self, path, sources: dict | None = None) -> "Plan":
        """Write the plan, with what it was made from (``made_from``) and its seal; the plan as
        written."""
        return Plan(write_sealed_json(path, self.data if sources is None else {**self.data, MADE_FROM: sources}))

    @property
    def searches(self) -> dict[str, dict]:
        return self.data["searches"]

    @property
    def seal(self) -> str:
        return self.data[SEAL]

    def rounds(self, key: str) -> list[Round]:
        """The rounds the plan records for the search ``key``."""
        return [Round.from_dict(d) for d in self.searches[key]["rounds"]]

    def problem(self, mtime: int, code: str, searches: str, previous: "Plan | None",
                stats: dict | None = None) -> str | None:
        """Why this sealed plan (written at ``mtime``, ns) is not the one its round job would write
        now, or None: it records no inputs, or another code, config, previous plan or cell result
        than those there now."""
        src = self.data.get(MADE_FROM)
        if not isinstance(src, dict):
            return "it records no inputs (written by an older version of the workflow)"
        if src.get("code") != code:
            return "the search's code changed since it was made"
        if src.get("searches") != text_sha(searches):
            return "its searches changed since it was made (config.yaml or --config)"
        if src.get("previous") != (None if previous is None else previous.seal):
            return "the plan of the round before it changed since it was made"
        stats = {} if stats is None else stats
        for path, sha in sorted((src.get("results") or {}).items()):
            why = _result_problem(path, sha, mtime, stats)
            if why:
                return why
        return None


def made_from(code: str, searches: str, previous: Plan | None, results) -> dict:
    """What a round's plan is made from: its job's ``code`` digest, its ``searches`` (the job's
    param, JSON), the ``previous`` round's plan (None for round 1) and the cell ``results`` it read
    (paths of result.json files, each recorded with its sha256)."""
    return {"code": code, "searches": text_sha(searches), "previous": None if previous is None else previous.seal,
            "results": {str(p): file_sha(p) for p in results}}


# --------------------------------------------------------------------------- a search's decision file
def write_report(path, report: dict) -> None:
    write_sealed_json(path, report)


def read_report(path) -> dict:
    """A search's decision file, checked (its seal); else UnreadableFile naming it."""
    report, why = sealed_problem(path)
    if why:
        raise UnreadableFile(f"{path}: {why}; {_fix('decision file')}")
    return report


# --------------------------------------------------------------------------- before the DAG
def _result_problem(path: str, sha: str, plan_mtime: int, stats: dict) -> str | None:
    """Why a cell result a plan read is not the one it read, or None. A result no newer than the
    plan is taken as read (what Snakemake itself assumes); a newer one is hashed."""
    if path not in stats:
        try:
            stats[path] = os.stat(path).st_mtime_ns
        except OSError:
            stats[path] = None
    if stats[path] is None:
        return f"the cell result {path} it read is missing"
    if stats[path] > plan_mtime and file_sha(path) != sha:
        return f"the cell result {path} it read has changed since (retrained or rebuilt)"
    return None


def stale_plans(searches, out: str, code: str) -> dict[str, str]:
    """The plans to rebuild, each with why: per group of ``searches`` (arrepro.search.rounds.Searches),
    the first round whose plan is damaged or stale (``Plan.problem``) and every later round's
    that exists (a missing plan is rebuilt by Snakemake itself; those after it are forced)."""
    stale: dict[str, str] = {}
    stats: dict = {}
    for group in searches.groups:
        params = searches.params(group)
        previous, broken = None, None
        for r in range(1, searches.final_round(group) + 1):
            path = Plan.path(out, group, r)
            if broken is not None:
                if os.path.exists(path):
                    stale[path] = f"it follows {broken}"
                continue
            if not os.path.exists(path):
                broken = f"{Path(path).name}, which is missing"
                continue
            mtime = os.stat(path).st_mtime_ns
            data, why = sealed_problem(path)
            if why is None:
                why = Plan(data).problem(mtime, code, params, previous, stats)
            if why:
                stale[path] = why
                broken = f"{Path(path).name}, which is rebuilt"
                continue
            previous = Plan(data)
    return stale


def damaged_reports(paths) -> dict[str, str]:
    """The decision files in ``paths`` that exist and fail their seal, each with why."""
    out = {}
    for path in paths:
        if os.path.exists(path):
            _, why = sealed_problem(path)
            if why:
                out[str(path)] = why
    return out
