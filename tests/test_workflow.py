"""The workflow as a user drives it: config errors stop the run before any job and name the
key; an edit reruns only what it should (Snakemake dry runs on the tiny scale)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow_copy import copy_workflow, finished_run, private_copy

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def smk(wd: Path, *args, check=True):
    p = subprocess.run(SNAKEMAKE + list(args), cwd=wd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(p.stdout + p.stderr)
    return p


def search_reports(scale="tiny"):
    """The per-search files of a scale (rule search_reports)."""
    from arrepro.config.grid import Grid
    from arrepro.search.rounds import Searches

    grid = Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), scale)
    return sorted(s.report_path(grid.out) for s in Searches(grid).searches.values())


# everything `all` builds but the paper (its LaTeX build has its own test, tests/test_paper.py): the
# tiny scale's fixed grid (fig2) and its learning-rate search (fig1)
TARGETS = ["results/tiny/fig2.pdf", "results/tiny/fig1.pdf", "results/tiny/tables/cells.csv"]
FIG1_REPORT = next(p for p in search_reports() if "/mqar-L8-" in p)
NUMBERS = "results/tiny/paper/numbers.tex"


def planned(wd: Path, *args, targets=TARGETS, config=()) -> dict[str, int]:
    """Jobs a dry run would execute, by rule."""
    out = smk(wd, "-n", *targets, *args, "--config", "scale=tiny", *config).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+(\d+)\s*$", table, re.M)}


def edit_config(wd: Path, fn) -> None:
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    fn(cfg)
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def run_tiny(wd: Path) -> None:
    """A new copy of the workflow in ``wd``, its tiny scale run to the end (and the paper's numbers)."""
    copy_workflow(wd)
    smk(wd, "--cores", "2", *TARGETS, *search_reports(), NUMBERS, "--config", "scale=tiny")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A copy of the workflow whose tiny scale has run to the end (and made the paper's numbers):
    this module's own copy of the test session's one such run (workflow_copy.finished_run)."""
    wd = private_copy(finished_run(tmp_path_factory, "tiny-done", run_tiny), tmp_path_factory.mktemp("done"))
    assert planned(wd) == {}
    return wd


@pytest.fixture
def wd(done, tmp_path):
    """A private copy of the finished workflow."""
    return private_copy(done, tmp_path)


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


@pytest.mark.parametrize("path", ["src/arrepro/train/loop.py", "src/arrepro/models/backbone.py", "src/arrepro/models/ops.py",
                                  "src/arrepro/models/mixers/attention.py", "src/arrepro/report/plots.py",
                                  "src/arrepro/report/aggregate.py", "src/arrepro/data/mqar.py", "src/arrepro/search/protocol/decision.py",
                                  "src/arrepro/search/rounds.py"])
def test_a_comment_or_docstring_edit_reruns_nothing(wd, path):
    comment_edit(wd / path)
    assert planned(wd) == {}


# the tiny scale: fig2's fixed grid (2 attention cells) and fig1's learning-rate search (attention,
# 2 start learning rates on 1 seed, then refinement rounds)
FIXED_CELLS, SEARCH_ROUND0 = 2, 2


def test_editing_a_model_file_reruns_its_cells_only(wd):
    with open(wd / "src/arrepro/models/mixers/attention.py", "a") as f:
        f.write(CODE_EDIT)
    jobs = planned(wd)
    # the fixed grid's cells and the search's round 0: the search starts over from round 0 (its
    # later rounds are decided again from the new results, not replanned from the old ones)
    assert jobs.get("train") == FIXED_CELLS + SEARCH_ROUND0
    assert "data" not in jobs


def move_lr_schedule(wd: Path) -> Path:
    """A refactor: ``lr_at`` moved from train/loop.py to a new module that loop.py imports (the
    cell's sources follow the import: arrepro.config.catalogue)."""
    train = wd / "src/arrepro/train/loop.py"
    text = train.read_text()
    body_start = text.index("def lr_at(")
    body_end = text.index("\n\n\n", body_start)  # the next top-level statement follows two blank lines
    moved = text[body_start:body_end].rstrip() + "\n"
    rest = text[:body_start] + text[body_end + 3:]
    anchor = "from arrepro.train.checkpoint import"
    assert anchor in rest
    rest = rest.replace(anchor, "from arrepro.train.schedule import lr_at\n" + anchor, 1)
    schedule = wd / "src/arrepro/train/schedule.py"
    schedule.write_text('"""Learning-rate schedules."""\nimport math\n\nfrom arrepro.train.prepare import SCHEDULES\n\n\n'
                        + moved)
    train.write_text(rest)
    return schedule


def test_a_refactor_plans_nothing_and_the_moved_code_still_counts(wd):
    """Issue 19: code moved between the cell's source files (a function to a new module) is the
    same code: nothing reruns. An edit of the moved function's body reruns every cell."""
    schedule = move_lr_schedule(wd)
    subprocess.run([sys.executable, "-c", "import arrepro.train.loop"], cwd=wd / "src", check=True)  # still imports
    assert planned(wd) == {}
    schedule.write_text(schedule.read_text().replace("return base * (1.0 - frac)", "return (base * (1.0 - frac))"))
    assert planned(wd) == {}  # (the same code after parsing)
    schedule.write_text(schedule.read_text().replace("return (base * (1.0 - frac))", "return base * (1.0 - frac) * 1.0"))
    assert planned(wd).get("train") == FIXED_CELLS + SEARCH_ROUND0


def move_grid_meta(wd: Path) -> None:
    """A refactor between two report modules: ``grid_meta`` moved from report/paper.py to
    report/fidelity.py (paper.py imports it back, for the Snakefile), and the paper_numbers
    script's import line pointed at its new home: the script's file is edited."""
    paper, fidelity = wd / "src/arrepro/report/paper.py", wd / "src/arrepro/report/fidelity.py"
    text = paper.read_text()
    start = text.index("def grid_meta(")
    end = text.find("\ndef ", start + 1)
    end = len(text) if end < 0 else end + 1
    moved = text[start:end].rstrip() + "\n"
    anchor = "from arrepro.report.texkeys import numbers_tex\n"
    assert anchor in text
    paper.write_text((text[:start] + text[end:]).rstrip().replace(
        anchor, anchor + "from arrepro.report.fidelity import grid_meta  # noqa: F401 (the Snakefile's)\n", 1) + "\n")
    fidelity.write_text(fidelity.read_text().rstrip() + "\n\n\n" + moved)
    script = wd / "scripts/paper_numbers.py"
    old = "from arrepro.report.paper import grid_meta, write_paper_inputs\n"
    assert old in script.read_text()
    script.write_text(script.read_text().replace(old, "from arrepro.report.fidelity import grid_meta\n"
                                                      "from arrepro.report.paper import write_paper_inputs\n"))


def test_a_move_of_code_between_report_modules_plans_nothing(wd):
    """Issue 32, round 6, 8: a function moved between two report modules reran two figures,
    paper_numbers and paper (Snakemake's own code trigger reran the rule whose script's import line
    changed). The recorded code digests are now the only code trigger (profiles/default): the move
    plans nothing; the moved function's code still counts."""
    move_grid_meta(wd)
    for module in ("arrepro.report.paper", "arrepro.report.fidelity"):  # (still imports)
        subprocess.run([sys.executable, "-c", f"import {module}"], cwd=wd / "src", check=True)
    assert planned(wd, targets=[*TARGETS, NUMBERS]) == {}
    fidelity = wd / "src/arrepro/report/fidelity.py"
    fidelity.write_text(fidelity.read_text().replace('"scale": grid.scale_name,', '"scale": str(grid.scale_name),'))
    assert planned(wd, "--allowed-rules", "paper_numbers", targets=[*TARGETS, NUMBERS]) == {"paper_numbers": 1}


def test_an_edit_of_a_shell_rules_command_reruns_its_jobs(wd):
    """With Snakemake's code trigger off, a shell rule's command is its param (command_param):
    an edited command reruns the rule's jobs, and a touched script alone reruns nothing."""
    (wd / "scripts/plot_figure.py").touch()
    assert planned(wd, targets=[*TARGETS, NUMBERS]) == {}
    rules = wd / "workflow/rules/data.smk"
    rules.write_text(rules.read_text().replace("> {log:q} 2>&1", "> {log:q} 2>&1 < /dev/null", 1))
    jobs = planned(wd, targets=[*TARGETS, NUMBERS])
    assert jobs.get("data") == 2 and jobs.get("train") == FIXED_CELLS + SEARCH_ROUND0, jobs  # (and what reads them)


def test_editing_shared_model_code_reruns_every_cell(wd):
    with open(wd / "src/arrepro/models/ops.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd).get("train") == FIXED_CELLS + SEARCH_ROUND0


def test_editing_plotting_code_reruns_only_the_figures(wd):
    with open(wd / "src/arrepro/report/plots.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd) == {"figure": 2}  # fig1 and fig2


def test_a_name_rebound_with_as_reruns_the_figures(wd):
    """Issue 38: ``lr_label`` rebound to another function (``tex_lr as lr_label``) changed no
    digest: `snakemake all` had nothing to do and a forced run drew other figures."""
    plots = wd / "src/arrepro/report/plots.py"
    old = "from arrepro.report.tex import fmt_count, lr_label"
    assert old in plots.read_text()
    plots.write_text(plots.read_text().replace(old, "from arrepro.report.tex import fmt_count, tex_lr as lr_label"))
    assert planned(wd) == {"figure": 2}


def test_a_pure_move_and_an_edit_of_an_untrained_mixer_rerun_no_paper_job(wd):
    """Issue 38: ``_pm`` moved from report/tables.py to report/tex.py reran two figures and
    paper_numbers (and so the paper); a real edit of the Mamba mixer reran the tiny paper, which
    trains no Mamba. Neither plans a job now."""
    from test_rule_sources import move_pm

    move_pm(wd)
    with open(wd / "src/arrepro/models/mixers/mamba.py", "a") as f:
        f.write(CODE_EDIT)
    assert planned(wd, targets=[*TARGETS, NUMBERS]) == {}


def rerun_on_their_own(wd: Path, rules) -> set[str]:
    """Which of ``rules`` a dry run plans when only they may run (--allowed-rules: no job of
    another rule reruns, so none of theirs reruns because an upstream job does)."""
    return set(planned(wd, "--allowed-rules", *rules, targets=[*TARGETS, NUMBERS])) & set(rules)


# issue 23: modules the hand-kept lists missed (tex.py: the paper's numbers; cellfiles.py: the
# search's rounds; rounds.py: the aggregation)
@pytest.mark.parametrize("module, importer", [("src/arrepro/report/tex.py", "paper_numbers"),
                                              ("src/arrepro/config/cellfiles.py", "search_round"),
                                              ("src/arrepro/search/rounds.py", "aggregate")])
def test_a_code_edit_reruns_the_rules_that_import_it(wd, module, importer):
    """A code edit of a module reruns a rule whose script imports it, and no rule whose script
    does not (each rule judged on its own params; which script imports what: an independent
    trace, tests/test_rule_sources.py)."""
    from test_rule_sources import dynamic_modules, rule_scripts, traced

    with open(wd / module, "a") as f:
        f.write(CODE_EDIT)
    uses = {r: traced(ROOT, s, *(dynamic_modules("attention") if r == "train" else ())) for r, s in rule_scripts().items()}
    others = sorted(r for r, files in uses.items() if module not in files)
    assert module in uses[importer]
    assert rerun_on_their_own(wd, [importer]) == {importer}
    assert rerun_on_their_own(wd, others) == set(), others


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


def test_a_finished_run_reports_its_cost_and_writes_its_claims(done):
    """The run's own records (issue 56): every cell's CPU-seconds from its job.log, the critical path
    through the search's rounds (a round's cells after the plan that asked for them); claims.md and
    claims.csv beside the paper's numbers (the tiny scale judges none of the paper's claims)."""
    import pandas as pd

    from arrepro.cluster import runcost

    r = runcost.report(done, "tiny")
    logs = sorted((done / "results/cells").rglob("job.log"))
    assert r["cells"] == len(logs) > 0 and r["cells_without_cpu"] == 0
    assert r["cells_cpu_seconds"] == pytest.approx(sum(runcost.cell_cpu(log) for log in logs))
    rules = [p["rule"] for p in r["critical_path"]]
    assert any(a == "search_round" and "train" in rules[i + 1:] for i, a in enumerate(rules)), rules
    assert 0 < r["critical_path_seconds"] <= r["total_seconds"]
    claims = pd.read_csv(done / "results/tiny/claims.csv")
    assert list(claims.columns) == ["id", "experiment", "claim", "verdict", "compared", "interval", "reason"]
    assert claims.empty and "This scale tests none of the paper's" in (done / "results/tiny/claims.md").read_text()


def test_every_scale_plans(tmp_path):
    """Every scale plans; the paper scale's job count is the README's (issue 24: it said 2,886)."""
    wd = copy_workflow(tmp_path)
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    for scale in cfg["scales"]:
        p = smk(wd, "-n", "--quiet", "all", "--config", f"scale={scale}")
        if scale == "paper":
            stats = p.stdout.split("Job stats:")[1]
            jobs = {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+(\d+)\s*$", stats.split("\n\n")[0], re.M)}
            said = re.search(r"lists\s+round 0 \(([\d,]+) jobs: ([\d,]+) train", (ROOT / "docs/reference/workflow.md").read_text())
            assert said, "docs/reference/workflow.md: `snakemake -n all --config scale=paper` lists round 0 (N jobs: M train, ...)"
            assert (jobs["total"], jobs["train"]) == tuple(int(x.replace(",", "")) for x in said.groups()), jobs


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
    training of exactly the round-0 cells of its experiment's searches (and a cell two
    experiments share is one job)."""
    from arrepro.config.grid import Grid
    from arrepro.search.rounds import Searches, search_cells, start_round

    wd = copy_workflow(tmp_path)
    grid = Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    searches = Searches(grid)
    for exp, e in grid.experiments.items():
        target = f"results/demo/{exp}.pdf" if "plot" in e else f"results/demo/{exp}.tex"
        out = smk(wd, "-n", target, "--config", "scale=demo").stdout
        blocks = [b for b in out.split("\n\n") if re.search(r"rule train:", b)]
        scheduled = {re.search(r"output: (\S+)/result\.json", b).group(1) for b in blocks}
        assert len(blocks) == len(scheduled), f"{exp}: a cell is scheduled twice"
        round0 = {c.path for _, s in searches.of_experiment(exp) for c in search_cells(s, [start_round(s)])}
        assert scheduled == round0, exp


def test_every_job_writes_its_log(done):
    logs = list((done / "results").rglob("*.log"))
    rules = {p.parent.name for p in (done / "results/tiny/logs").rglob("*.log")}
    assert {"data", "aggregate", "figures", "searches"} <= rules
    assert len(list(done.glob("results/cells/**/train.log"))) == len(list(done.glob("results/cells/**/result.json")))
    empty = [str(p.relative_to(done)) for p in logs if p.stat().st_size == 0]
    assert not empty, f"empty logs: {empty}"


def test_an_unreadable_result_is_named_in_the_error_and_the_log(wd):
    result = next(wd.glob("results/cells/mqar-L16-*/**/result.json"))
    result.write_text('{"cell": ')  # a truncated file, newer than the tables made from it
    p = smk(wd, "--cores", "1", *TARGETS, "--config", "scale=tiny", check=False)
    rel = str(result.relative_to(wd))
    assert p.returncode != 0 and rel in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    # its first reader, the search's round job, names it in its log
    assert rel in (wd / "results/tiny/logs/searches/cells_10min-fig2-round1.log").read_text()


def interrupt(wd: Path, grid, cell) -> None:
    """Leave ``cell`` as a training job stopped after its first step leaves it: a checkpoint of
    that step (its fingerprint: this cell, data and code), beside its old result."""
    from arrepro.config.grid import identity
    from arrepro.train.loop import train_cell

    # what the train rule passes on (the cell's identity, as its checkpoint's fingerprint reads it)
    spec = identity(grid.cell_spec(cell.task, cell.model, cell.width, cell.layers, cell.recipe, cell.lr, cell.seed))
    (wd / cell.path / "checkpoint.pt").unlink(missing_ok=True)
    with pytest.raises(SystemExit):
        train_cell(spec, wd / "results/data" / cell.task, wd / cell.path, threads=1, log=lambda s: None,
                   stop_after_steps=1)


def test_a_forced_run_retrains_every_cell_of_every_round(wd):
    """Issue 23: `--forcerun train` started over only the cells known when the DAG was first built
    (round 0): the cells the search's later rounds added resumed their checkpoints ("resumed from
    checkpoint at epoch 3 batch 0") and kept their old numbers. Here each later-round cell holds
    the checkpoint of an interrupted attempt: every cell trains from scratch, the run says how
    many, and each train.log keeps its earlier lines."""
    from arrepro.config.grid import Grid
    from arrepro.search.plans import Plan
    from arrepro.search.rounds import Searches, search_cells

    grid = Grid(yaml.safe_load((wd / "config.yaml").read_text()), "tiny")
    searches = Searches(grid)
    cells = {}  # every cell of every round, from the searches' last plans
    for s in searches.searches.values():
        plan = Plan.read(wd / Plan.path(grid.out, s.group, searches.final_round(s.group)))
        cells.update({c.path: c for c in search_cells(s, plan.rounds(s.key))})
    later = sorted(set(cells) - {c.path for c in searches.round0_cells()})
    assert len(later) >= 2, later  # the search's refining rounds
    for path in later:
        interrupt(wd, grid, cells[path])
    logs = sorted(wd.glob("results/cells/**/train.log"))
    assert len(logs) == len(cells)
    for log in logs:
        log.write_text("an earlier attempt's line\n" + log.read_text())
    p = smk(wd, "--cores", "1", *TARGETS, "--forcerun", "train", "--config", "scale=tiny")  # (targets first:
    # --forcerun takes every name after it, and `all` would need TeX for the paper)
    for path in sorted(cells):
        job = (wd / path / "job.log").read_text()
        assert "resumed from checkpoint" not in job and "epoch 1/" in job, f"{path}:\n{job}"
        text = (wd / path / "train.log").read_text()
        assert text.startswith("an earlier attempt's line\n") and text.count("epoch") >= 2, text
    assert f"{len(cells)} forced cell(s) trained from scratch" in p.stderr, p.stderr[-3000:]


# `all` rebuilds what is missing (Snakemake alone reruns a job with missing outputs only when a
# job that needs them must run anyway). The finished fixture never built the paper (only its
# numbers): `all` plans paper, the appendix's table of the built models (fidelity_built) and itself
# in any case, and paper_numbers after any aggregate job.
PAPER = {"paper": 1, "fidelity_built": 1, "all": 1}


def test_all_rebuilds_a_deleted_result(wd):
    assert planned(wd, targets=["all"]) == PAPER
    next(wd.glob("results/cells/mqar-L16-*/**/result.json")).unlink()  # a cell of fig2's fixed grid
    # fig2's cell, and the round of fig2's group only (a fixed grid on every seed: one round, its
    # last; fig1's search is not redone)
    assert planned(wd, targets=["all"]) == {**PAPER, "train": 1, "search_round": 1, "search_reports": 1, "aggregate": 1,
                                            "figure": 1, "cells_table": 1, "paper_numbers": 1}


def test_all_rebuilds_tables_a_failed_aggregate_deleted(wd):
    import json
    import os

    result = next(wd.glob("results/cells/mqar-L16-*/**/result.json"))  # a cell of fig2
    good, st = result.read_text(), result.stat()
    broken = json.loads(good)
    del broken["cell"]["task_def"]
    result.write_text(json.dumps(broken))
    os.utime(result, ns=(st.st_atime_ns, st.st_mtime_ns))  # as old as it was: the search does not read it again
    (wd / "results/tiny/tables/fig2_best.csv").unlink()  # the aggregation runs, reads it and fails
    # (the missing table named as a target, not `all`: `all` would stop first for want of TeX)
    p = smk(wd, "--cores", "1", "results/tiny/tables/fig2_best.csv", "--config", "scale=tiny", check=False)
    assert p.returncode != 0 and str(result.parent.relative_to(wd)) in p.stdout + p.stderr
    assert not (wd / "results/tiny/tables/fig2_cells.csv").exists()  # Snakemake deleted the failed job's outputs
    result.write_text(good)
    os.utime(result, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert planned(wd, targets=["all"]) == {**PAPER, "aggregate": 1, "figure": 1, "cells_table": 1, "paper_numbers": 1}


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
    assert planned(wd, targets=["all"]) == {**PAPER, "aggregate": 1, "figure": 1, "cells_table": 1, "paper_numbers": 1}


# --------------------------------------------------------------------------- the learning-rate search
def report(path) -> dict:
    import json

    return json.loads(Path(path).read_text())


def test_the_tiny_search_refines_in_at_least_two_rounds(done):
    r = report(done / FIG1_REPORT)
    kinds = [x["kind"] for x in r["rounds"]]
    assert kinds[0] == "start" and kinds.count("refine") >= 2, kinds
    assert all(x["reason"] for x in r["rounds"]) and r["state"]["phase"] == "done"
    # every round's learning rates, accuracies and reason are in the search's file
    assert all(len(x["accuracies"]) == len(x["cells"]) and all(a[2] is not None for a in x["accuracies"])
               for x in r["rounds"])


def test_a_dry_run_says_what_round_0_trains_and_that_later_rounds_follow(tmp_path):
    wd = copy_workflow(tmp_path)
    p = smk(wd, "-n", *TARGETS, "--config", "scale=tiny")
    assert "Round 0 trains 4 cells" in p.stderr and "later rounds" in p.stderr
    jobs = planned(wd)
    assert jobs["train"] == FIXED_CELLS + SEARCH_ROUND0 and jobs["search_round"] >= 1


def test_an_interrupted_search_resumes_without_redoing_finished_rounds_and_decides_the_same(done, tmp_path):
    """Stopped after its first refinement round, the search resumes from there: the cells of the
    rounds already run are not trained again, and its file equals an uninterrupted run's."""
    wd = copy_workflow(tmp_path)
    smk(wd, "--cores", "2", "results/tiny/searches/rounds/cells_10min-fig1/round2.json", "--config", "scale=tiny")
    before = {str(p.parent.relative_to(wd)) for p in wd.glob("results/cells/mqar-L8-*/**/result.json")}
    assert len(before) == SEARCH_ROUND0 + 2  # round 0 and the first refinement round
    p = smk(wd, "--cores", "2", *TARGETS, "--config", "scale=tiny")
    trained = set(re.findall(r"output: (results/cells/[^\s,]+)/result\.json", p.stdout + p.stderr))
    assert trained and not trained & before, "a finished round's cell was trained again"
    smk(wd, "--cores", "1", FIG1_REPORT, "--config", "scale=tiny")
    assert report(wd / FIG1_REPORT) == report(done / FIG1_REPORT)  # the same decisions, the same numbers


def test_editing_the_search_code_reruns_its_rounds_not_its_cells(wd):
    with open(wd / "src/arrepro/search/protocol/decision.py", "a") as f:
        f.write(CODE_EDIT)
    jobs = planned(wd)
    assert "train" not in jobs and jobs["search_round"] >= 1


def test_adding_a_model_to_a_searched_grid_runs_only_its_search(wd):
    edit_config(wd, lambda c: c["scales"]["tiny"]["experiments"]["fig1"]["grids"][0]["models"].append("based"))
    out = smk(wd, "-n", *TARGETS, "--config", "scale=tiny").stdout
    trained = set(re.findall(r"output: results/cells/[^/]+/(\w+)/[^\s,]+/result\.json", out))
    assert trained == {"based"} and planned(wd)["train"] == SEARCH_ROUND0  # its round 0; the rest follows


def test_the_fixed_grid_protocol_plans_every_learning_rate_on_every_seed(tmp_path):
    wd = copy_workflow(tmp_path)
    p = smk(wd, "-n", *TARGETS, "--config", "scale=tiny", "lr_protocol=grid")
    assert "lr_protocol: grid" in p.stderr and "0 refine" in p.stderr
    assert planned(wd, config=["lr_protocol=grid"])["train"] == FIXED_CELLS + 2


def test_the_protocol_check_trains_only_the_literal_grids_missing_cells_and_tabulates_each_search_once(wd):
    """make protocol-check on the tiny scale: fig1's search against the finer literal grid of the
    scale's protocol_check (config.yaml), one row, the cells the search already trained shared."""
    import csv
    cfg = yaml.safe_load((wd / "config.yaml").read_text())["scales"]["tiny"]["protocol_check"]
    lrs = [float(x) for x in cfg["lrs"]]
    p = smk(wd, "--cores", "2", "results/tiny/tables/protocol_check.csv", "--config", "scale=tiny")
    trained = set(re.findall(r"output: (results/cells/[^\s,]+)/result\.json", p.stdout + p.stderr))
    rows = list(csv.DictReader(open(wd / "results/tiny/tables/protocol_check.csv")))
    assert len(rows) == 1 and rows[0]["model"] == "attention"
    r = rows[0]
    assert [float(x) for x in r["grid_lrs"].split(";")] == lrs and int(r["grid_cells"]) == len(lrs)
    shared = int(r["shared_cells"])
    assert shared >= 1 and len(trained) == len(lrs) - shared, "a cell the search had trained was trained again"
    assert abs(float(r["difference"]) - (float(r["search"]) - float(r["grid"]))) < 1e-9
    md = (wd / "results/tiny/tables/protocol_check.md").read_text()
    assert "1 search;" in md and f"the literal grid {len(lrs)}" in md
