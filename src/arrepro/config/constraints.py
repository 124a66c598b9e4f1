"""What a mixer's constructor arguments must satisfy: declared once, next to the mixer, checked
twice (pure Python, no torch).

A mixer file (``arrepro/models/mixers/<name>.py``) declares at module level::

    REQUIRES = (
        ("isinstance(num_heads, int) and num_heads >= 1", "num_heads must be a whole number >= 1"),
        ("d_model % num_heads == 0", "the width must be a multiple of num_heads"),
    )

each entry a Python expression over the constructor's arguments (``d_model``, ``max_len`` and
its keyword arguments, their defaults included) and what it means, checked in order (an earlier
one guards a later one: no division by a zero ``num_heads``). ``arrepro.config.catalogue`` reads
the literal with ``ast`` (no torch import) and ``arrepro.config.checks`` checks every model of
config.yaml at every width and task of the grids that use it, before any job; the constructor
calls ``require`` on the same literal. The
expressions are this repository's code; the values they see are config.yaml's plain data.
"""
from __future__ import annotations

import ast
import functools

# the only names an expression may call besides the arguments
_NAMES = {"isinstance": isinstance, "int": int, "float": float, "str": str, "bool": bool, "set": set, "len": len}


@functools.lru_cache(maxsize=None)
def names_in(expr: str) -> tuple[str, ...]:
    """The argument names an expression reads, in order."""
    seen = [n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)]
    return tuple(n for n in dict.fromkeys(seen) if n not in _NAMES)


@functools.lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(expr, "<REQUIRES>", "eval")


def unmet(requires, values) -> tuple[str, str] | None:
    """The first requirement that ``values`` (argument name -> value) fail: (its expression, a
    message with what it means and the values it read); None if all hold."""
    scope = {"__builtins__": {}, **_NAMES}
    for expr, meaning in requires:
        try:
            ok = eval(_compiled(expr), scope, dict(values))  # noqa: S307 - the repository's expression
            problem = None if ok else ""
        except Exception as e:  # a value of the wrong type, say
            problem = f": {type(e).__name__}: {e}"
        if problem is not None:
            shown = ", ".join(f"{n}={values[n]!r}" for n in names_in(expr) if n in values)
            return expr, f"{meaning} ({shown}{problem})"
    return None


def require(requires, values) -> None:
    """ValueError if ``values`` (the constructor's ``locals()``) fail a requirement."""
    problem = unmet(requires, values)
    if problem:
        raise ValueError(problem[1])
