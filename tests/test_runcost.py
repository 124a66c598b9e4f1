"""The run's cost read from its own records (arrepro.cluster.runcost): the cells' CPU-seconds from
their job.log, the jobs and what they depend on from Snakemake's records, the critical path
through the search rounds, on a synthetic run whose numbers are known."""
import base64
import json
import os
from pathlib import Path

import pytest

from arrepro.cluster import runcost


def record(wd: Path, output: str, rule: str, inputs=(), logs=(), start=0.0, end=0.0, job=0) -> None:
    """One output's record as Snakemake 9 writes it (.snakemake/metadata, the path in URL-safe
    base64, cut into parts of at most NAME_MAX - 1 characters, all but the last prefixed '@')."""
    meta = wd / ".snakemake" / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    name = base64.urlsafe_b64encode(output.encode()).decode()
    limit = os.pathconf(meta, "PC_NAME_MAX") - 1
    parts = [name[i:i + limit] for i in range(0, len(name), limit)]
    path = meta.joinpath(*["@" + p for p in parts[:-1]], parts[-1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rule": rule, "input": list(inputs), "log": list(logs), "starttime": start,
                                "endtime": end, "job_hash": job, "incomplete": False, "record_format_version": 6}))


def cell(wd: Path, name: str, cpu: float | None, start: float, end: float, scale_data="results/data/t/train.npz") -> str:
    """A train job: its result.json and metrics.jsonl recorded, its job.log with the CPU line."""
    folder = f"results/cells/t/attention/w8-l1/r/{name}"
    (wd / folder).mkdir(parents=True)
    line = f"the cell's process (pid 7, a child of the training server) used {cpu:.2f} CPU-seconds\n" if cpu else ""
    (wd / folder / "job.log").write_text("epoch 1 ...\n" + line)
    for out in ("result.json", "metrics.jsonl"):
        record(wd, f"{folder}/{out}", "train", [scale_data], [f"{folder}/job.log"], start, end, job=hash(name))
    return f"{folder}/result.json"


@pytest.fixture
def run(tmp_path):
    """data (1 s) -> round 0: cells a (10 CPU-s), b (30) -> round 1's plan (1 s) -> cell c (5), asked
    for by that plan and first read by round 2 (1 s) -> the aggregate (2 s) -> a figure (0.5 s); a
    cell without a CPU line (4 s wall) read by the figure; another scale's cell (100 CPU-s) apart."""
    wd = tmp_path
    (wd / "workflow/rules").mkdir(parents=True)
    (wd / "workflow/rules/search.smk").write_text("checkpoint search_round:\n    output: 'x'\n")
    data = "results/data/t/train.npz"
    record(wd, data, "data", [], ["results/demo/logs/data.log"], 0, 1, job=1)
    a, b = cell(wd, "lr0.01-s0", 10, 1, 12), cell(wd, "lr0.001-s0", 30, 1, 32)
    plan1 = "results/demo/searches/rounds/g/round1.json"
    record(wd, plan1, "search_round", [a, b], ["results/demo/logs/r1.log"], 32, 33, job=2)
    c = cell(wd, "lr0.1-s0", 5, 33.5, 39)
    plan2 = "results/demo/searches/rounds/g/round2.json"
    record(wd, plan2, "search_round", [plan1, a, b, c], ["results/demo/logs/r2.log"], 39, 40, job=3)
    nocpu = cell(wd, "lr0.3-s0", None, 1, 5)
    record(wd, "results/demo/tables/fig1_best.csv", "aggregate", [plan2, a, b, c], [], 40, 42, job=4)
    record(wd, "results/demo/fig1.pdf", "figure", ["results/demo/tables/fig1_best.csv", nocpu], [], 42, 42.5, job=5)
    other = cell(wd, "lr0.01-s1", 100, 50, 200)
    record(wd, "results/tiny/tables/fig1_best.csv", "aggregate", [other], [], 200, 201, job=6)
    return wd


def test_the_total_counts_the_cells_cpu_and_the_other_jobs_wall_of_the_scale_only(run):
    r = runcost.report(run, "demo")
    assert (r["cells"], r["cells_cpu_seconds"], r["cells_without_cpu"]) == (4, 45.0, 1)
    # data 1, three cells' CPU 45, the cell without its line 4, two rounds 2, aggregate 2, figure 0.5
    assert r["total_seconds"] == pytest.approx(54.5)
    assert r["jobs"] == 9  # not the tiny scale's cell nor its table


def test_the_critical_path_runs_through_the_plan_that_asked_for_a_cell(run):
    r = runcost.report(run, "demo")
    chain = [(p["rule"], p["seconds"]) for p in r["critical_path"]]
    # round 1's cell c waits for round 1's plan: without that edge the path would skip c (35.5 s)
    assert chain == [("data", 1), ("train", 30), ("search_round", 1), ("train", 5), ("search_round", 1),
                     ("aggregate", 2), ("figure", 0.5)]
    assert r["critical_path_seconds"] == pytest.approx(40.5)
    assert r["at_least_seconds"][1] == pytest.approx(54.5) and r["at_least_seconds"][2] == pytest.approx(40.5)


def test_a_cell_started_before_a_plan_ended_does_not_depend_on_it(run):
    jobs = runcost.read_jobs(run)
    deps = runcost.dependencies(jobs, runcost.checkpoint_rules(run))
    by = {j.outputs[0].rsplit("/", 2)[-2]: i for i, j in enumerate(jobs) if j.cell}
    plan1 = next(i for i, j in enumerate(jobs) if j.outputs[0].endswith("round1.json"))
    assert plan1 in deps[by["lr0.1-s0"]] and plan1 not in deps[by["lr0.01-s0"]]


def test_the_command_prints_the_path_and_the_cores(run, capsys):
    assert runcost.main(["demo", "--workdir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "critical path: 40 s" in out and "2: 40 s" in out and "1 of them cells without a CPU line" in out
    assert runcost.main(["paper", "--workdir", str(run)]) == 1
    assert "no job of this scale recorded here" in capsys.readouterr().out
