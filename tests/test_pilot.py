"""bench/pilot_demo.py's command line (issue 55): a rule that cannot run for want of another's
result is an error, never a pass; --reuse is a folder that exists; a candidate named twice runs
once. No cell is trained: the pilot's training is replaced where a test would reach it."""
import importlib.util
import sys

import pytest

from conftest import ROOT


@pytest.fixture
def pilot(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("pilot_demo", ROOT / "bench" / "pilot_demo.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pilot_demo", mod)  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path / "pilot")
    monkeypatch.setattr(mod, "run_stage", lambda *a, **k: pytest.fail("a cell would be trained"))
    monkeypatch.chdir(tmp_path)  # (main moves to the repository; the test's folder comes back after it)
    return mod


def test_a_rule_that_needs_anothers_result_is_refused_not_passed(pilot, tmp_path):
    """`--rules R2 S1` trained 0 cells and wrote "tried only, passes": R2 needs R4's and R1's best rates."""
    with pytest.raises(SystemExit, match=r"R2 needs the results of R4 and R1.*--rules R4,R1,R2"):
        pilot.main(["--rules", "R2", "S1"])
    with pytest.raises(SystemExit, match=r"R1 is not among the rules"):
        pilot.main(["--rules", "R4,R2", "S1"])
    assert not (tmp_path / "pilot").exists()
    assert pilot.rules_problem(("R4", "R1", "R2")) is None and pilot.rules_problem(("R3",)) is None


def test_a_candidate_with_no_rule_decided_does_not_pass(pilot, tmp_path):
    pilot.write([pilot.Trial("S1", None)])
    text = (tmp_path / "pilot" / "pilot-S1.md").read_text()
    assert "no rule decided" in text and "pass" not in text


def test_reuse_must_be_a_folder_that_exists(pilot, tmp_path):
    for path, why in ((tmp_path / "nowhere", "no such folder"), (tmp_path / "file", "a file")):
        if why == "a file":
            path.write_text("")
        with pytest.raises(SystemExit, match=f"--reuse {path}: {why}"):
            pilot.main(["--reuse", str(path), "S1"])


def test_a_candidate_named_twice_runs_once(pilot, monkeypatch):
    ran = []
    monkeypatch.setattr(pilot, "pilot", lambda name, *a: ran.append(name) or pilot.Trial(name, None))
    monkeypatch.setattr(pilot, "write", lambda trials: None)
    pilot.main(["S1", "S1", "S2"])
    assert ran == ["S1", "S2"]
