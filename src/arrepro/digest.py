"""Digests of what code *does*, not how it is written (pure Python: the Snakefile imports it).

``source_digest`` hashes a Python file's syntax tree with every docstring removed, printed back
by ``ast.unparse``: comments, docstrings, blank lines and formatting do not change it; any change
to a statement, name or literal does. A file that is not Python is hashed byte for byte.
Workflow rules record these digests as params (so a comment edit reruns nothing and a code edit
reruns exactly the jobs whose sources changed), and a training checkpoint is resumed only if its
digest matches.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def normalised_source(path: str | Path) -> bytes:
    """The file's code without comments, docstrings and formatting (bytes of other files as is)."""
    data = Path(path).read_bytes()
    if not str(path).endswith(".py"):
        return data
    try:
        tree = ast.parse(data, filename=str(path))
    except SyntaxError:  # not valid Python: a change to any byte counts
        return data
    return ast.unparse(_strip_docstrings(tree)).encode()


@functools.lru_cache(maxsize=None)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha1(normalised_source(path)).hexdigest()


def file_digest(path: str | Path) -> str:
    """Digest of one file's normalised source (memoised on its path, mtime and size)."""
    st = os.stat(path)
    return _file_digest(str(path), st.st_mtime_ns, st.st_size)


def source_digest(paths, root: str | Path = ".") -> str:
    """One digest for several files (relative to ``root``), in the order given, each with its name."""
    h = hashlib.sha1()
    for p in paths:
        h.update(str(p).encode() + b"\0" + file_digest(Path(root) / p).encode() + b"\0")
    return h.hexdigest()[:16]
