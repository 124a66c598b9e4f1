"""From ``config.yaml`` to the list of training cells (pure Python: the Snakefile imports it).

A *cell* is one training run: (task, model, width, layers, recipe, lr, seed). Its folder

    results/cells/{task}/{model}/w{width}-l{layers}/{recipe}/lr{lr}-s{seed}

names everything that changes its result; ``task`` and ``recipe`` carry a short hash of their
definitions, so editing a dataset or a recipe in the config makes new folders instead of
overwriting finished cells. Cells are shared: two experiments that need the same cell name the
same folder and it is trained once.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import math
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

CELL_ROOT = "results/cells"
CELL_PATTERN = CELL_ROOT + "/{task}/{model}/w{width}-l{layers}/{recipe}/lr{lr}-s{seed}"
# one folder name of a path built from config: no '/', no leading '.' or '-', no spaces, quotes
# or shell syntax (config names are letters, digits, '_' and '-'; a formatted lr adds '.' and '+')
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# arguments every mixer gets from the backbone, not from mixer_kwargs
BACKBONE_ARGS = {"self", "d_model", "max_len"}
# a config model named zoology_X is Zoology's own form of architecture X (the replication of
# Figs. 2 and 11); figures colour it, and claims pair it, with X
ZOO_PREFIX = "zoology_"


SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


@functools.lru_cache(maxsize=None)
def schema_defaults(definition: str | None = None) -> dict:
    """The ``default:`` of each property of the config schema's top level (``definition`` None)
    or of one of its ``$defs``: the one home of the config's defaults."""
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text())
    props = (schema if definition is None else schema["$defs"][definition])["properties"]
    return {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}


def architecture(model: str) -> str:
    """The architecture a config model stands for: ``zoology_hyena`` -> ``hyena``."""
    return model.removeprefix(ZOO_PREFIX)


class ConfigError(ValueError):
    """A config value that the schema cannot catch (a dangling reference, say); names its key."""


def check_path(path: str, key: str, root: str | None = "results") -> str:
    """``path`` itself if it is a relative, normalised path (under ``root/`` when one is given)
    whose every folder name is plain (``PLAIN_NAME``): no ``..``, no absolute path, no space,
    quote or shell syntax. Else a ConfigError naming ``key``. Every path the workflow builds from
    config names passes here (``Grid._check_paths``)."""
    parts = path.split("/")
    if (posixpath.normpath(path) != path or (root is not None and (parts[0] != root or len(parts) < 2))
            or not all(PLAIN_NAME.fullmatch(p) for p in parts)):
        where = f"under {root}/" if root else "inside the repository"
        raise ConfigError(f"{key}: the path {path!r} is not a plain path {where} "
                          "(names: letters, digits, '_' and '-')")
    return path


def check_finite(obj, key: str = "") -> None:
    """Refuse NaN and infinite numbers anywhere in ``obj`` (the schema's number type admits
    YAML's .inf and .nan), naming the key."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ConfigError(f"{key}: {obj} is not a finite number")
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_finite(v, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_finite(v, f"{key}[{i}]")


def prepare_job_environment(root: str | Path) -> None:
    """Let jobs import this package from ``root/src`` and run the interpreter that runs the
    workflow (an activated conda env, when one is used, comes first on PATH anyway)."""
    import os
    import sys

    env = os.environ
    env["PYTHONPATH"] = os.pathsep.join([str(Path(root) / "src"), env.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])


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
    files = ["scripts/train_cell.py", f"{pkg}/trainjob.py", f"{pkg}/train.py", f"{pkg}/numerics.py", f"{pkg}/cellfiles.py",
             f"{pkg}/constraints.py", f"{pkg}/models/backbone.py", f"{pkg}/models/ops.py", f"{pkg}/models/registry.py",
             f"{pkg}/models/kernels.py"]
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
    """The fused CPU kernel a mixer names (``cpu_kernel_name = "k"``: models/cpu_kernels/k.py) and
    the sibling modules that file imports (``from .common import``)."""
    out = []
    for name in re.findall(r'^\s*cpu_kernel_name = "(\w+)"', mixer_text, re.M):
        path = root / pkg / "models" / "cpu_kernels" / f"{name}.py"
        deps = re.findall(r"^from \.(\w+) import", path.read_text(), re.M) if path.exists() else []
        out += [f"{pkg}/models/cpu_kernels/{m}.py" for m in [name, *deps, "__init__"]]
    return out


def one_of(names) -> str:
    """A wildcard constraint (a regex) matching exactly these names, nothing at all if there are
    none; names are escaped ('.' in a name matches only '.')."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


def task_seq_len(task: dict) -> int:
    """The length of a task's model inputs: MQAR's ``seq_len``; the copy task's padded example
    (``CopySpec.seq_len``, which depends on ``max_len``)."""
    return _seq_len(json.dumps(task, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _seq_len(task_json: str) -> int:
    from .data import task_spec

    return int(task_spec(json.loads(task_json)).seq_len)


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


def short_hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:6]


def fmt_lr(lr: float) -> str:
    """A learning rate's folder name, exact: ``float(fmt_lr(x)) == x`` for every float, so two
    learning rates never share a cell and a cell trains exactly the config's value. Three
    significant digits where they are exact (the names finished cells already have), else
    Python's shortest round-trip form."""
    lr = float(lr)
    short = f"{lr:.3g}"
    return short if float(short) == lr else repr(lr)


def task_id(name: str, task: dict) -> str:
    if task["kind"] == "mqar":
        head = f"mqar-L{task['seq_len']}-K{task['num_kv_pairs']}-V{task['vocab_size']}"
    else:
        head = f"copy-{task['min_len']}to{task['max_len']}"
    return f"{head}-{short_hash(task)}"


def recipe_id(name: str, recipe: dict) -> str:
    return f"{name}-{short_hash(recipe)}"


@dataclass(frozen=True)
class Setting:
    """What a learning-rate search runs over: a cell without its learning rate and seed."""
    task: str  # task id (folder name)
    model: str
    width: int
    layers: int
    recipe: str  # recipe id

    @property
    def path(self) -> str:
        return CELL_PATTERN.rsplit("/", 1)[0].format(**self.__dict__)

    def cell(self, lr: float, seed: int) -> "Cell":
        return Cell(self.task, self.model, self.width, self.layers, self.recipe, fmt_lr(lr), int(seed))


@dataclass(frozen=True)
class Cell(Setting):
    lr: str  # formatted (fmt_lr)
    seed: int

    @property
    def path(self) -> str:
        return CELL_PATTERN.format(**self.__dict__)


class Grid:
    """The selected scale of a config: its tasks, recipes, experiments and their cells."""

    def __init__(self, config: dict, scale: str | None = None):
        self.config = config
        self.scale_name = scale or config["scale"]
        if self.scale_name not in config["scales"]:
            raise ConfigError(f"scale: {self.scale_name!r} is not one of {sorted(config['scales'])}")
        self.scale = config["scales"][self.scale_name]
        # this scale's outputs (figures, tables, paper, logs); cells and data are shared by scales
        self.out = f"results/{self.scale_name}"
        self.models = config["models"]
        self.task_names = {n: task_id(n, t) for n, t in self.scale["tasks"].items()}
        self.tasks = {self.task_names[n]: {"name": n, **t} for n, t in self.scale["tasks"].items()}
        self.recipe_names = {n: recipe_id(n, r) for n, r in self.scale["recipes"].items()}
        self.recipes = {self.recipe_names[n]: {"name": n, **r} for n, r in self.scale["recipes"].items()}
        self.experiments = self.scale["experiments"]
        self._specs: dict[tuple, dict] = {}
        self._cells: dict[str, list[Cell]] = {}
        self._check()

    # -- validation beyond the schema -------------------------------------------------------
    def _check(self) -> None:
        check_finite(self.config)
        on_disk = _mixer_names()
        root = str(Path(__file__).resolve().parents[2])
        for name, m in self.models.items():
            if on_disk is not None and m["mixer"] not in on_disk:
                raise ConfigError(f"models.{name}.mixer: unknown mixer {m['mixer']!r}; known: {sorted(on_disk)}")
            accepted = mixer_arguments(m["mixer"], root) if on_disk is not None else None
            for k in m.get("mixer_kwargs", {}):
                if accepted is not None and k not in accepted:
                    raise ConfigError(f"models.{name}.mixer_kwargs.{k}: mixer {m['mixer']!r} takes no argument "
                                      f"{k!r}; it takes: {', '.join(sorted(accepted)) or 'none'}")
        base = f"scales.{self.scale_name}"
        from .data import task_spec

        for name, t in self.scale["tasks"].items():
            try:
                task_spec(t).validate()
            except (ValueError, TypeError) as err:
                raise ConfigError(f"{base}.tasks.{name}: {err}") from None
        for exp, e in self.experiments.items():
            kind = "plot" if exp.startswith("fig") else "table"
            if kind not in e:
                raise ConfigError(f"{base}.experiments.{exp}: a {exp[:3]}* experiment needs a '{kind}' key")
            for i, g in enumerate(e["grids"]):
                where = f"{base}.experiments.{exp}.grids[{i}]"
                for key, known in (("tasks", self.task_names), ("models", self.models)):
                    for v in g[key]:
                        if v not in known:
                            raise ConfigError(f"{where}.{key}: unknown {key[:-1]} {v!r}; known: {sorted(known)}")
                if g["recipe"] not in self.recipe_names:
                    raise ConfigError(f"{where}.recipe: unknown recipe {g['recipe']!r}; known: {sorted(self.recipe_names)}")
                self.lrs(g, where)
                recipe = self.scale["recipes"][g["recipe"]]
                for t in g["tasks"]:
                    task = self.scale["tasks"][t]
                    bs = self.batch_size(recipe, task, f"{base}.recipes.{g['recipe']}")
                    if bs > task["n_train"]:
                        raise ConfigError(f"{base}.recipes.{g['recipe']}.batch_size: {bs} exceeds the {task['n_train']} "
                                          f"training examples of task {t} ({where})")
        self._check_models(root if on_disk is not None else None)
        self._check_paths()

    def _check_models(self, root: str | None) -> None:
        """Each model of each grid at each of its widths, depths and tasks: the requirements its
        mixer declares (``REQUIRES``, read with ast: arrepro.constraints), e.g. ``num_heads >= 1``
        and a width that ``num_heads`` divides, and a size some machine can hold
        (``resources.memory_problem``). Refused here, naming the key, not inside a job."""
        from .constraints import names_in, unmet
        from .resources import memory_problem  # here: resources imports this module

        base = f"scales.{self.scale_name}"
        seen = set()
        for exp, e in self.experiments.items():
            for i, g in enumerate(e["grids"]):
                where = f"{base}.experiments.{exp}.grids[{i}]"
                for t, m, w, nl in itertools.product(g["tasks"], g["models"], g["widths"], g["layers"]):
                    if (t, m, w, nl, g["recipe"]) in seen:
                        continue
                    seen.add((t, m, w, nl, g["recipe"]))
                    model = self.models[m]
                    kwargs = model.get("mixer_kwargs", {})
                    sig = mixer_signature(model["mixer"], root) if root is not None else None
                    if sig is not None:
                        values = {k: v for k, v in sig[0].items() if v is not NO_DEFAULT}
                        values.update(kwargs, d_model=w, max_len=task_seq_len(self.scale["tasks"][t]))
                        problem = unmet(sig[1], values)
                        if problem and not {"d_model", "max_len"} & set(names_in(problem[0])):
                            raise ConfigError(f"models.{m}.mixer_kwargs: {problem[1]}")
                        if problem:
                            raise ConfigError(f"{where}.widths: model {m!r} at width {w}: {problem[1]} "
                                              f"(models.{m}.mixer_kwargs: {kwargs})")
                    spec = self._cell_spec(self.task_names[t], m, w, nl, self.recipe_names[g["recipe"]],
                                           self.lrs(g)[0], 0)
                    problem = memory_problem(spec)
                    if problem:
                        raise ConfigError(f"{where}.widths: model {m!r} at width {w}, {nl} layer(s): {problem}")

    def _check_paths(self) -> None:
        """Every path built from config names stays under results/ (check_path): the data and
        cell folders, each experiment's outputs; a published CSV stays inside the repository."""
        base = f"scales.{self.scale_name}"
        check_path(self.out, "scale")
        for name, tid in self.task_names.items():
            check_path(f"results/data/{tid}", f"{base}.tasks.{name}")
        seen = set()
        for exp, e in self.experiments.items():
            for name in self.outputs(exp):
                check_path(name, f"{base}.experiments.{exp}")
            if "published" in e:
                check_path(e["published"], f"{base}.experiments.{exp}.published", root=None)
            for i, g in enumerate(e["grids"]):
                for t, m, lr in itertools.product(g["tasks"], g["models"], self.lrs(g)):
                    key = (t, m, g["recipe"], lr)
                    if key not in seen:
                        seen.add(key)
                        cell = Cell(self.task_names[t], m, 1, 1, self.recipe_names[g["recipe"]], fmt_lr(lr), 0)
                        check_path(cell.path, f"{base}.experiments.{exp}.grids[{i}]")

    def tables(self, exp: str) -> list[str]:
        """An experiment's aggregated tables: its cells and its best-over-LR statistics."""
        return [f"{self.out}/tables/{exp}_{t}.csv" for t in ("cells", "best")]

    def outputs(self, exp: str) -> list[str]:
        """The files an experiment's figure or table rule writes, and its aggregated tables."""
        exts = ("pdf", "png") if "plot" in self.experiments[exp] else ("csv", "tex")
        return [f"{self.out}/{exp}.{x}" for x in exts] + self.tables(exp)

    def lrs(self, grid: dict, where: str = "") -> list[float]:
        lrs = grid["lrs"]
        if isinstance(lrs, str):
            if lrs not in self.config["lr_grids"]:
                raise ConfigError(f"{where}.lrs: unknown lr grid {lrs!r}; known: {sorted(self.config['lr_grids'])}")
            lrs = self.config["lr_grids"][lrs]
        lrs = [float(x) for x in lrs]
        names = [fmt_lr(x) for x in lrs]
        if len(set(names)) < len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"{where}.lrs: learning rate(s) {', '.join(dup)} given twice")
        return lrs

    @staticmethod
    def batch_size(recipe: dict, task: dict, where: str = "") -> int:
        bs = recipe["batch_size"]
        if isinstance(bs, int):
            return bs
        L = task_seq_len(task)
        for bound in sorted(int(k) for k in bs):  # the first bound >= L
            if L <= bound:
                return int(bs[bound] if bound in bs else bs[str(bound)])
        raise ConfigError(f"{where}.batch_size: no entry for sequence length {L}")

    # -- cells ---------------------------------------------------------------------------------
    def grid_cells(self, grid: dict) -> list[Cell]:
        return [
            Cell(self.task_names[t], m, int(w), int(nl), self.recipe_names[grid["recipe"]], fmt_lr(lr), int(s))
            for t, m, w, nl, lr, s in itertools.product(
                grid["tasks"], grid["models"], grid["widths"], grid["layers"], self.lrs(grid), grid["seeds"]
            )
        ]

    def experiment_cells(self, exp: str) -> list[Cell]:
        if exp not in self._cells:  # memoised: the workflow asks several times per experiment
            cells = [c for g in self.experiments[exp]["grids"] for c in self.grid_cells(g)]
            self._cells[exp] = list(dict.fromkeys(cells))
        return self._cells[exp]

    def all_cells(self) -> list[Cell]:
        return list(dict.fromkeys(c for e in self.experiments for c in self.experiment_cells(e)))

    def series_of(self, exp: str) -> list[dict]:
        """Each grid of an experiment as plain data: the aggregation assigns cells to series."""
        return [
            {"series": g.get("series", "main"), "cells": [c.path for c in self.grid_cells(g)]}
            for g in self.experiments[exp]["grids"]
        ]

    def metric(self, exp: str) -> str:
        """The per-cell number an experiment reports (its own, or config's aggregate.metric)."""
        return self.experiments[exp].get("metric", self.config["aggregate"]["metric"])

    def reference_lrs(self, exp: str) -> list[float]:
        """Learning rates an experiment's figure marks as dashed lines (its ``reference_lrs``:
        an lr grid's name or a list), e.g. Zoology's grid in Fig. 1; none by default."""
        ref = self.experiments[exp].get("reference_lrs")
        return [] if ref is None else self.lrs({"lrs": ref}, f"scales.{self.scale_name}.experiments.{exp}.reference_lrs")

    def experiment_models(self, exp: str) -> dict:
        """The definitions of the models an experiment names, in its order."""
        names = dict.fromkeys(m for g in self.experiments[exp]["grids"] for m in g["models"])
        return {m: self.models[m] for m in names}

    def cell_spec(self, task: str, model: str, width, layers, recipe: str, lr, seed) -> dict:
        """Everything a training run needs, resolved from the config (the rule's params), and
        nothing else: a cell's identity (this param, and its checkpoint's fingerprint) is what
        changes its result, so scales that define a task and a recipe alike share its cells
        without retraining them (no scale name, no task name: labels come from the grid).
        Memoised: the rules ask for it several times per job, for thousands of jobs."""
        key = (task, model, str(width), str(layers), recipe, str(lr), str(seed))
        if key not in self._specs:
            self._specs[key] = self._cell_spec(task, model, width, layers, recipe, lr, seed)
        return self._specs[key]

    def _cell_spec(self, task, model, width, layers, recipe, lr, seed) -> dict:
        t, r, m = self.tasks[task], self.recipes[recipe], self.models[model]
        return {
            "task": task, "task_def": {k: v for k, v in t.items() if k != "name"},
            "model": model, "model_def": m, "width": int(width), "layers": int(layers),
            "recipe": recipe, "recipe_def": {k: v for k, v in r.items() if k != "name"},
            "batch_size": self.batch_size(r, t), "lr": float(lr), "seed": int(seed),
            "device": self.scale.get("device", "auto"), "precision": self.scale.get("precision", "fp32"),
        }


def _mixer_names() -> set[str] | None:
    """Mixer files on disk (no torch import), or None where the package source is not at hand."""
    import os

    here = os.path.join(os.path.dirname(__file__), "models", "mixers")
    if not os.path.isdir(here):
        return None
    return {f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_")}
