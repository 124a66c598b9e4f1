"""From ``config.yaml`` to the list of training cells (pure Python: the Snakefile imports it).

A *cell* is one training run: (task, model, width, layers, recipe, lr, seed). Its folder

    results/cells/{task}/{model}/w{width}-l{layers}/{recipe}/lr{lr}-s{seed}

names everything that changes its result; ``task`` and ``recipe`` carry a short hash of their
definitions, so editing a dataset or a recipe in the config makes new folders instead of
overwriting finished cells. Cells are shared: two experiments that need the same cell name the
same folder and it is trained once.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from arrepro.config import defaults
from arrepro.config.cards import card_of, without_card
from arrepro.config.paths import REPO_ROOT

CELL_ROOT = "results/cells"
CELL_PATTERN = CELL_ROOT + "/{task}/{model}/w{width}-l{layers}/{recipe}/lr{lr}-s{seed}"
# the keys of a cell's spec that change no result (the cost model's, from the model's card): a
# cell's identity (the train rule's param, its checkpoint's fingerprint) leaves them out
NOT_IDENTITY = ("cost_factor",)


SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


@functools.lru_cache(maxsize=None)
def schema_defaults(definition: str | None = None) -> dict:
    """The ``default:`` of each property of the config schema's top level (``definition`` None)
    or of one of its ``$defs``: the one home of the config's defaults."""
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text())
    props = (schema if definition is None else schema["$defs"][definition])["properties"]
    return {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}


class ConfigError(ValueError):
    """A config value that the schema cannot catch (a dangling reference, say); names its key."""


def is_replication(grid_def: dict) -> bool:
    """A grid that replicates a coarse reference grid (Zoology's: the dotted series of Figures 2
    and 11): it says so (``replication: true``)."""
    return bool(grid_def.get("replication"))


def identity(spec: dict) -> dict:
    """A cell's spec without what changes no result (``NOT_IDENTITY``): what its train rule
    passes on and its checkpoint's fingerprint reads."""
    return {k: v for k, v in spec.items() if k not in NOT_IDENTITY}


def one_of(names) -> str:
    """A wildcard constraint (a regex) matching exactly these names, nothing at all if there are
    none; names are escaped ('.' in a name matches only '.')."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


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

    def cell(self, task: str, model: str, width, layers, recipe: str, lr, seed) -> Cell:
        """The cell of a task and a recipe named as in the config (not by their ids)."""
        return Cell(self.task_names[task], model, int(width), int(layers), self.recipe_names[recipe], fmt_lr(lr), int(seed))

    def tables(self, exp: str) -> list[str]:
        """An experiment's aggregated tables: its cells and its best-over-LR statistics."""
        return [self.table(exp, t) for t in ("cells", "best")]

    def table(self, exp: str, kind: str) -> str:
        """The one spelling of an aggregated table's path: ``{out}/tables/{exp}_{kind}.csv``
        (``kind``: cells or best; ``exp`` may be the wildcard ``{exp}``)."""
        return f"{self.out}/tables/{exp}_{kind}.csv"

    @property
    def device(self) -> str:
        """The device this scale's cells train on (``cpu``, ``cuda`` or ``auto``)."""
        return defaults.scale(self.scale, "device")

    @property
    def cells_table(self) -> str:
        """Every cell of the scale once (rule cells_table)."""
        return f"{self.out}/tables/cells.csv"

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
        from arrepro.data import task_seq_len

        L = task_seq_len(task)
        for bound in sorted(int(k) for k in bs):  # the first bound >= L
            if L <= bound:
                return int(bs[bound] if bound in bs else bs[str(bound)])
        raise ConfigError(f"{where}.batch_size: no entry for sequence length {L}")

    # -- cells ---------------------------------------------------------------------------------
    def grid_cells(self, grid: dict) -> list[Cell]:
        """A grid's cells as a fixed grid (every learning rate on every seed: lr_protocol grid)."""
        return [self.cell(t, m, w, nl, grid["recipe"], lr, s) for t, m, w, nl, lr, s in itertools.product(
            grid["tasks"], grid["models"], grid["widths"], grid["layers"], self.lrs(grid), grid["seeds"])]

    def experiment_cells(self, exp: str) -> list[Cell]:
        if exp not in self._cells:  # memoised: the workflow asks several times per experiment
            cells = [c for g in self.experiments[exp]["grids"] for c in self.grid_cells(g)]
            self._cells[exp] = list(dict.fromkeys(cells))
        return self._cells[exp]

    def all_cells(self) -> list[Cell]:
        return list(dict.fromkeys(c for e in self.experiments for c in self.experiment_cells(e)))

    def metric(self, exp: str) -> str:
        """The per-cell number an experiment reports (its own, or config's aggregate.metric)."""
        return self.experiments[exp].get("metric", self.config["aggregate"]["metric"])

    def reference_lrs(self, exp: str) -> list[float]:
        """Learning rates an experiment's figure marks as dashed lines (its ``reference_lrs``:
        an lr grid's name or a list), e.g. Zoology's grid in Fig. 1; none by default."""
        ref = self.experiments[exp].get("reference_lrs")
        return [] if ref is None else self.lrs({"lrs": ref}, f"scales.{self.scale_name}.experiments.{exp}.reference_lrs")

    def experiment_models(self, exp: str) -> dict:
        """The definitions of the models an experiment names, in its order, then those their cards
        name (``of``: the model a variant varies, whose label a table prints)."""
        names = dict.fromkeys(m for g in self.experiments[exp]["grids"] for m in g["models"])
        names.update(dict.fromkeys(card_of(self.models, m).of for m in list(names) if card_of(self.models, m).of))
        return {m: self.models[m] for m in names}

    def experiment_recipes(self, exp: str) -> dict:
        """The recipes an experiment's grids train, by the name its cells carry (with their hash),
        each its definition with its config name (``name``)."""
        return {self.recipe_names[r]: self.recipes[self.recipe_names[r]] for r in
                dict.fromkeys(g["recipe"] for g in self.experiments[exp]["grids"])}

    def replication_series(self, exp: str) -> list[str]:
        """The series of an experiment's grids that replicate a coarse reference grid (``is_replication``)."""
        return list(dict.fromkeys(g.get("series", "main") for g in self.experiments[exp]["grids"] if is_replication(g)))

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

    def spec_of(self, cell: "Cell") -> dict:
        """A cell's spec (``cell_spec``), from the cell: the one way from a Cell to its spec."""
        return self.cell_spec(**vars(cell))

    def _cell_spec(self, task, model, width, layers, recipe, lr, seed) -> dict:
        t, r, m = self.tasks[task], self.recipes[recipe], self.models[model]
        return {
            "task": task, "task_def": {k: v for k, v in t.items() if k != "name"},
            "model": model, "model_def": without_card(m), "width": int(width), "layers": int(layers),
            "recipe": recipe, "recipe_def": {k: v for k, v in r.items() if k != "name"},
            "batch_size": self.batch_size(r, t), "lr": float(lr), "seed": int(seed),
            "device": self.device, "precision": defaults.scale(self.scale, "precision"),
            "subnormals": defaults.scale(self.scale, "subnormals"),
            "cost_factor": card_of(self.models, model).cost,  # not its identity (``identity``)
        }
