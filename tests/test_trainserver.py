"""The training server (arrepro.train.server): a cell trained by the train rule's command through it
has the numbers of the same cell trained in its own process, alone or beside another cell; a
signal to the job reaches the cell (checkpoint, exit 3), and a job killed outright stops its cell."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from arrepro.train import runfile
from arrepro.data import save_task

ROOT = Path(__file__).resolve().parents[1]
TASK = {"kind": "mqar", "vocab_size": 128, "seq_len": 32, "num_kv_pairs": 4, "n_train": 64, "n_test": 64, "seed": 0}
RECIPE = {"epochs": 3, "batch_size": 32, "warmup_frac": 0.3, "schedule": "cosine", "weight_decay": 0.1}
MAMBA = {"mixer": "mamba", "position": "none", "mlp": False, "mixer_kwargs": {"d_state": 16, "d_conv": 4, "expand": 2}}
ATTENTION = {"mixer": "attention", "position": "learned", "mlp": True, "mixer_kwargs": {"num_heads": 1}}
# its own server (another key: the idle time is part of it), gone a few seconds after the tests
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "ARREPRO_TRAIN_SERVER_IDLE": "5"}
ENV.pop("ARREPRO_TRAIN_SERVER", None)
ENV.pop("SLURM_JOB_ID", None)
TIMING = ("train_seconds", "tokens_per_second", "seconds", "sha256", "metrics_sha256")


def spec(model_def, seed, **recipe):
    return {"task": "L32", "task_def": TASK, "model": model_def["mixer"], "model_def": model_def, "width": 32,
            "layers": 1, "recipe": "r", "recipe_def": {**RECIPE, **recipe}, "batch_size": 32, "lr": 3e-3,
            "seed": seed, "device": "cpu", "precision": "fp32"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    save_task(TASK, d)
    return d


def job(cell: dict, data, out: Path, server: bool) -> subprocess.Popen:
    """The train rule's command on ``cell`` (with or without --server), keeping the final weights."""
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / "run.json"
    runfile.write(runfile.new([], [], keep_weights=True), run_file)
    cmd = [sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", json.dumps(cell), "--data", str(data),
           "--out", str(out), "--threads", "1", "--train-log", str(out / "train.log"), "--die-with-parent",
           "--run-file", str(run_file)]
    return subprocess.Popen(cmd + (["--server"] if server else []), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finished(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out
    return out


def numbers(out: Path) -> tuple[dict, list, dict]:
    """result.json and metrics.jsonl without their timings, and the trained weights."""
    result = {k: v for k, v in json.loads((out / "result.json").read_text()).items() if k not in TIMING}
    rows = [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (out / "metrics.jsonl").read_text().splitlines()]
    return result, rows, torch.load(out / "weights.pt", map_location="cpu", weights_only=True)


def test_cells_through_the_server_have_the_numbers_of_cells_trained_alone(data, tmp_path):
    cells = {"mamba": spec(MAMBA, 0), "attention": spec(ATTENTION, 1)}
    for name, cell in cells.items():  # alone, each in its own process
        finished(job(cell, data, tmp_path / "alone" / name, server=False))
    together = {name: job(cell, data, tmp_path / "server" / name, server=True) for name, cell in cells.items()}
    logs = {name: finished(p) for name, p in together.items()}  # at once, through one server
    assert sum("started a training server" in log for log in logs.values()) <= 1, logs
    for name in cells:
        alone, served = numbers(tmp_path / "alone" / name), numbers(tmp_path / "server" / name)
        assert alone[0] == served[0] and alone[1] == served[1], name
        assert alone[2].keys() == served[2].keys() and all(torch.equal(alone[2][k], served[2][k]) for k in alone[2])
        assert "numerics pinned" in logs[name] and "linear.linear_cpu: kernel" in logs[name], logs[name]
        assert served[0]["numerics"]["pinned"] is True


def test_a_signal_to_the_job_reaches_its_cell_and_a_killed_job_stops_it(data, tmp_path):
    cell = spec(MAMBA, 0, epochs=400)
    for how in ("SIGTERM", "kill -9"):
        out = tmp_path / how
        p = job(cell, data, out, server=True)
        seen = []
        for line in p.stdout:  # under way in the server's child
            seen.append(line)
            if "epoch 2/400" in line:
                break
        if how == "SIGTERM":
            p.send_signal(signal.SIGTERM)
            rest, _ = p.communicate(timeout=120)
            assert p.returncode == 3, "".join(seen) + rest
            assert "(SIGTERM): checkpoint written" in rest, rest
        else:
            p.kill()  # the job dies at once: the server sends its cell SIGTERM
            p.communicate(timeout=60)
            deadline = time.monotonic() + 120
            while "checkpoint written" not in (out / "train.log").read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "(SIGTERM): checkpoint written" in (out / "train.log").read_text()
        assert (out / "checkpoint.pt").exists() and not (out / "result.json").exists()


def warm_up(patch: str = "", after: str = "") -> subprocess.CompletedProcess:
    """The server's warm-up in a process of its own (it pins this process's numerics), after
    ``patch`` (Python run first), then ``after``."""
    code = f"{patch}\nfrom arrepro.train.server import _warm_up\n_warm_up()\nprint('warmed up')\n{after}"
    return subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=900)


# after the warm-up: how many compiled variants each fused CPU kernel function gained in a training
# step of demo-sized attention models whose blocks are compiled whole (plain; centred convolutions
# and rotary positions), and of one whose blocks are not (no MLP, a convolution on Q, K and V: the
# block's modules, attention_cpu and short_conv_cpu)
NEW_VARIANTS = """
import importlib, pkgutil, torch
from numba.core.registry import CPUDispatcher
import arrepro.models.cpu_kernels as ck
from arrepro.models import LanguageModel
def variants():
    n = {}
    for info in pkgutil.iter_modules(ck.__path__):
        mod = importlib.import_module(f"{ck.__name__}.{info.name}")
        n.update({f"{info.name}.{k}": len(v.signatures) for k, v in vars(mod).items() if isinstance(v, CPUDispatcher)})
    return n
before = variants()
for kw in ({}, {"mixer_kwargs": {"conv": "qkv", "conv_mode": "centred"}, "position": "rope"},
           {"mixer_kwargs": {"conv": "qkv"}, "mlp": False}):
    kw = {"position": "learned", **kw}
    m = LanguageModel(vocab_size=128, d_model=32, n_layers=2, max_len=32, mixer="attention", **kw)
    x = torch.randint(0, 128, (32, 32))
    loss, _, _ = m.loss(x, x)
    loss.backward()
after = variants()
print("new variants:", {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
"""


def test_the_warm_up_runs_every_step_it_names():
    """Issue 32, round 6, 6: every server's log said `warm-up of <mixer>: NameError: name 'train' is
    not defined` (the evaluation step of the warm-up had never run); each step now runs, for every
    mixer, and nothing is reported."""
    p = warm_up()
    assert p.returncode == 0 and "warmed up" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    assert "warm-up of" not in p.stdout + p.stderr, p.stdout[-3000:] + p.stderr[-3000:]


def test_after_the_warm_up_a_cell_compiles_no_kernel_variant():
    """With the attention block compiled whole, the warm-up's attention model no longer ran
    attention_cpu's training layout, and each cell of an attention model whose block is not
    compiled (a convolution) compiled it itself: about 15 CPU-seconds a cell (bench_cpu_throughput's
    attention + conv QKV cell at 1.67x its baseline). The warm-up now steps a mixer's model with its
    blocks compiled and with their modules."""
    p = warm_up(after=NEW_VARIANTS)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "new variants: {}" in p.stdout, p.stdout[-3000:]


def test_a_warm_up_step_that_raises_stops_the_server_naming_it():
    """A warm-up step that raises is not swallowed: the server does not start, its log naming the
    mixer and the step (its jobs then train in their own processes and say why)."""
    p = warm_up("import arrepro.train.loop as loop\n"
                "def broken(*a, **k):\n    raise RuntimeError('an evaluation that fails')\n"
                "loop.evaluate = broken")
    assert p.returncode != 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r"warm-up of \w+, an evaluation: RuntimeError: an evaluation that fails", p.stderr), p.stderr[-3000:]


def test_after_a_failed_warm_up_the_jobs_of_that_code_start_no_other_server():
    """The server whose warm-up failed leaves a note beside its log; the next jobs of the same code
    (the same key) read it and train in their own processes at once, saying why, instead of each
    paying for another start."""
    from arrepro.train.client import _side_file, _start

    key = f"test-failed-warm-up-{os.getpid()}"
    note = _side_file(key, "failed")
    note.write_text("warm-up of mamba, an evaluation: RuntimeError: broken\n")
    try:
        said = []
        assert _start(key, said.append) is None
        assert len(said) == 1 and "no training server: its warm-up failed with this code (warm-up of mamba" in said[0]
    finally:
        for ext in ("failed", "lock"):
            _side_file(key, ext).unlink(missing_ok=True)


def served(env: dict, cell: dict, data, out: Path) -> tuple[str, dict]:
    """The train rule's command on ``cell`` through the server, in environment ``env``: its output
    and the cell's numerics record."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", json.dumps(cell), "--data", str(data),
           "--out", str(out), "--threads", "1", "--train-log", str(out / "train.log"), "--server"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, json.loads((out / "result.json").read_text())["numerics"]


def test_a_pinned_numerics_override_is_recorded_per_job_not_per_server(data, tmp_path):
    """Issue 32, round 6, 1: the caller's environment was captured once, by the server, from the
    job that started it: a later job's override was recorded as nothing, and the first job's
    override in every later job's cell. Each job's own is recorded now (and said in its
    train.log): three jobs through one server, started by the first."""
    env = {**ENV, "ARREPRO_TRAIN_SERVER_IDLE": "13"}  # a server of this test's own (another key)
    asked = [{"MKL_CBWR": "AVX2"}, {}, {"OMP_NUM_THREADS": "4"}]
    logs = []
    for i, override in enumerate(asked):
        job_env = {k: v for k, v in env.items() if k not in ("MKL_CBWR", "OMP_NUM_THREADS")}
        out, record = served({**job_env, **override}, spec(ATTENTION, i, epochs=1), data, tmp_path / str(i))
        logs.append(out)
        assert record["overridden"] == override, (override, record)
        assert record["pinned"] is True, record
        said = re.findall(r"the caller's (\w+=\S+) was replaced by the pin", (tmp_path / str(i) / "train.log").read_text())
        assert said == [f"{k}={v}" for k, v in override.items()]
    assert "started a training server" in logs[0] and not any("started a training server" in x for x in logs[1:]), logs


def child_of_the_server(job: subprocess.Popen) -> int | None:
    """The pid of the server's child that trains ``job``'s cell: the process, other than the job,
    whose standard output is the job's (the server hands the child the job's descriptors)."""
    mine = os.readlink(f"/proc/{job.pid}/fd/1")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != job.pid:
            try:
                if os.readlink(proc / "fd" / "1") == mine:
                    return int(proc.name)
            except OSError:
                continue
    return None


def test_a_killed_child_is_named_in_the_jobs_log_with_its_signal(data, tmp_path):
    """Issue 32, round 6, 4: a `kill -9` of the cell's process (the server's child) ended the job
    with status 247 and the normal "used N CPU-seconds" line only. The job now says, in its log and
    on standard error, that the cell's process was killed and by which signal, and exits 128 + 9."""
    out = tmp_path / "killed"
    p = job(spec(MAMBA, 0, epochs=400), data, out, server=True)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "epoch 2/400" in line:
            break
    child = child_of_the_server(p)
    assert child is not None, "".join(seen)
    os.kill(child, signal.SIGKILL)
    rest, _ = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGKILL, "".join(seen) + rest
    assert re.search(rf"error: the cell's process \(pid {child}, a child of the training server\) was killed by "
                     r"signal 9 \(SIGKILL\)", rest), rest
    assert "killed by signal 9 (SIGKILL)" in (out / "train.log").read_text()
    assert not (out / "result.json").exists()
