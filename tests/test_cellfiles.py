"""A cell's files agree with each other, and a cell has one trainer at a time (arrepro.config.cellfiles):
an edited, half-written, misplaced result.json or a cut metrics.jsonl is reported naming the file
and the fix; a second trainer is refused while the first lives, and a dead one (kill -9) never
blocks its cell."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from arrepro.config.cellfiles import BadCellFile, CellBusy, CellLock, read_metrics, read_result
from arrepro.train.loop import CHECKPOINT, train_cell
from test_resume import data, spec  # noqa: F401 - data is a fixture

ROOT = Path(__file__).resolve().parents[1]
SPEC = spec()
CELL = "results/cells/t/attention/w16-l2/r/lr0.003-s0"  # the folder the spec names


@pytest.fixture(scope="module")
def finished(data, tmp_path_factory):
    """A trained cell in its own folder (as the workflow lays it out)."""
    out = tmp_path_factory.mktemp("cells") / CELL
    train_cell(SPEC, data, out, threads=1, log=lambda s: None)
    return out


@pytest.fixture
def cell(finished, tmp_path):
    dst = tmp_path / CELL
    shutil.copytree(finished, dst)
    return dst


def test_a_cell_as_trained_reads_back(cell):
    r = read_result(cell / "result.json")
    rows = read_metrics(cell)
    assert r["final_accuracy"] == rows[-1]["test_accuracy"] and len(rows) == SPEC["recipe_def"]["epochs"]


def expect_bad(fn, path: Path, why: str, checkpoint: bool = True):
    with pytest.raises(BadCellFile) as err:
        fn()
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and why in msg, msg
    # the fix: delete both files and rerun; the checkpoint rebuilds them, or the cell trains again
    assert f"to fix: rm {path.parent / 'result.json'} {path.parent / 'metrics.jsonl'}" in msg, msg
    assert ("rebuilds both from checkpoint.pt" if checkpoint else "trains the cell again") in msg, msg


def test_an_edited_result_is_refused_naming_the_cell(cell):
    """Issue 18: accuracy 0.777 typed into a valid result.json while metrics.jsonl says otherwise."""
    path = cell / "result.json"
    r = json.loads(path.read_text())
    r["final_accuracy"] = 0.777
    path.write_text(json.dumps(r, indent=1))
    expect_bad(lambda: read_result(path), path, "sha256 mismatch")


def test_a_half_written_result_is_refused_naming_the_cell(cell):
    path = cell / "result.json"
    path.write_text(path.read_text()[:200])
    expect_bad(lambda: read_result(path), path, "not valid JSON")


def test_a_result_in_another_cells_folder_is_refused(cell, tmp_path):
    other = tmp_path / CELL.replace("lr0.003-s0", "lr0.003-s1")
    other.mkdir(parents=True)
    shutil.copy(cell / "result.json", other / "result.json")
    expect_bad(lambda: read_result(other / "result.json"), other / "result.json", "the result of another cell",
               checkpoint=False)


@pytest.mark.parametrize("cut", [
    lambda text: text[: text.index("\n") + 1],  # at a line boundary: valid JSON lines, epochs missing
    lambda text: text[:-30],  # inside the last line
], ids=["line-boundary", "mid-line"])
def test_a_cut_metrics_file_is_refused_naming_the_cell(cell, cut):
    path = cell / "metrics.jsonl"
    path.write_text(cut(path.read_text()))
    expect_bad(lambda: read_metrics(cell), path, "sha256 mismatch")


def test_the_fix_works_a_deleted_pair_comes_back_from_the_checkpoint(cell, data):
    """The advice of the messages above: delete both files, rerun the cell (what its train job
    does): the checkpoint rebuilds them, byte for byte, without training."""
    before = {f: (cell / f).read_bytes() for f in ("result.json", "metrics.jsonl")}
    (cell / "result.json").write_text("{")
    for f in before:
        (cell / f).unlink()
    logs = []
    train_cell(SPEC, data, cell, threads=1, log=logs.append)
    assert any("resumed from checkpoint at epoch 3 batch 0" in line for line in logs), logs
    assert {f: (cell / f).read_bytes() for f in before} == before


HOLD = "import sys, time; from arrepro.config.cellfiles import CellLock\nwith CellLock(sys.argv[1]):\n print('held', flush=True); time.sleep(600)"


def hold_lock(cell: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(cell)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_cell_has_one_trainer_and_a_dead_one_releases_it(cell, data):
    holder = hold_lock(cell)
    try:
        with pytest.raises(CellBusy) as err:
            with CellLock(cell):
                pass
        assert f"another process is training this cell (pid {holder.pid} on " in str(err.value), str(err.value)
        with pytest.raises(Exception, match="another process is training this cell"):  # TrainError
            train_cell(SPEC, data, cell, threads=1, log=lambda s: None)
        with pytest.raises(Exception, match="another process is training this cell"):  # a forced one too
            train_cell(SPEC, data, cell, threads=1, log=lambda s: None, forced_run="r1")
        assert (cell / CHECKPOINT).exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with CellLock(cell) as lock:  # the kernel released the dead holder's lock
        assert lock.unsupported is None
