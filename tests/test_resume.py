"""A cell survives being killed: it resumes from its last checkpoint and ends with exactly the
numbers of an uninterrupted run (bit for bit on CPU); a partial cell has no result.json; a
checkpoint of another cell or of other code is not resumed; a finished cell whose outputs a
scheduler deleted comes back from its checkpoint unchanged, without training again."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arrepro.data import save_task
from arrepro.train.loop import CHECKPOINT, train_cell

ROOT = Path(__file__).resolve().parents[1]
TASK = {"kind": "mqar", "vocab_size": 64, "seq_len": 16, "num_kv_pairs": 2, "n_train": 512, "n_test": 128, "seed": 0}
# fields that measure time, not learning (and the checksums, which cover them)
TIMING = {"seconds", "train_seconds", "tokens_per_second", "sha256", "metrics_sha256"}


def spec(**over):
    s = {"task": "t", "task_name": "L16", "task_def": TASK, "model": "attention",
         "model_def": {"mixer": "attention", "position": "learned", "mlp": True, "mixer_kwargs": {"num_heads": 1}},
         "width": 16, "layers": 2, "recipe": "r",
         "recipe_def": {"epochs": 3, "batch_size": 32, "warmup_frac": 0.1, "schedule": "cosine",
                        "weight_decay": 0.1, "embed_dropout": 0.1},
         "batch_size": 32, "lr": 3e-3, "seed": 0, "device": "cpu", "scale": "test"}
    s.update(over)
    return s


def quiet(_):
    pass


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    save_task(TASK, d)
    return d


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """An uninterrupted run of spec()."""
    out = tmp_path_factory.mktemp("reference")
    train_cell(spec(), data, out, threads=1, log=quiet)
    return out


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def checkpoint_metrics(out: Path) -> list[dict]:
    """The epochs an unfinished cell has done, as its checkpoint holds them (its metrics.jsonl is
    written when it ends)."""
    from arrepro.train import checkpoint

    return checkpoint.load(out / CHECKPOINT, "cpu")["state"]["metrics"]


def untimed(obj):
    if isinstance(obj, list):
        return [untimed(x) for x in obj]
    return {k: v for k, v in obj.items() if k not in TIMING}


def assert_same_cell(a: Path, b: Path):
    """Same learning curve and result, every float equal (==, not approx)."""
    assert untimed(metrics(a)) == untimed(metrics(b))
    assert untimed(json.loads((a / "result.json").read_text())) == untimed(json.loads((b / "result.json").read_text()))


def test_preempted_mid_epoch_then_resumed_equals_uninterrupted(data, reference, tmp_path):
    steps_per_epoch = 512 // 32
    # stopped in the middle of the second epoch
    with pytest.raises(SystemExit) as stop:
        train_cell(spec(), data, tmp_path, threads=1, log=quiet, stop_after_steps=steps_per_epoch + 5)
    assert stop.value.code != 0  # a scheduler sees a failure and retries
    assert (tmp_path / CHECKPOINT).exists()
    assert not (tmp_path / "result.json").exists()  # a partial cell is not a finished one
    assert not (tmp_path / "metrics.jsonl").exists()  # (written with result.json: no output of an unfinished job)
    assert [m["epoch"] for m in checkpoint_metrics(tmp_path)] == [1]
    logs = []
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append)
    assert any("resumed from checkpoint at epoch 1 batch 5" in line for line in logs)
    assert_same_cell(tmp_path, reference)


def test_preempted_again_and_again_still_equals_uninterrupted(data, reference, tmp_path):
    stops = 0
    while True:
        try:
            train_cell(spec(), data, tmp_path, threads=1, log=quiet, stop_after_steps=7)
            break
        except SystemExit:
            stops += 1
            assert not (tmp_path / "result.json").exists()
    assert stops == (3 * 512 // 32) // 7
    assert_same_cell(tmp_path, reference)


SCRIPT_CELL = spec(recipe_def={**spec()["recipe_def"], "epochs": 8}, width=32)


def run_script(data, out: Path, cell=SCRIPT_CELL, **kw) -> subprocess.Popen:
    """scripts/train_cell.py on ``cell``, as the train rule runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", json.dumps(cell),
           "--data", str(data), "--out", str(out), "--threads", "1"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


@pytest.fixture(scope="module")
def script_reference(data, tmp_path_factory):
    """An uninterrupted run of the training script on SCRIPT_CELL."""
    out = tmp_path_factory.mktemp("whole")
    whole = run_script(data, out)
    whole_out, _ = whole.communicate(timeout=300)
    assert whole.returncode == 0, whole_out
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_training_script_checkpoints_and_a_restart_resumes(data, script_reference, tmp_path, sig):
    """A real signal to scripts/train_cell.py (SIGTERM: what Slurm sends at the time limit or on
    preemption; SIGINT: Ctrl-C): it exits non-zero with a checkpoint of the partial epoch, and the
    restarted script finishes with the numbers of an uninterrupted run of the same script."""
    killed = run_script(data, tmp_path / "killed")
    seen = []
    for line in killed.stdout:  # wait until the run is really under way, then stop it mid-epoch
        seen.append(line)
        if "epoch 2/8" in line:
            time.sleep(0.05)
            killed.send_signal(sig)
            break
    rest, _ = killed.communicate(timeout=120)
    seen.append(rest)
    assert killed.returncode not in (0, None), "".join(seen)
    assert f"({sig.name}): checkpoint written" in "".join(seen), "".join(seen)
    assert (tmp_path / "killed" / CHECKPOINT).exists()
    assert not (tmp_path / "killed" / "result.json").exists()
    done_epochs = len(checkpoint_metrics(tmp_path / "killed"))
    assert 2 <= done_epochs < 8

    again = run_script(data, tmp_path / "killed")
    again_out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, again_out
    assert f"resumed from checkpoint at epoch {done_epochs} batch " in again_out
    assert f"resumed from checkpoint at epoch {done_epochs} batch 0" not in again_out  # the partial epoch was kept
    assert_same_cell(tmp_path / "killed", script_reference)


def test_a_full_disk_stops_the_script_with_a_clear_error_and_no_tmp_file(data, tmp_path):
    """A real full disk: the cell's folder is a 64 KiB tmpfs (mounted in a private user and mount
    namespace), too small for the first checkpoint (about 140 KB). The script exits 1 saying
    "no space left on .../checkpoint.pt", without a traceback, and leaves no .tmp file."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small tmpfs")
    out = tmp_path / "cell"
    out.mkdir()
    script = ('mount -t tmpfs -o size=64k none "$1" || exit 97; "$2" "$3" --cell-json "$4" --data "$5" '
              '--out "$1" --threads 1; rc=$?; echo "files: $(ls -A "$1" | tr "\\n" " ")"; exit $rc')
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(out), sys.executable,
           str(ROOT / "scripts" / "train_cell.py"), json.dumps(spec()), str(data)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode == 97 or p.stderr.startswith("unshare:"):
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"no space left on {out / CHECKPOINT}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    files = p.stdout.split("files:")[-1].split()
    assert files == ["train.lock"], p.stdout  # no checkpoint, no .tmp, no output (metrics.jsonl comes with result.json)


def restart_logs(data, out: Path) -> list[str]:
    """The log of a restart of spec() in ``out``, stopped after its first step."""
    logs = []
    with pytest.raises(SystemExit):
        train_cell(spec(), data, out, threads=1, log=logs.append, stop_after_steps=1)
    return logs


def resumed(logs: list[str]) -> bool:
    return any("resumed from checkpoint" in line for line in logs)


@pytest.mark.parametrize("tracked", ["train_sources", "data_sources"])
@pytest.mark.parametrize("edit, resumes", [
    ("x = 2\n", False),  # code: another cell
    ('"""A docstring."""\nx = 1  # a comment\n\n', True),  # comments, docstrings, blank lines: the same cell
])
def test_a_checkpoint_is_resumed_only_by_the_same_code(data, tmp_path, monkeypatch, tracked, edit, resumes):
    """Editing a source that shapes the cell (a stand-in added to the training sources, or to the
    data generator's) invalidates its checkpoint; editing only its comments or docstrings does not."""
    from arrepro.train import prepare

    extra = tmp_path / "model_source.py"
    extra.write_text("x = 1\n")
    if tracked == "train_sources":  # (read through catalogue.cell_sources: the cell's model decides them)
        real = prepare.cell_sources
        monkeypatch.setattr(prepare, "cell_sources", lambda *a, **kw: real(*a, **kw) + [str(extra)])
    else:
        real_data = prepare.data_sources
        monkeypatch.setattr(prepare, "data_sources", lambda *a, **kw: real_data(*a, **kw) + [str(extra)])
    out = tmp_path / "cell"
    with pytest.raises(SystemExit):
        train_cell(spec(), data, out, threads=1, log=quiet, stop_after_steps=20)
    extra.write_text(edit)
    logs = restart_logs(data, out)
    assert resumed(logs) == resumes, logs
    assert any("fingerprint differs" in line for line in logs) != resumes, logs


def test_a_checkpoint_of_other_data_is_not_resumed(tmp_path):
    """The same cell spec on regenerated data (a changed generator, or ``--forcerun``) starts over."""
    d = tmp_path / "data"
    save_task(TASK, d)
    out = tmp_path / "cell"
    with pytest.raises(SystemExit):
        train_cell(spec(), d, out, threads=1, log=quiet, stop_after_steps=20)
    assert resumed(restart_logs(d, out))  # the same data: resumed
    save_task({**TASK, "seed": 1}, d)  # other bytes under the same spec
    logs = restart_logs(d, out)
    assert not resumed(logs) and any("fingerprint differs" in line for line in logs), logs


def garble(path: Path) -> None:
    """Flip 64 bytes in the middle of the file (tensor data), keeping its size."""
    b = bytearray(path.read_bytes())
    mid = len(b) // 2
    b[mid : mid + 64] = bytes(x ^ 0xFF for x in b[mid : mid + 64])
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("damage", [
    garble,
    lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),  # truncated (a full disk, a crash)
    lambda p: p.write_bytes(p.read_bytes()[:10]),  # truncated inside the header
], ids=["garbled", "truncated", "truncated-header"])
def test_a_corrupt_checkpoint_is_reported_and_the_cell_starts_over(data, reference, tmp_path, damage):
    with pytest.raises(SystemExit):
        train_cell(spec(), data, tmp_path, threads=1, log=quiet, stop_after_steps=20)
    damage(tmp_path / CHECKPOINT)
    logs = []
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append)
    assert any(f"checkpoint {tmp_path / CHECKPOINT} is corrupt (" in line and "starting the cell over" in line
               for line in logs), logs
    assert not resumed(logs)
    assert_same_cell(tmp_path, reference)


def test_a_finished_cell_whose_outputs_were_deleted_comes_back_unchanged(data, reference, tmp_path):
    """Snakemake deletes the declared outputs (result.json, metrics.jsonl) of every job of a
    failed Slurm job, including cells that had finished in the same group job. The checkpoint is
    not a declared output: the retry rebuilds both files from it, byte for byte, training
    nothing."""
    import shutil

    shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
    before = {f: (tmp_path / f).read_bytes() for f in ("result.json", "metrics.jsonl")}
    for f in before:
        (tmp_path / f).unlink()
    logs = []
    t = time.perf_counter()
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append)
    assert any("resumed from checkpoint at epoch 3 batch 0" in line for line in logs)
    assert not any("epoch 3/3" in line for line in logs)  # no training step ran
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
    assert time.perf_counter() - t < 30


def test_a_temporary_file_left_by_a_killed_writer_does_not_outlive_the_next_attempt(data, reference, tmp_path):
    """Issue 32, round 6, 5: a `kill -9` between result.json's write and its rename (here: the
    trainer kills itself there) left `.result.json.NNN.tmp` in the cell's folder for good. The
    next attempt (under the cell's lock) removes it, says so, and ends as the uninterrupted cell;
    and a writer of any file removes what a dead writer of the same file left."""
    import shutil
    import socket

    shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
    before = {f: (tmp_path / f).read_bytes() for f in ("result.json", "metrics.jsonl")}
    for f in before:
        (tmp_path / f).unlink()
    killed = ("import os, sys, json\n"
              "real = os.replace\n"
              "def replace(src, dst):\n"
              "    if str(dst).endswith('result.json'):\n"
              "        os.kill(os.getpid(), 9)\n"
              "    return real(src, dst)\n"
              "os.replace = replace\n"
              "from arrepro.train.loop import train_cell\n"
              f"train_cell(json.loads(sys.argv[1]), {str(data)!r}, {str(tmp_path)!r}, threads=1, log=lambda s: None)\n")
    p = subprocess.run([sys.executable, "-c", killed, json.dumps(spec())], capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    left = [f.name for f in tmp_path.glob(".*.tmp")]
    assert any(name.startswith(".result.json.") for name in left), sorted(f.name for f in tmp_path.iterdir())
    logs = []
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append)
    assert list(tmp_path.glob(".*.tmp")) == [], sorted(f.name for f in tmp_path.iterdir())
    assert any(f"removed {left[0]}" in line for line in logs), logs
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
    # any file: what a dead writer (its process gone) left goes when the file is next written; a
    # living writer's stays (the names: this version's .NAME.HOST.PID.tmp and the earlier .NAME.PID.tmp)
    from arrepro.files import write_json_atomic

    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    table = tmp_path / "elsewhere" / "table.json"
    table.parent.mkdir()
    host, alive = socket.gethostname(), os.getppid()
    for name in (f".table.json.{host}.{gone}.tmp", f".table.json.{gone}.tmp", f".table.json.{host}.{alive}.tmp",
                 f".table.json.{alive}.tmp", f".table.json.another-host.{gone}.tmp"):
        (table.parent / name).write_text("{")
    write_json_atomic(table, {"a": 1})
    assert sorted(f.name for f in table.parent.iterdir()) == sorted(
        [f".table.json.{host}.{alive}.tmp", f".table.json.{alive}.tmp", f".table.json.another-host.{gone}.tmp",
         "table.json"])


# -- issue 23: a finished cell frees its disk; a forced cell starts over once per run ----------------
def test_a_finished_cell_keeps_no_model_nor_optimiser_state(reference):
    """Its checkpoint is replaced, when result.json is sealed, by the record that rebuilds its
    outputs (above): no model, no optimiser state, a few KB; no weights unless asked."""
    import torch

    from arrepro.train import checkpoint

    ck = checkpoint.load(reference / CHECKPOINT, torch.device("cpu"))
    assert "model" not in ck and "optimizer" not in ck, sorted(ck)
    assert (reference / CHECKPOINT).stat().st_size < 20_000, (reference / CHECKPOINT).stat().st_size
    assert not (reference / "weights.pt").exists()


def test_keep_weights_keeps_the_final_weights_only(data, reference, tmp_path):
    """keep_weights: weights.pt holds the model's parameters (torch.load, weights only), those the
    result was evaluated with; rebuilding the outputs from the record leaves them alone, and
    retraining without keep_weights removes them."""
    import contextlib

    import torch

    from arrepro.train.loop import evaluate
    from arrepro.train.prepare import build_model, load_task

    train_cell(spec(), data, tmp_path, threads=1, log=quiet, keep_weights=True)
    assert_same_cell(tmp_path, reference)
    weights = torch.load(tmp_path / "weights.pt", weights_only=True)
    _, _, xte, yte, vocab, _ = load_task(data)
    model = build_model(spec(), vocab, xte.shape[1])
    model.load_state_dict(weights)
    acc = evaluate(model, xte, yte, 256, torch.device("cpu"), contextlib.nullcontext)["test_accuracy"]
    assert acc == json.loads((tmp_path / "result.json").read_text())["final_accuracy"]
    stamp = (tmp_path / "weights.pt").stat().st_mtime_ns
    for f in ("result.json", "metrics.jsonl"):
        (tmp_path / f).unlink()
    train_cell(spec(), data, tmp_path, threads=1, log=quiet, keep_weights=True)  # from the record
    assert (tmp_path / "weights.pt").stat().st_mtime_ns == stamp
    train_cell(spec(), data, tmp_path, threads=1, log=quiet, forced_run="r2")  # retrained, weights not asked
    assert not (tmp_path / "weights.pt").exists()


def test_a_forced_cell_starts_over_once_per_run(data, reference, tmp_path):
    """A checkpoint of another run (or of none) is not resumed by a forced cell; the one that the
    forced run's own earlier attempt wrote is (a preempted attempt's retry), and the cell ends
    with an uninterrupted run's numbers."""
    with pytest.raises(SystemExit):
        train_cell(spec(), data, tmp_path, threads=1, log=quiet, stop_after_steps=20)  # not forced
    logs = []
    with pytest.raises(SystemExit):
        train_cell(spec(), data, tmp_path, threads=1, log=logs.append, stop_after_steps=20, forced_run="r1")
    assert any("forced by snakemake (run r1): the cell starts over; its checkpoint (epoch 1 batch 4) is not used"
               in line for line in logs), logs
    assert not resumed(logs)
    logs = []
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append, forced_run="r1")  # the retry
    assert any("resumed from checkpoint at epoch 1 batch 4" in line for line in logs), logs
    assert_same_cell(tmp_path, reference)
    logs = []
    train_cell(spec(), data, tmp_path, threads=1, log=logs.append, forced_run="r2")  # a finished cell, forced again
    assert not resumed(logs) and any("epoch 3/3" in line for line in logs), logs
    assert_same_cell(tmp_path, reference)
