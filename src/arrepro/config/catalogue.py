"""What code defines what, read without importing torch (the Snakefile and the config checks
use it): the sequence mixers on disk, each mixer's constructor arguments and declared
requirements (read with ``ast``), and the source files of each rule (its script and the modules
of this package its job loads: ``script_sources``), of a cell of a mixer and of a dataset,
whose code digests decide reruns and checkpoints."""
from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

from arrepro.config import defaults
from arrepro.config.paths import PACKAGE_ROOT, REPO_ROOT
from arrepro.digest import PACKAGE, parse, reached

ROOT = REPO_ROOT
MIXERS_DIR = PACKAGE_ROOT / "models" / "mixers"
# arguments every mixer gets from the backbone, not from mixer_kwargs
BACKBONE_ARGS = {"self", "d_model", "max_len"}


def mixer_names() -> set[str] | None:
    """The mixers: one file each under models/mixers (no torch import); None where the package's
    source is not at hand."""
    if not MIXERS_DIR.is_dir():
        return None
    return {f[:-3] for f in os.listdir(MIXERS_DIR) if f.endswith(".py") and not f.startswith("_")}


# ------------------------------------------------------------------------------ a rule's sources
# The package's modules live in src/arrepro of the repository; rules run scripts under scripts/.
PACKAGE_DIR = f"src/{PACKAGE}"
TRAIN_SCRIPT = "scripts/train_cell.py"
DATA_SCRIPT = "scripts/make_data.py"


def script_sources(script: str, root: str | Path = ".") -> list[str]:
    """The files whose code a rule running ``script`` (relative to the repository ``root``)
    depends on: the script and every module of this package its job loads, with the package
    ``__init__`` files that importing them runs (read with ``ast``; nothing is imported): what the
    script imports, at the top of a file or inside a function, directly or through another module
    of the package, where the code that imports it can run (``arrepro.digest.reached``: the
    imports at the top of every module loaded, and those inside the statements of a loaded module
    that its job can run; an import inside a function that nothing the job runs names, loads
    nothing). Rules record the code digest of these files as a param (Snakemake does not track
    imported modules), so a code edit of a module reruns exactly the rules whose jobs load it."""
    return list(_sources(str(root), ((script, None),)))


def _module_file(root: str, module: str) -> str | None:
    """The file (relative to ``root``) of one of this package's modules, None if there is none
    (``arrepro.files.job_log`` names a function, not a module)."""
    rel = PACKAGE_DIR + "".join(f"/{p}" for p in module.split(".")[1:])
    for f in (f"{rel}.py", f"{rel}/__init__.py"):
        if os.path.isfile(os.path.join(root, f)):
            return f
    return None


def _imported(rel: str, module: str | None, found) -> set[str]:
    """This package's modules (dotted names, and names that may be modules) that the imports
    ``found`` of the file ``rel`` name (as ``digest.imports`` writes them); ``module``: its own
    dotted name (None for a script)."""
    package = module if rel.endswith("__init__.py") else (module or "").rpartition(".")[0]
    names: set[str] = set()
    for level, base, imported in found:
        if level:  # relative: from the file's own package
            parts = package.split(".") if package else []
            if level - 1 >= len(parts):
                continue
            base = ".".join(parts[:len(parts) - level + 1] + ([base] if base else []))
        names.add(base)
        names.update(f"{base}.{n}" for n in imported)  # `from arrepro import files`: a module
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


def _load(root: str, names, seen: set[str]) -> list[tuple[str, str]]:
    """The files of the modules ``names`` not looked up before (``seen``), with their packages:
    importing a.b.c runs a/__init__ and a/b/__init__ first."""
    out = []
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            dotted = ".".join(parts[:i])
            if dotted not in seen:
                seen.add(dotted)
                f = _module_file(root, dotted)
                if f is not None:
                    out.append((f, dotted))
    return out


def _sources(root: str, starts: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    """The files ``starts`` (file, its dotted module name or None) are and load: the imports at
    the top of each file loaded (they run when it loads), then those inside what its job can run
    (``reached``), until nothing more loads."""
    files: dict[str, str | None] = {}
    seen: set[str] = set()  # dotted names looked up
    todo = list(starts)
    while todo:
        while todo:
            rel, module = todo.pop()
            if rel in files:
                continue
            files[rel] = module
            top = _imported(rel, module, parse(os.path.join(root, rel)).top_imports)
            todo += _load(root, top | ({module} if module else set()), seen)  # a start's packages too
        for rel, units in reached(list(files), root).items():
            todo += _load(root, _imported(rel, files[rel], [i for u in units for i in u.imports]), seen)
    return tuple(sorted(files))


def data_sources(root: str | Path = ".") -> list[str]:
    """The sources of the data job (relative to the repository root): its script and what it
    imports. A checkpoint records their digest."""
    return script_sources(DATA_SCRIPT, root)


def train_sources(mixer: str, root: str | Path = ".", device: str = "cpu", mlp: bool = True) -> list[str]:
    """Source files (relative to the repository root) that shape a cell of this mixer: the one
    definition of a cell's code. The train rule records their code digest as a param and a
    checkpoint records it in its fingerprint: a checkpoint is resumed only if they are unchanged,
    so every code edit that makes Snakemake rerun a cell also makes it start over.

    What the rule's script (scripts/train_cell.py) imports (``script_sources``), and the two
    modules that the package imports by name rather than by an import statement: the mixer's own
    file (``models.registry.get_mixer``), with what it imports (a sibling mixer's base class,
    ...), and the fused CPU kernels a model file names (``cpu_kernel_name = "k"`` in a class of a
    mixer file or ops.py, and ``block_cpu_kernel_name = "k"`` for its block: models/cpu_kernels/k.py,
    loaded by ``models.kernels``), with what they import; a kernel another mixer file names does not
    count where the mixer's own file sets that attribute to None (a subclass that does not run its
    base class's kernel: Gated DeltaNet).

    ``device``: the cell's (its scale's ``device``). A fused CPU kernel runs on CPU tensors only
    (``models.kernels``), so a ``cuda`` cell's sources leave them out: an edit of a CPU kernel
    reruns the CPU cells, not the GPU grid. ``cpu`` and ``auto`` (which may train on the CPU)
    keep them. ``mlp``: whether the cell's model has an MLP (its ``mlp``; ``cell_sources`` reads it);
    without one, the kernels that only a model with an MLP runs (``MLP_ONLY``) do not count, unless
    a kernel that counts imports them."""
    return list(_train_sources(mixer, str(root), device != "cuda", bool(mlp)))


def sources_key(model_def: dict) -> tuple[str, bool]:
    """What of a model (a config's ``models`` entry, or a cell spec's ``model_def``) decides its
    cells' sources: its mixer, and whether it has an MLP (``defaults.MODEL``'s where it does not say)."""
    m = defaults.model(model_def)
    return m["mixer"], m["mlp"] is not False


def cell_sources(model_def: dict, root: str | Path = ".", device: str = "cpu") -> list[str]:
    """``train_sources`` of a cell of the model ``model_def`` on ``device`` (``sources_key``)."""
    mixer, mlp = sources_key(model_def)
    return train_sources(mixer, root, device, mlp)


# what only a model with an MLP runs, as (class, attribute) of a kernel's declaration (None: any
# class): a block compiled whole (backbone.Block compiles a block with an MLP only) and the MLP's
# own kernel (ops.MLP: backbone.LanguageModel builds one only for a model with an MLP)
MLP_ONLY = ((None, "block_cpu_kernel_name"), ("MLP", "cpu_kernel_name"))
KERNEL_ATTRIBUTES = ("cpu_kernel_name", "block_cpu_kernel_name")


@functools.lru_cache(maxsize=None)
def _declared_kernels(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str, str], ...]:
    """(class, attribute, kernel or "" for None) of each kernel a class body of the file names
    (``KERNEL_ATTRIBUTES``), read with ``ast``."""
    out = []
    for cls in ast.walk(ast.parse(Path(path).read_text(), filename=path)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
            value = getattr(stmt, "value", None)
            if not (isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, str))):
                continue
            out += [(cls.name, t.id, value.value or "") for t in targets
                    if isinstance(t, ast.Name) and t.id in KERNEL_ATTRIBUTES]
    return tuple(out)


def _train_sources(mixer: str, root: str, cpu_kernels: bool = True, mlp: bool = True) -> tuple[str, ...]:
    module = f"{PACKAGE}.models.mixers.{mixer}"
    starts = [(TRAIN_SCRIPT, None)]
    path = _module_file(root, module)
    if path is not None:
        starts.append((path, module))
    if not cpu_kernels:
        return _sources(root, tuple(starts))
    # a fused CPU kernel named by a model file (a mixer, ops.py): (class, attribute, kernel or "" for
    # None) per file; the mixer's own file may set an attribute to None: a subclass that does not run
    # the kernel its base class in another mixer file names (Gated DeltaNet, DeltaNet's)
    names = {}
    for f in _sources(root, tuple(starts)):
        if f.startswith(f"{PACKAGE_DIR}/models/"):
            st = os.stat(os.path.join(root, f))
            names[f] = _declared_kernels(os.path.join(root, f), st.st_mtime_ns, st.st_size)
    opted_out = {attr for _, attr, name in names.get(path, ()) if not name}
    named = []
    for f, found in names.items():
        other_mixer = f.startswith(f"{PACKAGE_DIR}/models/mixers/") and f != path
        for cls, attr, name in found:
            kernel = f"{PACKAGE}.models.cpu_kernels.{name}"
            if not mlp and any(c in (None, cls) and a == attr for c, a in MLP_ONLY):
                continue
            if name and not (other_mixer and attr in opted_out) and _module_file(root, kernel) is not None:
                named.append((_module_file(root, kernel), kernel))
    return _sources(root, tuple(starts + list(dict.fromkeys(named))))


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
    arrepro.config.constraints), following a ``**kwargs`` base class in a sibling mixer file as
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
        sibling = f"{PACKAGE}.models.mixers."  # `from arrepro.models.mixers.x import X` (or `from .x import X`)
        siblings = {alias.asname or alias.name: (n.module.removeprefix(sibling), alias.name) for n in tree.body
                    if isinstance(n, ast.ImportFrom) and n.module and (n.level == 1 or n.module.startswith(sibling))
                    for alias in n.names}
        base = next((siblings[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in siblings), None)
        if base is None:
            return None
        inherited = signature(mixers / f"{base[0]}.py", lambda n: n.name == base[1])
        if inherited is None:
            return None
        return {**inherited[0], **args}, tuple(inherited[1]) + tuple(requires)

    return signature(mixers / f"{mixer}.py", registered)
