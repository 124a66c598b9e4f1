"""The training server (arrepro.train.server): a cell trained by the train rule's command through it
has the numbers of the same cell trained in its own process, alone or beside another cell; a
signal to the job reaches the cell (checkpoint, exit 3), and a job killed outright stops its cell."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
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


STANDIN = '''
import os, socket, sys, time
from arrepro.train.client import _address
key, mode = sys.argv[1], os.environ["STANDIN_MODE"]
with open(os.environ["STANDIN_STARTS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
if mode == "silent":  # warms up without a word, for ever
    time.sleep(120)
    sys.exit(0)
for i in range(int(os.environ.get("STANDIN_STEPS", "0"))):  # a warm-up step a line, as the server's
    print(f"warm-up: step {i}", flush=True)
    time.sleep(0.3)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(_address(key))
s.listen(8)
s.settimeout(0.5)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        conn, _ = s.accept()
    except socket.timeout:
        continue
    conn.close()  # every connection closed before a cell starts (an idle server exiting as a job connects)
'''


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """A stand-in for the server (``STANDIN``) that the client starts: its starts counted in a file;
    the client gives up a silent start after 1 s and says it waits every second."""
    from arrepro.train import client

    (tmp_path / "standin_server.py").write_text(STANDIN)
    monkeypatch.setattr(client, "SERVER_MODULE", "standin_server")
    monkeypatch.setattr(client, "START_SECONDS", 1)
    monkeypatch.setattr(client, "WAIT_REPORT_SECONDS", 1, raising=False)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{ROOT / 'src'}")
    monkeypatch.setenv("STANDIN_STARTS", str(tmp_path / "starts"))
    key = f"test-standin-{os.getpid()}-{tmp_path.name}"
    yield client, key, tmp_path / "starts"
    for line in (tmp_path / "starts").read_text().split() if (tmp_path / "starts").exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGKILL)
    for ext in ("lock", "log", "starting", "failed"):
        client._side_file(key, ext).unlink(missing_ok=True)


def test_a_job_waits_for_a_server_that_is_warming_up_and_starts_no_second(standin, monkeypatch):
    """Issue 55: a job waiting for a server that warmed up for longer than 600 s gave up, and the next
    job started a second server for the same code. Now the starting server's pid is noted: a job
    that comes while it warms up says so in its log and waits for it, for as long as its log goes
    on growing (here 3 s of warm-up against a 1 s limit of silence), and no job starts another."""
    client, key, starts = standin
    monkeypatch.setenv("STANDIN_MODE", "listen")
    monkeypatch.setenv("STANDIN_STEPS", "10")
    said = {"first": [], "second": []}
    got = {}

    def job(name):
        sock = client._start(key, said[name].append)
        got[name] = sock is not None
        if sock is not None:
            sock.close()

    first = threading.Thread(target=job, args=("first",))
    first.start()
    time.sleep(0.6)
    second = threading.Thread(target=job, args=("second",))
    second.start()
    first.join(60)
    second.join(60)
    assert got == {"first": True, "second": True}, said
    assert len(starts.read_text().split()) == 1, said
    assert any("started a training server" in line for line in said["first"]), said
    assert not any("started a training server" in line for line in said["second"]), said
    assert any("is warming up: waiting for it" in line and "warm-up: step" in line for line in said["second"]), said
    assert any("still waiting for the training server" in line for line in said["first"] + said["second"]), said


def test_a_server_that_starts_without_a_word_is_given_up_saying_why(standin, monkeypatch):
    """A starting server that writes nothing to its log for START_SECONDS is given up: the job says
    so (and trains in its own process); the next job does the same at once, without starting a second."""
    client, key, starts = standin
    monkeypatch.setenv("STANDIN_MODE", "silent")
    said = []
    t0 = time.monotonic()
    assert client._start(key, said.append) is None
    assert time.monotonic() - t0 < 30
    assert "has written nothing to its log for" in said[-1] and said[-1].endswith("training in this process"), said
    said.clear()
    assert client._start(key, said.append) is None
    assert len(starts.read_text().split()) == 1, said
    assert "is warming up: waiting for it" in said[0] and "has written nothing to its log" in said[-1], said


def test_a_job_whose_server_drops_it_says_why_in_its_own_log(data, tmp_path):
    """Issue 55: a job whose server closed the connection before the cell started (an idle server
    exiting as it connected) exited 1 with nothing in its job.log and train.log but "started a
    training server". Now it asks again, then trains in its own process, each step said in its logs."""
    env = {**ENV, "ARREPRO_TRAIN_SERVER_IDLE": "7"}  # a key of this test's own
    key = subprocess.run([sys.executable, "-c", "from arrepro.train.client import server_key; print(server_key())"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "standin_server.py").write_text(STANDIN)
    server = subprocess.Popen([sys.executable, "-m", "standin_server", key],
                              env={**env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}",
                                   "STANDIN_MODE": "drop", "STANDIN_STARTS": str(tmp_path / "starts")})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "starts").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # (listening)
        out = tmp_path / "cell"
        out.mkdir()
        cmd = [sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", json.dumps(spec(MAMBA, 0, epochs=1)),
               "--data", str(data), "--out", str(out), "--threads", "1", "--train-log", str(out / "train.log"), "--server"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    finally:
        server.kill()
        server.wait()
    assert p.returncode == 0, p.stdout + p.stderr
    for log in (p.stdout, (out / "train.log").read_text()):
        assert "the training server closed the connection before it started the cell" in log and "asking again" in log, log
        assert re.search(r"before it started the cell .*: training in this process", log), log
    assert (out / "result.json").exists()


def test_a_warm_up_step_that_computes_for_long_still_shows_progress_and_a_hung_one_does_not(capsys):
    """The server's log gets a line every HEARTBEAT_SECONDS in which its warm-up used CPU (a kernel
    that compiles for minutes on a loaded machine), none while it uses none (hung): the jobs that
    wait for it go by that log (client.START_SECONDS of silence: given up)."""
    from arrepro.train import server

    with server._heartbeat(every=0.1):
        server._say("a long step")
        t0 = time.process_time()
        while time.process_time() - t0 < 0.5:
            pass
    busy = capsys.readouterr().out
    with server._heartbeat(every=0.1):
        server._say("a hung step")
        time.sleep(0.5)
    hung = capsys.readouterr().out
    assert busy.count("warm-up: still at a long step") >= 2, busy
    assert "still at" not in hung, hung
