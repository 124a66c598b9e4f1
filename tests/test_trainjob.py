"""The training script as a user or a job calls it (scripts/train_cell.py, arrepro.train.job): bad
input is one clear line naming the file or key (no traceback, nothing written); two trainers
never share a cell; ARREPRO_KERNELS takes the usual spellings of yes and no and refuses others;
the resource planner refuses a cells-per-GPU count below 1."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from arrepro.train.loop import train_cell
from test_resume import data, spec  # noqa: F401 - data is a fixture

ROOT = Path(__file__).resolve().parents[1]
SPEC = spec(recipe_def={**spec()["recipe_def"], "epochs": 1})
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def script(cell_json: str, data, out, env=ENV, **kw):
    cmd = [sys.executable, str(ROOT / "scripts/train_cell.py"), "--cell-json", cell_json, "--data", str(data),
           "--out", str(out), "--threads", "1"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, **kw)


def refused(p, *phrases):
    """Exit 1 with one line on stderr, ``train_cell.py: error: ...``, holding every phrase."""
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train_cell.py: error: "), p.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


@pytest.mark.parametrize("text, phrase", [
    ('{"task": ', "--cell-json: not valid JSON"),
    ('[1, 2]', "the cell spec is a list, not an object"),
])
def test_malformed_cell_json_is_one_clear_line(data, tmp_path, text, phrase):
    refused(script(text, data, tmp_path / "cell"), phrase)
    assert not (tmp_path / "cell").exists()


def test_a_missing_data_folder_is_named(tmp_path):
    missing = tmp_path / "no-such-task"
    refused(script(json.dumps(SPEC), missing, tmp_path / "cell"), f"{missing / 'train.npz'}: cannot read the task's data")
    assert not (tmp_path / "cell" / "result.json").exists()


@pytest.mark.parametrize("key, value, phrase", [
    ("epochs", 0, "cell spec: recipe_def.epochs is 0; it must be a whole number >= 1"),
    ("warmup_frac", 1.5, "cell spec: recipe_def.warmup_frac is 1.5; it must be a number in [0, 1]"),
    ("schedule", "cosne", "cell spec: recipe_def.schedule is 'cosne'; it must be one of cosine, linear, constant"),
])
def test_a_recipe_the_trainer_cannot_run_is_refused_before_anything_is_written(data, tmp_path, key, value, phrase):
    """Issue 18: ``epochs: 0`` wrote a "finished" result of accuracy 0.0."""
    spec = {**SPEC, "recipe_def": {**SPEC["recipe_def"], key: value}}
    refused(script(json.dumps(spec), data, tmp_path / "cell"), phrase)
    assert not (tmp_path / "cell").exists()


@pytest.mark.parametrize("key, value, phrase", [
    ("lr", -1.0, "cell spec: lr is -1.0; it must be a finite number > 0"),
    ("width", 0, "cell spec: width is 0"),
    ("seed", "0", "cell spec: seed is '0'"),
])
def test_a_cell_value_the_trainer_cannot_run_is_refused(data, tmp_path, key, value, phrase):
    spec = {**SPEC, key: value}
    with pytest.raises(Exception, match=phrase.replace("[", r"\[").replace("(", r"\(")):
        train_cell(spec, data, tmp_path / "cell", log=lambda s: None)
    assert not (tmp_path / "cell").exists()


def test_a_missing_key_is_named(data, tmp_path):
    spec = {k: v for k, v in SPEC.items() if k != "lr"}
    refused(script(json.dumps(spec), data, tmp_path / "cell"), "cell spec: lr is missing")


@pytest.mark.parametrize("value", ["off", "FALSE", "no", "0"])
def test_arrepro_kernels_off_in_any_usual_spelling_disables_them(data, tmp_path, monkeypatch, value):
    monkeypatch.setenv("ARREPRO_KERNELS", value)
    r = train_cell(SPEC, data, tmp_path, log=lambda s: None)
    assert {p["reason"] for p in r["kernel_paths"]} == {f"ARREPRO_KERNELS={value}"}, r["kernel_paths"]
    assert {p["path"] for p in r["kernel_paths"]} == {"portable"}


def test_arrepro_kernels_on_leaves_the_choice_to_the_device(data, tmp_path, monkeypatch):
    monkeypatch.setenv("ARREPRO_KERNELS", "yes")
    r = train_cell(SPEC, data, tmp_path, log=lambda s: None)
    paths = {p["op"]: p["path"] for p in r["kernel_paths"]}  # on the CPU: the fused CPU kernels
    assert paths == {"block.block_cpu": "kernel", "linear.linear_cpu": "kernel"}, r["kernel_paths"]  # attention: its block whole


def test_arrepro_kernels_of_another_value_is_refused_naming_the_variable(data, tmp_path):
    refused(script(json.dumps(SPEC), data, tmp_path / "cell", env={**ENV, "ARREPRO_KERNELS": "maybe"}),
            "ARREPRO_KERNELS='maybe': not a yes (1, true, yes, on) or a no (0, false, no, off)")
    assert not (tmp_path / "cell" / "result.json").exists()


def test_two_training_scripts_on_one_cell_the_second_is_refused(data, tmp_path):
    """scripts/train_cell.py twice on the same cell at once (an orphaned job and a rerun): the
    second stops at once, naming the first; the first finishes as if alone. (The first is paused
    with SIGSTOP while the second starts, so that it cannot finish first.)"""
    out = tmp_path / "cell"
    spec = {**SPEC, "recipe_def": {**SPEC["recipe_def"], "epochs": 5}}
    cmd = [sys.executable, str(ROOT / "scripts/train_cell.py"), "--cell-json", json.dumps(spec), "--data", str(data),
           "--out", str(out), "--threads", "1"]
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in first.stdout:
            if "epoch 1/5" in line:
                first.send_signal(signal.SIGSTOP)
                break
        second = script(json.dumps(spec), data, out)
    finally:
        first.send_signal(signal.SIGCONT)
    refused(second, f"{out}: another process is training this cell (pid {first.pid} on")
    rest, _ = first.communicate(timeout=600)
    assert first.returncode == 0, rest
    assert "resumed" not in rest  # the second one wrote nothing
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in rows] == [1, 2, 3, 4, 5]


def test_the_run_file_forces_the_cells_it_names_and_keeps_their_weights_if_asked(data, tmp_path):
    """--run-file (the train rule's; arrepro.train.runfile): a finished cell whose outputs the run
    forces trains from scratch and, with keep_weights, keeps weights.pt; a damaged run file is
    named, before anything is read or written. (Not forced: tests/test_resume.py.)"""
    from arrepro.train import runfile

    out = tmp_path / "cell"
    train_cell(SPEC, data, out, threads=1, log=lambda s: None)
    cmd = [sys.executable, str(ROOT / "scripts/train_cell.py"), "--cell-json", json.dumps(SPEC), "--data", str(data),
           "--out", str(out), "--threads", "1", "--run-file", str(tmp_path / "run.json")]
    runfile.write(runfile.new([], [out / "metrics.jsonl"], keep_weights=True), tmp_path / "run.json")
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "the cell starts over" in p.stdout and "resumed" not in p.stdout, p.stdout + p.stderr
    assert (out / "weights.pt").is_file()
    assert runfile.forces(runfile.read(tmp_path / "run.json"), "train", [f"{out}/./metrics.jsonl"])
    assert not runfile.forces(runfile.new(["data"], [tmp_path / "other/result.json"], False), "train", [out / "result.json"])
    (tmp_path / "run.json").write_text("{")
    refused(subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300),
            f"{tmp_path / 'run.json'}: cannot read this Snakemake run's file")


@pytest.mark.parametrize("n", ["0", "-1"])
def test_the_resource_plan_refuses_fewer_than_one_cell_per_gpu(n):
    p = subprocess.run([sys.executable, "-m", "arrepro.cluster.budget", "tiny", "--cells-per-gpu", n], env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "scale tiny" not in p.stdout, p.stdout + p.stderr
    assert f"--cells-per-gpu: {n} is not a whole number >= 1" in p.stderr, p.stderr
