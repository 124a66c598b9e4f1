"""Each rule's code digest covers exactly the package modules its job loads (issues 23, 38).

The lists arrepro.config.catalogue derives from the imports (``script_sources``, ``train_sources``) are
checked against two independent traces: they hold every module that importing the script loads
(the interpreter's own ``sys.modules``: a lower bound) and only modules that the standard library's
``modulefinder``, which reads the compiled bytecode of every function, finds the script importing
anywhere (an upper bound: a module imported only inside a function that the job never calls is
left out, issue 38). Every rule that runs a Python script records the digest of its own script's
list. And a code edit of any module of the package changes the digest of exactly the rules whose
jobs load it (a comment edit: of none). The workflow's own dry runs of such edits:
tests/test_workflow.py (``test_a_code_edit_reruns_the_rules_that_import_it``).
No Snakemake run here: a few seconds.
"""
import json
import modulefinder
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arrepro.config.catalogue import mixer_names
from arrepro.digest import source_digest, statements

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "arrepro"
TRAIN_SCRIPT = "scripts/train_cell.py"  # the train rule's (a shell command)
RULE_FILES = sorted((ROOT / "workflow/rules").glob("*.smk"))


class _PackageFinder(modulefinder.ModuleFinder):
    """modulefinder restricted to this package: any other top-level module is not looked for."""

    def find_module(self, name, path, parent=None):
        if path is None and name != PACKAGE:
            raise ImportError(name)
        return super().find_module(name, path, parent)


def _package_files(finder, root: Path) -> set[str]:
    return {str(Path(m.__file__).relative_to(root)) for name, m in finder.modules.items()
            if name.split(".")[0] == PACKAGE and m.__file__}


def traced(root: Path, script: str, *modules: str) -> set[str]:
    """What modulefinder finds ``script`` importing (and ``modules``, imported by name), with it."""
    finder = _PackageFinder(path=[str(root / "src")])
    finder.run_script(str(root / script))
    for m in modules:
        finder.import_hook(m)
    return _package_files(finder, root) | {script}


def dynamic_modules(mixer: str) -> list[str]:
    """The modules the package imports by name for a cell of ``mixer``: the mixer's module
    (models.registry) and the fused CPU kernel its class names (models.kernels), asked of the
    imported classes themselves."""
    from arrepro.models import get_mixer
    from arrepro.models.kernels import KERNELS
    from arrepro.models.registry import mixer_module

    from arrepro.models import ops

    cls = get_mixer(mixer)
    named = [getattr(cls, "cpu_kernel_name", None), getattr(cls, "block_cpu_kernel_name", None)]
    # the blocks of ops.py every model file imports name theirs too (the linear layers, the short conv)
    named += [getattr(c, "cpu_kernel_name", None) for c in vars(ops).values() if isinstance(c, type)]
    return [mixer_module(mixer)] + list(dict.fromkeys(KERNELS[k].module for k in named if k))


def rule_blocks():
    """(rules file, rule name, the rule's text) of every rule in workflow/rules/*.smk."""
    for f in RULE_FILES:
        text = f.read_text()
        starts = [(m.start(), m[1]) for m in re.finditer(r"^(?:rule|checkpoint) (\w+):", text, re.M)]
        for (start, name), (end, _) in zip(starts, starts[1:] + [(len(text), None)]):
            after = re.search(r"^\S", text[start:end].split("\n", 1)[1], re.M)  # the rule's indented lines
            yield f, name, text[start:end] if after is None else text[start:start + text[start:end].index("\n") + 1 + after.start()]


def shell_command(f: Path, block: str) -> str | None:
    """The text of a rule's ``shell:`` command: written in the rule, or a constant of its rules
    file (``shell: TRAIN_COMMAND``, defined before the rule as ``TRAIN_COMMAND = ...``)."""
    m = re.search(r"^    shell:\s*\n\s*(\w+)\s*$", block, re.M)
    if m is None:
        m = re.search(r"^    shell:\s*\n(.*)", block, re.M | re.S)
        return m and m[1]
    text = f.read_text()
    start = re.search(rf"^{m[1]} = ", text, re.M)
    assert start, f"{f.name}: shell: {m[1]}, a name the file does not define"
    end = re.search(r"^(?:rule|checkpoint) ", text[start.end():], re.M)
    return text[start.end():start.end() + (end.start() if end else len(text))]


def rule_scripts() -> dict[str, str]:
    """Rule -> the Python script it runs (a ``script:`` directive or a ``python scripts/...``
    shell command), read from workflow/rules/*.smk."""
    out = {}
    for f, name, block in rule_blocks():
        block += shell_command(f, block) or ""
        runs = re.search(r'script:\s*"\.\./\.\./(scripts/\w+\.py)"|python (scripts/\w+\.py)', block)
        if runs:
            out[name] = runs[1] or runs[2]
    return out


def test_every_rule_that_runs_a_script_records_its_scripts_digest():
    """Its code param is ``script_code("scripts/X.py")`` of the script it runs, or the train
    rule's ``train_code`` (TRAIN_SCRIPT and the mixer's modules)."""
    scripts = rule_scripts()
    assert {"data", "train", "search_round", "search_reports", "aggregate", "cells_table", "figure", "table",
            "paper_numbers"} <= set(scripts), scripts
    for f, name, block in rule_blocks():
        if name not in scripts:
            continue
        named = re.search(r'code=script_code\("(scripts/\w+\.py)"[,)]', block)
        if named is None:
            assert scripts[name] == TRAIN_SCRIPT and "code=lambda wc: train_code(" in block, \
                f"{f.name}: rule {name} runs {scripts[name]} without its code digest, script_code({scripts[name]!r})"
        else:
            assert named[1] == scripts[name], f"{f.name}: rule {name} runs {scripts[name]}, records the digest of {named[1]}"


def test_every_shell_rule_records_its_command():
    """Snakemake's own code trigger is off (profiles/default/config.yaml: the recorded code digests
    are the only code trigger), so a shell rule's command is a constant of its rules file that the
    rule records as its param ``command`` (``command_param``): an edit of it reruns the rule's jobs."""
    shells = 0
    for f, name, block in rule_blocks():
        m = re.search(r"^    shell:\s*\n\s*(\S.*)$", block, re.M)
        if m is None:
            continue
        shells += 1
        const = m[1].strip()
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", const), (
            f"{f.name}: rule {name} writes its shell command in the rule; make it a constant its params record "
            "(command=command_param(NAME))")
        assert f"command=command_param({const})" in block, f"{f.name}: rule {name} does not record {const} as a param"
    assert shells >= 4  # data, train, gpu_pack, paper


def test_the_workflow_profile_leaves_snakemakes_code_trigger_off():
    """A move of code between modules edits the scripts' import lines: Snakemake's code trigger
    (a `script:` rule reruns when its script's file is newer than its outputs) would rerun them."""
    import yaml

    triggers = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())["rerun-triggers"]
    assert set(triggers) == {"mtime", "params", "input", "software-env"}, triggers


# one process imports the heavy libraries once, then forks a child per script that imports it
# (run_path, not as __main__ and not under Snakemake: only what its top level imports) and prints
# the package's modules in its sys.modules
LOADED = """
import json, os, runpy, sys
from pathlib import Path
import matplotlib, numpy, pandas, yaml  # noqa: F401,E401 (inherited by every child; no script imports torch at its top)
matplotlib.use("Agg")
import seaborn  # noqa: F401,E402
for script in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        runpy.run_path(script, run_name="imported")
        found = sorted(str(Path(m.__file__).resolve()) for n, m in list(sys.modules.items())
                       if n.split(".")[0] == "arrepro" and getattr(m, "__file__", None))
        print(json.dumps([script, found]), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, script
"""


def loaded_on_import(*scripts: str) -> dict[str, set[str]]:
    """The package's modules (with the script) that importing each script loads, from the
    interpreter's own ``sys.modules``."""
    p = subprocess.run([sys.executable, "-c", LOADED, *(str(ROOT / s) for s in scripts)], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    out = {}
    for line in p.stdout.splitlines():
        script, found = json.loads(line)
        rel = str(Path(script).relative_to(ROOT))
        out[rel] = {str(Path(f).relative_to(ROOT)) for f in found} | {rel}
    assert set(out) == set(scripts), p.stdout[-2000:]
    return out


def test_the_derived_sources_are_what_the_scripts_load():
    """script_sources (syntax trees, what the job can run) between what importing the script
    loads and what modulefinder (bytecode) finds it importing anywhere, for every rule's script,
    the data job's sources (a checkpoint's fingerprint), and the train rule's sources of every
    mixer, whose module and CPU kernel the package imports by name."""
    from arrepro.config.catalogue import data_sources, script_sources, train_sources

    scripts = sorted(set(rule_scripts().values()))
    on_import = loaded_on_import(*scripts)
    for script in scripts:
        listed = set(script_sources(script, ROOT))
        assert on_import[script] <= listed <= traced(ROOT, script), script
    assert set(data_sources(ROOT)) <= traced(ROOT, "scripts/make_data.py")
    for mixer in sorted(mixer_names()):
        listed = set(train_sources(mixer, ROOT))
        assert on_import[TRAIN_SCRIPT] <= listed <= traced(ROOT, TRAIN_SCRIPT, *dynamic_modules(mixer)), mixer
        assert {f"src/arrepro/{m.replace('.', '/').removeprefix('arrepro/')}.py" for m in dynamic_modules(mixer)} <= listed


def test_the_paper_loads_no_mixer_and_the_blocks_figure_its_mamba():
    """Issue 38: a real edit of models/mixers/mamba.py reran the tiny scale's paper, which trains
    no Mamba: report/blocks.py imports the mixer (and the trainer) inside the functions that build
    and walk a block, which only the block_structure rule runs."""
    from arrepro.config.catalogue import script_sources

    numbers = script_sources("scripts/paper_numbers.py", ROOT)
    assert "src/arrepro/report/blocks.py" in numbers  # (for its figure names)
    assert not [f for f in numbers if f.startswith(("src/arrepro/models/", "src/arrepro/train/"))], numbers
    assert "src/arrepro/models/mixers/mamba.py" in script_sources("scripts/block_structure.py", ROOT)


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """The package and the scripts, to edit."""
    dst = tmp_path_factory.mktemp("src")
    for d in ("src/arrepro", "scripts"):
        shutil.copytree(ROOT / d, dst / d, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def rule_sources(root: Path, scripts) -> dict[str, list[str]]:
    """The sources of each rule script (the train rule's: one list per mixer), as the workflow
    lists them."""
    from arrepro.config.catalogue import script_sources, train_sources

    out = {s: script_sources(s, root) for s in scripts if s != TRAIN_SCRIPT}
    out.update({f"train {m}": train_sources(m, root) for m in sorted(mixer_names())})
    return out


def test_a_code_edit_of_any_module_changes_exactly_the_rules_that_load_it(copy):
    """Each module of the package in turn gets a statement appended (code), then a comment and a
    reworded docstring instead: the code edit changes the digests of the rules whose job loads
    it and no other; the comment edit changes none."""
    from test_workflow import CODE_EDIT, comment_edit

    scripts = set(rule_scripts().values())
    sources = rule_sources(copy, scripts)
    uses = sources  # what each rule's job loads (bounded by two traces: test_the_derived_sources_are_what_the_scripts_load)

    def digests():
        return {k: source_digest(files, copy) for k, files in sources.items()}

    base = digests()
    modules = sorted(str(p.relative_to(copy)) for p in (copy / "src" / PACKAGE).rglob("*.py"))
    assert len(modules) > 30
    for module in modules:
        path = copy / module
        original = path.read_text()
        try:
            path.write_text(original + CODE_EDIT)
            changed = {k for k, v in digests().items() if v != base[k]}
            assert changed == {k for k, files in uses.items() if module in files}, module
            path.write_text(original)
            before = statements(path)
            comment_edit(path)
            assert statements(path) == before, f"{module}: a comment edit changed its code"  # so no digest
        finally:
            path.write_text(original)


def move_pm(root: Path) -> None:
    """Issue 38's refactor: ``_pm`` moved from report/tables.py to report/tex.py, tables.py importing it."""
    tables, tex = root / "src/arrepro/report/tables.py", root / "src/arrepro/report/tex.py"
    text = tables.read_text()
    start = text.index("def _pm(")
    end = text.index("\ndef ", start + 1) + 1
    anchor = "from arrepro.report.tex import acc,"
    assert anchor in text
    tables.write_text((text[:start] + text[end:]).replace(anchor, "from arrepro.report.tex import _pm, acc,", 1))
    tex.write_text(tex.read_text().rstrip() + "\n\n\n" + text[start:end].rstrip() + "\n")


# issue 38's edits, each rebinding a name with `as` (the first as the issue wrote it): the rules whose jobs run the
# statements that read the name
RENAMED = [("src/arrepro/report/plots.py", "from arrepro.report.tex import fmt_count, lr_label",
            "from arrepro.report.tex import fmt_count, tex_lr as lr_label", "scripts/plot_figure.py"),
           ("src/arrepro/report/aggregate.py", "from arrepro.files import read_table, write_table",
            "from arrepro.files import read_table, write_text_atomic as write_table", "scripts/aggregate.py"),
           ("src/arrepro/models/mixers/attention.py", "from arrepro.models.ops import ShortConv, apply_rotary, rotary_tables",
            "from arrepro.models.ops import ShortConv, apply_rotary as rotary_tables, rotary_tables as apply_rotary",
            "train attention")]


@pytest.mark.parametrize("module, old, new, rule", RENAMED)
def test_a_name_rebound_with_as_changes_the_digest_of_the_rules_that_run_it(copy, module, old, new, rule):
    """Issue 38: these edits changed no digest: `snakemake all` had nothing to do, a forced run
    drew other figures, stale tables and cells stayed, old checkpoints were resumed."""
    scripts = set(rule_scripts().values())
    sources = rule_sources(copy, scripts)
    base = {k: source_digest(files, copy) for k, files in sources.items()}
    path = copy / module
    original = path.read_text()
    assert old in original
    try:
        path.write_text(original.replace(old, new, 1))
        assert source_digest(rule_sources(copy, scripts)[rule], copy) != base[rule]
    finally:
        path.write_text(original)


def test_a_pure_move_and_an_edit_of_code_no_rule_runs_change_no_other_digest(copy):
    """Issue 38: ``_pm`` moved from report/tables.py to report/tex.py changed the digests of the
    figures and the paper's numbers (which load tex.py, never calling ``_pm``): now no rule's and no
    cell's. A real edit of the Mamba mixer changes Mamba's cells and the blocks figure's structure,
    not the paper's numbers."""
    scripts = set(rule_scripts().values())
    saved = {p: p.read_text() for p in (copy / "src/arrepro/report").glob("*.py")}
    mamba = copy / "src/arrepro/models/mixers/mamba.py"
    saved[mamba] = mamba.read_text()

    def digests():
        return {k: source_digest(files, copy) for k, files in rule_sources(copy, scripts).items()}

    base = digests()
    try:
        move_pm(copy)
        assert digests() == base
        mamba.write_text(saved[mamba] + "\n_AN_EDIT = 1\n")
        changed = {k for k, v in digests().items() if v != base[k]}
        assert changed == {"train mamba", "scripts/block_structure.py"}, changed
    finally:
        for p, text in saved.items():
            p.write_text(text)


def cell_digests(root: Path) -> dict[tuple[str, str], str]:
    """The code digest of a cell of every model of config.yaml, on the CPU and on a GPU, as the
    train rule, the checkpoint's fingerprint and the job's check take it (catalogue.cell_sources)."""
    import yaml

    from arrepro.config.catalogue import cell_sources

    models = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]
    return {(name, device): source_digest(cell_sources(m, root, device), root)
            for name, m in models.items() for device in ("cpu", "cuda")}


# an edit of code only some cells run: (file, old, new, which cells it must rerun: (model, device) -> bool)
CPU_KERNEL_EDITS = [
    # Hyena's fused operator's length limit (issue 55: it lived in models/kernels.py, which every cell
    # loads, and reran every cell of every mixer, on the GPU too): Hyena's CPU cells only
    ("src/arrepro/models/cpu_kernels/hyena_cpu.py", "MAX_LEN = 256", "MAX_LEN = 128",
     lambda model, device, m: device == "cpu" and m["mixer"] == "hyena"),
    # the MLP's kernel (issue 55: it reran Mamba's and Mamba2's cells, which have no MLP): the CPU
    # cells of the models with an MLP only
    ("src/arrepro/models/cpu_kernels/mlp_cpu.py", "def self_check(", "_AN_EDIT = 1\n\n\ndef self_check(",
     lambda model, device, m: device == "cpu" and m.get("mlp", True) is not False),
    # the compiled attention block (it runs only in a block with an MLP): attention's CPU cells with one
    ("src/arrepro/models/cpu_kernels/block_cpu.py", "def self_check(", "_AN_EDIT = 1\n\n\ndef self_check(",
     lambda model, device, m: device == "cpu" and m["mixer"] == "attention" and m.get("mlp", True) is not False),
    # code every CPU cell runs where a model asks for a fused CPU kernel: every CPU cell, no GPU cell
    ("src/arrepro/models/cpu_kernels/linear_cpu.py", "def self_check(", "_AN_EDIT = 1\n\n\ndef self_check(",
     lambda model, device, m: device == "cpu"),
    # code every cell runs (the choice of a CPU kernel's limits, in models/kernels.py): every cell
    ("src/arrepro/models/kernels.py", 'getattr(module, "outside_limits", None)', 'getattr(module, "outside_limit", None)',
     lambda model, device, m: True),
]


@pytest.mark.parametrize("module, old, new, reruns", CPU_KERNEL_EDITS, ids=[e[0].rsplit("/", 1)[1] for e in CPU_KERNEL_EDITS])
def test_a_cells_digest_counts_the_code_its_device_and_model_run(copy, module, old, new, reruns):
    """Issue 55: an edit of a CPU kernel's limit changed the code digest of every cell of every
    mixer, on the CPU and on the GPU (a whole paper grid retrained on a cluster for a constant no GPU
    cell reads), and an edit of mlp_cpu.py reran the cells of models without an MLP. A cell's digest
    counts the code its device and model run: each edit reruns exactly the cells that run it."""
    import yaml

    models = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]
    base = cell_digests(copy)
    path = copy / module
    original = path.read_text()
    assert old in original, module
    try:
        path.write_text(original.replace(old, new, 1))
        changed = {k for k, v in cell_digests(copy).items() if v != base[k]}
    finally:
        path.write_text(original)
    want = {(name, device) for name, device in base if reruns(name, device, models[name])}
    assert want, module  # (the edit reaches some cell)
    assert changed == want, (sorted(changed - want), sorted(want - changed))


def test_the_rule_the_checkpoint_and_the_job_take_one_list_of_a_cells_sources(monkeypatch):
    """The train rule's digest (common.smk's train_code), the checkpoint's fingerprint
    (train.prepare.fingerprint) and the job's check of its planned code (train.job.check_code) read
    a cell's sources through catalogue.cell_sources: a job of a model without an MLP finds the list
    the workflow planned it with (a list of its own would leave its check of its code unmade)."""
    import json as _json

    from arrepro.config.catalogue import cell_sources
    from arrepro.planned import PLANNED, CodeChanged
    from arrepro.train import job

    assert "sources_key(GRID.models[model])" in (ROOT / "workflow/rules/common.smk").read_text()
    assert "code=lambda wc: train_code(wc.model)" in (ROOT / "workflow/rules/train.smk").read_text()
    model_def = {"mixer": "mamba", "position": "none", "mlp": False, "mixer_kwargs": {"d_state": 16}}
    paths = cell_sources(model_def, ROOT, "cpu")
    assert "src/arrepro/models/cpu_kernels/mlp_cpu.py" not in paths
    # planned with a digest the sources no longer have: the job must stop
    record = {"root": str(ROOT), "groups": {"\0".join(paths): "0" * 16}, "files": {}}
    monkeypatch.setenv(PLANNED, _json.dumps(record))
    with pytest.raises(CodeChanged):
        job.check_code({"model_def": model_def, "device": "cpu"})
