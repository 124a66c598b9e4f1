"""The docs name today's code (issue 32): every module, file, function and variable that README.md
and docs/*.md name in backticks exists where they say, so that a move of code cannot leave the
docs behind. What counts as a name of code (each checked without importing anything):

* a path of the repository (``src/arrepro/train/server.py``, ``workflow/rules/``, a glob), or of
  the package (``train/server.py``, ``config/paths.py``), or a file's name alone (``rounds.py``,
  ``paper.smk``): the file exists (a path whose first folder is none of this tree's, such as
  another package's file or a folder a command makes, is not a name of this tree);
* ``tests/FILE.py::test_name`` (``...`` ending an abbreviated name): the test is in that file;
* ``arrepro.a.b`` and ``arrepro.a.b.name``: the module, and the name defined at its top level;
* ``module.name`` where ``module`` is the name of one of the package's modules (``grid.check_path``):
  the name defined at the top level of a module of that name. Any other dotted name must be a key
  path of config.yaml or of the config schema (``aggregate.metric``, ``search.window``), a file
  name (``cells.csv``), or a name of a library the docs talk about (``torch.load``); one that is
  none of these (``resources.MAX_MEM_MB``, after ``resources`` moved) is reported.
"""
import ast
import fnmatch
import functools
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "arrepro"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LIBRARIES = {"torch", "nn", "F", "np", "numpy", "pd", "pandas", "numba", "triton", "snakemake", "os", "sys", "json",
             "hashlib", "ast", "yaml", "jsonschema", "scipy", "math"}
# file extensions of names that are files, not code (outputs, data, configs, libraries)
FILE_EXTENSIONS = {"json", "jsonl", "csv", "sha256", "pt", "npz", "log", "lock", "so", "pdf", "png", "md", "yaml",
                   "yml", "toml", "tex", "bib", "txt", "sh", "smk", "py", "html", "gz", "tar", "whl", "cfg", "ini"}
# where a path that is not from the repository's root is looked for
PATH_ROOTS = [ROOT, ROOT / "src", PACKAGE, ROOT / "workflow" / "rules", ROOT / "workflow", ROOT / "scripts", ROOT / "bench",
              ROOT / "tests", ROOT / "paper", ROOT / "envs"]
# a source file's name alone: where it may live
NAME_ROOTS = [PACKAGE, ROOT / "scripts", ROOT / "bench", ROOT / "tests", ROOT / "workflow", ROOT / "envs", ROOT]


def inline_code(text: str) -> list[tuple[int, str]]:
    """(line, text) of every inline code span outside fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [(n, m) for m in re.findall(r"`([^`\n]+)`", line)]
    return out


@functools.lru_cache(maxsize=None)
def defined(path: Path) -> frozenset[str]:
    """The names a Python file defines or imports at its top level (in blocks too: try/if)."""
    names, todo = set(), list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo += [s for s in getattr(node, field, ()) if isinstance(s, ast.AST)]
    return frozenset(names)


def class_members(path: Path, cls: str) -> set[str]:
    """What class ``cls`` of ``path`` defines: methods, class attributes, ``self.x`` attributes."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            out = set()
            for n in ast.walk(node):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n in node.body:
                    out.add(n.name)
                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    out.add(n.id)
                elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and \
                        isinstance(n.value, ast.Name) and n.value.id == "self":
                    out.add(n.attr)
            return out
    return set()


def module_files() -> dict[str, list[Path]]:
    """A module's last name -> its files (``grid`` -> config/grid.py; a package -> its __init__)."""
    out: dict[str, list[Path]] = {}
    for f in PACKAGE.rglob("*.py"):
        name = f.parent.name if f.name == "__init__.py" else f.stem
        out.setdefault(name, []).append(f)
    return out


def resolve_in_module(path: Path, rest: list[str]) -> bool:
    """``rest`` (a name, or a class and its member) defined in the Python file ``path``."""
    if not rest:
        return True
    if rest[0] not in defined(path):
        sub = path.parent / rest[0] if path.name == "__init__.py" else None
        if sub is not None and ((sub.with_suffix(".py")).exists() or (sub / "__init__.py").exists()):
            return resolve_in_module(sub.with_suffix(".py") if sub.with_suffix(".py").exists()
                                     else sub / "__init__.py", rest[1:])
        return False
    return len(rest) == 1 or rest[1] in class_members(path, rest[0])


def resolve_dotted_module(parts: list[str]) -> bool:
    """``arrepro.a.b[.name[.member]]``: the longest prefix that is a module, then the names in it."""
    for i in range(len(parts), 0, -1):
        base = ROOT / "src" / Path(*parts[:i])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.exists():
                return resolve_in_module(f, parts[i:])
    return False


@functools.lru_cache(maxsize=None)
def config_paths() -> frozenset[tuple[str, ...]]:
    """Every key path of config.yaml (any suffix of one too: ``window`` under any search) and of the
    schema's definitions and properties."""
    paths = set()

    def walk(obj, prefix=()):
        if isinstance(obj, dict):
            for k, v in obj.items():
                p = (*prefix, str(k))
                for i in range(len(p)):
                    paths.add(p[i:])
                walk(v, p)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, prefix)

    walk(yaml.safe_load((ROOT / "config.yaml").read_text()))
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    for name, d in {**schema.get("$defs", {}), **schema.get("properties", {})}.items():
        paths.add((name,))
        for prop in (d.get("properties") or {}) if isinstance(d, dict) else {}:
            paths.add((name, prop))
    return frozenset(paths)


def has_test(file: Path, name: str) -> bool:
    name = name.split("[")[0]
    tests = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
    if name.endswith("..."):
        return any(t.startswith(name[:-3]) for t in tests)
    return any(fnmatch.fnmatchcase(t, name) for t in tests)


def problem(token: str, test_file: str | None = None, strict: bool = True) -> str | None:
    """Why ``token`` (an inline code span) names code that does not exist; None if it exists or
    names no code. ``test_file``: the test file a ``::test_name`` means (the one named before it).
    Not ``strict`` (docstrings, which also name other projects' files and classes, locals and
    attributes): only names of this package (``arrepro.x``, ``module.name``, ``Class.member``)
    and paths from the repository's root are checked."""
    token = token.strip().rstrip(",;")
    if token.startswith("::") and test_file:
        token = test_file + token
    if " " in token or any(c in token for c in "{}<>|$=+'\"") or token.startswith(("results/", "-", ".ci/", ".snakemake/")) or "..." in token.partition("::")[0]:
        return None  # a command, a pattern of outputs, an expression: not a name
    if "::" in token:
        file, _, test = token.partition("::")
        if not file or not (ROOT / file).is_file():
            return f"no file {file}"
        return None if has_test(ROOT / file, test) else f"{file} has no test {test.split('[')[0]}"
    if "/" in token:
        rel = token.rstrip("/")
        if not strict and not rel.startswith(("src/", "scripts/", "workflow/", "tests/", "bench/", "docs/")):
            return None
        first = rel.split("/")[0]
        roots = [base for base in PATH_ROOTS if (base / first).exists()]
        if rel.startswith("/") or not roots:
            return None  # an absolute path, another package's file, a folder a command makes: not this tree's
        for base in roots:
            if (base / rel).exists() or ("*" in rel and list(base.glob(rel))):
                return None
        return f"no file or folder {token}"
    parts = token.removesuffix("()").split(".")
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts):
        return None
    if len(parts) == 2 and parts[1] in FILE_EXTENSIONS:  # a file's name
        if parts[1] in ("py", "smk") and strict:
            if not any(list(base.rglob(token)) for base in NAME_ROOTS[:-1]) and not (ROOT / token).exists():
                return f"no source file {token}"
        return None
    if len(parts) < 2:
        return None
    if parts[0] == "arrepro":
        return None if resolve_dotted_module(parts) else f"{token}: no such module or name in src/arrepro"
    modules = module_files()
    if parts[0] in modules:
        if any(resolve_in_module(f, parts[1:]) for f in modules[parts[0]]):
            return None
        if tuple(parts) in config_paths():  # (a config key that shares a module's name: aggregate.metric)
            return None
        where = ", ".join(str(f.relative_to(ROOT)) for f in modules[parts[0]])
        return f"{token}: {where} defines no {'.'.join(parts[1:])}"
    classes = package_classes()
    if parts[0] in classes and len(parts) == 2:
        if any(parts[1] in class_members(f, parts[0]) for f in classes[parts[0]]):
            return None
        return f"{token}: class {parts[0]} ({', '.join(str(f.relative_to(ROOT)) for f in classes[parts[0]])}) has no {parts[1]}"
    if not strict or parts[0] in LIBRARIES or tuple(parts) in config_paths() or parts[-1] in FILE_EXTENSIONS:
        return None
    return f"{token}: names no module of src/arrepro, no config key, no library"


@functools.lru_cache(maxsize=None)
def package_classes() -> dict[str, list[Path]]:
    """A class defined at the top level of one of the package's modules -> its files."""
    out: dict[str, list[Path]] = {}
    for f in PACKAGE.rglob("*.py"):
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(f)
    return out


def named_in_docs():
    """(doc, line, code span, the test file a ``::test_name`` on that line means)."""
    for doc in DOCS:
        test_file = None  # (a table's later rows name their tests after the file of an earlier row)
        for line, token in inline_code(doc.read_text()):
            if re.match(r"tests/\w+\.py", token):
                test_file = token.partition("::")[0]
            yield doc, line, token, test_file


def test_every_name_of_code_in_the_docs_exists():
    stale = [f"{doc.relative_to(ROOT)}:{line}: `{token}`: {why}" for doc, line, token, test_file in named_in_docs()
             if (why := problem(token, test_file))]
    assert not stale, "the docs name code that is not there:\n" + "\n".join(stale)


@pytest.mark.parametrize("token", ["grid.check_path", "resources.MAX_MEM_MB", "resources.flops_per_token",
                                   "trainjob.train_here", "arrepro.config.grid.check_path", "arrepro.train.nothing",
                                   "src/arrepro/config/resources.py", "tests/test_train.py::test_no_such_test",
                                   "train/no_such_module.py", "no_such_module.py", "files.no_such_function"])
def test_the_check_sees_a_stale_name(token):
    """Names the docs once held (before code moved), and others that do not exist: each reported."""
    assert problem(token) is not None, token


@pytest.mark.parametrize("token", ["checks.check_path", "costs.MAX_MEM_MB", "arrepro.config.checks.check_path",
                                   "arrepro.train.loop.autocast_for", "src/arrepro/train/server.py",
                                   "train/server.py", "rounds.py", "paper.smk", "aggregate.metric", "search.window",
                                   "torch.load", "cells.csv", "tests/test_train.py::test_device_cuda_without_cuda_is_an_error",
                                   "tests/test_train.py::test_a_full_disk_is_named...", "workflow/rules/",
                                   "arrepro.search.plans.Plan.read"])
def test_the_check_accepts_names_that_exist(token):
    assert problem(token) is None, (token, problem(token))


def named_in_code():
    """(file, line, ``span``) of the package's and the scripts' sources (docstrings and comments)."""
    for f in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            for token in re.findall(r"``([^`\n]+)``", line):
                yield f, n, token


def test_every_name_of_code_in_the_sources_docstrings_exists():
    """The same check on what the package's docstrings and comments name in double backticks."""
    stale = [f"{f.relative_to(ROOT)}:{line}: ``{token}``: {why}" for f, line, token in named_in_code()
             if (why := problem(token, strict=False))]
    assert not stale, "docstrings name code that is not there:\n" + "\n".join(stale)
