"""Issue 24 without running the workflow (its workflow cases: tests/test_trust_workflow.py): the
search's plans and decision files sealed and checked; a forged result.json refused; a symlinked
cell folder named, its fix removing the link; config.yaml's duplicate keys, alias bombs and
learning-rate lists; --config values read as YAML and named; edited code under a running
workflow; a read-only cell folder; numerics overrides recorded and every unpinned run named."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from arrepro.config.cellfiles import BadCellFile, metrics_text, read_metrics, read_result, seal
from arrepro.digest import source_digest
from arrepro.files import UnreadableFile
from arrepro.config.grid import ConfigError
from test_cellfiles import CELL, finished, cell  # noqa: F401 - fixtures: a trained cell
from test_resume import data  # noqa: F401 - a fixture
from test_trainjob import SPEC, script

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- plans and decision files
def test_a_plan_is_sealed_and_an_edited_or_cut_one_is_named(tmp_path):
    from arrepro.search.plans import Plan, made_from

    path = tmp_path / "round5.json"
    Plan({"group": "g", "round": 5, "searches": {"k": {"state": {"chosen_lr": 0.001}}}}).write(
        path, made_from("code", "{}", None, []))
    assert Plan.read(path).searches["k"]["state"]["chosen_lr"] == 0.001
    edited = json.loads(path.read_text())
    edited["searches"]["k"]["state"]["chosen_lr"] = 0.0316  # valid JSON, the seal not recomputed
    path.write_text(json.dumps(edited))
    with pytest.raises(UnreadableFile, match=f"{path}: its contents differ.*rebuilds"):
        Plan.read(path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(UnreadableFile, match=f"{path}: not valid JSON"):
        Plan.read(path)


def test_a_plan_made_from_other_inputs_is_stale(tmp_path):
    from arrepro.search.plans import Plan, made_from

    result = tmp_path / "result.json"
    result.write_text('{"a": 1}')
    previous = Plan({"sha256": "p" * 64})
    plan = Plan({"round": 2}).write(tmp_path / "r2.json", made_from("c1", "S", previous, [result]))
    mtime = (tmp_path / "r2.json").stat().st_mtime_ns
    assert plan.problem(mtime, "c1", "S", previous) is None
    assert "code changed" in plan.problem(mtime, "c2", "S", previous)
    assert "searches changed" in plan.problem(mtime, "c1", "T", previous)
    assert "round before it changed" in plan.problem(mtime, "c1", "S", Plan({"sha256": "q" * 64}))
    result.write_text('{"a": 2}')  # retrained, newer than the plan
    os.utime(result, ns=(mtime + 10**9, mtime + 10**9))
    assert "has changed since" in plan.problem(mtime, "c1", "S", previous)
    result.unlink()
    assert "is missing" in plan.problem(mtime, "c1", "S", previous)
    assert "records no inputs" in Plan({"round": 2}).problem(mtime, "c1", "S", previous)


def test_a_damaged_decision_file_is_found(tmp_path):
    from arrepro.search import plans

    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    plans.write_report(good, {"search": "a"})
    plans.write_report(bad, {"search": "b"})
    bad.write_bytes(bad.read_bytes()[:-5])
    assert list(plans.damaged_reports([good, bad, tmp_path / "missing.json"])) == [str(bad)]
    with pytest.raises(UnreadableFile, match=str(bad)):
        plans.read_report(bad)


# --------------------------------------------------------------------------- cells
def forge(cell: Path, accuracy: float) -> None:
    """What issue 24's forger did: a new final_accuracy and the seal recomputed from the other keys."""
    r = json.loads((cell / "result.json").read_text())
    r["final_accuracy"] = accuracy
    body = {k: v for k, v in r.items() if k != "sha256"}
    r["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    (cell / "result.json").write_text(json.dumps(r, indent=1))


def test_a_forged_result_with_its_seal_recomputed_is_refused(cell):
    """Issue 24, case 3: 0.95 typed in and the checksum recomputed: metrics.jsonl says otherwise."""
    true = read_metrics(cell)[-1]["test_accuracy"]
    forge(cell, 0.95)
    with pytest.raises(BadCellFile, match=rf"final_accuracy is 0.95 where the last epoch of metrics.jsonl has test_accuracy {true}"):
        read_result(cell / "result.json")


def test_a_result_agreeing_with_a_forged_metrics_file_and_both_seals_passes(cell):
    """What the checksums do not protect against (documented in arrepro.config.cellfiles): a forger who
    rewrites both files and both checksums."""
    rows = read_metrics(cell)
    rows[-1]["test_accuracy"] = 0.95
    r = json.loads((cell / "result.json").read_text())
    r.update(final_accuracy=0.95, best_accuracy=max(m["test_accuracy"] for m in rows))
    (cell / "metrics.jsonl").write_text(metrics_text(rows))
    body = {k: v for k, v in r.items() if k not in ("sha256", "metrics_sha256")}
    (cell / "result.json").write_text(json.dumps(seal(body, metrics_text(rows))))
    assert read_result(cell / "result.json")["final_accuracy"] == 0.95


def test_a_symlinked_cell_folder_is_named_and_its_fix_removes_the_link_only(cell):
    """Issue 24, case 4: the seed-1 folder a link to the genuine seed-0 cell: the printed fix
    must not delete the genuine cell's files through the link."""
    link = cell.parent / cell.name.replace("-s0", "-s1")
    link.symlink_to(cell.name)
    with pytest.raises(BadCellFile) as err:
        read_result(link / "result.json")
    msg = str(err.value)
    assert f"{link} is a symbolic link" in msg and f"rm {link})" in msg, msg
    assert f"rm {link}/result.json" not in msg and f"rm {link / 'result.json'}" not in msg, msg
    assert (cell / "result.json").exists()


# --------------------------------------------------------------------------- config.yaml and --config
def alias_bomb() -> str:
    """Nine lines whose aliases expand to 10^9 values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, phrase", [
    ("scale: tiny\nscale: demo\n", "line 2: key 'scale' given twice in one mapping (first at line 1)"),
    (alias_bomb(), "expand to more than"),
    ("a: [1, 2\n", "not valid YAML"),
], ids=["duplicate-key", "alias-bomb", "not-yaml"])
def test_a_config_file_is_refused_in_one_line_before_snakemake_reads_it(tmp_path, text, phrase):
    from arrepro.cluster.configfile import ConfigFileError, check_config_file

    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as err:
        check_config_file(path)
    assert str(err.value).startswith(f"{path}: ") and phrase in str(err.value) and "\n" not in str(err.value)


def test_the_config_file_passes_and_merge_keys_are_no_duplicates():
    from arrepro.cluster.configfile import check_config_file

    check_config_file(ROOT / "config.yaml")


def test_an_oversized_config_is_refused(tmp_path):
    from arrepro.cluster.configfile import ConfigFileError, check_config_file

    path = tmp_path / "config.yaml"
    path.write_text("a: " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigFileError, match="more than"):
        check_config_file(path)


def test_command_line_mappings_are_read_as_yaml_and_named():
    from arrepro.cluster.configfile import COMMAND_LINE, command_line_config, config_source

    over = command_line_config(["lr_searches={tiny: {rounds: 1}}", "scale=tiny", "lr_protocol=grid"])
    assert over == {"lr_searches": {"tiny": {"rounds": 1}}, "scale": "tiny", "lr_protocol": "grid"}
    assert config_source("lr_searches.tiny.rounds", over) == COMMAND_LINE
    assert config_source("lr_searches.demo_best.rounds", over) == "config.yaml"
    assert config_source("scales.tiny.tasks", over) == "config.yaml"
    assert config_source("lr_protocol", over) == COMMAND_LINE


@pytest.mark.parametrize("lrs, phrase", [
    ([], "an empty list; give at least one learning rate"),
    ([0], "lrs[0]: 0 is not a learning rate: it trains nothing"),
    ([-1e-3], "lrs[0]: -0.001 is not a learning rate: it would climb the loss"),
    (["1e-3x"], "lrs[0]: '1e-3x' is not a number"),
])
def test_a_bad_learning_rate_list_is_explained(config, lrs, phrase):
    from arrepro.config.checks import check_lr_lists

    c = json.loads(json.dumps(config))
    c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0]["lrs"] = lrs
    with pytest.raises(ConfigError) as err:
        check_lr_lists(c)
    assert str(err.value).startswith("scales.tiny.experiments.fig2.grids[0].lrs") and phrase in str(err.value)


def test_yamls_unquoted_1e_3_is_taken_as_a_number(config):
    from arrepro.config.checks import check_lr_lists

    text = (ROOT / "config.yaml").read_text().replace("lrs: [1.0e-3, 1.0e-2]", "lrs: [1e-3, 1e-2]", 1)
    c = yaml.safe_load(text)
    assert c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0]["lrs"] == ["1e-3", "1e-2"]  # YAML 1.1
    check_lr_lists(c)
    assert c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0]["lrs"] == [1e-3, 1e-2]


# --------------------------------------------------------------------------- the code a run planned with
def test_a_job_whose_code_changed_since_the_plan_stops_naming_the_file(tmp_path, monkeypatch):
    from arrepro.planned import CodeChanged, PLANNED, check_planned_code, record_planned

    src = tmp_path / "a.py"
    src.write_text("X = 1\n")
    other = tmp_path / "b.py"
    other.write_text("Y = 1\n")
    monkeypatch.delenv(PLANNED, raising=False)
    digest = source_digest(["a.py", "b.py"], tmp_path)
    record_planned(["a.py", "b.py"], digest, tmp_path)
    check_planned_code(digest)  # unchanged
    check_planned_code(paths=["a.py", "b.py"])
    src.write_text("X = 1\n# a comment: the same code\n")
    check_planned_code(digest)
    src.write_text("X = 2\n")
    with pytest.raises(CodeChanged, match=r"changed since the workflow planned it \(a.py\)"):
        check_planned_code(digest)
    with pytest.raises(CodeChanged):
        check_planned_code(paths=["a.py", "b.py"])
    monkeypatch.delenv(PLANNED)
    check_planned_code(digest)  # not under a workflow: nothing to check


def test_the_trainer_stops_when_its_code_changed_since_the_plan(data, tmp_path):
    """The train job's side: the cell's sources (arrepro.config.catalogue.train_sources) recorded with
    another digest than they have now: one line, nothing trained."""
    from arrepro.config.catalogue import train_sources

    PLANNED = "ARREPRO_PLANNED_CODE"  # (arrepro.planned.PLANNED)

    paths = train_sources("attention", ROOT)
    rec = {"root": str(ROOT), "groups": {"\0".join(paths): "0" * 16}, "files": {}}
    p = script(json.dumps(SPEC), data, tmp_path / "cell", env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                                                PLANNED: json.dumps(rec)})
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "train_cell.py: error: the code this job runs changed since the workflow planned it" in p.stderr
    assert not (tmp_path / "cell" / "result.json").exists()


# --------------------------------------------------------------------------- read-only folders
def immutable(path: Path, on: bool) -> bool:
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_a_cell_folder_read_only_while_training_is_one_line(data, tmp_path):
    """Issue 24, case 6: the folder refuses writes once training has started (its lock file is
    there): one line naming the file, as a full disk, and no output left for Snakemake to remove."""
    from arrepro.cluster.preflight import unwritable_folders

    out = tmp_path / "cell"
    out.mkdir()
    (out / "train.lock").write_text("")
    if shutil.which("chattr") is None or not immutable(out, True):
        pytest.skip("cannot make a folder read-only for this user (chattr +i)")
    try:
        p = script(json.dumps(SPEC), data, out)
    finally:
        immutable(out, False)
    assert p.returncode == 1 and "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot write {out / 'checkpoint.pt'}: its folder {out} is read-only" in lines[0], p.stderr
    assert sorted(f.name for f in out.iterdir()) == ["train.lock"]
    assert unwritable_folders([out / "result.json"]) == {}


def test_unwritable_folders_are_tried_not_guessed(tmp_path):
    from arrepro.cluster.preflight import unwritable_folders

    ro = tmp_path / "ro"
    ro.mkdir()
    if shutil.which("chattr") is None or not immutable(ro, True):
        pytest.skip("cannot make a folder read-only for this user (chattr +i)")
    try:
        assert list(unwritable_folders([ro / "x.csv", tmp_path / "y.csv", tmp_path / "gone" / "z"])) == [str(ro)]
    finally:
        immutable(ro, False)


def test_a_foreign_file_where_the_workflow_links_is_found(tmp_path):
    from arrepro.cluster.preflight import foreign_links

    (tmp_path / "fig1.pdf").write_text("old")
    (tmp_path / "fig2.pdf").symlink_to("tiny/fig2.pdf")
    (tmp_path / "fig3.pdf").symlink_to("/etc/hostname")
    (tmp_path / "fig4.pdf").mkdir()
    found = foreign_links(["fig1.pdf", "fig2.pdf", "fig3.pdf", "fig4.pdf", "fig5.pdf"], root=str(tmp_path))
    assert sorted(Path(p).name for p in found) == ["fig1.pdf", "fig3.pdf"]


# --------------------------------------------------------------------------- numerics
def test_overridden_numerics_are_recorded_and_an_unpinned_run_is_named(data, tmp_path):
    """Issue 24, case 6: the caller's ATEN_CPU_CAPABILITY and MKL_CBWR (replaced by the pins) are
    recorded in the cell; two threads make it unpinned; its table row says so and the paper's
    text names it."""
    from arrepro.report.aggregate import load_results
    from arrepro.report.prose import numerics_text

    out = tmp_path / CELL
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2"}
    cmd = [sys.executable, str(ROOT / "scripts/train_cell.py"), "--cell-json", json.dumps(SPEC), "--data", str(data),
           "--out", str(out), "--threads", "2"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    record = json.loads((out / "result.json").read_text())["numerics"]
    assert record["overridden"] == {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2"}
    assert record["pinned"] is False and record["env"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "the caller's MKL_CBWR=AVX2 was replaced by the pin" in p.stdout
    cells = load_results([out / "result.json"])
    assert cells["pinned"].tolist() == [False]
    both = pd.concat([cells, cells.assign(cell_dir="results/cells/x/pinned", pinned=True)])
    text = numerics_text(both)
    assert text.startswith("1 of the 2 runs trained") and "t/attention/w16-l2/r/lr0.003-s0" in text, text
    assert numerics_text(cells.assign(pinned=True)) == "All 1 runs trained with the pinned CPU numerics."
