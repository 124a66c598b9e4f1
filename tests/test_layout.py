"""The layout shows the architecture: one package a stage, imports only in the direction data
flows (base -> config -> search -> train -> report -> cluster), no import circle, docs/reference/layout.md
naming every module, rule file and rule script and nothing else, a README that is a guide."""
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "arrepro"

# the stages in the order data flows; a module may import its own stage or an earlier one
STAGES = {"base": 0, "config": 1, "search": 2, "train": 3, "report": 4, "cluster": 5}
STAGE_OF = {"files": "base", "digest": "base", "parsecache": "base", "planned": "base", "data": "base", "models": "train",
            "config": "config", "search": "search", "train": "train", "report": "report", "cluster": "cluster"}


def modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / PACKAGE).rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def import_edges(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """(importer, imported) between the package's modules, from every import statement, at the
    top of a file or inside a function."""
    edges = set()
    for mod, f in mods.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rpartition(".")[0]
                if t in mods and t != mod and t != PACKAGE:
                    edges.add((mod, t))
    return edges


def stage(mod: str) -> str:
    top = mod.split(".")[1]
    assert top in STAGE_OF, f"{mod}: a module outside every stage (tests/test_layout.py STAGE_OF, docs/reference/layout.md)"
    return STAGE_OF[top]


def test_every_module_belongs_to_a_stage_and_imports_nothing_downstream():
    mods = modules()
    upward = sorted(f"{a} ({stage(a)}) imports {b} ({stage(b)})" for a, b in import_edges(mods)
                    if STAGES[stage(b)] > STAGES[stage(a)])
    assert not upward, "imports against the direction base -> config -> search -> train -> report -> cluster:\n" \
        + "\n".join(upward)


def test_the_import_graph_has_no_circle():
    graph = defaultdict(set)
    for a, b in import_edges(modules()):
        graph[a].add(b)
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if not state.get(nxt):
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [node])


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path, monkeypatch):
    """The two checks above fail on a tree that breaks them (a config module importing the report
    stage, two modules importing each other)."""
    pkg = tmp_path / PACKAGE
    for d in ("config", "report"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "config" / "a.py").write_text("from arrepro.report import b\n")
    (pkg / "report" / "b.py").write_text("def f():\n    from arrepro.config import a\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    with pytest.raises(AssertionError, match="config.a .config. imports arrepro.report.b"):
        test_every_module_belongs_to_a_stage_and_imports_nothing_downstream()
    with pytest.raises(AssertionError, match="import circle"):
        test_the_import_graph_has_no_circle()


def no_module_alias(text: str, where: str) -> list[str]:
    """``import arrepro.x as y`` / ``from arrepro.p import m as y`` where m is a module: a name
    that hides which module it is."""
    mods = modules()
    bad = []
    for line in text.splitlines():
        m = re.match(r"\s*from (arrepro[\w.]*) import (.+)", line) or re.match(r"\s*import (arrepro[\w.]*) as (\w+)", line)
        if not m:
            continue
        if line.lstrip().startswith("import") or any(
                f"{m[1]}.{n.split(' as ')[0].strip()}" in mods for n in m[2].split(",") if " as " in n):
            bad.append(f"{where}: {line.strip()}")
    return bad


def test_no_module_is_imported_under_another_name():
    bad = []
    for f in [*SRC.rglob("*.py"), *(ROOT / "workflow").rglob("*.smk"), ROOT / "Snakefile", *(ROOT / "scripts").glob("*.py")]:
        bad += no_module_alias(f.read_text(), str(f.relative_to(ROOT)))
    assert not bad, bad


def test_rule_files_hold_rules_and_little_python():
    """The Python of the rule files is the grid, thin wrappers and glue: each function short; the
    logic lives in the package."""
    long = []
    for f in [*(ROOT / "workflow/rules").glob("*.smk"), ROOT / "Snakefile"]:
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("def "):
                body = 1
                while i + body < len(lines) and (not lines[i + body].strip() or lines[i + body].startswith((" ", "\t"))):
                    body += 1
                if body > 25:
                    long.append(f"{f.name}: {line.strip()} ({body} lines)")
    assert not long, long


def layout() -> str:
    return (ROOT / "docs/reference/layout.md").read_text()


def test_the_layout_names_every_module_rule_file_and_rule_script():
    text = layout()
    named = set(re.findall(r"[\w/*-]+\.(?:py|smk)\b", text))
    mods = {str(p.relative_to(SRC / PACKAGE)) for p in (SRC / PACKAGE).rglob("*.py")
            if p.name != "__init__.py" and not p.parent.name in ("mixers", "cpu_kernels")}
    rules = {p.name for p in (ROOT / "workflow/rules").glob("*.smk")}
    scripts = {m for m in re.findall(r"scripts/(\w+\.py)", "\n".join(
        p.read_text() for p in (ROOT / "workflow/rules").glob("*.smk")))}
    missing = sorted((mods | rules | scripts) - named - {Path(n).name for n in named})
    assert not missing, f"docs/reference/layout.md does not name {missing}"
    for n in named:  # and everything it names exists
        where = [ROOT / d / n for d in ("", "src/arrepro", "workflow/rules", "scripts", "bench")]
        assert any(p.exists() or list(p.parent.glob(p.name)) for p in where), f"docs/reference/layout.md names {n}, not in the tree"


def test_the_readme_is_a_guide_that_links_every_docs_page():
    """A guide (issue 56): at most about 800 words, the two commands, the time and CORES on its first
    screen, and a map of the docs: every guide, reference and results page, the history's index."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200 and len(readme.split()) <= 800, len(readme.split())
    pages = [p for part in ("guides", "reference", "results") for p in (ROOT / "docs" / part).glob("*.md")]
    assert len(pages) >= 15
    for page in [*pages, ROOT / "docs/history/README.md"]:
        rel = page.relative_to(ROOT).as_posix()
        assert f"]({rel})" in readme, f"README does not link {rel}"
    for link in re.findall(r"\]\((docs/[\w./-]+\.md)\)", readme):
        assert (ROOT / link).exists(), link
    first_screen = "\n".join(readme.splitlines()[:40])
    assert all(t in first_screen for t in ("make demo", "make test", "Time", "CORES=")), first_screen
