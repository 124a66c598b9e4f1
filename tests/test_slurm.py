"""Running on a Slurm cluster with the shipped profile (slurm/profile.yaml).

Fast checks (always): the profile renders, selects the paper scale by default, agrees with the
grouping of src/arrepro/config/costs.py; the wall-time estimates are calibrated to the paper; a dry
run of the paper grid through the profile bundles small cells into fewer Slurm jobs; against a
fake `sbatch`, the profile's group job asks for one GPU per cell one after another (1 cell per
GPU) or for one GPU, N cores and N cells' memory (N cells per GPU).

End to end (marker `slurm`): tests/slurm/start_cluster.sh installs and starts a single-node
Slurm with accounting (munge, MariaDB, slurmdbd, slurmctld, slurmd, two fake GPUs); the tiny
scale runs through `snakemake --profile slurm all` with only the software-deployment method
overridden (this machine has no conda; the scale comes from ARREPRO_SCALE, which the profile
reads) and ends with the numbers of a local `snakemake all` run; a deliberately failing
job (tests/slurm/Snakefile, through the same profile) is reported failed after the profile's
retries, each with more time; a cell that Slurm kills at its time limit (SIGTERM) resumes from
its checkpoint in the retry; with CELLS_PER_GPU = 2 two tiny cells run at once in one Slurm job
with one (fake) GPU and end with the numbers of the cells trained apart; every daemon is stopped by
PID. The four runs share the cluster and run at the same time (~7 minutes in all, mostly the
plugin's status polling). Skipped, saying why, where the
machine cannot install Debian packages (not root, no apt-get, or apt-get fails).
"""
import contextlib
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from arrepro.cluster import budget, packs
from arrepro.config import costs
from arrepro.config.cards import card_of
from arrepro.config.grid import Grid
from workflow_copy import copy_workflow, finished_run
from arrepro.search.rounds import Searches, search_cells, start_round

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "slurm" / "profile.yaml"
HERE = ROOT / "tests" / "slurm"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# through real Slurm: the same, with status checks that do not slow down (tests/slurm/prompt_status.py)
ON_SLURM = [sys.executable, str(HERE / "prompt_status.py")]
# fields that measure time, not learning (and the checksums, which cover them)
TIMING = {"seconds", "train_seconds", "tokens_per_second", "sha256", "metrics_sha256"}


def render_profile(**env) -> dict:
    """The profile as Snakemake reads it (YTE rendered), under the given environment."""
    from snakemake.profiles import ProfileConfigFileParser

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if v is not None})
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        with open(PROFILE) as f:
            return ProfileConfigFileParser().parse(f)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def profile_partitions() -> tuple[str, str]:
    text = PROFILE.read_text()
    return (re.search(r'CPU_PARTITION = "([^"]+)"', text)[1], re.search(r'GPU_PARTITION = "([^"]+)"', text)[1])


# ============================================================================ fast checks
def test_the_profile_runs_the_paper_grid_unless_told_otherwise():
    p = render_profile(ARREPRO_SCALE=None)
    assert p["executor"] == "slurm"
    assert p["software-deployment-method"] == "conda"
    assert p["config"] == ["scale=paper", f"cells_per_gpu={profile_cells_per_gpu()}"]
    assert render_profile(ARREPRO_SCALE="tiny")["config"][0] == "scale=tiny"
    cpu, gpu = profile_partitions()
    assert f"slurm_partition='{cpu}'" in p["default-resources"]
    assert f"train:slurm_partition='{gpu}'" in p["set-resources"]
    assert int(p["retries"]) >= 1 and p["rerun-incomplete"] in ("True", "true")


def profile_cells_per_gpu(text: str | None = None) -> int:
    return int(re.search(r"^  - CELLS_PER_GPU = (\d+)", text or PROFILE.read_text(), re.M)[1])


def test_the_profile_bundles_what_resources_py_groups():
    p = render_profile()
    assert sorted(p["group-components"]) == sorted(f"{g}={n}" for g, n in costs.group_components().items())
    # the submitting Snakemake lays CELLS_PER_GPU cells side by side, the workflow packs as many
    n = profile_cells_per_gpu()
    assert f"train_slot={n}" in p["resources"] and "train_slot=local" in p["set-resource-scopes"]
    assert f"cells_per_gpu={n}" in p["config"]
    gpu = profile_partitions()[1]
    assert f"gpu_pack:slurm_partition='{gpu}'" in p["set-resources"]  # a group's strings must agree


def test_resources_does_not_import_torch():
    code = "import sys, arrepro.config.costs, arrepro.cluster.packs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def paper_specs(config):
    grid = Grid(config, "paper")
    return grid, [grid.cell_spec(c.task, c.model, c.width, c.layers, c.recipe, c.lr, c.seed) for c in grid.all_cells()]


def test_wall_time_is_calibrated_to_the_paper(config):
    """The paper: runs take 10 minutes to 18 hours on one GPU."""
    _, specs = paper_specs(config)
    assert min(costs.runtime_min(s) for s in specs) == 10
    hours = [costs.estimate_seconds(s) / 3600 for s in specs]
    assert 10 <= max(hours) <= 18
    biggest = max(specs, key=costs.estimate_seconds)
    assert (biggest["width"], biggest["task_def"]["seq_len"]) == (2048, 512)
    assert all(costs.gpus(s) == 1 for s in specs)
    assert all(4096 <= costs.mem_mb(s) <= 16384 for s in specs)


def test_a_retry_asks_for_more_time_up_to_a_cap(config):
    _, specs = paper_specs(config)
    for s in (min(specs, key=costs.estimate_seconds), sorted(specs, key=costs.estimate_seconds)[len(specs) // 2],
              max(specs, key=costs.estimate_seconds)):
        first = costs.runtime_min(s)
        assert first <= costs.MAX_RUNTIME_MIN
        assert [costs.runtime_min(s, a) for a in (1, 2, 3, 4)] == [min(costs.MAX_RUNTIME_MIN, first * 2 ** i) for i in range(4)]
    assert costs.runtime_min(min(specs, key=costs.estimate_seconds), 2) == 20


def test_wider_longer_deeper_cells_ask_for_more(config):
    _, specs = paper_specs(config)
    s = specs[0]
    base = costs.estimate_seconds(s)
    assert costs.estimate_seconds({**s, "width": s["width"] * 4}) > base
    assert costs.estimate_seconds({**s, "layers": s["layers"] * 2}) > base
    assert costs.estimate_seconds({**s, "recipe_def": {**s["recipe_def"], "epochs": 100}}) > base
    longer = {**s, "task_def": {**s["task_def"], "seq_len": 4 * s["task_def"]["seq_len"]}}
    assert costs.estimate_seconds(longer) > base


def test_only_small_cells_are_grouped(config):
    _, specs = paper_specs(config)
    for s in specs:
        g = costs.group(s)
        m = costs.runtime_min(s)
        if g is None:
            assert m > costs.GROUP_TIERS[-1].max_minutes
        else:
            tier = next(t for t in costs.GROUP_TIERS if t.name == g)
            assert m <= tier.max_minutes and tier.bundle * tier.max_minutes <= costs.GROUP_TARGET_MIN


def test_the_paper_grid_becomes_fewer_slurm_jobs(config):
    """A dry run of one experiment of the paper grid through the profile: its learning-rate
    searches' round 0 is what `arrepro.cluster.budget` counts, and every training cell runs in exactly
    one group job of its size class, as the plan's bundles. Without arrepro.cluster.internals (Snakemake
    9.27 merges the bundles again on each DAG update) it formed 59-73 group jobs where the plan
    has 116, and listed 46 of the 480 cells in two of them."""
    grid, _ = paper_specs(config)
    exp = "fig1" if "fig1" in grid.experiments else next(iter(grid.experiments))
    env = {k: v for k, v in os.environ.items() if k != "ARREPRO_SCALE"}
    p = subprocess.run(SNAKEMAKE + ["-n", "--profile", "slurm", f"{grid.out}/tables/{exp}_best.csv", "--sdm", "env-modules"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    searches = Searches(grid)  # the dry run lists round 0 of the searches whose groups serve the table
    round0 = dict.fromkeys(c for g in searches.experiment_groups(exp) for s in searches.groups[g]
                           for c in search_cells(s, [start_round(s)]))
    plan = budget.plan(grid, list(round0))
    assert int(re.search(r"^train\s+(\d+)$", p.stdout, re.M)[1]) == plan["cells"]
    assert not re.findall(r"^rule train:", p.stdout, re.M)  # no cell outside a group job
    parts = re.split(r"^\[.*\] Group job (\S+) \(jobs in lexicogr\. order\):$", p.stdout, flags=re.M)
    tiers, in_groups = parts[1::2], []
    for tier, body in zip(parts[1::2], parts[2::2]):
        # (a job's spec is the cell's identity: the cost model's factor comes from the model's card)
        specs = [{**s, "cost_factor": card_of(config["models"], s["model"]).cost}
                 for s in map(json.loads, re.findall(r"--cell-json '([^']+)'", body))]
        assert specs and {costs.group(s) for s in specs} == {tier}, tier  # one size class per Slurm job
        in_groups += [(s["task"], s["model"], s["width"], s["layers"], s["lr"], s["seed"]) for s in specs]
    print(f"\n{exp}: {plan['cells']} cells -> {plan['train_jobs']} Slurm jobs planned; Snakemake forms {len(tiers)}, "
          f"{len(in_groups) - len(set(in_groups))} cells listed twice")
    assert len(set(in_groups)) == plan["cells"]
    assert len(in_groups) == plan["cells"], "a cell in two group jobs"
    assert len(tiers) == plan["train_jobs"] < plan["cells"] / 2


FAKE_SBATCH = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_SBATCH_LOG"
echo 4242
"""


def with_cells_per_gpu(wd: Path, n: int) -> None:
    """Set the knob in a copy of the profile, as a user would."""
    profile = wd / "slurm" / "profile.yaml"
    text = profile.read_text()
    profile.write_text(re.sub(r"^  - CELLS_PER_GPU = \d+", f"  - CELLS_PER_GPU = {n}", text, count=1, flags=re.M))
    assert profile_cells_per_gpu(profile.read_text()) == n


def first_sbatch(wd: Path, targets: list[str], tmp: Path, env: dict) -> str:
    """The first sbatch call the profile makes for these targets, against a fake sbatch that
    records it (and fake status tools); the submitting Snakemake is then killed."""
    fake = tmp / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "sbatch").write_text(FAKE_SBATCH)
    for tool in ("sacct", "sacctmgr", "squeue", "sinfo", "scontrol", "sshare"):
        (fake / tool).write_text("#!/bin/sh\nexit 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    record = tmp / f"sbatch-{len(list(tmp.glob('sbatch-*')))}.log"
    env = {**env, "PATH": f"{fake}:{env['PATH']}", "FAKE_SBATCH_LOG": str(record)}
    proc = subprocess.Popen(SNAKEMAKE + ["--profile", "slurm", *targets, "--sdm", "env-modules", "--nolock"], cwd=wd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (record.exists() and record.read_text().strip()) and proc.poll() is None:
            assert time.monotonic() < deadline, "no sbatch call in 300 s"
            time.sleep(1)
    finally:
        proc.kill()
        out, _ = proc.communicate()
    assert record.exists(), out[-4000:]
    return record.read_text().splitlines()[0]


def sbatch_options(call: str) -> dict:
    head = call.split(" --wrap=")[0]
    opts = dict(re.findall(r"(--[\w-]+|-[tp])[= ]([^ -][^ ]*)", head))
    return {k: v for k, v in opts.items()}


def test_a_group_job_of_n_cells_per_gpu_asks_for_one_gpu(tmp_path, config):
    """What the profile submits for the two tiny cells (made CUDA cells here; nothing runs), with
    1 and 2 cells per GPU: one cell per GPU, one after another (--gpus=1, one core, the sum of
    their times); two per GPU, at once (--gres=gpu:1, two cores, both cells' memory, the longer
    time plus the pack marker's minute). Inside, the plugin runs Snakemake with --jobs 1: one
    component at a time, which is why the cells of a pack must be one component."""
    import yaml

    wd = copy_workflow(tmp_path / "wf", whole=True)
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    cfg["scales"]["tiny"]["device"] = "cuda"
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    grid = Grid(cfg, "tiny")
    marker, cells = next(iter(packs.packs(grid, 2).items()))
    assert len(cells) == 2
    spec = grid.cell_spec(**vars(cells[0]))
    subprocess.run(SNAKEMAKE + [f"results/data/{cells[0].task}/train.npz", "--cores", "1", "--config", "scale=tiny"],
                   cwd=wd, check=True, capture_output=True, timeout=300)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM")}, "ARREPRO_SCALE": "tiny"}
    _, gpu = profile_partitions()

    with_cells_per_gpu(wd, 1)
    call = first_sbatch(wd, [f"{c.path}/result.json" for c in cells], tmp_path, env)
    o = sbatch_options(call)
    assert (o["-p"], o["--gpus"], o["--cpus-per-task"], "--gres" in o) == (gpu, "1", "1", False), call
    assert (int(o["-t"]), int(o["--mem"])) == (2 * costs.runtime_min(spec), costs.mem_mb(spec)), call
    assert call.count("'train:") == 2 and "gpu_pack" not in call and " --jobs 1 " in call

    with_cells_per_gpu(wd, 2)
    call = first_sbatch(wd, [marker], tmp_path, env)
    o = sbatch_options(call)
    assert (o["-p"], o["--gres"], o["--cpus-per-task"], "--gpus" in o) == (gpu, "gpu:1", "2", False), call
    assert (int(o["-t"]), int(o["--mem"])) == (costs.runtime_min(spec, 1, 2) + 1, 2 * costs.mem_mb(spec)), call
    assert call.count("'train:") == 2 and "'gpu_pack:" in call and " --jobs 1 " in call


# ============================================================================ a real cluster
def why_no_cluster() -> str | None:
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root: it installs Debian's Slurm packages and runs the Slurm daemons"
    needed = ("munged", "slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "mariadbd")
    if not all(shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") for b in needed) \
            and not shutil.which("apt-get"):
        return "Slurm is not installed and there is no apt-get to install Debian's packages"
    return None


@dataclass
class Cluster:
    state: Path
    env: dict


def pids_of(state: Path) -> dict[str, int]:
    out = {}
    for f in (state / "pids").glob("*.pid"):
        text = f.read_text().strip()
        if text.isdigit():
            out[f.name] = int(text)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = why_no_cluster()
    if why:
        pytest.skip(why)
    state = tmp_path_factory.mktemp("cluster")
    cpu, gpu = profile_partitions()
    pids = {}
    try:
        t = time.monotonic()
        p = subprocess.run(["bash", str(HERE / "start_cluster.sh"), str(state), cpu, gpu],
                           capture_output=True, text=True, timeout=900)
        pids = pids_of(state)
        if p.returncode == 77:
            pytest.skip("cannot install Debian's Slurm packages on this machine: " + p.stderr.strip()[-800:])
        assert p.returncode == 0, p.stdout + p.stderr
        print(f"\n{p.stdout.strip()}\ncluster up in {time.monotonic() - t:.0f} s")
        yield Cluster(state, {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf")})
    finally:
        pids = {**pids, **pids_of(state)}
        stop = subprocess.run(["bash", str(HERE / "stop_cluster.sh"), str(state)],
                              capture_output=True, text=True, timeout=300)
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        assert stop.returncode == 0 and not left, f"still running: {left}\n{stop.stdout}{stop.stderr}"


def submitted(log: str) -> list[str]:
    return re.findall(r"has been submitted with SLURM jobid (\d+)", log)


def sacct(cluster: Cluster, ids: list[str]) -> list[dict]:
    fields = ["JobID", "Partition", "State", "Timelimit", "AllocTRES", "Comment"]
    p = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", ",".join(fields)],
                       env=cluster.env, capture_output=True, text=True, check=True, timeout=60)
    return [dict(zip(fields, line.split("|"))) for line in p.stdout.splitlines() if line]


@contextlib.contextmanager
def background(cmd, cwd, env):
    """A command that runs while the tests go on; terminated (killed after 60 s) at the end."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def failing(cluster, tmp_path_factory):
    """tests/slurm/Snakefile through the profile, started early so that it runs alongside the
    smoke grid (both mostly wait for Slurm)."""
    wd = tmp_path_factory.mktemp("failing")
    shutil.copy(HERE / "Snakefile", wd / "Snakefile")
    shutil.copytree(ROOT / "slurm", wd / "slurm")
    with background(ON_SLURM + ["--profile", "slurm", "--sdm", "env-modules"], wd, cluster.env) as proc:
        yield proc, wd


# One CPU cell of about 3 minutes (2-core Intel Xeon, beside the rest of the suite), far past the
# 1-minute limit of its first attempt: Slurm checks limits every 30 s or so and then waits KillWait
# (30 s) after its SIGTERM, so a cell of 45 epochs, 73 s at 7daffca, could end before the kill
TIMEOUT_SCALE = {
    "device": "cpu",
    "tasks": {"L32": {"kind": "mqar", "vocab_size": 128, "seq_len": 32, "num_kv_pairs": 4, "n_train": 10000,
                      "n_test": 256, "seed": 0}},
    "recipes": {"long": {"epochs": 120, "batch_size": 32, "warmup_frac": 0.1, "schedule": "cosine", "weight_decay": 0.1}},
    "experiments": {"fig2": {"title": "timeout", "plot": "width", "grids": [
        {"series": "one cell", "tasks": ["L32"], "models": ["attention"], "widths": [32], "layers": [2],
         "lrs": [1.0e-3], "seeds": [0], "recipe": "long"}]}},
}


@pytest.fixture(scope="module")
def timed_out(cluster, tmp_path_factory):
    """One long cell through the profile whose first attempt gets a 1-minute limit: Slurm ends it
    with SIGTERM, the retry (10 minutes) must resume from the checkpoint. Forced (--forcerun
    train, issue 23): the job on the Slurm node reads what the run forces from the run's file,
    starts over once, and its retry resumes. Started early, so that it runs alongside the other
    runs."""
    import yaml

    wd = copy_workflow(tmp_path_factory.mktemp("timeout") / "wf", whole=True)
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    cfg["scales"]["tiny"] = TIMEOUT_SCALE
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    cell = Grid(cfg, "tiny").all_cells()[0]
    # the dataset beforehand, locally: only the training goes through Slurm
    subprocess.run(SNAKEMAKE + [f"results/data/{cell.task}/train.npz", "--cores", "1", "--config", "scale=tiny"],
                   cwd=wd, check=True, capture_output=True, timeout=300)
    cell = cell.path
    # the time limits of this scenario, and quicker status checks than the profile's (for speed)
    cmd = ON_SLURM + ["--profile", "slurm", f"{cell}/result.json", "--sdm", "env-modules", "--forcerun", "train",
                       "--set-resources", "train:runtime=1 if attempt == 1 else 10",
                       "--slurm-init-seconds-before-status-checks", "10"]
    with background(cmd, wd, {**cluster.env, "ARREPRO_SCALE": "tiny"}) as proc:
        yield proc, wd / cell


@pytest.fixture(scope="module")
def shared(cluster, tmp_path_factory):
    """The two tiny cells as one pack through the profile with CELLS_PER_GPU = 2: one Slurm job
    that asks for one (fake) GPU and runs both cells at once. The tiny cells are CPU cells, so
    their GPU request is given on the command line (with the partitions, which a command-line
    --set-resources replaces); what the rule itself asks for is test_a_group_job_of_n_cells_per_gpu_...
    Started early, so that it runs alongside the other runs."""
    import yaml

    wd = copy_workflow(tmp_path_factory.mktemp("shared") / "wf", whole=True)
    with_cells_per_gpu(wd, 2)
    grid = Grid(yaml.safe_load((wd / "config.yaml").read_text()), "tiny")
    marker, cells = next(iter(packs.packs(grid, 2).items()))
    subprocess.run(SNAKEMAKE + [f"results/data/{cells[0].task}/train.npz", "--cores", "1", "--config", "scale=tiny"],
                   cwd=wd, check=True, capture_output=True, timeout=300)
    cpu, gpu = profile_partitions()
    cmd = ON_SLURM + ["--profile", "slurm", marker, "--sdm", "env-modules", "--set-resources",
                       f"train:slurm_partition='{gpu}'", f"gpu_pack:slurm_partition='{gpu}'",
                       "train:gres='gpu:1'", "gpu_pack:gres='gpu:1'", "--slurm-init-seconds-before-status-checks", "10",
                       "--slurm-keep-successful-logs"]  # the job's log shows the two cells at once
    with background(cmd, wd, {**cluster.env, "ARREPRO_SCALE": "tiny"}) as proc:
        yield proc, wd, cells


def untimed(obj):
    if isinstance(obj, list):
        return [untimed(x) for x in obj]
    return {k: v for k, v in obj.items() if k not in TIMING}


def read_table(path: Path) -> list[dict]:
    with open(path) as f:
        return [untimed(row) for row in csv.DictReader(f)]


@pytest.mark.slurm
def test_the_tiny_grid_through_the_slurm_profile_ends_as_a_local_run(cluster, failing, timed_out, shared, tmp_path,
                                                                    tmp_path_factory, config):
    from test_trust_workflow import run_as_typed, tex_standin

    via_slurm = copy_workflow(tmp_path / "slurm", whole=True)
    # the paper with the TeX stand-in, as the local run builds it: this machine may have no TeX
    tex = tex_standin(tmp_path / "texbin")
    t0 = time.monotonic()
    # the profile as users run it, with quicker status checks (every 5 s, not 20 growing to 180:
    # ON_SLURM): the DAG's levels each wait for one
    run = subprocess.Popen(ON_SLURM + ["--profile", "slurm", "all", "--sdm", "env-modules",
                                        "--slurm-init-seconds-before-status-checks", "5"], cwd=via_slurm,
                           env={**cluster.env, "ARREPRO_SCALE": "tiny", "PATH": tex},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the local run: `snakemake all` on the tiny scale, the test session's one (built meanwhile
        # if no other test has yet: workflow_copy.finished_run)
        local = finished_run(tmp_path_factory, "tiny-typed", run_as_typed)
        log, _ = run.communicate(timeout=1200)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    elapsed = time.monotonic() - t0
    print(f"\ntiny grid through Slurm: {elapsed:.0f} s")
    assert run.returncode == 0, log[-6000:]

    # the same cells, with the same numbers
    cells = sorted(p.parent.relative_to(local) for p in (local / "results" / "cells").rglob("result.json"))
    assert cells and cells == sorted(p.parent.relative_to(via_slurm)
                                     for p in (via_slurm / "results" / "cells").rglob("result.json"))
    for cell in cells:
        a, b = local / cell, via_slurm / cell
        assert untimed(json.loads((a / "result.json").read_text())) == untimed(json.loads((b / "result.json").read_text()))
        rows = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
        assert untimed(rows(a)) == untimed(rows(b))
    tables = sorted(p.relative_to(local) for p in (local / "results" / "tiny" / "tables").glob("*.csv"))
    assert tables
    for t in tables:
        assert read_table(local / t) == read_table(via_slurm / t), t
    for fig in (local / "results" / "tiny").glob("*.pdf"):
        assert (via_slurm / fig.relative_to(local)).stat().st_size > 0
    # the learning-rate search: the same rounds and decisions, at least two of them refining
    reports = sorted(p.relative_to(local) for p in (local / "results/tiny/searches").rglob("*.json")
                     if "/rounds/" not in str(p))
    assert reports
    for r in reports:
        assert json.loads((local / r).read_text()) == json.loads((via_slurm / r).read_text()), r
    kinds = [[x["kind"] for x in json.loads((local / r).read_text())["rounds"]] for r in reports]
    assert max(k.count("refine") for k in kinds) >= 2, kinds

    # what Slurm ran: every job completed; the cells as bundles on the GPU partition, the rest on the CPU one
    cpu, gpu = profile_partitions()
    jobs = sacct(cluster, submitted(log))
    assert jobs and all(j["State"] == "COMPLETED" for j in jobs), jobs
    train = [j for j in jobs if "train" in j["Comment"]]
    assert all(j["Partition"] == gpu for j in train) and all(j["Partition"] == cpu for j in jobs if j not in train)
    assert len(train) < len(cells), "the tiny cells of a round should share a Slurm job"
    assert {j["Comment"].split("_wildcards_")[0] for j in jobs if j not in train} >= {
        "rule_data", "rule_aggregate", "rule_cells_table", "rule_figure"}


@pytest.mark.slurm
def test_a_failing_job_is_reported_failed_after_retries_with_more_time(cluster, failing):
    proc, wd = failing
    log, _ = proc.communicate(timeout=1200)
    assert proc.returncode != 0, log[-4000:]
    assert "Error in rule fails" in log and "SLURM status is: 'FAILED'" in log, log[-4000:]
    assert not (wd / "fails.txt").exists()
    attempts = 1 + int(render_profile()["retries"])
    runtimes = [5 * 2 ** i for i in range(attempts)]
    assert (wd / "attempts.txt").read_text().splitlines() == [f"attempt {m} min" for m in runtimes]
    jobs = sacct(cluster, submitted(log))
    failed = [j for j in jobs if j["Comment"] == "rule_fails"]
    assert [j["State"] for j in failed] == ["FAILED"] * attempts
    assert [j["Timelimit"] for j in failed] == [f"00:{m:02d}:00" for m in runtimes]
    # keep-going: the other job finished, on one of the (fake) GPUs
    assert re.match(r"CUDA_VISIBLE_DEVICES=[01] ", (wd / "gpu.txt").read_text())
    assert any("gres/gpu=1" in j["AllocTRES"] and j["State"] == "COMPLETED" for j in jobs)


@pytest.mark.slurm
def test_a_cell_killed_at_its_time_limit_resumes_in_the_retry(cluster, timed_out):
    proc, cell = timed_out
    log, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, log[-6000:]
    jobs = sacct(cluster, submitted(log))
    first, retry = jobs[-2:]
    # Slurm records TIMEOUT, or FAILED when the job's processes exit on its SIGTERM before the kill
    assert first["State"] in ("TIMEOUT", "FAILED") and retry["State"] == "COMPLETED", jobs
    assert (first["Timelimit"], retry["Timelimit"]) == ("00:01:00", "00:10:00")
    first_log = next(cell.parents[6].glob(f".snakemake/slurm_logs/**/{first['JobID']}.log")).read_text()
    assert "DUE TO TIME LIMIT" in first_log, first_log[-3000:]
    # the retry went on from where the first attempt stopped (its SIGTERM checkpoint or its last
    # epoch's), and the record is whole: every epoch once, in order
    train_log = (cell / "train.log").read_text()
    resumed = re.search(r"resumed from checkpoint at epoch (\d+) batch (\d+)", train_log)
    assert resumed and int(resumed[1]) + int(resumed[2]) > 0, train_log
    assert len(re.findall(r"forced by snakemake \(run \S+\): the cell starts over", train_log)) == 1, train_log
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    epochs = TIMEOUT_SCALE["recipes"]["long"]["epochs"]
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))
    per_epoch = math.ceil(TIMEOUT_SCALE["tasks"]["L32"]["n_train"] / TIMEOUT_SCALE["recipes"]["long"]["batch_size"])
    assert [r["step"] for r in rows] == [per_epoch * e for e in range(1, epochs + 1)]
    result = json.loads((cell / "result.json").read_text())
    assert result["epochs_run"] == epochs and result["steps"] == rows[-1]["step"]


@pytest.mark.slurm
def test_two_cells_share_one_gpu_in_one_slurm_job(cluster, shared, tmp_path_factory):
    """CELLS_PER_GPU = 2: one Slurm job with one GPU and two cores; one step (that has the GPU)
    runs both cells at once; their numbers are those of the cells trained apart (each its own job)."""
    proc, wd, cells = shared
    log, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, log[-6000:]
    jobs = sacct(cluster, submitted(log))
    assert len(jobs) == 1 and jobs[0]["State"] == "COMPLETED", jobs
    tres = jobs[0]["AllocTRES"]
    assert "gres/gpu=1" in tres and re.search(r"\bcpu=2\b", tres), tres
    steps = subprocess.run(["sacct", "-n", "-P", "-j", jobs[0]["JobID"], "-o", "JobID,AllocTRES"], env=cluster.env,
                           capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    numbered = [line for line in steps if re.match(r"\d+\.\d+\|", line)]
    assert len(numbered) == 1 and "gres/gpu=1" in numbered[0], steps  # one srun step, with the GPU
    job_log = next(wd.glob(f".snakemake/slurm_logs/**/{jobs[0]['JobID']}.log")).read_text()
    assert_ran_at_once(job_log, 2)
    assert_as_trained_apart(wd, cells, tmp_path_factory)


def assert_ran_at_once(log: str, n: int) -> None:
    """A Snakemake log in which n training jobs all started before the first of them finished."""
    started = [m.start() for m in re.finditer(r"^(local)?rule train:", log, re.M)]
    assert len(started) == n, log[-6000:]
    assert started[-1] < log.index("Finished jobid", started[0]), "the cells did not run at once:\n" + log[-6000:]


def assert_as_trained_apart(done: Path, cells, tmp_path_factory) -> None:
    """The cells' result.json and metrics under the workflow copy `done` are those of the same
    cells trained apart, each its own job, by a plain local run of the tiny scale (the test
    session's one: workflow_copy.finished_run), timings aside."""
    from test_workflow import run_tiny

    apart = finished_run(tmp_path_factory, "tiny-done", run_tiny)
    for c in cells:
        a, b = done / c.path, apart / c.path
        assert untimed(json.loads((a / "result.json").read_text())) == untimed(json.loads((b / "result.json").read_text()))
        rows = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
        assert rows(a) and untimed(rows(a)) == untimed(rows(b))


def test_the_prompt_status_checks_keep_their_first_interval():
    """What ON_SLURM changes: the plugin's next interval, capped at its first (and nothing when it is
    already shorter); a plugin without the property it caps stops it loudly (prompt_status.py)."""
    sys.path.insert(0, str(HERE))
    try:
        import prompt_status
    finally:
        sys.path.remove(str(HERE))
    from types import SimpleNamespace
    from snakemake_executor_plugin_slurm import Executor

    before = Executor.next_seconds_between_status_checks
    try:
        prompt_status.install()
        ex = object.__new__(Executor)
        ex.workflow = SimpleNamespace(executor_settings=SimpleNamespace(init_seconds_before_status_checks=5))
        ex.next_seconds_between_status_checks = 15  # what the plugin sets after a check that found nothing
        assert ex.next_seconds_between_status_checks == 5
        ex.next_seconds_between_status_checks = 3
        assert ex.next_seconds_between_status_checks == 3
    finally:
        Executor.next_seconds_between_status_checks = before
