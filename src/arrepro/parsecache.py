"""A disk cache for pure functions of file contents (pure Python: the Snakefile imports it).

The code digests (arrepro.digest) parse every module of the package with ``ast`` and print each
statement back: about 2.7 of a Snakemake start's 8 CPU-seconds on the 2-core test machine, paid on
every start (a dry run, every test's workflow, every cluster job, which parses the Snakefile
again). A parse is a function of the file's bytes and name, the code that parses and the Python
that runs it (``ast.unparse`` may print differently in another version): ``cached`` keys an
entry by all of them, so a hit is the parse itself, and any edit is a miss. An entry that cannot
be read back (damaged, or written by other code) is a miss too, computed afresh and rewritten; a
cache that cannot be written is passed by (the result is the same either way).

Entries are JSON (never pickle: a cache file can run no code), the values dataclasses, frozensets,
tuples and scalars (``encode``/``decode``). Where: ``$ARREPRO_CACHE_DIR``, else
``$XDG_CACHE_HOME/arrepro`` (``~/.cache/arrepro``); safe to delete at any time.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    env = os.environ.get("ARREPRO_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "arrepro"


def encode(x):
    """A value as JSON: a dataclass as its fields and class name, a frozenset sorted, a tuple as a list."""
    if dataclasses.is_dataclass(x):
        return {"@": type(x).__name__, **{f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, frozenset):
        return {"@set": sorted(encode(v) for v in x)}
    if isinstance(x, (tuple, list)):
        return [encode(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"parsecache: cannot store a {type(x).__name__}")


def decode(x, types: dict[str, type]):
    """``encode``'s inverse (a list comes back a tuple), building only the dataclasses in ``types``."""
    if isinstance(x, dict):
        if "@set" in x:
            return frozenset(decode(v, types) for v in x["@set"])
        fields = {k: decode(v, types) for k, v in x.items() if k != "@"}
        return types[x["@"]](**fields)
    if isinstance(x, list):
        return tuple(decode(v, types) for v in x)
    return x


_SELF = Path(__file__).read_bytes()  # this module's source: how an entry was written


def cached(kind: str, key: list[bytes | str], compute: Callable[[], object], types: dict[str, type]):
    """``compute()``, or its value stored under ``key`` (with the Python version and this module's
    source) in the ``kind`` cache."""
    h = hashlib.sha256(sys.version.encode() + _SELF)
    for part in key:
        b = part.encode() if isinstance(part, str) else part
        h.update(len(b).to_bytes(8, "little") + b)
    path = cache_dir() / kind / f"{h.hexdigest()}.json"
    try:
        return decode(json.loads(path.read_text()), types)
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or one that does not read back: a miss
        pass
    value = compute()
    _store(path, json.dumps(encode(value)))
    return value


def _store(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed; not arrepro.files.atomic_write,
    whose module imports this one through arrepro.digest); a cache that cannot be written is passed by."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
