"""Training jobs as Snakemake runs them, on the tiny scale (issue 18): a forced job starts over and
its retry resumes; a code edit of the train script restarts its cells; scales defined alike share
cells; a cell's outputs that disagree stop the tables or figures, naming the cell and the fix; a
killed Snakemake takes its training jobs down (checkpointed) and the printed advice resumes them;
Ctrl-C and a full disk leave their messages where the user sees them."""
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from arrepro.config.grid import Grid
from test_workflow import CODE_EDIT, SNAKEMAKE, TARGETS, edit_config, planned, smk
from workflow_copy import copy_workflow
from test_workflow import done, wd  # noqa: F401 - fixtures: the finished tiny scale, a private copy

TIMING = {"seconds", "train_seconds", "tokens_per_second", "sha256", "metrics_sha256"}


def untimed(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def metrics(cell: Path) -> list[dict]:
    return [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]


# these tests drive fig2, the tiny scale's fixed grid of two cells (fig1's learning-rate search has
# tests of its own in test_workflow)
FIG2 = ["results/tiny/fig2.pdf"]


def cells(wd: Path) -> list[Path]:
    found = sorted(p.parent for p in wd.glob("results/cells/mqar-L16-*/**/result.json"))
    assert len(found) == 2
    return found


# -- a forced job starts over; a retry resumes ---------------------------------------------------
@pytest.mark.parametrize("force", [["--forcerun", "train"], ["--forceall"]], ids=["forcerun", "forceall"])
def test_a_forced_train_job_starts_over(wd, force):
    """Issue 18: both ended with "resumed from checkpoint at epoch 1 batch 0" and the old numbers.
    (With the config's keep_weights, issue 23: the retrained cells keep their final weights.)"""
    before = {c: (c / "checkpoint.pt").stat().st_mtime_ns for c in cells(wd)}
    assert not any((c / "weights.pt").exists() for c in cells(wd))
    p = smk(wd, "--cores", "1", *FIG2, *force, "--config", "scale=tiny", "keep_weights=True")  # (--forcerun takes every name after it)
    assert "2 forced cell(s) train from scratch" in p.stderr and "2 forced cell(s) trained from scratch" in p.stderr, \
        p.stderr[-2000:]
    for c in cells(wd):
        job = (c / "job.log").read_text()
        assert "resumed from checkpoint" not in job and "epoch 1/1" in job, job
        assert re.search(r"forced by snakemake \(run \S+\): the cell starts over", (c / "train.log").read_text())
        assert (c / "checkpoint.pt").stat().st_mtime_ns != before[c]
        assert (c / "weights.pt").is_file()


def test_editing_the_train_script_restarts_its_cells(wd):
    """scripts/train_cell.py is in the train rule's code digest (Snakemake reruns the cells) and
    in the checkpoint's fingerprint (the rerun does not resume): one list of a cell's sources."""
    with open(wd / "scripts/train_cell.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd, targets=FIG2).get("train") == 2
    smk(wd, "--cores", "1", *FIG2, "--config", "scale=tiny")
    for c in cells(wd):
        job = (c / "job.log").read_text()
        assert "fingerprint differs" in job and "resumed" not in job, job


def test_a_cell_whose_outputs_were_deleted_comes_back_from_its_checkpoint(wd):
    """Not forced: a finished cell whose outputs were deleted (what Snakemake does to every cell
    of a failed Slurm group job) is rebuilt from its checkpoint, unchanged, without training."""
    c = cells(wd)[0]
    before = {f: (c / f).read_bytes() for f in ("result.json", "metrics.jsonl")}
    for f in before:
        (c / f).unlink()
    smk(wd, "--cores", "1", f"{c.relative_to(wd)}/result.json", "--config", "scale=tiny")
    job = (c / "job.log").read_text()
    assert "resumed from checkpoint at epoch 1 batch 0" in job and "epoch 1/1" not in job, job
    assert {f: (c / f).read_bytes() for f in before} == before


# -- a cell's identity is what changes its result ------------------------------------------------
def test_a_scale_defined_alike_shares_the_cells_without_retraining(wd):
    """Issue 18: the spec held the scale's name, so the twin scale retrained (and overwrote) the
    cells; a task named differently with the same definition is the same cell too."""
    def twin(c):
        t = copy.deepcopy(c["scales"]["tiny"])
        t["tasks"] = {"short": t["tasks"].pop("L16")}
        t["experiments"] = {"fig2": t["experiments"]["fig2"]}  # the twin of fig2 (fig1 has its own task)
        t["experiments"]["fig2"]["grids"][0]["tasks"] = ["short"]
        c["scales"]["twin"] = t

    edit_config(wd, twin)
    dry = smk(wd, "-n", "results/twin/fig2.pdf", "--config", "scale=twin").stdout
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", dry.split("Job stats:")[1].split("total")[0], re.M))
    assert jobs == {"search_round": "1", "aggregate": "1", "figure": "1"}, dry[-3000:]  # no training (a fixed grid: one round)
    smk(wd, "--cores", "1", "results/twin/tables/fig2_cells.csv", "--config", "scale=twin")
    table = (wd / "results/twin/tables/fig2_cells.csv").read_text()
    assert ",short," in table and ",L16," not in table  # each scale labels the shared cells its way
    assert planned(wd) == {}  # and the first scale is still up to date


def test_reordering_keys_in_the_config_reruns_nothing(wd):
    """The order of a task's, a recipe's or a model's keys changes no result."""
    def reverse(c):
        for d in (c["scales"]["tiny"]["tasks"], c["scales"]["tiny"]["recipes"], c["models"]):
            for name in d:
                d[name] = dict(reversed(list(d[name].items())))

    edit_config(wd, reverse)
    assert planned(wd) == {}


# -- a cell's outputs agree ----------------------------------------------------------------------
def test_an_edited_result_stops_the_tables_naming_the_cell(wd):
    """Issue 18: accuracy 0.777 typed into result.json (metrics.jsonl says otherwise) flowed into
    the tables and the paper."""
    c = cells(wd)[0]
    r = json.loads((c / "result.json").read_text())
    r["final_accuracy"] = 0.777
    (c / "result.json").write_text(json.dumps(r, indent=1))
    p = smk(wd, "--cores", "1", *FIG2, "--config", "scale=tiny", check=False)
    rel = c.relative_to(wd)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and f"{rel}/result.json: its contents differ from what its trainer wrote" in out, out[-3000:]
    assert f"to fix: rm {rel}/result.json {rel}/metrics.jsonl" in out
    # its first reader, the learning-rate search's round job, stops: no decision and no table rests on it
    assert "Error in rule search_round" in out
    assert not (wd / "results/tiny/searches/rounds/cells_10min-fig2/round1.json").exists()


def test_the_advised_fix_rebuilds_a_broken_cell_without_training(wd):
    c = cells(wd)[0]
    good = (c / "result.json").read_bytes()
    (c / "result.json").write_text(good.decode()[:100])  # half-written
    p = smk(wd, "--cores", "1", *FIG2, "--config", "scale=tiny", check=False)
    rel = c.relative_to(wd)
    assert p.returncode != 0 and f"{rel}/result.json: not valid JSON" in p.stdout + p.stderr
    for f in ("result.json", "metrics.jsonl"):  # the message's fix, as typed
        (c / f).unlink()
    smk(wd, "--cores", "1", f"{rel}/result.json", "--config", "scale=tiny")
    assert (c / "result.json").read_bytes() == good
    assert "resumed from checkpoint at epoch 1 batch 0" in (c / "job.log").read_text()


def test_a_cut_metrics_file_stops_the_dynamics_figure_naming_the_cell(wd):
    """A dynamics figure (per-epoch curves from metrics.jsonl) over the same cells: a metrics file
    cut after training (to nothing, at a line boundary) is named, not plotted (by its first
    reader: the search's round job, which checks a result against its metrics)."""
    def dynamics(c):
        c["scales"]["tiny"]["experiments"]["fig6"] = {**c["scales"]["tiny"]["experiments"]["fig2"], "plot": "dynamics"}

    edit_config(wd, dynamics)
    c = cells(wd)[0]
    (c / "metrics.jsonl").write_text("")
    p = smk(wd, "--cores", "1", "results/tiny/fig6.pdf", "--config", "scale=tiny", check=False)
    rel = c.relative_to(wd)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    assert not (wd / "results/tiny/fig6.pdf").exists()
    log = "".join(f.read_text() for f in (wd / "results/tiny/logs").rglob("*.log"))
    assert f"{rel}/metrics.jsonl: differs from the file its result.json was written with" in log, log[-3000:]
    assert f"to fix: rm {rel}/result.json {rel}/metrics.jsonl" in log


# -- jobs that are killed, interrupted or out of space -------------------------------------------
EPOCHS = 50  # a few seconds of training: long enough to stop it half-way


@pytest.fixture
def slow(tmp_path):
    """A copy of the workflow whose tiny recipe trains EPOCHS epochs, and its first cell."""
    wd = copy_workflow(tmp_path)
    edit_config(wd, lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(epochs=EPOCHS))
    grid = Grid(yaml.safe_load((wd / "config.yaml").read_text()), "tiny")
    return wd, wd / grid.all_cells()[0].path


def start(wd: Path, *args) -> subprocess.Popen:
    """Snakemake in the background, in a session of its own (its process group: what a terminal's
    Ctrl-C reaches)."""
    return subprocess.Popen(SNAKEMAKE + ["--cores", "1", *args, "--config", "scale=tiny"], cwd=wd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_for(path: Path, pattern: str, after: int = 0, timeout: float = 300) -> str:
    """The text of ``path`` from byte ``after`` on, once it matches ``pattern``."""
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        if path.exists():
            text = path.read_bytes()[after:].decode(errors="replace")
            if re.search(pattern, text):
                return text
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in {path} after {timeout} s:\n"
                         + (path.read_text()[-3000:] if path.exists() else "(no file)"))


def trainer(cell: Path) -> int:
    """The pid of the process training the cell (its lock file says)."""
    return int(re.match(r"pid (\d+) on", (cell / "train.lock").read_text())[1])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_killing_snakemake_stops_its_training_job_and_the_printed_advice_resumes_it(slow):
    """Issue 18: after kill -9 of Snakemake its training job trained on as an orphan, and
    --unlock + --rerun-incomplete started a second trainer on the same cell."""
    wd, cell = slow
    target = f"{cell.relative_to(wd)}/result.json"
    p = start(wd, target)
    wait_for(cell / "train.log", rf"epoch 2/{EPOCHS}")
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    log = wait_for(cell / "train.log", r"\(SIGTERM\): checkpoint written", timeout=60)
    pid = trainer(cell)
    t = time.monotonic()
    while alive(pid) and time.monotonic() - t < 30:
        time.sleep(0.1)
    assert not alive(pid), "the training job outlived its Snakemake"
    assert not (cell / "result.json").exists() and not (cell / "metrics.jsonl").exists()
    from arrepro.train import checkpoint

    stopped_at = len(checkpoint.load(cell / "checkpoint.pt", "cpu")["state"]["metrics"])  # (its epochs so far)
    assert stopped_at < EPOCHS, log
    smk(wd, "--unlock", "--config", "scale=tiny")
    smk(wd, "--cores", "1", "--rerun-incomplete", target, "--config", "scale=tiny")
    resumed = re.findall(r"resumed from checkpoint at epoch (\d+) batch \d+", (cell / "train.log").read_text())
    assert resumed and int(resumed[-1]) >= stopped_at
    assert [m["epoch"] for m in metrics(cell)] == list(range(1, EPOCHS + 1))


def test_ctrl_c_keeps_the_checkpoint_line_in_the_log(slow):
    """Issue 18: Ctrl-C (SIGINT to the terminal's process group) killed `tee` too, and with it the
    "checkpoint written" line."""
    wd, cell = slow
    p = start(wd, f"{cell.relative_to(wd)}/result.json")
    wait_for(cell / "train.log", rf"epoch 2/{EPOCHS}")
    os.killpg(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=300)
    assert p.returncode != 0, out[-3000:]
    for log in ("train.log", "job.log"):
        assert "(SIGINT): checkpoint written, a restart resumes" in (cell / log).read_text(), log


def test_a_forced_job_retried_after_sigterm_resumes_its_own_checkpoint(slow):
    """--forcerun with --retries (the Slurm profile's): the forced attempt starts over; killed by
    SIGTERM (a time limit) half-way, its retry resumes from the checkpoint that attempt wrote,
    and ends with the numbers of an uninterrupted run."""
    wd, cell = slow
    target = f"{cell.relative_to(wd)}/result.json"
    smk(wd, "--cores", "1", target, "--config", "scale=tiny")
    first = untimed(metrics(cell))
    offset = (cell / "train.log").stat().st_size
    p = start(wd, "--forcerun", "train", "--retries", "1", target)
    wait_for(cell / "train.log", rf"the cell starts over(.|\n)*epoch 2/{EPOCHS}", after=offset)
    os.kill(trainer(cell), signal.SIGTERM)
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out[-3000:]
    log = (cell / "train.log").read_bytes()[offset:].decode()
    stop = log.index("(SIGTERM): checkpoint written")
    assert "resumed" not in log[:stop], log  # the forced attempt trained from scratch
    resumed = re.findall(r"resumed from checkpoint at epoch (\d+) batch \d+", log[stop:])
    assert len(resumed) == 1 and 2 <= int(resumed[0]) < EPOCHS, log
    assert untimed(metrics(cell)) == first


def test_a_full_disk_under_the_cells_is_reported_by_the_job(tmp_path):
    """Issue 18: with results/cells full, only tee's error showed (the script's own "no space left
    on <path>" went into the pipe, and job.log was empty). Here results/cells is a 16 KiB tmpfs
    (in a private user and mount namespace); the data is made first, outside it."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small tmpfs")
    wd = copy_workflow(tmp_path)
    grid = Grid(yaml.safe_load((wd / "config.yaml").read_text()), "tiny")
    cell = grid.all_cells()[0]
    smk(wd, "--cores", "1", f"results/data/{cell.task}/train.npz", "--config", "scale=tiny")
    (wd / "results/cells").mkdir(parents=True)
    script = ('mount -t tmpfs -o size=16k none results/cells || exit 97; exec "$@"')
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *SNAKEMAKE, "--cores", "1",
           f"{cell.path}/result.json", "--config", "scale=tiny"]
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=600)
    if p.returncode == 97 or p.stderr.startswith("unshare:"):
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()[:300]}")
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    assert re.search(rf"train_cell\.py: error: no space left on {re.escape(cell.path)}/\S+", out), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
