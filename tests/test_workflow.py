"""The workflow as a user drives it: config errors stop the run before any job and name the
key; an edit reruns only what it should (Snakemake dry runs on the tiny scale)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def copy_workflow(dst: Path) -> Path:
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, dst / name)
    for name in ("workflow", "src", "scripts", "paper", "envs"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dst


def smk(wd: Path, *args, check=True):
    p = subprocess.run(SNAKEMAKE + list(args), cwd=wd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(p.stdout + p.stderr)
    return p


# everything `all` builds but the paper (its LaTeX build has its own test, tests/test_paper.py)
TARGETS = ["results/tiny/fig2.pdf", "results/tiny/tables/cells.csv"]


def planned(wd: Path, *args, targets=TARGETS) -> dict[str, int]:
    """Jobs a dry run would execute, by rule."""
    out = smk(wd, "-n", *targets, *args, "--config", "scale=tiny").stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+(\d+)\s*$", table, re.M)}


def edit_config(wd: Path, fn) -> None:
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    fn(cfg)
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A copy of the workflow whose tiny scale has run to the end."""
    wd = copy_workflow(tmp_path_factory.mktemp("wf"))
    smk(wd, "--cores", "2", *TARGETS, "--config", "scale=tiny")
    assert planned(wd) == {}
    return wd


@pytest.fixture
def wd(done, tmp_path):
    """A private copy of the finished workflow, results and Snakemake's records included."""
    dst = tmp_path / "wf"
    shutil.copytree(done, dst, symlinks=True, copy_function=shutil.copy2)
    return dst


def test_adding_a_learning_rate_trains_only_the_new_cells(wd):
    edit_config(wd, lambda c: c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0]["lrs"].append(3.0e-3))
    jobs = planned(wd)
    n_new = 1 * 1 * 1 * 1  # tasks x models x widths x layers x seeds of the tiny grid, one new lr
    assert jobs.get("train") == n_new
    assert "data" not in jobs
    assert {"aggregate", "figure", "cells_table"} <= set(jobs)


CODE_EDIT = "\n_AN_EDIT = 1\n"  # a statement: the code changes



def comment_edit(path: Path) -> None:
    """A new comment, a reformatted line and an edited docstring: the code stays the same."""
    text = path.read_text() + "\n# a comment\n"
    doc = re.search(r'"""(.*?)"""', text, re.S)
    if doc:  # the module's (or first) docstring, reworded
        text = text[:doc.start(1)] + doc[1] + " Reworded." + text[doc.end(1):]
    path.write_text(text.replace("\n\n\n", "\n\n\n\n", 1))


@pytest.mark.parametrize("path", ["src/arrepro/train.py", "src/arrepro/models/backbone.py", "src/arrepro/models/ops.py",
                                  "src/arrepro/models/mixers/attention.py", "src/arrepro/plots.py",
                                  "src/arrepro/aggregate.py", "src/arrepro/data/mqar.py"])
def test_a_comment_or_docstring_edit_reruns_nothing(wd, path):
    comment_edit(wd / path)
    assert planned(wd) == {}


def test_editing_a_model_file_reruns_its_cells_only(wd):
    with open(wd / "src/arrepro/models/mixers/attention.py", "a") as f:
        f.write(CODE_EDIT)
    jobs = planned(wd)
    assert jobs.get("train") == 2  # the tiny grid's two attention cells
    assert "data" not in jobs


def test_editing_shared_model_code_reruns_every_cell(wd):
    with open(wd / "src/arrepro/models/ops.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd).get("train") == 2


def test_editing_plotting_code_reruns_only_the_figure(wd):
    with open(wd / "src/arrepro/plots.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd) == {"figure": 1}


def test_editing_an_unused_mixer_reruns_nothing(wd):
    other = next(p for p in (wd / "src/arrepro/models/mixers").glob("*.py")
                 if p.stem not in ("attention", "__init__"))
    with open(other, "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd) == {}


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(wdith=3), "wdith"),
    (lambda c: c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(widths=[-8]), "widths"),
    (lambda c: c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(models=["atention"]), "models"),
    (lambda c: c["models"]["attention"].update(mixer="atention"), "models.attention.mixer"),
    (lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(schedule="cosne"), "schedule"),
    # a task key no code reads (the input length is seq_len) is refused, not silently ignored
    (lambda c: c["scales"]["tiny"]["tasks"]["L16"].update(context_len=32), "context_len"),
])
def test_bad_config_stops_before_any_job_and_names_the_key(tmp_path, edit, key):
    wd = copy_workflow(tmp_path)
    edit_config(wd, edit)
    p = smk(wd, "-n", "--config", "scale=tiny", check=False)
    assert p.returncode != 0
    assert key in p.stdout + p.stderr
    assert "Job stats" not in p.stdout


def test_every_scale_plans(tmp_path):
    wd = copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    for scale in cfg["scales"]:
        assert smk(wd, "-n", "--quiet", "all", "--config", f"scale={scale}").returncode == 0


def test_lint_is_clean():
    p = smk(ROOT, "--lint", check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_adding_a_model_trains_only_that_models_cells(wd):
    edit_config(wd, lambda c: c["scales"]["tiny"]["experiments"]["fig2"]["grids"][0]["models"].append("hyena"))
    out = smk(wd, "-n", *TARGETS, "--config", "scale=tiny").stdout
    trained = set(re.findall(r"output: results/cells/[^/]+/(\w+)/[^\s,]+/result\.json", out))
    assert planned(wd)["train"] == 2 and trained == {"hyena"}


def test_each_figure_pulls_exactly_its_experiments_cells(tmp_path):
    """On the demo scale, with nothing built: a figure's or table's target schedules the
    training of exactly the cells its experiment names (and a cell two experiments share is
    one job)."""
    sys.path.insert(0, str(ROOT / "src"))
    from arrepro.grid import Grid

    wd = copy_workflow(tmp_path)
    grid = Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    for exp, e in grid.experiments.items():
        target = f"results/demo/{exp}.pdf" if "plot" in e else f"results/demo/{exp}.tex"
        out = smk(wd, "-n", target, "--config", "scale=demo").stdout
        blocks = [b for b in out.split("\n\n") if re.search(r"rule train:", b)]
        scheduled = {re.search(r"output: (\S+)/result\.json", b).group(1) for b in blocks}
        assert len(blocks) == len(scheduled), f"{exp}: a cell is scheduled twice"
        assert scheduled == {c.path for c in grid.experiment_cells(exp)}, exp


def test_every_job_writes_its_log(done):
    logs = list((done / "results").rglob("*.log"))
    rules = {p.parent.name for p in (done / "results/tiny/logs").rglob("*.log")}
    assert {"data", "aggregate", "figures"} <= rules and len(list(done.glob("results/cells/**/train.log"))) == 2
    empty = [str(p.relative_to(done)) for p in logs if p.stat().st_size == 0]
    assert not empty, f"empty logs: {empty}"


def test_an_unreadable_result_is_named_in_the_error_and_the_log(wd):
    result = next(wd.glob("results/cells/**/result.json"))
    result.write_text('{"cell": ')  # a truncated file, newer than the tables made from it
    p = smk(wd, "--cores", "1", *TARGETS, "--config", "scale=tiny", check=False)
    rel = str(result.relative_to(wd))
    assert p.returncode != 0 and rel in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    assert rel in (wd / "results/tiny/logs/aggregate/fig2.log").read_text()


def test_a_rerun_cell_appends_to_its_train_log(wd):
    logs = sorted(wd.glob("results/cells/**/train.log"))
    for log in logs:
        log.write_text("an earlier attempt's line\n" + log.read_text())
    smk(wd, "--cores", "1", "--forcerun", "train", *TARGETS, "--config", "scale=tiny")
    for log in logs:
        text = log.read_text()
        assert text.startswith("an earlier attempt's line\n") and text.count("epoch") >= 2, text


# `all` rebuilds what is missing (Snakemake alone reruns a job with missing outputs only when a
# job that needs them must run anyway). The finished fixture never built the paper: `all` plans
# paper_numbers, paper and itself in any case.
PAPER = {"paper_numbers": 1, "paper": 1, "all": 1}


def test_all_rebuilds_a_deleted_result(wd):
    assert planned(wd, targets=["all"]) == PAPER
    next(wd.glob("results/cells/**/result.json")).unlink()
    assert planned(wd, targets=["all"]) == {**PAPER, "train": 1, "aggregate": 1, "figure": 1, "cells_table": 1}


def test_all_rebuilds_tables_a_failed_aggregate_deleted(wd):
    result = next(wd.glob("results/cells/**/result.json"))
    good = result.read_text()
    result.write_text("{")
    assert smk(wd, "--cores", "1", *TARGETS, "--config", "scale=tiny", check=False).returncode != 0
    assert not (wd / "results/tiny/tables/fig2_best.csv").exists()  # Snakemake deleted the failed job's outputs
    result.write_text(good)
    assert planned(wd, targets=["all"]) == {**PAPER, "aggregate": 1, "figure": 1, "cells_table": 1}


def test_scales_keep_their_outputs_apart(done):
    """The tiny run wrote under results/tiny/ only (and the shared cells and data); the demo's
    plan writes under results/demo/, never over another scale's files."""
    assert {p.name for p in (done / "results").iterdir()} == {"cells", "data", "tiny"}
    assert not (done / "results/fig2.pdf").exists()
    out = smk(done, "-n", "all", "--config", "scale=demo").stdout
    written = set(re.findall(r"^\s+output: (.+)$", out, re.M))
    files = {f for line in written for f in line.split(", ")}
    assert files and all(f.startswith(("results/demo/", "results/cells/", "results/data/")) for f in files)


def test_all_rebuilds_a_deleted_table(wd):
    (wd / "results/tiny/tables/fig2_best.csv").unlink()
    assert planned(wd, targets=["all"]) == {**PAPER, "aggregate": 1, "figure": 1, "cells_table": 1}
