"""Snakemake's scheduler wakes itself once per timespan, not once more for every job that ended
(arrepro.cluster.internals.install_one_reevaluation, installed by the Snakefile)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from arrepro.cluster import internals

ROOT = Path(__file__).resolve().parents[1]


class _Scheduler:
    """What the method reads of Snakemake's JobScheduler: its semaphore of open passes."""

    def __init__(self):
        self._open_jobs = threading.Semaphore(0)


def _wake_ups(s: _Scheduler) -> int:
    n = 0
    while s._open_jobs.acquire(blocking=False):
        n += 1
    return n


def test_one_wake_up_is_pending_however_many_passes_ask_for_one():
    s = _Scheduler()
    before = threading.active_count()
    for _ in range(50):  # fifty passes, each asking for a pass within the timespan
        internals._schedule_reevaluation(s, 0.2)
    assert threading.active_count() - before <= 1
    time.sleep(0.6)
    assert _wake_ups(s) == 1
    internals._schedule_reevaluation(s, 0.05)  # once it has fired, the next pass asks for another
    time.sleep(0.4)
    assert _wake_ups(s) == 1


def test_the_snakefile_installs_it():
    text = (ROOT / "Snakefile").read_text()
    assert "internals.install_one_reevaluation()" in text
    assert internals.install_one_reevaluation()
    from snakemake.scheduling.job_scheduler import JobScheduler

    assert JobScheduler._schedule_reevalutation is internals._schedule_reevaluation


SNAKEFILE = """
{install}
rule all:
    input: "threads.txt"

rule step:
    output: "out/{{i}}.txt"
    shell: "sleep 0.05; touch {{output}}"

rule count:  # the threads of the Snakemake process that runs this job's shell, after every step ended
    input: expand("out/{{i}}.txt", i=range({n}))
    output: "threads.txt"
    shell: "grep Threads /proc/$PPID/status | cut -f2 > {{output}}"
"""


def _threads_at_the_end(tmp_path: Path, fixed: bool, n: int) -> int:
    work = tmp_path / ("fixed" if fixed else "as_shipped")
    work.mkdir()
    install = "from arrepro.cluster import internals\ninternals.install_one_reevaluation()" if fixed else ""
    (work / "Snakefile").write_text(textwrap.dedent(SNAKEFILE.format(install=install, n=n)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--quiet", "all"], cwd=work, env=env,
                   check=True, capture_output=True)
    return int((work / "threads.txt").read_text())


def test_a_run_of_many_jobs_keeps_one_wake_up(tmp_path):
    """Snakemake as shipped ends a run of n jobs with a live timer thread for about every job that
    ended (each starts a chain of wake-ups, one a second); with the fix, one at most."""
    n = 40
    shipped, fixed = _threads_at_the_end(tmp_path, False, n), _threads_at_the_end(tmp_path, True, n)
    assert shipped >= fixed + n // 2, (shipped, fixed)
    assert fixed < n // 2, fixed


def test_a_shorter_wake_up_asked_later_fires_at_its_time():
    """Issue 55: a pending 3 s wake-up dropped a 0.2 s one asked after it (the scheduler then slept
    3 s). The pending timer is the one due first: the 0.2 s one fires at its time, once, and the 3 s
    one it replaced does not fire as well; a longer one asked while a shorter is pending adds none."""
    s = _Scheduler()
    internals._schedule_reevaluation(s, 3.0)
    internals._schedule_reevaluation(s, 0.2)
    internals._schedule_reevaluation(s, 5.0)  # due after the pending one: nothing to add
    time.sleep(0.7)
    assert _wake_ups(s) == 1
    time.sleep(3.0)
    assert _wake_ups(s) == 0


def test_a_fix_that_cannot_be_installed_says_so_on_stderr(monkeypatch, capsys):
    """Issue 55: on a Snakemake 9.x whose scheduler had no ``_schedule_reevalutation`` (renamed) the
    fix returned False and the Snakefile, which ignores the return, said nothing. Now a method that
    is missing, or takes other arguments, is named on stderr; the fix is not installed."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    monkeypatch.setattr(internals, "_WARNED", set())
    monkeypatch.delattr(JobScheduler, "_schedule_reevalutation")
    assert internals.install_one_reevaluation() is False
    err = capsys.readouterr().err
    assert "JobScheduler._schedule_reevalutation is not there (renamed or removed)" in err, err
    assert "the scheduler's fix" in err, err
    assert not hasattr(JobScheduler, "_schedule_reevalutation")

    monkeypatch.setattr(internals, "_WARNED", set())
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", lambda self, delay, why: None, raising=False)
    assert internals.install_one_reevaluation() is False
    err = capsys.readouterr().err
    assert "takes (self, delay, why), not (self, delay)" in err, err
    assert JobScheduler._schedule_reevalutation is not internals._schedule_reevaluation
