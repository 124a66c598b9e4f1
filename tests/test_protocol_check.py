"""`make protocol-check` can fail (issue 38): it printed a shortfall beyond the seed spread and
exited 0, a check that could not fail in CI or a script. Now its last step reads the table the
rule wrote and exits 1 naming each search that falls short; 0 where none does. The rule's own
run on the tiny scale: tests/test_workflow.py."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from arrepro.files import write_table
from arrepro.search.protocol_check import markdown, verdict

ROOT = Path(__file__).resolve().parents[1]


def row(search, grid, spread=0.02, **over):
    r = {"task": "t1", "model": "attention", "width": 32, "layers": 1, "search": search, "search_lr": 1e-3,
         "search_spread": spread, "search_cells": 6, "search_outcome": "learned", "grid": grid, "grid_lr": 3.16e-3,
         "grid_spread": spread, "grid_cells": 9, "grid_lrs": "0.001;0.00316", "shared_cells": 2,
         "difference": search - grid, "within_spread": abs(search - grid) <= spread}
    return {**r, **over}


def test_the_verdict_fails_on_a_shortfall_beyond_the_seed_spread_only():
    short, close, above = row(0.41, 0.91), row(0.90, 0.91), row(0.95, 0.60)
    status, line = verdict([close, short, above])
    assert status == 1 and "1 of 3 searches fall short" in line and "attention 1x32 on t1" in line and "-0.500" in line
    assert "shortfalls beyond the seed spread: 1" in markdown([close, short, above])
    assert verdict([close, above])[0] == 0


@pytest.fixture
def make_dir(tmp_path):
    """A folder where `make protocol-check` runs its real recipe: the Makefile, this repository's
    scripts, a stand-in `snakemake` (the table is already there) and a venv marked as set up."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "snakemake"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    (tmp_path / "pyproject.toml").write_text("")
    os.utime(tmp_path / "pyproject.toml", (1, 1))
    (venv / ".installed").write_text("")
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    (tmp_path / "results/t/tables").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("rows,status", [([row(0.90, 0.91)], 0), ([row(0.90, 0.91), row(0.41, 0.91)], 1)])
def test_make_protocol_check_exits_non_zero_on_a_shortfall(make_dir, rows, status):
    tables = make_dir / "results/t/tables"
    write_table(pd.DataFrame(rows), tables / "protocol_check.csv")
    (tables / "protocol_check.md").write_text(markdown(rows) + "\n")
    p = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "protocol-check", "SCALE=t", f"PY={sys.executable}"],
                       cwd=make_dir, capture_output=True, text=True)
    assert p.returncode == (2 if status else 0), p.stdout + p.stderr  # make's own status for a failed step: 2
    assert ("protocol check failed: 1 of 2" in p.stderr) == bool(status), p.stdout + p.stderr
