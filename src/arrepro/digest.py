"""Digests of what code *does*, not how it is written or where it lives (pure Python: the
Snakefile imports it).

``source_digest`` hashes what several Python files define, each top-level statement printed back
by ``ast.unparse`` with every docstring removed: comments, docstrings, blank lines and
formatting do not change it; any change to a statement, name or literal does. The statements are
hashed as a set keyed by what they define (a function, a class, an assigned name; any other
statement by its text), not by file or position, and imports from this package are left out,
at the top of a file or inside a function (a name they bind is defined in the set): so moving a
function from one of the files to another, splitting a module into two that are both in the
list, or moving a module to another package changes nothing, while editing it does.
Where two files define one name differently, both are kept, each with its file (known by what
it defines, not by its path), and so is each import of that name from one of the files to
another (the import decides which one runs): moving either definition to another file, or
pointing an import at the other one, is a change; moving or renaming a whole file is not. A file that is not Python is hashed byte
for byte, with its name. Workflow rules record these digests as params (so a comment edit or a
refactor reruns nothing, and a code edit reruns exactly the jobs whose sources changed), and a
training checkpoint is resumed only if its digest matches.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path

PACKAGE = "arrepro"


# the fields of a statement that hold statements (a function's, a class's or a block's body, ...)
BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _all_statements(tree: ast.Module):
    """Every statement of a module, in functions, classes and blocks too (expressions hold none)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for field in BLOCKS:
            todo.extend(getattr(node, field, ()))


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    for node in _all_statements(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _strip_inner_imports(tree: ast.Module) -> ast.Module:
    """Imports of this package inside functions, classes and blocks left out, as at the top: how
    a function reaches a module of the package (``from . import x``, ``from arrepro.y import x``)
    says where code lives, not what it does."""
    for node in _all_statements(tree):
        if node is tree:
            continue
        for field in BLOCKS:
            body = getattr(node, field, None)
            if body and any(_internal_import(s) for s in body):
                setattr(node, field, [s for s in body if not _internal_import(s)] or [ast.Pass()])
    return tree


def _imports(tree: ast.Module) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    out = []
    for node in _all_statements(tree):
        if isinstance(node, ast.Import):
            out += [(0, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", tuple(a.name for a in node.names)))
    return tuple(out)


def _internal_import(node: ast.stmt) -> bool:
    """An import of this package's own code (relative, or ``arrepro...``)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == PACKAGE
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] == PACKAGE for a in node.names)
    return False


def _key(node: ast.stmt, text: str) -> str:
    """What a top-level statement defines: a name, or (for anything else) its own text."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return f"def {node.name}"
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    if targets and all(isinstance(t, ast.Name) for t in targets):
        return "name " + ",".join(t.id for t in targets)
    return "stmt " + text


def statements(path: str | Path) -> list[tuple[str, str]]:
    """(key, code) of each top-level statement of a Python file (docstrings, comments and
    formatting gone; imports of this package left out); a file that is not Python, or not valid
    Python, is one entry of its bytes."""
    return _read(path)[0]


def _read(path: str | Path) -> tuple[list[tuple[str, str]], tuple]:
    """``statements`` and ``imports`` of a file, from one parse."""
    data = Path(path).read_bytes()
    if str(path).endswith(".py"):
        try:
            tree = ast.parse(data, filename=str(path))
        except SyntaxError:  # not valid Python: a change to any byte counts
            tree = None
        if tree is not None:
            found = _imports(tree)
            out, seen = [], {}
            for node in _strip_inner_imports(_strip_docstrings(tree)).body:
                if _internal_import(node) or isinstance(node, ast.Pass):
                    continue
                text = ast.unparse(node)
                key = _key(node, text)
                seen[key] = seen.get(key, 0) + 1  # a name bound twice in a file: the order counts
                out.append((key if seen[key] == 1 else f"{key}#{seen[key]}", text))
            return out, found
    return [(f"file {Path(path).name}", hashlib.sha1(data).hexdigest())], ()


def normalised_source(path: str | Path) -> bytes:
    """The file's code without comments, docstrings, formatting and package imports."""
    return "\n".join(text for _, text in statements(path)).encode()


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[tuple[tuple[str, str], ...], tuple]:
    found, imported = _read(path)
    return tuple(found), imported


def _cached(path: Path) -> tuple[tuple[str, str], ...]:
    st = os.stat(path)
    return _parsed(str(path), st.st_mtime_ns, st.st_size)[0]


def imports(path: str | Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """Every import statement of a Python file, at the top or in a function, class or block:
    (level, module, names); ``import a.b`` is (0, "a.b", ()), ``from ..x import y, z`` is
    (2, "x", ("y", "z")); none for a file that is not valid Python. From the parse that its
    ``statements`` come from (memoised on the file's path, mtime and size): arrepro.config.catalogue
    follows them to a rule's sources."""
    st = os.stat(path)
    return _parsed(str(path), st.st_mtime_ns, st.st_size)[1]


def file_digest(path: str | Path) -> str:
    """Digest of one file's code as ``statements`` reads it (memoised on its path, mtime and size):
    a data file's bytes."""
    h = hashlib.sha1()
    for key, text in _cached(Path(path)):
        h.update(key.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def source_digest(paths, root: str | Path = ".") -> str:
    """One digest for what several files (relative to ``root``) define, wherever each definition
    lives among them (see the module's docstring)."""
    root = Path(root)
    entries: dict[str, set[str]] = {}
    found = {(root / p).resolve(): _cached(root / p) for p in paths}
    for statements_ in found.values():
        for key, text in statements_:
            entries.setdefault(key, set()).add(text)
    # a name defined differently in two places: keep each with its file, the file known by its
    # definitions of such names, not by where it lives nor by the rest of what it defines (a module
    # that moves, or another definition moved in or out of it, leaves it the same file; a definition
    # of such a name moved to another file is a change), and which one each file imports (the
    # import decides which runs)
    twice = {key for key, texts in entries.items() if len(texts) > 1}
    ids = {f: hashlib.sha1("\0".join(sorted(f"{k}\0{x}" for k, x in st if k in twice)).encode()).hexdigest()
           for f, st in found.items()}
    final = [f"{key}\0{text}\0" + (f"{ids[f]}\0" if key in twice else "") for f, st in found.items() for key, text in st]
    if twice:
        final += _imports_of(twice, [root / p for p in paths], ids)
    h = hashlib.sha1()
    for line in dict.fromkeys(sorted(final)):  # the same statement twice (a shared constant) counts once
        h.update(line.encode())
    return h.hexdigest()[:16]


def _imports_of(keys: set[str], files: list[Path], ids: dict[Path, str]) -> list[str]:
    """For each name of ``keys`` (``def x``, ``name x``) a file imports from another of ``files``:
    the two files, each known by what it defines."""
    out = []
    for f in files:
        for level, module, names in imports(f):
            for target in _module_files(f, level, module):
                tid = ids.get(target.resolve()) if target.exists() else None
                if tid is None:
                    continue
                for n in names:
                    if f"def {n}" in keys or f"name {n}" in keys:
                        out.append(f"import {n}\0{ids[f.resolve()]}\0{tid}\0")
    return out


def _module_files(importer: Path, level: int, module: str) -> list[Path]:
    """The files a ``from (level dots)module import ...`` of ``importer`` may read: the module's
    file or package; absolute imports of this package from the ``src`` folder above it."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
    else:
        if module.split(".")[0] != PACKAGE:
            return []
        base = next((d for d in importer.resolve().parents if (d / PACKAGE).is_dir() and d.name == "src"), None)
        if base is None:
            return []
    target = base.joinpath(*module.split(".")) if module else base
    return [target.with_suffix(".py"), target / "__init__.py"]


# -- the code a run planned with -----------------------------------------------------------------
# Snakemake plans every job with the code digests above (the rules' ``code`` params) when it
# starts; a job starts minutes or hours later, in a new process that imports the code as it is
# *then*. A source edited in between (an edit while a long run trains) would give a run whose
# tables, search decisions and paper mix results of the old and the new code. So the process
# that plans records what it planned with in its environment (``PLANNED``, inherited by every job
# it starts, on a cluster too when the job's environment is exported), and a job checks, after
# importing its code and before it writes anything, that its sources still have the planned
# digest (``check_planned_code``); else it stops with one line naming the files.
PLANNED = "ARREPRO_PLANNED_CODE"


class CodeChanged(RuntimeError):
    """A job's sources differ from those the workflow planned it with; the message is one line."""


def _planned() -> dict:
    import json

    try:
        rec = json.loads(os.environ.get(PLANNED, ""))
        return rec if isinstance(rec, dict) else {}
    except ValueError:
        return {}


def record_planned(paths, digest: str, root: str | Path) -> None:
    """Record in this process's environment that ``paths`` (relative to ``root``) were planned
    with ``digest``, each file with its own digest (to name what changed). The first record of a
    set of paths stays: a process started by the planning one (a Slurm job's Snakemake) keeps the
    plan it inherited."""
    import json

    rec = _planned()
    if rec.get("root", str(root)) != str(root):
        return
    groups, files = rec.setdefault("groups", {}), rec.setdefault("files", {})
    key = "\0".join(map(str, paths))
    if key in groups:
        return
    groups[key] = digest
    for p in paths:
        files.setdefault(str(p), file_digest(Path(root) / p))
    rec["root"] = str(root)
    os.environ[PLANNED] = json.dumps(rec, separators=(",", ":"))


def check_planned_code(digest: str | None = None, paths=None) -> None:
    """CodeChanged if the sources this job runs (``paths``, or those planned with ``digest``, a
    rule's ``code`` param) no longer have the digest the workflow planned them with. Nothing to
    check outside a workflow run (no record in the environment), or for code it did not record."""
    rec = _planned()
    groups, files, root = rec.get("groups", {}), rec.get("files", {}), rec.get("root")
    if not groups or root is None:
        return
    if paths is not None:
        key = "\0".join(map(str, paths))
        planned = groups.get(key)
    else:
        key = next((k for k, d in groups.items() if d == digest), None)
        planned = digest
    if key is None or planned is None:
        return
    paths = key.split("\0")
    try:
        now = source_digest(paths, root)
    except OSError as e:
        raise CodeChanged(f"a source of this job cannot be read now ({e}): it changed since the workflow planned "
                          "this job; stop the run and start it again") from None
    if now != planned:
        changed = [p for p in paths if files.get(p) != file_digest(Path(root) / p)] or paths
        raise CodeChanged(f"the code this job runs changed since the workflow planned it ({', '.join(changed)}): "
                          "its results would mix with those of the old code. Stop the run (Ctrl-C) and start it "
                          "again: Snakemake then reruns every job the change affects")
