"""The user's own commands, typed as they type them, from a fresh checkout of this repository;
and the workflow-level guarantees of issue 18: damaged tables and datasets are rebuilt (not
used), a damaged table read by hand is named, config text is drawn and typeset as written,
another run in the folder is named with its pid, a config error is one short message, and what
a Slurm run lacks is said before the DAG is built. Snakemake runs on the tiny scale."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from arrepro.report.aggregate import read_best_table, read_cells_table
from arrepro.files import UnreadableFile, write_table
from arrepro.config.grid import Grid
from arrepro.report.plots import literal
from arrepro.search.plans import Plan
from arrepro.search.rounds import Searches
from arrepro.report.tables import render_table
from arrepro.report.tex import tex_escape
from test_workflow import ROOT, TARGETS, edit_config
from workflow_copy import copy_workflow, finished_run, private_copy, with_compiled_kernels

BIN = Path(sys.executable).parent  # this environment's `snakemake` and `python`
TASK = "results/data/mqar-L16-K2-V64-3640bf"  # the tiny scale's dataset
BEST = "results/tiny/tables/fig2_best.csv"


def fresh_checkout(dst: Path) -> Path:
    """The files a clone of this work tree would hold (tracked, and new ones not ignored), without
    results, .snakemake or .venv: what `git clone` of the branch gives."""
    git = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True)
    if git.returncode != 0:  # not a git work tree (an unpacked archive): its files as they are
        return copy_workflow(dst)
    files = git.stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


def typed(wd: Path, command: str, path: str | None = None, check=False, **kw):
    """``command`` as a user types it in ``wd`` (a shell; this environment's bin first on PATH)."""
    # PYTHONPATH: a script run by hand imports this checkout's package, as `pip install -e .` of it would
    env = {**os.environ, "PATH": path or f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(wd / "src"),
           **kw.pop("env", {})}
    p = subprocess.run(command, shell=True, cwd=wd, capture_output=True, text=True, env=env, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{command}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def set_default_scale(wd: Path, scale: str) -> None:
    """config.yaml's `scale:` line, as a user edits it (the rest of the file as it is)."""
    cfg = wd / "config.yaml"
    cfg.write_text(re.sub(r"^scale: \S+", f"scale: {scale}", cfg.read_text(), count=1, flags=re.M))


# A stand-in for TeX (where the machine has none, as CI): `all` builds the paper with it, whose
# "PDF" is its numbers.tex. The numbers are what these tests check; tests/test_paper.py builds the
# real PDF.
TEX_STANDIN = "#!/bin/sh\n# a stand-in for tectonic: the paper's numbers as its PDF\ncat results/paper/numbers.tex > main.pdf\n"


def tex_standin(bin_dir: Path) -> str:
    """PATH with the TeX stand-in (in ``bin_dir``) first, then this environment's bin."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "tectonic").write_text(TEX_STANDIN)
    (bin_dir / "tectonic").chmod(0o755)
    return os.pathsep.join([str(bin_dir), str(BIN), os.environ["PATH"]])


@pytest.fixture(scope="module")
def tex_path(tmp_path_factory) -> str:
    return tex_standin(tmp_path_factory.mktemp("texbin"))


def run_as_typed(wd: Path) -> None:
    """A fresh checkout in ``wd`` whose default scale is set to tiny (the demo trains for 20
    minutes), after the command users type: `snakemake results/fig2.pdf` (no --cores, no
    --config), then `snakemake all` (the paper with the TeX stand-in)."""
    # with the checkout's compiled kernels, as copy_workflow: a clone compiles them from nothing
    # (about 3 CPU-minutes in its training server's warm-up), which the session's first warm-up
    # already does in CI's clean clone; here it was the suite's longest set-up
    with_compiled_kernels(fresh_checkout(wd))
    set_default_scale(wd, "tiny")
    typed(wd, "snakemake results/fig2.pdf", check=True)
    tex = tex_standin(wd.with_name(wd.name + "-texbin"))
    typed(wd, "snakemake all", path=tex, check=True)  # the rest of TARGETS, the searches' files, the paper


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """This module's own copy of the test session's run_as_typed (workflow_copy.finished_run)."""
    return private_copy(finished_run(tmp_path_factory, "tiny-typed", run_as_typed), tmp_path_factory.mktemp("clone"))


@pytest.fixture
def wd(finished, tmp_path):
    return private_copy(finished, tmp_path)


def run(wd: Path, *args, check=True):
    return typed(wd, " ".join(["snakemake", "--cores", "1", *args]), check=check)


# --------------------------------------------------------------------------- the commands as typed
def test_the_plain_command_builds_the_figure_of_the_configs_scale(finished):
    link = finished / "results/fig2.pdf"
    assert link.is_symlink() and os.readlink(link) == "tiny/fig2.pdf" and link.resolve().is_file()
    again = typed(finished, "snakemake results/fig2.pdf", check=True)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_figure_of_the_default_demo_scale_plans_as_typed(tmp_path):
    wd = fresh_checkout(tmp_path)
    p = typed(wd, "snakemake -n results/fig1.pdf", check=True)
    assert re.search(r"rule current:\s+input: results/demo/fig1\.pdf\s+output: results/fig1\.pdf", p.stdout), p.stdout[-2000:]


def test_switching_scales_repoints_the_link_and_another_scales_figure_is_explained(finished):
    p = typed(finished, "snakemake -n results/fig2.pdf --config scale=demo", check=True)
    assert re.search(r"rule current:\s+input: results/demo/fig2\.pdf", p.stdout), p.stdout[-2000:]
    p = typed(finished, "snakemake -n results/fig3.pdf")  # a figure of the demo scale, not of tiny
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "scale tiny" in out and "--config scale=" in out, out[-2000:]
    assert "MissingRuleException" not in out


def test_the_slurm_profile_says_conda_is_missing_before_building_the_dag(tmp_path):
    wd = fresh_checkout(tmp_path)
    path = f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin"
    if shutil.which("conda", path=path):
        pytest.skip("conda is on this machine's PATH")
    t0 = time.perf_counter()
    p = typed(wd, "snakemake --profile slurm all -n", path=path)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "`conda` is not on PATH" in out, out[-3000:]
    assert "Building DAG" not in out
    print(f"refused after {time.perf_counter() - t0:.1f} s")


FAKE_CONDA = """#!/bin/sh
# answers what a Snakemake dry run asks conda
case "$*" in
  "info --json") echo '{"conda_prefix": "/nonexistent", "platform": "linux-64"}';;
  "--version") echo "conda 24.11.0";;
  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}';;
  *) exit 1;;
esac
"""


def test_the_slurm_profile_plans_as_typed_beside_the_workflow_profile(tmp_path):
    """`snakemake --profile slurm all -n` with conda on PATH (a stand-in answering what a dry run
    asks) and the workflow's own profile: both are used and the tiny grid plans."""
    wd = fresh_checkout(tmp_path / "wf")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/conda").write_text(FAKE_CONDA)
    (tmp_path / "bin/conda").chmod(0o755)
    p = typed(wd, "snakemake --profile slurm all -n", path=f"{tmp_path / 'bin'}{os.pathsep}{BIN}{os.pathsep}/usr/bin:/bin",
              env={"ARREPRO_SCALE": "tiny"}, check=True)
    assert re.search(r"Using profiles? slurm and workflow specific profile profiles/default", p.stderr), p.stderr
    round0 = len(Searches(Grid(yaml.safe_load((wd / "config.yaml").read_text()), "tiny")).round0_cells())
    assert re.search(rf"^train\s+{round0}$", p.stdout, re.M), p.stdout[-2000:]  # the searches' round 0


def test_paper_numbers_by_hand_reads_the_scales_tables(wd):
    p = typed(wd, "python scripts/paper_numbers.py", check=True)
    by_hand = (wd / "results/tiny/paper/numbers.tex").read_text()
    assert "results/tiny/tables" in p.stdout
    run(wd, "results/tiny/paper/numbers.tex", "--forcerun", "paper_numbers")  # (--forcerun takes every name after it)
    assert (wd / "results/tiny/paper/numbers.tex").read_text() == by_hand  # the workflow's own


# --------------------------------------------------------------------------- config errors, other runs
def test_an_unknown_top_level_key_is_one_short_message(tmp_path):
    wd = fresh_checkout(tmp_path)
    with open(wd / "config.yaml", "a") as f:
        f.write("wdith: 3\n")
    p = typed(wd, "snakemake -n")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "'wdith'" in out and "config.yaml" in out
    assert len(out.splitlines()) <= 6, out[:3000]


def test_a_second_run_is_told_another_run_holds_the_folder(wd):
    """The first run is inside a (slowed) data job; the second is told who holds the folder,
    with its pid, instead of "use --rerun-incomplete"."""
    with open(wd / "scripts/make_data.py", "a") as f:
        f.write("\nimport time\ntime.sleep(120)\n")
    shutil.rmtree(wd / TASK)
    shutil.rmtree(wd / "results/tiny/logs/data")
    first = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1", *TARGETS], cwd=wd, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not list(wd.glob("results/tiny/logs/data/*.log")) and time.time() < deadline:
            time.sleep(0.5)
        assert first.poll() is None, "the first run ended early"
        second = run(wd, *TARGETS, check=False)
        out = second.stdout + second.stderr
        assert second.returncode != 0 and "another Snakemake run holds this folder" in out, out[-3000:]
        assert f"pid {first.pid}" in out
        dry = run(wd, "-n", *TARGETS, check=False)
        assert f"pid {first.pid}" in dry.stderr
    finally:  # the first run and its job (its own process group)
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(60)


# --------------------------------------------------------------------------- damaged tables
def test_a_truncated_table_is_rebuilt_not_used(wd):
    """Issue 18's case: 40 bytes cut off the best table and off cells.csv after a finished run.
    The rerun rebuilds both (naming them) and the figure from the true table."""
    good = {t: (wd / t).read_bytes() for t in (BEST, "results/tiny/tables/cells.csv")}
    figure = (wd / "results/tiny/fig2.pdf").stat().st_mtime_ns
    for t in good:
        with open(wd / t, "r+b") as f:
            f.truncate(len(good[t]) - 40)
    p = run(wd, *TARGETS)
    for t, data in good.items():
        assert (wd / t).read_bytes() == data
        assert t in p.stderr
    assert (wd / "results/tiny/fig2.pdf").stat().st_mtime_ns > figure  # redrawn from the true table


def test_a_best_table_missing_its_last_row_is_rebuilt(wd):
    table = wd / BEST
    good = table.read_text()
    table.write_text("".join(good.splitlines(keepends=True)[:-1]))
    dry = run(wd, "-n", *TARGETS)  # the plan shows the rebuild
    assert re.search(r"^aggregate\s+1$", dry.stdout, re.M) and BEST in dry.stderr, dry.stdout[-2000:]
    run(wd, *TARGETS)
    assert table.read_text() == good


def test_a_damaged_table_read_by_hand_is_named(tmp_path, finished):
    best = tmp_path / "fig2_best.csv"
    write_table(pd.read_csv(finished / BEST), best)
    read_best_table(best)
    best.write_text("".join(best.read_text().splitlines(keepends=True)[:-1]))  # its last row cut
    with pytest.raises(UnreadableFile, match=re.escape(str(best)) + ".*checksum"):
        read_best_table(best)
    # the figure script by hand: the error names the file
    p = typed(ROOT, f"python scripts/plot_figure.py --kind width --best {best} --cells {finished / 'results/tiny/tables/fig2_cells.csv'}"
                    f" --title t --scale tiny {tmp_path / 'f.pdf'}")
    assert p.returncode != 0 and str(best) in p.stderr, p.stderr[-2000:]


def test_a_hand_made_table_with_a_missing_value_is_named(tmp_path, finished):
    cells = tmp_path / "fig2_cells.csv"
    text = (finished / "results/tiny/tables/fig2_cells.csv").read_text()
    *rows, last = text.rstrip().splitlines()
    cell_dir = next(f for f in last.split(",") if f.startswith("results/cells/"))
    cells.write_text("\n".join(rows + [last.replace(f",{cell_dir},", ",,")]) + "\n")  # the last row's cell_dir emptied
    with pytest.raises(UnreadableFile, match=re.escape(str(cells)) + ".*'cell_dir'.*line 3"):
        read_cells_table(cells)


# --------------------------------------------------------------------------- damaged datasets
@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_dataset_is_regenerated_and_nothing_retrains(wd, damage):
    data = wd / TASK / "train.npz"
    good, results = data.read_bytes(), sorted(wd.glob("results/cells/**/result.json"))
    stamps = [r.stat().st_mtime_ns for r in results]
    if damage == "truncate":
        data.write_bytes(good[:-100])
    else:
        data.write_bytes(good[:1000] + bytes(b ^ 0xFF for b in good[1000:1100]) + good[1100:])
    dry = run(wd, "-n", *TARGETS)
    assert str(data.relative_to(wd)) in dry.stderr and data.read_bytes() != good  # a dry run changes nothing
    p = run(wd, *TARGETS)
    assert data.read_bytes() == good
    assert f"{data.relative_to(wd)}: damaged" in p.stderr and "no cell is retrained" in p.stderr
    assert "rule train:" not in p.stdout + p.stderr
    assert [r.stat().st_mtime_ns for r in results] == stamps


def test_a_damaged_dataset_without_a_recorded_checksum_is_regenerated_and_its_cells_retrain(wd):
    (wd / TASK / "manifest.json").unlink(missing_ok=True)  # (the code before it wrote none)
    data = wd / TASK / "train.npz"
    good = data.read_bytes()
    data.write_bytes(good[: len(good) // 2])
    p = run(wd, *TARGETS)
    assert data.read_bytes() == good and "no checksum was recorded" in p.stderr
    assert all(json.loads(r.read_text())["final_accuracy"] >= 0 for r in wd.glob("results/cells/**/result.json"))
    assert json.loads((wd / TASK / "manifest.json").read_text())["train.npz"]["size"] == len(good)


# --------------------------------------------------------------------------- text drawn as written
TITLE = r"$\foo$ costs <5 | 10% & more"
SERIES = "budget in US$"


def test_config_text_with_dollars_is_drawn_and_typeset_as_written(wd):
    """The figure is drawn and the paper built (where TeX is installed: tests/test_paper.py
    installs it as root) with a '$' in a series and '$\\foo$' in a title."""
    def edit(c):
        fig2 = c["scales"]["tiny"]["experiments"]["fig2"]
        fig2["title"], fig2["grids"][0]["series"] = TITLE, SERIES
    edit_config(wd, edit)
    tex = shutil.which("pdflatex") and shutil.which("bibtex")
    p = run(wd, "results/tiny/fig2.pdf", "results/tiny/paper.pdf" if tex else "results/tiny/paper/numbers.tex", check=False)
    log = wd / "results/tiny/logs/paper.log"
    assert p.returncode == 0, p.stderr[-2000:] + (log.read_text()[-2000:] if log.exists() else "")
    assert pd.read_csv(wd / BEST)["series"].tolist() == [SERIES]
    for f in ("numbers.tex", "setup.tex"):
        text = (wd / "results/tiny/paper" / f).read_text()
        assert r"\$" not in text  # LaTeX's text dollar needs TS1 fonts (bitmaps on Debian): see paper.py
    assert tex_escape(TITLE) in (wd / "results/tiny/paper/numbers.tex").read_text()
    if not tex:
        pytest.skip("the figure and numbers.tex built; the PDF needs pdflatex and bibtex")


def test_escaping_functions():
    assert literal(r"$\foo$ in US$") == r"\$\foo\$ in US\$"
    assert "$" not in tex_escape("US$").replace(r"\ensuremath{\mathdollar}", "")
    assert tex_escape("<a|b>") == r"\textless{}a\textbar{}b\textgreater{}"


def test_a_table_typesets_a_dollar_in_a_label_without_the_text_dollar(tmp_path, finished):
    best = pd.read_csv(finished / BEST)
    write_table(best, tmp_path / "b.csv")
    write_table(pd.read_csv(finished / "results/tiny/tables/fig2_cells.csv"), tmp_path / "c.csv")
    attention = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]["attention"]
    attention["card"]["label"] = "Attn (US$ 5 <x>)"
    render_table("accuracy", tmp_path / "b.csv", tmp_path / "c.csv", {"attention": attention},
                 "final_accuracy", "tiny", tmp_path / "t.csv", tmp_path / "t.tex")
    tex = (tmp_path / "t.tex").read_text()
    assert r"Attn (US\ensuremath{\mathdollar} 5 \textless{}x\textgreater{})" in tex and r"\$" not in tex


# --------------------------------------------------------------------------- issue 24: the search's own files
FIG1_ROUNDS = "results/tiny/searches/rounds/cells_10min-fig1"  # fig1's search (attention 2x32 on L8)
FIG2_ROUNDS = "results/tiny/searches/rounds/cells_10min-fig2"  # fig2's fixed grid


def last_round(group: str) -> int:
    """The round whose plan is a group's last (arrepro.search.rounds.Searches.final_round)."""
    return Searches(Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "tiny")).final_round(group)


FIG1_LAST, FIG2_LAST = last_round("cells_10min-fig1"), last_round("cells_10min-fig2")  # 3 and 1 today


def outputs(wd: Path) -> dict[str, bytes]:
    """What `all` ends with: the tables, the searches' decision files, the paper's numbers and
    the (stand-in) paper."""
    files = [*wd.glob("results/tiny/tables/*.csv"), *wd.glob("results/tiny/searches/*/**/*.json"),
             wd / "results/tiny/paper/numbers.tex", wd / "results/tiny/paper.pdf"]
    return {str(f.relative_to(wd)): f.read_bytes() for f in files if "/rounds/" not in str(f)}


def same_as(wd: Path, clean: dict) -> list[str]:
    """The files of ``clean`` that differ now (files that only exist now are not compared)."""
    now = outputs(wd)
    return [f for f in clean if now.get(f) != clean[f]]


def run_all(wd: Path, tex_path: str, *args, check=True):
    return typed(wd, " ".join(["snakemake", "--cores", "1", "all", *args]), path=tex_path, check=check)


def fig1_cell(wd: Path, lr: str) -> Path:
    return next(wd.glob(f"results/cells/mqar-L8-*/attention/w32-l2/*/lr{lr}-s0"))


def test_switching_the_protocol_or_the_round_budget_and_back_ends_as_a_clean_run(wd, tex_path):
    """Issue 24, case 1: after `--config lr_protocol=grid` and back to the default, and after
    `rounds: 2 -> 1 -> 2`, one `snakemake all` ends with the tables, decision files and paper of
    a clean run."""
    clean = outputs(wd)
    run_all(wd, tex_path, "--config", "lr_protocol=grid")
    assert "results/tiny/tables/fig1_best.csv" in same_as(wd, clean)  # the fixed grid's numbers
    p = run_all(wd, tex_path)
    assert not same_as(wd, clean), p.stderr[-3000:]
    cfg = wd / "config.yaml"
    text = cfg.read_text()
    assert "tiny: {start: [1.0e-2, 3.16e-2], range: [1.0e-4, 1.0e-1], rounds: 2}" in text
    cfg.write_text(text.replace("range: [1.0e-4, 1.0e-1], rounds: 2}", "range: [1.0e-4, 1.0e-1], rounds: 1}"))
    run_all(wd, tex_path)  # (the last plan of `rounds: 2` stays, made from another round before it)
    cfg.write_text(text)
    p = run_all(wd, tex_path)
    assert not same_as(wd, clean), p.stderr[-3000:]


def test_an_edited_plan_a_truncated_plan_and_a_garbled_decision_file_are_rebuilt(wd, tex_path):
    """Issue 24, case 2: a valid-JSON edit of the last plan's chosen learning rate, an intermediate
    plan cut short and a garbled decision file: each named before any job, each rebuilt from the
    cells; the tables, decision files and paper are a clean run's."""
    clean = outputs(wd)
    last = wd / FIG1_ROUNDS / f"round{FIG1_LAST}.json"
    plan = json.loads(last.read_text())
    state = next(iter(plan["searches"].values()))["state"]
    state["chosen_lr"] = 0.0316  # one of the learning rates it tried, not the one it chose
    last.write_text(json.dumps(plan, indent=1))
    assert FIG1_LAST >= 2  # an intermediate plan to damage
    middle = wd / FIG1_ROUNDS / f"round{FIG1_LAST - 1}.json"
    middle.write_text(middle.read_text()[:80])
    decision = next(wd.glob("results/tiny/searches/mqar-L8-*/**/*.json"))
    decision.write_bytes(bytes(b ^ 0x20 for b in decision.read_bytes()))
    dry = run_all(wd, tex_path, "-n")
    for f in (last, middle, decision):
        assert f"{f.relative_to(wd)}: " in dry.stderr, dry.stderr[-3000:]
    p = run_all(wd, tex_path)
    assert not same_as(wd, clean), p.stderr[-3000:]
    middle.write_text("{")  # read by hand: named, with the fix
    with pytest.raises(UnreadableFile, match=re.escape(str(middle)) + ": not valid JSON.*rebuilds"):
        Plan.read(middle)


def test_deleted_plans_and_a_cell_deleted_meanwhile_are_rebuilt(wd, tex_path):
    """Issue 24, case 2: an intermediate plan (fig1's round before its last) and a last one
    (fig2's) deleted, and while they are missing a round-0 cell's result: all rebuilt (the cell
    from its checkpoint), ending as a clean run."""
    clean = outputs(wd)
    (wd / FIG1_ROUNDS / f"round{FIG1_LAST - 1}.json").unlink()
    (wd / FIG2_ROUNDS / f"round{FIG2_LAST}.json").unlink()
    cell = fig1_cell(wd, "0.01")
    for f in ("result.json", "metrics.jsonl"):
        (cell / f).unlink()
    p = run_all(wd, tex_path)
    assert (cell / "result.json").exists() and (wd / FIG1_ROUNDS / f"round{FIG1_LAST - 1}.json").exists()
    assert not same_as(wd, clean), p.stderr[-3000:]


def test_a_rebuilt_cell_reruns_every_search_round_that_read_it(wd, tex_path):
    """Issue 24, case 6: a round-0 cell of fig1's search deleted and made again (here from its
    checkpoint, byte for byte; a retrain from scratch differs at least in its timings): every
    round of its search runs again, each having read it, not only round 1 and the tables."""
    cell = fig1_cell(wd, "0.01")
    for f in ("result.json", "metrics.jsonl"):
        (cell / f).unlink()
    p = run_all(wd, tex_path)
    out = p.stdout + p.stderr
    rounds = set(re.findall(r"group cells_10min-fig1, round (\d+): decides", out))
    assert rounds == {str(r) for r in range(1, FIG1_LAST + 1)}, out[-3000:]


def test_code_edited_while_the_workflow_runs_stops_the_jobs_planned_with_the_old_code(wd, tex_path):
    """Issue 24, case 6: attention's code edited while the workflow runs (here by the search's
    round job, as a user's editor would between two jobs): the cells planned after it are not
    trained with the new code beside cells of the old one; the run stops, naming the file."""
    start = {"0.01", "0.0316"}  # fig1's round 0
    shutil.rmtree(wd / FIG1_ROUNDS)
    later = [c for c in wd.glob("results/cells/mqar-L8-*/attention/w32-l2/*/lr*-s0")
             if c.name.removeprefix("lr").removesuffix("-s0") not in start]
    assert later
    for c in later:
        shutil.rmtree(c)
    with open(wd / "scripts/search_round.py", "a") as f:
        f.write('\nwith open("src/arrepro/models/mixers/attention.py", "a") as edit:\n'
                '    edit.write("\\n_EDITED_WHILE_THE_WORKFLOW_RUNS = 1\\n")\n')
    p = run_all(wd, tex_path, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    assert "changed since the workflow planned it (src/arrepro/models/mixers/attention.py)" in out, out[-3000:]
    assert not [c for c in later if (c / "result.json").exists()]  # nothing trained with the edited code


def test_an_output_of_another_scale_names_the_config_to_add(finished):
    """Issue 24, case 6: results/demo/fig1.pdf while config.yaml's scale is tiny."""
    p = typed(finished, "snakemake -n results/demo/fig1.pdf")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "--config scale=demo" in out, out[-3000:]
    assert "No rule to produce" not in out and "MissingRuleException" not in out


def test_a_regular_file_where_the_link_goes_is_replaced_and_a_folder_is_named(wd):
    """Issue 24, case 4: results/fig2.pdf an old regular file, then a folder."""
    link = wd / "results/fig2.pdf"
    link.unlink()
    link.write_bytes(b"an old copy of a figure")
    run(wd, "results/fig2.pdf")
    assert link.is_symlink() and os.readlink(link) == "tiny/fig2.pdf"
    link.unlink()
    link.mkdir()
    p = run(wd, "results/fig2.pdf", check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "results/fig2.pdf: a folder" in out and "mv results/fig2.pdf" in out, out[-3000:]


def immutable(path: Path, on: bool) -> bool:
    """chattr +i / -i (a folder nobody may write in, root included); False where it cannot."""
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_a_read_only_cell_or_table_folder_stops_the_run_in_one_line(wd, tex_path):
    """Issue 24, case 6: a cell's folder and the tables' folder that refuse writes: one line
    naming both before any job, not Snakemake's crash removing the old outputs."""
    cell = fig1_cell(wd, "0.01")
    for f in ("result.json", "checkpoint.pt"):
        (cell / f).unlink()
    (wd / BEST).unlink()
    tables = wd / "results/tiny/tables"
    if shutil.which("chattr") is None or not immutable(cell, True):
        pytest.skip("cannot make a folder read-only for this user (chattr +i)")
    try:
        assert immutable(tables, True)
        p = run_all(wd, tex_path, check=False)
    finally:
        immutable(cell, False)
        immutable(tables, False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "stopping before any job" in out, out[-3000:]
    assert f"{cell.relative_to(wd)}: cannot write in this folder" in out and "results/tiny/tables: cannot write" in out
    assert "PermissionError" not in out and "Error in rule" not in out


# ------------------------------------------------------------------------- issue 32: trust, round 6
def test_a_deleted_last_plan_of_a_finished_search_is_rebuilt(wd, tex_path):
    """Round 6, 7: fig1's last round plan deleted from a finished run: the next `snakemake all`
    said "Nothing to be done" (a missing file that only finished jobs read is not rebuilt by
    Snakemake). It is rebuilt now, from the cells, training nothing, and the run ends as a clean
    one."""
    clean = outputs(wd)
    last = wd / FIG1_ROUNDS / f"round{FIG1_LAST}.json"
    last.unlink()
    p = run_all(wd, tex_path)
    out = p.stdout + p.stderr
    assert last.exists(), out[-3000:]
    assert f"group cells_10min-fig1, round {FIG1_LAST}: decides" in out and "rule train:" not in out, out[-3000:]
    assert not same_as(wd, clean)


def test_an_empty_experiments_mapping_is_one_line_and_deletes_nothing(wd, tex_path):
    """Round 6, 3: `experiments: {}` passed the schema; two jobs then died with pandas' "No objects
    to concatenate", and tables/cells.csv was deleted with its .sha256 left beside it. Now one
    line naming the key, before any job; every table stays as it was."""
    tables = {f: f.read_bytes() for f in (wd / "results/tiny/tables").iterdir()}
    cfg = yaml.safe_load((wd / "config.yaml").read_text())
    cfg["scales"]["tiny"]["experiments"] = {}
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    p = run_all(wd, tex_path, check=False)
    out = p.stdout + p.stderr
    error = [line for line in out.splitlines() if line.startswith("config.yaml")]
    assert p.returncode != 0 and len(error) == 1 and "scales.tiny.experiments" in error[0], out[-3000:]
    assert "Job stats" not in out and "No objects to concatenate" not in out, out[-3000:]
    assert {f: f.read_bytes() for f in (wd / "results/tiny/tables").iterdir()} == tables


# a stand-in for TeX that reads what pdflatex reads first (paper/main.tex, through the build folder's links)
TEX_READS = ("#!/bin/sh\n# a stand-in for tectonic that opens the manuscript as TeX would\n"
             "cat paper/main.tex paper/refs.bib > /dev/null || exit 1\ncat results/paper/numbers.tex > main.pdf\n")


def test_results_as_a_link_to_another_folder_builds_the_paper(wd, tmp_path):
    """Round 6, 2: `results` a link to a folder elsewhere (another disk): every cell trained, then
    the paper job failed ("I can't find file `paper/main.tex'": the build folder's relative link
    to paper/ resolved inside the link's target). The paper is built now."""
    elsewhere = tmp_path / "another-disk"
    elsewhere.mkdir()
    shutil.move(wd / "results", elsewhere / "results")
    (wd / "results").symlink_to(elsewhere / "results")
    (wd / "results/tiny/paper.pdf").unlink()
    bin_dir = tmp_path / "texbin"
    bin_dir.mkdir()
    (bin_dir / "tectonic").write_text(TEX_READS)
    (bin_dir / "tectonic").chmod(0o755)
    p = run_all(wd, os.pathsep.join([str(bin_dir), str(BIN), os.environ["PATH"]]), check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:] + (wd / "results/tiny/logs/paper.log").read_text()[-2000:]
    assert (elsewhere / "results/tiny/paper.pdf").read_bytes() == (wd / "results/tiny/paper/numbers.tex").read_bytes()
