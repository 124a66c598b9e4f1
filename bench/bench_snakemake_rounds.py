#!/usr/bin/env python
"""Benchmark: Snakemake's own cost for a round-based learning-rate search run by the DAG (issue 16).

Generates synthetic workflows of trivial jobs in a temporary directory and runs them with this
repository's Snakemake (the ``snakemake`` next to this interpreter; local executor, ``--cores 2``),
printing the main Snakemake process's CPU time, its children's CPU time (the jobs' shells and
scripts, and the ILP scheduler's solver) and the wall time of each run.

The synthetic search: S settings, each with ``len(ROUND0)`` cells in round 0 (known from the
config), then ``--rounds - 1`` rounds adding NEW_CELLS[r] cells per setting each (with the
defaults 6 + 3 + 3 + 2 + 2 = 16 cells a setting: 7,888 cells at the paper's 493 settings). A cell
job writes a tiny JSON with a deterministic fake accuracy (a shell ``echo``); a round job (a
shell running ``python3 -S -I round.py``) reads the results of every earlier round of its
settings and writes the plan of the next (a pure function of the accuracies). One aggregate per
experiment (about 12 settings each, spread over every group) reads the final plans and every cell
of its settings; one trivial "figure" per aggregate; ``all`` asks for the figures.

Designs (where the round jobs cut the settings):
  per_setting  one checkpoint per (setting, round)
  global       one checkpoint per round across all settings
  per_group    one checkpoint per (group, round); 5 groups sized like the resource tiers of
               src/arrepro/config/costs.py at the paper scale (share of its cells per tier)
  groupsN      as per_group with N groups of equal size (e.g. groups20)
  static       no checkpoint: every round's cells computed when the Snakefile is parsed (the
               same jobs, for reference: what the DAG costs without dynamic planning)

With ``--extras`` (default on) also, for per_group at the largest size: the dry run before any
round ran, a run interrupted between rounds and resumed (its dry run, the resumed run, then the
nothing-to-do run), and a run after deleting one round-0 cell; and at a small size the rerun
semantics of a checkpoint chain (rewriting an identical plan, deleting a cell, with and without
the mtime trigger, a hard kill mid-run, --keep-going with a failing cell).

The machine may be shared: the load average is printed with every run; compare ratios within one
run of this script, not absolute times between runs.

    .venv/bin/python bench/bench_snakemake_rounds.py                 # 50,100,200,493 settings
    .venv/bin/python bench/bench_snakemake_rounds.py --sizes 50 --designs per_group --no-extras
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# round 0 (log10 of the learning rate, seed) and the cells each later round adds per setting
ROUND0 = [(x / 2, 0) for x in range(-8, -2)]  # 1e-4 ... 3.16e-2, seed 0
NEW_CELLS = (3, 3, 2, 2, 2, 2, 2, 2)
N_GROUPS_SHARE = (("cells_10min", 0.09), ("cells_30min", 0.26), ("cells_60min", 0.25),
                  ("cells_2h", 0.17), ("big", 0.23))  # python -m arrepro.cluster.budget paper: cells per tier
SETTINGS_PER_EXPERIMENT = 12  # ~40 aggregates at 493 settings
DESIGNS = ("per_setting", "global", "per_group", "static")

# ------------------------------------------------------------------ the generated workflow
SEARCHLIB = r'''
"""The synthetic search's rule (shared by round.py and the static design): pure functions."""
import hashlib
import math


def lr_str(log10):
    return f"{10 ** log10:.6g}"


def fake_acc(setting, lr):
    """A bump in log-LR whose peak depends on the setting (deterministic)."""
    h = int(hashlib.sha256(setting.encode()).hexdigest()[:8], 16)
    peak = -3.5 + (h % 1000) / 500
    return round(max(0.0, 1.0 - 0.3 * (math.log10(float(lr)) - peak) ** 2), 6)


def next_cells(tried, accs, r, n):
    """n new (lr, seed) cells around the best seed-0 LR so far, closer each round."""
    seed0 = [(float(lr), a) for (lr, seed), a in zip(tried, accs) if seed == 0]
    best = max(seed0, key=lambda t: (t[1], -t[0]))[0]
    x, d = round(math.log10(best), 4), 0.5 / 2 ** (r - 1)
    cands = [(lr_str(round(x + k, 4)), 0) for k in (-d, d, -d / 2, d / 2, -2 * d, 2 * d)]
    cands += [(lr_str(x), s) for s in range(1, 100)]
    seen, out = set(tried), []
    for c in cands:
        if c not in seen and c not in out:
            out.append(c)
        if len(out) == n:
            break
    return out


def simulate(setting, round0, new_cells, rounds):
    """Every round's cells of one setting, computed without running anything."""
    plans, tried = {0: list(round0)}, list(round0)
    for r in range(1, rounds):
        plans[r] = next_cells(tried, [fake_acc(setting, lr) for lr, _ in tried], r, new_cells[r - 1])
        tried += plans[r]
    return plans
'''

ROUND_PY = r'''
"""A round job: reads every earlier round's results of its unit's settings, writes the next plan."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import searchlib

unit, r, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open("config.json") as f:
    cfg = json.load(f)
settings = cfg["units"][unit]
earlier = []
for k in range(1, r):
    with open(f"plans/{unit}/round{k}.json") as f:
        earlier.append(json.load(f))
plan = {}
for s in settings:
    tried = [tuple(c) for c in cfg["round0"]] + [tuple(c) for p in earlier for c in p[s]]
    accs = []
    for lr, seed in tried:
        with open(f"cells/{s}/lr{lr}_s{seed}.json") as f:
            accs.append(json.load(f)["acc"])
    plan[s] = searchlib.next_cells(tried, accs, r, cfg["new_cells"][r - 1])
with open(out, "w") as f:
    json.dump(plan, f, sort_keys=True)
'''

SNAKEFILE = r'''
import functools
import json
import os
import sys

sys.path.insert(0, workflow.basedir)
import searchlib

configfile: "config.json"

UNITS = config["units"]
UNIT_OF = {s: u for u, ss in UNITS.items() for s in ss}
EXPERIMENTS = config["experiments"]
ROUNDS = config["rounds"]
ROUND0 = [tuple(c) for c in config["round0"]]
STATIC = config["design"] == "static"
FAIL = set(config.get("fail_cells", []))

if STATIC:
    SIM = {s: searchlib.simulate(s, ROUND0, config["new_cells"], ROUNDS) for s in UNIT_OF}

wildcard_constraints:
    unit=r"[A-Za-z0-9_]+",
    round=r"\d+",
    setting=r"[A-Za-z0-9_]+",
    lr=r"[0-9.e+-]+",
    seed=r"\d+",
    exp=r"[A-Za-z0-9_]+",


def plan_file(unit, k):
    return f"plans/{unit}/round{k}.json"


def cell_file(s, lr, seed):
    return f"cells/{s}/lr{lr}_s{seed}.json"


@functools.lru_cache(maxsize=None)
def _read_plan(path, mtime_ns, size):
    with open(path) as f:
        return json.load(f)


def plan_cells(unit, k):
    """{setting: [(lr, seed), ...]} of round k of a unit; round k >= 1 from its checkpoint."""
    if k == 0:
        return {s: ROUND0 for s in UNITS[unit]}
    if STATIC:
        return {s: SIM[s][k] for s in UNITS[unit]}
    path = checkpoints.search_round.get(unit=unit, round=k).output[0]
    st = os.stat(path)
    return _read_plan(path, st.st_mtime_ns, st.st_size)


def round_input(w):
    r = int(w.round)
    files = [cell_file(s, lr, seed) for k in range(r)
             for s, cells in plan_cells(w.unit, k).items() for lr, seed in cells]
    if r >= 2:
        files.append(plan_file(w.unit, r - 1))
    return files


def setting_cells(s):
    """Every cell of every round of one setting (raises until its unit's last round is planned)."""
    return [cell_file(s, lr, seed) for k in range(ROUNDS) for lr, seed in plan_cells(UNIT_OF[s], k)[s]]


def aggregate_input(w):
    """"direct": the union of the final cells of the experiment's settings, read from the final
    plans with checkpoints.get; "record": the settings' search records (fixed paths)."""
    settings = EXPERIMENTS[w.exp]
    if config["aggregate"] == "record":
        return [f"search/{s}.json" for s in settings]
    files = [plan_file(u, ROUNDS - 1) for u in sorted({UNIT_OF[s] for s in settings})]
    for s in settings:
        files += setting_cells(s)
    return files


rule all:
    input: expand("figures/{exp}.txt", exp=sorted(EXPERIMENTS))


rule cell:
    output: "cells/{setting}/lr{lr}_s{seed}.json"
    params:
        acc=lambda w: searchlib.fake_acc(w.setting, w.lr),
        fail=lambda w: "false" if f"{w.setting}/lr{w.lr}_s{w.seed}" in FAIL else "true",
    shell: "__CELL_SLEEP__{params.fail} && echo '{{\"acc\": {params.acc}}}' > {output}"


__ROUND_KEYWORD__ search_round:
    input: round_input
    output: "plans/{unit}/round{round}.json"
    shell: "python3 -S -I round.py {wildcards.unit} {wildcards.round} {output}"


# one file per setting with every round's cells and results: what downstream rules read
rule search_record:
    input:
        cells=lambda w: setting_cells(w.setting),
        plan=lambda w: plan_file(UNIT_OF[w.setting], ROUNDS - 1),
    output: "search/{setting}.json"
    shell: "cat {input.cells} > {output}"


rule aggregate:
    input: aggregate_input
    output: "aggregates/{exp}.json"
    shell: "cat {input} > {output}"


rule figure:
    input: "aggregates/{exp}.json"
    output: "figures/{exp}.txt"
    shell: "wc -c < {input} > {output}"
'''

# runs Snakemake in this process and writes its own CPU time (all threads, no children) and
# its children's at exit: the main Snakemake process's cost apart from its jobs'
WRAPPER = r'''
import atexit, json, os, resource, sys

def _dump():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.environ["BENCH_RUSAGE"], "w") as f:
        json.dump({"self": s.ru_utime + s.ru_stime, "children": c.ru_utime + c.ru_stime,
                   "maxrss_mb": s.ru_maxrss / 1024}, f)

atexit.register(_dump)
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
if os.environ.get("BENCH_PROFILE"):
    import cProfile, time
    prof = cProfile.Profile(time.thread_time)  # CPU time of the main thread, where the DAG lives
    atexit.register(lambda: prof.dump_stats(os.environ["BENCH_PROFILE"]))
    prof.enable()
sys.exit(main())
'''

JOB_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):", re.M)


def units_of(design, settings):
    """unit name -> settings, per design."""
    if design == "per_setting":
        return {s: [s] for s in settings}
    if design == "global":
        return {"all": list(settings)}
    if design.startswith("groups"):  # groupsN: N groups of (nearly) equal size
        k = int(design.removeprefix("groups"))
        return {f"g{i:03d}": list(settings[i * len(settings) // k:(i + 1) * len(settings) // k]) for i in range(k)}
    units, start = {}, 0
    for i, (name, share) in enumerate(N_GROUPS_SHARE):
        stop = len(settings) if i == len(N_GROUPS_SHARE) - 1 else start + round(share * len(settings))
        units[f"g_{name}"] = list(settings[start:stop])
        start = stop
    return units


def make_workflow(root: Path, design: str, n_settings: int, rounds: int, cell_sleep: float = 0.0,
                  fail_cells=(), aggregate="record") -> Path:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    settings = [f"s{i:04d}" for i in range(n_settings)]
    n_exp = max(1, round(n_settings / SETTINGS_PER_EXPERIMENT))
    cfg = {
        "design": design,
        "units": units_of("per_group" if design == "static" else design, settings),
        "experiments": {f"e{j:03d}": settings[j::n_exp] for j in range(n_exp)},
        "rounds": rounds,
        "round0": [[f"{10 ** x:.6g}", seed] for x, seed in ROUND0],
        "new_cells": list(NEW_CELLS[: rounds - 1]),
        "fail_cells": list(fail_cells),
        "aggregate": aggregate,
    }
    (root / "config.json").write_text(json.dumps(cfg))
    (root / "searchlib.py").write_text(SEARCHLIB)
    (root / "round.py").write_text(ROUND_PY)
    keyword = "rule" if design == "static" else "checkpoint"
    sleep = f"sleep {cell_sleep} && " if cell_sleep else ""
    (root / "Snakefile").write_text(SNAKEFILE.replace("__ROUND_KEYWORD__", keyword).replace("__CELL_SLEEP__", sleep))
    (root / "run_snakemake.py").write_text(WRAPPER)
    return root


def expected_cells(n_settings, rounds):
    return n_settings * (len(ROUND0) + sum(NEW_CELLS[: rounds - 1]))


def proc_cpu(pid):
    """utime + stime (s) of a running process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def count_files(root: Path, sub: str):
    d = root / sub
    return sum(1 for _ in d.rglob("*.json")) if d.exists() else 0


def run_smk(root: Path, args, timeout: float, kill_when=None, profile: Path | None = None):
    """Run Snakemake in root; returns a dict of measurements (status ok / failed / timeout / killed)."""
    rusage = root / f".rusage-{time.monotonic_ns()}.json"
    env = {**os.environ, "BENCH_RUSAGE": str(rusage)}
    if profile is not None:
        env["BENCH_PROFILE"] = str(profile)
    log = root / f"log-{time.monotonic_ns()}.txt"
    cmd = [sys.executable, str(root / "run_snakemake.py"), "--cores", "2", *args]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "w") as logf:
        p = subprocess.Popen(cmd, cwd=root, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                             env=env)
        status, cpu_at_kill = None, None
        while p.poll() is None:
            time.sleep(0.2)
            elapsed = time.perf_counter() - t0
            if elapsed > timeout or (kill_when is not None and kill_when(root)):
                cpu_at_kill = proc_cpu(p.pid)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                status = "timeout" if elapsed > timeout else "killed"
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    res = {"wall": wall, "load": (load0 + os.getloadavg()[0]) / 2, "log": log, "text": text,
           "jobs": Counter(JOB_HEADER.findall(text))}
    if status is None:
        status = "ok" if p.returncode == 0 else f"failed({p.returncode})"
        r = json.loads(rusage.read_text()) if rusage.exists() else {}
        res.update(main_cpu=r.get("self", float("nan")), child_cpu=r.get("children", float("nan")),
                   maxrss_mb=r.get("maxrss_mb", float("nan")))
    else:
        res.update(main_cpu=cpu_at_kill, child_cpu=float("nan"), maxrss_mb=float("nan"))
    res["status"] = status
    res["cells_done"] = count_files(root, "cells")
    res["plans_done"] = count_files(root, "plans")
    return res


# where the main process spends its time (cumulative, from cProfile): substrings of "file:function"
PROFILE_KEYS = (("DAG update after a checkpoint", "dag.py:update_checkpoint_dependencies"),
                ("  of it: re-evaluating jobs' input", "jobs.py:updated"),
                ("  of it: postprocess (needrun etc.)", "dag.py:postprocess_after_update"),
                ("initial DAG", "dag.py:init"),
                ("choosing jobs to run (scheduler)", "job_scheduler.py:job_selector"),
                ("  of it: ILP (building + solving)", "milp.py:select_jobs"),
                ("finishing jobs (incl. the DAG update)", "dag.py:finish"),
                ("running jobs (local executor)", "local.py:run_single_job"),
                ("logging (formatting + writing)", "__init__.py:_log"))


def profile_summary(path: Path):
    import pstats

    st = pstats.Stats(str(path)).stats
    total = max(v[3] for v in st.values())
    parts = []
    for label, key in PROFILE_KEYS:
        file_part, func = key.split(":")
        hits = [(v[3], v[1]) for (f, _, fn), v in st.items() if f.endswith("/" + file_part) and fn == func]
        if hits:
            parts.append(f"    {label:<38} {max(hits)[0]:7.1f} s")
    return f"  profiled run: {total:.1f} s CPU of the main thread under cProfile, of it:\n" + "\n".join(parts)


def fmt_jobs(jobs: Counter):
    return ", ".join(f"{k} {v}" for k, v in sorted(jobs.items())) or "none"


HEAD = f"{'settings':>8} {'cells':>6} {'design':<12} {'main CPU s':>10} {'jobs+solver CPU s':>17} {'wall s':>8} {'load':>5}  status"


def row(n, cells, design, r, extra=""):
    return (f"{n:>8} {cells:>6} {design:<12} {r['main_cpu']:>10.1f} {r['child_cpu']:>17.1f} {r['wall']:>8.1f} "
            f"{r['load']:>5.2f}  {r['status']}{extra}")


def scaling(args, base: Path):
    print("\n== Full runs (snakemake all, from nothing) ==")
    print(HEAD, flush=True)
    gave_up = set()
    results = {}
    for n in args.sizes:
        for design in args.designs:
            cells = expected_cells(n, args.rounds)
            if design in gave_up:
                print(f"{n:>8} {cells:>6} {design:<12} {'skipped: timed out at a smaller size':>40}", flush=True)
                continue
            root = make_workflow(base / f"{design}-{n}", design, n, args.rounds)
            r = run_smk(root, ["all", *args.smk_args], args.timeout)
            prof = None
            if args.profile and r["status"] == "ok":  # a second run from nothing, under cProfile
                root = make_workflow(base / f"{design}-{n}", design, n, args.rounds)
                run_smk(root, ["all", *args.smk_args], args.timeout, profile=root / "main.prof")
                prof = profile_summary(root / "main.prof")
            extra = "" if r["status"] == "ok" else f" after {r['wall']:.0f} s: {r['cells_done']}/{cells} cells, {r['plans_done']} plans"
            if r["status"] == "ok" and r["cells_done"] != cells:
                extra += f" (cells on disk {r['cells_done']} != {cells} expected)"
            print(row(n, cells, design, r, extra), flush=True)
            if prof:
                print(prof, flush=True)
            if r["status"] == "timeout":
                gave_up.add(design)
            results[(n, design)] = r
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    return results


def round0_cell(root: Path, setting: str) -> str:
    return f"cells/{setting}/lr{10 ** ROUND0[0][0]:.6g}_s{ROUND0[0][1]}.json"


def say(label, r, what="ran"):
    print(f"{label:<44} main CPU {r['main_cpu']:6.1f} s, wall {r['wall']:6.1f} s, load {r['load']:.2f}, "
          f"{r['status']}; {what}: {fmt_jobs(r['jobs'])}", flush=True)


def per_group_extras(args, base: Path):
    n = args.extras_size
    cells = expected_cells(n, args.rounds)
    print(f"\n== per_group at {n} settings ({cells} cells, {args.rounds} rounds): planning, resume, repair ==")
    root = make_workflow(base / f"extras-{n}", "per_group", n, args.rounds)
    units = json.loads((root / "config.json").read_text())["units"]
    say("dry run before any round", run_smk(root, ["-n", "all", *args.smk_args], args.timeout), "planned")
    naive = make_workflow(base / f"extras-direct-{n}", "per_group", n, args.rounds, aggregate="direct")
    say("the same, aggregates calling .get() directly", run_smk(naive, ["-n", "all", *args.smk_args], args.timeout),
        "planned")
    if args.direct_run:
        r = run_smk(naive, ["all", *args.smk_args], args.timeout)
        print(row(n, cells, "per_group, aggregates calling .get()", r), flush=True)
    shutil.rmtree(naive, ignore_errors=True)
    stop = min(3, args.rounds - 1)
    targets = [f"plans/{u}/round{stop}.json" for u in units]
    say(f"run up to round {stop}'s plans (the interruption)", run_smk(root, [*targets, *args.smk_args], args.timeout))
    say("dry run of the resume", run_smk(root, ["-n", "all", *args.smk_args], args.timeout), "planned")
    say("resumed run to the end", run_smk(root, ["all", *args.smk_args], args.timeout))
    say("finished, run again (nothing to do)", run_smk(root, ["all", *args.smk_args], args.timeout))
    say("finished, dry run", run_smk(root, ["-n", "all", *args.smk_args], args.timeout), "planned")
    u0 = sorted(units)[0]
    victim = round0_cell(root, units[u0][0])
    say(f"forced rerun of one round-0 cell of {u0}",
        run_smk(root, ["all", "--forcerun", victim, *args.smk_args], args.timeout))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


def semantics(args, base: Path):
    """What reruns after edits to a finished per_group workflow (small: behaviour, not cost)."""
    n = args.semantics_size
    print(f"\n== Rerun semantics of the checkpoint chain (per_group, {n} settings, {args.rounds} rounds) ==")
    root = make_workflow(base / f"semantics-{n}", "per_group", n, args.rounds)
    units = json.loads((root / "config.json").read_text())["units"]
    u0 = sorted(units)[0]
    s0 = units[u0][0]
    r = run_smk(root, ["all", *args.smk_args], args.timeout)
    assert r["status"] == "ok", r["text"][-3000:]
    no_mtime = ["--rerun-triggers", "params", "input", "software-env", "code"]

    def check(label, extra=(), dry_too=True):
        if dry_too:
            d = run_smk(root, ["-n", "all", *extra, *args.smk_args], args.timeout)
            print(f"  {label}: dry run plans {fmt_jobs(d['jobs'])}", flush=True)
        before = {p: p.read_bytes() for p in (root / "plans").rglob("*.json")}
        d = run_smk(root, ["all", *extra, *args.smk_args], args.timeout)
        changed = sum(before.get(p) != p.read_bytes() for p in (root / "plans").rglob("*.json"))
        print(f"  {label}: ran {fmt_jobs(d['jobs'])}; {d['status']}; plans whose bytes changed: {changed}", flush=True)

    cell = round0_cell(root, s0)
    print(f"- one round-0 cell rerun with the same result (--forcerun {cell}):")
    check("default triggers", ["--forcerun", cell], dry_too=False)
    plan1 = root / "plans" / u0 / "round1.json"
    print(f"- {plan1.relative_to(root)} rewritten with the same bytes (newer mtime than round 2's plan):")
    time.sleep(0.05)
    plan1.write_bytes(plan1.read_bytes())
    check("default triggers")
    print(f"- {plan1.relative_to(root)} rewritten with the same JSON, other bytes (indented):")
    plan1.write_text(json.dumps(json.loads(plan1.read_text()), sort_keys=True, indent=1))
    d = run_smk(root, ["-n", "all", *no_mtime, *args.smk_args], args.timeout)
    print(f"  --rerun-triggers without mtime: dry run plans {fmt_jobs(d['jobs'])}", flush=True)
    check("default triggers")
    print(f"- one round-0 cell deleted ({cell}), then `snakemake all`:")
    (root / cell).unlink()
    check("default triggers")
    print(f"  exists again: {(root / cell).exists()}")
    check("asked for by name", [cell], dry_too=False)
    print("- the round rule's shell command edited (a code change):")
    sf = root / "Snakefile"
    orig = sf.read_text()
    sf.write_text(orig.replace("{wildcards.round} {output}\"", "{wildcards.round} {output} # v2\""))
    d = run_smk(root, ["-n", "all", *args.smk_args], args.timeout)
    print(f"  dry run plans {fmt_jobs(d['jobs'])}", flush=True)
    sf.write_text(orig)

    print("- hard kill (SIGKILL, e.g. the login node's session dies) while round-1 cells run, then resume:")
    root = make_workflow(base / f"kill-{n}", "per_group", n, args.rounds, cell_sleep=0.3)
    k = run_smk(root, ["all", *args.smk_args], args.timeout,
                kill_when=lambda rt: any(rt.glob("plans/*/round1.json")) and count_files(rt, "cells") > n * len(ROUND0) + 4)
    inc = root / ".snakemake" / "incomplete"
    n_inc = sum(1 for _ in inc.iterdir()) if inc.exists() else 0
    done = sorted(str(p.relative_to(root)) for p in (root / "plans").rglob("*.json"))
    print(f"  killed after {k['cells_done']} cells and plans {', '.join(done)}; {n_inc} incomplete marker(s) left",
          flush=True)
    for label, extra in (("rerun", []), ("after --unlock, rerun", None), ("rerun with --rerun-incomplete", ["--rerun-incomplete"])):
        if extra is None:
            run_smk(root, ["--unlock", *args.smk_args], args.timeout)
            extra = []
        d = run_smk(root, ["all", *extra, *args.smk_args], args.timeout)
        msg = next((ln.strip() for ln in d["text"].splitlines() if re.search(r"Exception|Error", ln)), "")
        print(f"  {label}: {d['status']}; ran {fmt_jobs(d['jobs'])}{'; says: ' + msg[:150] if msg else ''}", flush=True)
        if d["status"] == "ok":
            break

    print("- one round-0 cell fails, --keep-going:")
    bad = round0_cell(root, "s0000").removeprefix("cells/").removesuffix(".json")
    for design in ("per_group", "global", "per_setting"):
        root = make_workflow(base / f"fail-{design}-{n}", design, n, args.rounds, fail_cells=[bad])
        d = run_smk(root, ["all", "--keep-going", *args.smk_args], args.timeout)
        print(f"  {design}: {d['status']}; {d['cells_done']}/{expected_cells(n, args.rounds)} cells, "
              f"{d['plans_done']} plans, {count_files(root, 'search')}/{n} search records written", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50,100,200,493", help="numbers of settings (comma-separated)")
    ap.add_argument("--designs", default=",".join(DESIGNS),
                    help=f"any of {', '.join(DESIGNS)}, or groupsN: one checkpoint per (group, round), N equal groups")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per search, round 0 included")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per Snakemake run")
    ap.add_argument("--extras", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--extras-size", type=int, default=493)
    ap.add_argument("--direct-run", action="store_true",
                    help="with --extras: also run the workflow whose aggregates call checkpoints.get to the end")
    ap.add_argument("--semantics-size", type=int, default=20)
    ap.add_argument("--profile", action="store_true",
                    help="after each full run, run it again under cProfile and print where the main process's time went")
    ap.add_argument("--keep", action="store_true", help="keep the generated workflows")
    ap.add_argument("--dir", help="where to generate them (default: a new temporary directory)")
    ap.add_argument("--smk-args", default="", help="extra Snakemake arguments, e.g. '--scheduler greedy'")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.designs = [d.strip() for d in args.designs.split(",")]
    bad = {d for d in args.designs if d not in DESIGNS and not re.fullmatch(r"groups[1-9]\d*", d)}
    if bad:
        ap.error(f"unknown design(s) {sorted(bad)}; known: {DESIGNS}")
    if not 2 <= args.rounds <= len(NEW_CELLS) + 1:
        ap.error(f"--rounds must be in 2..{len(NEW_CELLS) + 1}")
    args.smk_args = args.smk_args.split()
    import snakemake

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-smk-rounds-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"Snakemake {snakemake.__version__}, local executor, --cores 2 {' '.join(args.smk_args)}; "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.rounds} rounds, {len(ROUND0)} + {'+'.join(map(str, NEW_CELLS[: args.rounds - 1]))} cells a setting; "
          f"workflows in {base}", flush=True)
    print("main CPU: the Snakemake process itself (all its threads); jobs+solver: its children "
          "(job shells, round scripts, the ILP scheduler's solver)")
    t0 = time.perf_counter()
    scaling(args, base)
    if args.extras:
        per_group_extras(args, base)
        semantics(args, base)
    print(f"\nbenchmark wall time {time.perf_counter() - t0:.0f} s; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.keep and not args.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
