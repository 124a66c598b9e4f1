"""The training server (arrepro.train.server): a cell trained by the train rule's command through it
has the numbers of the same cell trained in its own process, alone or beside another cell; a
signal to the job reaches the cell (checkpoint, exit 3), and a job killed outright stops its cell."""
import json
import os
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
