#!/usr/bin/env python
"""Snakemake's own CPU time in a local run of many short jobs, its scheduler as shipped against the
fix the Snakefile installs (arrepro.cluster.internals.install_one_reevaluation), alternating, a
benchmark, not a test.

A Snakefile of ``--jobs`` jobs that each sleep ``--sleep`` seconds and use no CPU, run with
``--cores 2`` as ``make demo`` runs: the CPU-seconds of the whole run (Snakemake and the jobs' shells,
getrusage of the children) is Snakemake's own, mostly its main process scheduling.

    .venv/bin/python bench/bench_snakemake_scheduler.py            # ~4 minutes
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SNAKEFILE = """
{install}
rule all:
    input: expand("out/{{i}}.txt", i=range({n}))

rule step:
    output: "out/{{i}}.txt"
    shell: "sleep {sleep}; touch {{output}}"
"""


def run(work: Path, fixed: bool, n: int, sleep: float) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of one run in a fresh folder."""
    work.mkdir(parents=True)
    install = "from arrepro.cluster import internals\ninternals.install_one_reevaluation()" if fixed else ""
    (work / "Snakefile").write_text(textwrap.dedent(SNAKEFILE.format(install=install, n=n, sleep=sleep)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--quiet", "all"], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--sleep", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    cpu = {"as shipped": [], "fixed": []}
    wall = {"as shipped": [], "fixed": []}
    with tempfile.TemporaryDirectory(prefix="bench_scheduler_") as tmp:
        for r in range(a.rounds):
            for name in cpu:
                c, w = run(Path(tmp) / f"{name.replace(' ', '_')}{r}", name == "fixed", a.jobs, a.sleep)
                cpu[name].append(c)
                wall[name].append(w)
                print(f"round {r + 1}, {name:10}: {c:6.1f} CPU-s, {w:6.1f} s wall", flush=True)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"\n{a.jobs} jobs of {a.sleep} s, --cores 2, median of {a.rounds}: Snakemake as shipped {med['as shipped']:.1f} "
          f"CPU-s, fixed {med['fixed']:.1f} CPU-s: {med['as shipped'] / med['fixed']:.1f}x; wall "
          f"{statistics.median(wall['as shipped']):.0f} s and {statistics.median(wall['fixed']):.0f} s")


if __name__ == "__main__":
    main()
