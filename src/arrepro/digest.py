"""Digests of what code *does*, not how it is written or where it lives (pure Python: the
Snakefile imports it).

``source_digest`` hashes what several Python files define, each top-level statement printed back
by ``ast.unparse`` without docstrings (comments, docstrings and formatting change nothing; any
change to a statement, name or literal does), as a set keyed by what it defines (a function, a
class, an assigned name; any other statement by its text), not by file or position. Imports of
this package are left out, at the top of a file or inside a function: moving a function between
the files, splitting a module, or moving a module to another package changes nothing. A name
such an import binds under another name (``from .tex import tex_lr as lr_label``) is kept,
without the module (``lr_label=tex_lr``), with every statement that reads it (issue 38: such an
edit changed no digest). Where two files define one name differently, both are kept, each with
its file (known by what it defines, not by its path), and so is each import of that name from
one file to another: moving either definition, or pointing an import at the other, is a change;
moving or renaming a whole file is not. A file that is not Python is hashed byte for byte.

Only what a job can run counts (``reached``, issue 38): in the package (``src/arrepro``) a
function or class whose definition runs nothing (no decorator but ``PURE_DECORATORS``, no call in
its defaults, bases or class body) counts only where code that counts names it (by a name, an
attribute or a string: over-counting only reruns); every other statement of a module counts (it
runs on import) but its ``if __name__ == "__main__":`` block; a rule's script counts whole. So
``_pm`` moved from report/tables.py into report/tex.py, which the figures load and never call it
from, changes no rule; and arrepro.config.catalogue loads a module only through the imports of
what counts (report/blocks.py imports the Mamba mixer in functions the paper's numbers never call).
Rules record these digests as params (a comment edit or a refactor reruns nothing, a code edit
exactly the jobs that run it), and a checkpoint is resumed only if its digest matches.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from arrepro import parsecache

PACKAGE = "arrepro"
_SELF = Path(__file__).read_bytes()  # this module's source: what a cached parse was made by
# decorators that only wrap or describe what they decorate (no registration, no side effect): a
# definition with only these counts only where named (``reached``)
PURE_DECORATORS = frozenset({
    "dataclass", "dataclasses.dataclass", "functools.lru_cache", "lru_cache", "functools.cache", "cache",
    "functools.cached_property", "cached_property", "property", "staticmethod", "classmethod",
    "contextlib.contextmanager", "contextmanager", "functools.total_ordering", "total_ordering", "torch.no_grad",
    "torch.inference_mode", "abc.abstractmethod", "abstractmethod", "typing.overload", "overload"})


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
    says where code lives, not what it does. A name bound under another name stays, without its
    module (``import tex_lr as lr_label``): it decides what the name runs."""
    for node in _all_statements(tree):
        if node is tree:
            continue
        for field in BLOCKS:
            body = getattr(node, field, None)
            if body and any(_internal_import(s) for s in body):
                kept = [_renamed(s) if _internal_import(s) else s for s in body]
                setattr(node, field, [s for s in kept if s is not None] or [ast.Pass()])
    return tree


def _aliases(node: ast.stmt) -> list[tuple[str, str]]:
    """(bound name, imported name) of each name an import binds under another name; a module by
    its last part (``import arrepro.report.tex as t``: ("t", "tex"))."""
    out = []
    for a in getattr(node, "names", ()):
        name = a.name.rsplit(".", 1)[-1]
        if a.asname and a.asname != name:
            out.append((a.asname, name))
    return out


def _renamed(node: ast.stmt) -> ast.stmt | None:
    """An import of this package as what it binds under other names only (None if nothing)."""
    renamed = _aliases(node)
    return ast.Import(names=[ast.alias(name=n, asname=b) for b, n in renamed]) if renamed else None


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


@dataclass(frozen=True)
class Unit:
    """One top-level statement of a file: ``key`` and ``text`` (as ``statements`` gives them),
    ``defines`` (the name a function or class that runs nothing when defined binds; None for a
    statement that runs whenever its module loads), ``refs`` (every name, attribute name and
    identifier string it holds: what it may run), ``imports`` (this package's imports inside it,
    as ``imports`` writes them), ``main`` (a module's ``if __name__ == "__main__":`` block) and
    ``cls`` (a class)."""

    key: str
    text: str
    defines: str | None = None
    refs: frozenset = frozenset()
    imports: tuple = ()
    main: bool = False
    cls: bool = False


@dataclass(frozen=True)
class Parsed:
    """A file's ``units``, every import (``imports``), this package's imports at its top level
    (``top_imports``: they run whenever it loads) and the names those bind under another name
    (``aliases``: (bound, imported)), and whether a class of it hooks its subclasses
    (``__init_subclass__``: then no class counts only where named)."""

    units: tuple
    imports: tuple = ()
    top_imports: tuple = ()
    aliases: tuple = ()
    subclass_hook: bool = False


def statements(path: str | Path) -> list[tuple[str, str]]:
    """(key, code) of each top-level statement of a Python file (docstrings, comments and
    formatting gone; imports of this package left out, a name they bind under another name kept
    with the statements that read it); a file that is not Python, or not valid Python, is one
    entry of its bytes."""
    return [(u.key, u.text) for u in parse(path).units]


def _scan(node: ast.AST) -> tuple[frozenset, tuple]:
    """What a statement may run (every name, attribute name, imported name and identifier string)
    and this package's imports inside it (as ``imports`` writes them), from one walk."""
    refs, found = set(), []
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            refs.add(n.id)
        elif isinstance(n, ast.Attribute):
            refs.add(n.attr)
        elif isinstance(n, ast.alias):
            refs.update(n.name.split("."))
            refs.add(n.asname or n.name)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            refs.add(n.value)
        elif isinstance(n, ast.ImportFrom) and _internal_import(n):
            found.append((n.level, n.module or "", tuple(a.name for a in n.names)))
        elif isinstance(n, ast.Import) and _internal_import(n):
            found += [(0, a.name, ()) for a in n.names]
    return frozenset(refs), tuple(found)


def _calls(*nodes) -> bool:
    return any(isinstance(n, ast.Call) for node in nodes if node is not None for n in ast.walk(node))


def _pure(decorator: ast.expr) -> bool:
    """A decorator of ``PURE_DECORATORS`` (or a property's setter), called with no call in its
    arguments."""
    f = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(decorator, ast.Call) and _calls(*decorator.args, *(k.value for k in decorator.keywords)):
        return False
    return ast.unparse(f) in PURE_DECORATORS or (isinstance(f, ast.Attribute) and f.attr in ("setter", "getter", "deleter"))


def _quiet_function(node) -> bool:
    """A function whose definition runs nothing: pure decorators, no call in its defaults or
    annotations (evaluated when it is defined)."""
    a = node.args
    return (all(_pure(d) for d in node.decorator_list)
            and not _calls(*a.defaults, *a.kw_defaults, node.returns, *(x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs)))


def _defines(node: ast.stmt) -> str | None:
    """The name a function or class binds if defining it runs nothing (see ``reached``), else None."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or node.name.startswith("__"):
        return None
    if isinstance(node, ast.ClassDef):
        if node.keywords or _calls(*node.bases) or not all(_pure(d) for d in node.decorator_list):
            return None
        for s in node.body:  # a class body runs when the class is defined
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not _quiet_function(s):
                    return None
            elif not (isinstance(s, (ast.Assign, ast.AnnAssign, ast.Pass))
                      or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))):
                return None
        return node.name
    return node.name if _quiet_function(node) else None


def _is_main(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("__name__ == '__main__'", "'__main__' == __name__")


def _read(path: str | Path, data: bytes) -> Parsed:
    """``statements``, their ``Unit`` s and the file's imports, from one parse of ``data`` (the file's bytes)."""
    if str(path).endswith(".py"):
        try:
            tree = ast.parse(data, filename=str(path))
        except SyntaxError:  # not valid Python: a change to any byte counts
            tree = None
        if tree is not None:
            found = _imports(tree)
            top = [n for n in tree.body if _internal_import(n)]
            aliases = tuple(a for n in top for a in _aliases(n))
            renamed = dict(aliases)
            # what each statement binds, reads and imports, before the imports go
            tree = _strip_docstrings(tree)
            info = [(_defines(n), *_scan(n), _is_main(n), isinstance(n, ast.ClassDef)) for n in tree.body]
            hook = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "__init_subclass__"
                       for n in ast.walk(tree))
            out, seen = [], {}
            for node, (defines, refs, inner, main, cls) in zip(_strip_inner_imports(tree).body, info, strict=True):
                if _internal_import(node) or isinstance(node, ast.Pass):
                    continue
                text = ast.unparse(node) + "".join(f"\0as {b}={renamed[b]}" for b in sorted(refs & renamed.keys()))
                key = _key(node, text)
                seen[key] = seen.get(key, 0) + 1  # a name bound twice in a file: the order counts
                out.append(Unit(key if seen[key] == 1 else f"{key}#{seen[key]}", text, defines, refs, inner, main, cls))
            return Parsed(tuple(out), found, tuple(t for n in top for t in _scan(n)[1]), aliases, hook)
    return Parsed((Unit(f"file {Path(path).name}", hashlib.sha1(data).hexdigest()),))


def normalised_source(path: str | Path) -> bytes:
    """The file's code without comments, docstrings, formatting and package imports."""
    return "\n".join(text for _, text in statements(path)).encode()


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime_ns: int, size: int) -> Parsed:
    """``_read``, through the disk cache (arrepro.parsecache: keyed by the file's name and bytes and
    by this module's own source, which parses it)."""
    data = Path(path).read_bytes()
    return parsecache.cached("digest", [Path(path).name, data, _SELF], lambda: _read(path, data),
                             {"Unit": Unit, "Parsed": Parsed})


def parse(path: str | Path) -> Parsed:
    """``_read``, memoised on the file's path, mtime and size."""
    st = os.stat(path)
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


def imports(path: str | Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """Every import statement of a Python file, at the top or in a function, class or block:
    (level, module, names); ``import a.b`` is (0, "a.b", ()), ``from ..x import y, z`` is
    (2, "x", ("y", "z")); none for a file that is not valid Python. From the parse that its
    ``statements`` come from (memoised on the file's path, mtime and size)."""
    return parse(path).imports


def file_digest(path: str | Path) -> str:
    """Digest of one file's code as ``statements`` reads it (memoised on its path, mtime and size):
    a data file's bytes."""
    h = hashlib.sha1()
    for key, text in statements(path):
        h.update(key.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def in_package(rel: str | Path) -> bool:
    """Whether a path relative to the repository is a module of the package (``src/arrepro/...``),
    whose functions and classes count only where named; any other file (a rule's script) counts whole."""
    return Path(rel).parts[:2] == ("src", PACKAGE)


def reached(paths, root: str | Path = ".") -> dict[str, list[Unit]]:
    """The statements of ``paths`` (relative to ``root``: the files a job loads) that the job can
    run: every statement of a file outside the package; in a module of the package every statement
    but its ``if __name__ == "__main__":`` block, and a function or class that runs nothing when
    defined (``Unit.defines``) only once a statement that counts names it (by any name, attribute
    or string, or under another name: ``Parsed.aliases``), in any of the files (over-counting only
    reruns). Each file's statements in the order they were reached."""
    root = Path(root)
    found = {p: parse(root / p) for p in paths}
    hook = any(x.subclass_hook for x in found.values())
    out: dict[str, list[Unit]] = {p: [] for p in paths}
    waiting: dict[str, list] = {}
    renamed: dict[str, set] = {}
    names: set[str] = set()
    todo: list[str] = []

    def take(p, unit):
        out[p].append(unit)
        new = unit.refs - names
        names.update(new)
        todo.extend(new)

    for p, x in found.items():
        for b, a in x.aliases:
            renamed.setdefault(b, set()).add(a)
        whole = not in_package(p)
        for u in x.units:
            if u.main and not whole:
                continue
            if u.defines is not None and not whole and not (hook and u.cls):
                waiting.setdefault(u.defines, []).append((p, u))
            else:
                take(p, u)
    while todo:
        n = todo.pop()
        for a in renamed.get(n, set()) - names:
            names.add(a)
            todo.append(a)
        for p, u in waiting.pop(n, ()):
            take(p, u)
    return out


def source_digest(paths, root: str | Path = ".") -> str:
    """One digest for what several files (relative to ``root``: the files a job loads) define and
    the job can run (``reached``), wherever each definition lives among them (see the module's
    docstring)."""
    root = Path(root)
    entries: dict[str, set[str]] = {}
    found = {(root / p).resolve(): [(u.key, u.text) for u in units] for p, units in reached(paths, root).items()}
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
            named = [n for n in names if f"def {n}" in keys or f"name {n}" in keys]
            if not named:  # (before the paths: most imports name none of them)
                continue
            for target in _module_files(f, level, module):
                tid = ids.get(target.resolve()) if target.exists() else None
                if tid is not None:
                    out += [f"import {n}\0{ids[f.resolve()]}\0{tid}\0" for n in named]
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
