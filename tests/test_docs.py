"""The docs name today's code (issue 32): every module, file, function and variable that README.md
and the pages under docs/ name in backticks exists where they say, so that a move of code cannot
leave the docs behind. And (issue 56) every relative link of README.md, CHANGELOG.md and docs/
resolves, to the heading its anchor names; the README, the guides, the reference and the results
pages name no commit; the paper scale's budget they quote is the cost report's. What counts as a
name of code (each checked without importing anything):

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
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# every page whose relative links must resolve
MARKDOWN = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
# the pages that state what is true now: no commit hashes (history goes to CHANGELOG.md and docs/history/)
CURRENT = [ROOT / "README.md", *sorted(p for part in ("guides", "reference", "results")
                                       for p in (ROOT / "docs" / part).rglob("*.md"))]
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


def outside_fences(text: str) -> list[tuple[int, str]]:
    """(line, text) of every line outside fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def inline_code(text: str) -> list[tuple[int, str]]:
    """(line, text) of every inline code span outside fenced blocks."""
    return [(n, m) for n, line in outside_fences(text) for m in re.findall(r"`([^`\n]+)`", line)]


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


# --------------------------------------------------------------------------- links (issue 56)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """``text`` with its fenced blocks emptied and its inline code spans blanked, line for line (no link
    is in code; a link's text may run over two lines)."""
    kept = dict(outside_fences(text))
    return "\n".join(re.sub(r"`[^`\n]*`", "``", kept[n]) if n in kept else ""
                     for n in range(1, len(text.splitlines()) + 1))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: code marks and links' targets dropped, lower case, every
    character but letters, digits, spaces, hyphens and underscores removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", ""))
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a markdown file's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in outside_fences(path.read_text()):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def link_problems(text: str, page: Path) -> list[str]:
    """Why each relative link of ``text`` (the page ``page``) does not resolve: a file or folder that
    is not there, or an anchor no heading of its target makes. Links to a URL are not checked."""
    out, text = [], prose(text)
    for m in LINK.finditer(text):
        target, n = m.group(1), text.count("\n", 0, m.start()) + 1
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:: not a file of this tree
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{n}: ({target})"
        if not dest.exists():
            out.append(f"{where}: no file or folder {path}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: {dest.name} has no heading #{anchor}")
    return out


def test_every_relative_link_resolves():
    bad = [p for page in MARKDOWN for p in link_problems(page.read_text(), page)]
    assert not bad, "links that lead nowhere:\n" + "\n".join(bad)


@pytest.mark.parametrize("text, problem", [
    ("[the GPU](#on-a-gpu)", "has no heading #on-a-gpu"),
    ("see [Pinned CPU\nnumerics](#pinned-cpu-numerics)", "has no heading #pinned-cpu-numerics"),
    ("see [a page](no_such_page.md)", "no file or folder no_such_page.md"),
    ("![a figure](img/none.png)", "no file or folder img/none.png"),
    ("[protocol](reference/protocol.md#no-such-section)", "protocol.md has no heading #no-such-section"),
    ("[protocol](reference/protocol.md#the-rule)", None),
    ("[config](reference/protocol.md#in-configyaml)", None),
    ("[history](history/)", None),
    ("[here](#a-heading)\n\n## A heading", None),
    ("[the paper](https://arxiv.org/abs/2508.19029)", None),
    ("`[not a link](nowhere.md)`", None),
    ("```\n[not a link](nowhere.md)\n```", None),
])
def test_the_link_check_sees_a_broken_link(tmp_path, text, problem):
    """Run on a page of its own beside the real docs' folders (docs/models.md's three anchors to
    headings of other pages were such links)."""
    page = ROOT / "docs" / "test-links-page.md"
    try:
        page.write_text(text + "\n")
        anchors.cache_clear()
        found = link_problems(text, page)
    finally:
        page.unlink()
        anchors.cache_clear()
    assert (problem is None and not found) or (problem is not None and any(problem in f for f in found)), found


# --------------------------------------------------------------------------- commit hashes (issue 56)
COMMIT = re.compile(r"(?<![\w.@-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


def commit_hashes(text: str) -> list[str]:
    """What reads as a commit hash: 7 to 40 hexadecimal digits, letters and digits both, a word of its own;
    not another project's code cited at a commit (``zoology@0bb9665``: a source's version, not this project's)."""
    return COMMIT.findall(text)


def test_the_readme_the_guides_and_the_reference_name_no_commit():
    """They state what is true now; which commit measured what is history (CHANGELOG.md, docs/history/)."""
    bad = [f"{page.relative_to(ROOT)}:{n}: {h}" for page in CURRENT
           for n, line in enumerate(page.read_text().splitlines(), 1) for h in commit_hashes(line)]
    assert not bad, "commit hashes in the README, a guide or a reference page:\n" + "\n".join(bad)


@pytest.mark.parametrize("text, hashes", [
    ("measured at ff20d92, alone", ["ff20d92"]),
    ("(the demo of 1e935dd)", ["1e935dd"]),
    ("commit 845f464.", ["845f464"]),
    ("lr 1e-3 to 3.16e-2, 0.75073 decades", []),
    ("Zoology's init (HazyResearch/zoology@0bb9665, zoology/model.py:81)", []),
    ("a sha256 of 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", []),
    ("results/data/mqar-L8-K2-V16-fd829f/test.npz, lr0.01-s0, decade", []),
])
def test_the_hash_check_sees_a_commit(text, hashes):
    assert commit_hashes(text) == hashes


# --------------------------------------------------------------------------- the budget the pages quote (issue 56)
def test_the_paper_budget_the_pages_quote_is_the_cost_reports():
    """The paper scale's cells and GPU-hours that the README and the reference pages quote are what
    `python -m arrepro.cluster.budget paper` computes now (the literal grid was 21,890 cells in some
    pages and 21,690 in others)."""
    from arrepro.cluster import budget
    from arrepro.config.grid import Grid

    grid = Grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "paper")
    pp = budget.protocol_plan(grid)
    one, four = (budget.plan(grid, grid.all_cells(), n) for n in (1, 4))
    f = lambda x: f"{round(x):,}"  # noqa: E731 - as the pages write a count
    k = pp["by_kind"]
    cover = next(v for name, v in k.items() if name.startswith("cover"))
    searches = (pp["cells_max"] - cover["cells_max"], pp["gpu_hours_estimated_max"] - cover["gpu_hours_estimated_max"])
    row = lambda kind: (f"| {k[kind]['settings']} | {f(k[kind]['cells_round0'])} | {f(k[kind]['cells_max'])} | "  # noqa: E731
                        f"{f(k[kind]['gpu_hours_estimated_max'])} |")
    quoted = {
        "docs/reference/protocol.md": [
            f"({f(pp['cells_fixed_grid'])} cells at the paper scale",
            row("search on 1 seed(s)"), row("search on 1 seed(s), window"), row("search on every seed, window"),
            row("fixed grid, 1 seed(s)"),
            f"| {pp['searches']} | {f(pp['cells_round0'])} | {f(searches[0])} | {f(searches[1])} |",
            f"| | | {f(cover['cells_max'])} | {f(cover['gpu_hours_estimated_max'])} |",
            f"| {pp['searches']} | {f(pp['cells_round0'])} | **{f(pp['cells_max'])}** | **{f(pp['gpu_hours_estimated_max'])}** |",
            f"| | | {f(pp['cells_fixed_grid'])} | {f(pp['gpu_hours_estimated_fixed_grid'])} |",
            f"**{pp['ratio_gpu_hours_to_fixed_grid']:.2f} of its GPU-hours**",
            f"{f(pp['gpu_hours_estimated_fixed_grid'])} GPU-hours for {f(pp['cells_fixed_grid'])} cells"],
        "docs/reference/workflow.md": [
            f"**{f(pp['cells_round0'])} cells**", f"at most {f(searches[0])} cells\nand {f(searches[1])} estimated GPU-hours",
            f"at most {f(cover['cells_max'])} more and {f(cover['gpu_hours_estimated_max'])} GPU-hours",
            f"**{f(pp['cells_max'])} cells and\n{f(pp['gpu_hours_estimated_max'])} GPU-hours in all** "
            f"({f(pp['gpu_hours_requested_max'])} requested",
            f"is {f(pp['cells_fixed_grid'])}\ncells and {f(pp['gpu_hours_estimated_fixed_grid'])} estimated GPU-hours"],
        "docs/reference/cluster.md": [
            f"literal grid's {f(one['cells'])} cells", f"1 per GPU, {f(one['train_jobs'])} training jobs, {f(one['requested_hours'])}",
            f"GPU-hours requested, {f(one['estimated_gpu_hours'])} estimated, {f(one['grouped_gpu_hours'])} of them small cells",
            f"4 per GPU, {f(four['train_jobs'])} jobs, {f(four['requested_hours'])}",
            f"for the small cells {f(four['grouped_gpu_hours'])} GPU-hours", f"or {f(four['grouped_gpu_hours_mps'])} if their kernels overlap"],
        "README.md": [
            f"at most {f(pp['cells_max'])} cells and {f(pp['gpu_hours_estimated_max'])} estimated GPU-hours, "
            f"{pp['ratio_gpu_hours_to_fixed_grid']:.2f} of the\nliteral grid's {f(pp['gpu_hours_estimated_fixed_grid'])} "
            f"({f(pp['cells_fixed_grid'])} cells"],
    }
    missing = [f"{page}: {text!r}" for page, texts in quoted.items() for text in texts
               if text not in re.sub(r"[ \t]*\n[ \t]*", "\n", (ROOT / page).read_text())]
    assert not missing, "the pages quote another budget than the cost report's:\n" + "\n".join(missing)
