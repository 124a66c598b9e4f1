"""What code defines what, read without importing torch (the Snakefile and the config checks
use it): the sequence mixers on disk, each mixer's constructor arguments and declared
requirements (read with ``ast``), and the source files that define a cell of a mixer and a
dataset (whose code digests decide reruns and checkpoints)."""
from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIXERS_DIR = Path(__file__).resolve().parent / "models" / "mixers"
# arguments every mixer gets from the backbone, not from mixer_kwargs
BACKBONE_ARGS = {"self", "d_model", "max_len"}


def mixer_names() -> set[str] | None:
    """The mixers: one file each under models/mixers (no torch import); None where the package's
    source is not at hand."""
    if not MIXERS_DIR.is_dir():
        return None
    return {f[:-3] for f in os.listdir(MIXERS_DIR) if f.endswith(".py") and not f.startswith("_")}


# The sources of the data job (relative to the repository root): a checkpoint records their digest.
DATA_SOURCES = ("src/arrepro/data/__init__.py", "src/arrepro/data/mqar.py", "src/arrepro/data/copying.py",
                "scripts/make_data.py")


def train_sources(mixer: str, root: str | Path = ".") -> list[str]:
    """Source files (relative to the repository root) that shape a cell of this mixer: the one
    definition of a cell's code. The train rule records their code digest as a param (Snakemake
    does not track imported modules) and a checkpoint records it in its fingerprint: a checkpoint
    is resumed only if they are unchanged, so every code edit that makes Snakemake rerun a cell
    also makes it start over. The rule's script (scripts/train_cell.py) is one of them. A mixer
    file that imports a sibling mixer (``from .deltanet import ...``) depends on that file too."""
    return list(_train_sources(mixer, str(root)))


@functools.lru_cache(maxsize=None)
def _train_sources(mixer: str, root: str) -> tuple[str, ...]:
    pkg = "src/arrepro"
    files = ["scripts/train_cell.py", f"{pkg}/trainjob.py", f"{pkg}/train.py", f"{pkg}/checkpoint.py", f"{pkg}/defaults.py", f"{pkg}/numerics.py", f"{pkg}/cellfiles.py",
             f"{pkg}/constraints.py", f"{pkg}/models/backbone.py", f"{pkg}/models/ops.py", f"{pkg}/models/registry.py",
             f"{pkg}/models/kernels.py"]
    ops = Path(root) / pkg / "models" / "ops.py"  # the blocks every model has (its linear layers)
    if ops.exists():
        files += _cpu_kernel_sources(ops.read_text(), Path(root), pkg)
    todo, seen = [mixer], []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        path = Path(root) / pkg / "models" / "mixers" / f"{name}.py"
        if path.exists():
            text = path.read_text()
            todo += re.findall(r"^from \.(\w+) import", text, re.M)
            files += _cpu_kernel_sources(text, Path(root), pkg)
    return tuple(dict.fromkeys(files + [f"{pkg}/models/mixers/{m}.py" for m in seen]))


def _cpu_kernel_sources(mixer_text: str, root: Path, pkg: str) -> list[str]:
    """The fused CPU kernels a mixer's file (or ops.py) names (``cpu_kernel_name = "k"``:
    models/cpu_kernels/k.py) and the sibling modules that file imports (``from .common import``)."""
    out = []
    for name in re.findall(r'^\s*cpu_kernel_name = "(\w+)"', mixer_text, re.M):
        path = root / pkg / "models" / "cpu_kernels" / f"{name}.py"
        deps = re.findall(r"^from \.(\w+) import", path.read_text(), re.M) if path.exists() else []
        out += [f"{pkg}/models/cpu_kernels/{m}.py" for m in [name, *deps, "__init__"]]
    return out


NO_DEFAULT = object()  # a constructor argument without a literal default


def mixer_arguments(mixer: str, root: str) -> frozenset[str] | None:
    """The keyword arguments a mixer's constructor accepts beyond ``d_model`` and ``max_len``,
    read from the syntax tree of its file (no torch import): the ``__init__`` of the class
    registered as ``mixer``; a ``**kwargs`` handed to a base class imported from a sibling mixer
    file adds that class's. None where that cannot be told (any keyword then passes)."""
    sig = mixer_signature(mixer, root)
    return None if sig is None else frozenset(sig[0])


@functools.lru_cache(maxsize=None)
def mixer_signature(mixer: str, root: str) -> tuple[dict, tuple] | None:
    """(each keyword argument of the mixer's constructor -> its default, ``NO_DEFAULT`` where it
    has none or it is not a literal; the requirements its file declares, ``REQUIRES``: see
    arrepro.constraints), following a ``**kwargs`` base class in a sibling mixer file as
    ``mixer_arguments`` does. Read with ``ast``; None where that cannot be told."""
    mixers = Path(root) / "src" / "arrepro" / "models" / "mixers"

    def registered(cls: ast.ClassDef) -> bool:
        return any(isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant)
                   and d.args[0].value == mixer for d in cls.decorator_list)

    def literal(node) -> object:
        try:
            return ast.literal_eval(node)
        except ValueError:
            return NO_DEFAULT

    def signature(file: Path, pick) -> tuple[dict, tuple] | None:
        if not file.exists():
            return None
        tree = ast.parse(file.read_text())
        requires = next((literal(n.value) for n in tree.body if isinstance(n, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == "REQUIRES" for t in n.targets)), ())
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and pick(n)), None)
        if cls is None:
            return None
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        args: dict = {}
        if init is not None:
            a = init.args
            positional = a.posonlyargs + a.args
            defaults = [NO_DEFAULT] * (len(positional) - len(a.defaults)) + [literal(d) for d in a.defaults]
            kw_defaults = [NO_DEFAULT if d is None else literal(d) for d in a.kw_defaults]
            args = {x.arg: d for x, d in zip(positional + a.kwonlyargs, defaults + kw_defaults)
                    if x.arg not in BACKBONE_ARGS}
            if a.kwarg is None:
                return args, requires
        # no __init__, or **kwargs: what the base class takes, if it is a sibling mixer's class
        siblings = {alias.asname or alias.name: (n.module, alias.name) for n in tree.body
                    if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module for alias in n.names}
        base = next((siblings[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in siblings), None)
        if base is None:
            return None
        inherited = signature(mixers / f"{base[0]}.py", lambda n: n.name == base[1])
        if inherited is None:
            return None
        return {**inherited[0], **args}, tuple(inherited[1]) + tuple(requires)

    return signature(mixers / f"{mixer}.py", registered)
