"""External programs are checked before any job starts: with no TeX engine on PATH, a run that
will build the paper stops in its first seconds with the command that installs TeX, instead of
training first and failing at the paper (issue 12). PATH is a copy of the machine's, minus TeX
and apt-get."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_workflow import ROOT, SNAKEMAKE
from workflow_copy import copy_workflow

HIDDEN = {"pdflatex", "bibtex", "tectonic", "latex", "xelatex", "lualatex", "apt-get"}


@pytest.fixture(scope="module")
def no_tex_path(tmp_path_factory):
    """A PATH with every program of this one but TeX and apt-get (symlinks)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for d in [str(Path(sys.executable).parent)] + os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for f in os.listdir(d):
            if f not in HIDDEN and not (bin_dir / f).exists() and os.access(os.path.join(d, f), os.X_OK):
                (bin_dir / f).symlink_to(os.path.join(d, f))
    return str(bin_dir)


def test_snakemake_stops_before_any_job_when_the_paper_has_no_tex(tmp_path, no_tex_path):
    wd = copy_workflow(tmp_path)
    p = subprocess.run(SNAKEMAKE + ["--cores", "1", "all", "--config", "scale=tiny"], cwd=wd,
                       capture_output=True, text=True, env={**os.environ, "PATH": no_tex_path})
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "apt-get install" in out and "texlive-latex-base" in out, out[-3000:]
    assert not (wd / "results").exists(), "a job ran before the check"


def test_a_target_without_the_paper_needs_no_tex(tmp_path, no_tex_path):
    wd = copy_workflow(tmp_path)
    p = subprocess.run(SNAKEMAKE + ["--cores", "1", "results/tiny/tables/fig2_cells.csv", "--config", "scale=tiny"],
                       cwd=wd, capture_output=True, text=True, env={**os.environ, "PATH": no_tex_path})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]


def test_the_tools_check_prints_the_install_command_where_it_cannot_install(no_tex_path):
    p = subprocess.run([sys.executable, "-m", "arrepro.cluster.tools", "--install"], capture_output=True, text=True,
                       env={**os.environ, "PATH": no_tex_path, "PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 1 and "apt-get install -y --no-install-recommends texlive-latex-base" in p.stderr


def test_make_demo_checks_the_tools_before_the_workflow():
    p = subprocess.run(["make", "-n", "-o", ".venv/.installed", "demo"], cwd=ROOT, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    check = next(i for i, x in enumerate(lines) if "-m arrepro.cluster.tools --install" in x)
    run = next(i for i, x in enumerate(lines) if x.startswith("snakemake"))
    assert check < run


def make_dry(*args, env=None) -> list[str]:
    p = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_make_demo_uses_every_core_unless_told(tmp_path):
    """`make demo` on every core of the machine (each training cell one core), `CORES=N` wins (issue 56):
    here, and on a machine of 7 cores (an `nproc` that says 7 first on PATH)."""
    def run(*args, env=None):
        return [x for x in make_dry("-o", ".venv/.installed", "demo", *args, env=env) if x.startswith("snakemake")]

    assert run() == [f"snakemake --cores {len(os.sched_getaffinity(0))} --rerun-incomplete --keep-going "
                     "--show-failed-logs all"]
    (tmp_path / "nproc").write_text("#!/bin/sh\necho 7\n")
    (tmp_path / "nproc").chmod(0o755)
    seven = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    assert run(env=seven)[0].startswith("snakemake --cores 7 ")
    assert run("CORES=3", env=seven)[0].startswith("snakemake --cores 3 ")


def test_torch_comes_from_the_index_the_user_names():
    """An unpinned index serves PyPI's torch (the CUDA build); TORCH_INDEX asks for another's (the CPU build)."""
    plain = [x for x in make_dry("-B", ".venv/.installed") if "install -q torch" in x]
    assert plain == [".venv/bin/python -m pip install -q torch==2.13.0 "] or plain == [
        ".venv/bin/python -m pip install -q torch==2.13.0"]
    asked = [x for x in make_dry("-B", ".venv/.installed", "TORCH_INDEX=https://example.org/whl/cpu") if "install -q torch" in x]
    assert asked == [".venv/bin/python -m pip install -q torch==2.13.0 --index-url https://example.org/whl/cpu"]
