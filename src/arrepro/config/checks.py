"""The config checks beyond the schema: every value a job would fail on, refused before any job
and named by its key (``ConfigError``), and every path built from config names kept under
results/ (``check_path``). ``load_grid`` builds a scale's ``Grid`` and checks it."""
from __future__ import annotations

import itertools
import math
import posixpath
import re

from arrepro.config.cards import CardError, cards, distinct_labels
from arrepro.config.catalogue import NO_DEFAULT, ROOT, mixer_arguments, mixer_names, mixer_signature
from arrepro.config.constraints import names_in, unmet
from arrepro.config.lookahead import layer_lookahead, lookahead_problem
from arrepro.data import task_seq_len, task_spec
from arrepro.config.grid import ConfigError, Grid
from arrepro.config.paths import data_dir
from arrepro.config.costs import memory_problem


def load_grid(config: dict, scale: str | None = None) -> Grid:
    """The grid of a scale of ``config`` (the config's ``scale`` by default), checked
    (``check_grid``): what every entry point builds (the Snakefile, the command-line tools)."""
    grid = Grid(config, scale)
    check_grid(grid)
    return grid


# one folder name of a path built from config: no '/', no leading '.' or '-', no spaces, quotes
# or shell syntax (config names are letters, digits, '_' and '-'; a formatted lr adds '.' and '+')
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def check_path(path: str, key: str, root: str | None = "results") -> str:
    """``path`` itself if it is a relative, normalised path (under ``root/`` when one is given)
    whose every folder name is plain (``PLAIN_NAME``): no ``..``, no absolute path, no space,
    quote or shell syntax. Else a ConfigError naming ``key``. Every path the workflow builds from
    config names passes here (``_check_paths``)."""
    parts = path.split("/")
    if (posixpath.normpath(path) != path or (root is not None and (parts[0] != root or len(parts) < 2))
            or not all(PLAIN_NAME.fullmatch(p) for p in parts)):
        where = f"under {root}/" if root else "inside the repository"
        raise ConfigError(f"{key}: the path {path!r} is not a plain path {where} "
                          "(names: letters, digits, '_' and '-')")
    return path


MAX_SEED = 2 ** 32 - 1  # numpy's legacy generators take 32 bits (the schema's seed)
MAX_TEXT = 4096  # characters of any string in the config (the schema bounds titles and labels closer)


def config_values(obj, key: str = ""):
    """(key, value) of every value of ``obj`` that is no mapping or list, keys written as the
    errors name them (``scales.tiny.recipes.tiny.betas[1]``)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from config_values(v, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from config_values(v, f"{key}[{i}]")
    else:
        yield key, obj


def check_text(obj, key: str = "") -> None:
    """Refuse a string longer than ``MAX_TEXT`` anywhere in ``obj`` (mixer_kwargs too, which the
    schema leaves open), naming the key."""
    for k, v in config_values(obj, key):
        if isinstance(v, str) and len(v) > MAX_TEXT:
            raise ConfigError(f"{k}: a text of {len(v):,} characters; at most {MAX_TEXT:,}")


def check_finite(obj, key: str = "") -> None:
    """Refuse NaN and infinite numbers anywhere in ``obj`` (the schema's number type admits
    YAML's .inf and .nan), naming the key."""
    for k, v in config_values(obj, key):
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{k}: {v} is not a finite number")


# a number YAML 1.1 (PyYAML, Snakemake) reads as a string: 1e-3 (no dot), 1E-3, +1e-3
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def lr_lists(config: dict):
    """(key, list) of every learning-rate list in ``config``: lr_grids, each search's start,
    range and scan_range, each grid's lrs and each experiment's reference_lrs (a name of an lr grid is no list)."""
    for name, lrs in (config.get("lr_grids") or {}).items():
        yield f"lr_grids.{name}", lrs
    for name, s in (config.get("lr_searches") or {}).items():
        for k in ("start", "range", "scan_range"):
            if isinstance(s, dict) and k in s:
                yield f"lr_searches.{name}.{k}", s[k]
    for scale, sc in (config.get("scales") or {}).items():
        for exp, e in ((sc or {}).get("experiments") or {}).items() if isinstance(sc, dict) else ():
            if not isinstance(e, dict):
                continue
            if "reference_lrs" in e:
                yield f"scales.{scale}.experiments.{exp}.reference_lrs", e["reference_lrs"]
            for i, g in enumerate(e.get("grids") or []):
                if isinstance(g, dict) and "lrs" in g:
                    yield f"scales.{scale}.experiments.{exp}.grids[{i}].lrs", g["lrs"]


def check_lr_lists(config: dict) -> None:
    """Every learning-rate list of ``config``, explained where it is wrong (ConfigError naming the
    key): empty, an entry that is no number, not finite, or not > 0, a range that is not [lo, hi]
    with lo < hi. A number YAML read as a string (``1e-3``, which YAML 1.1 does not take for a
    number) is accepted: replaced by its value in place, before the schema sees it."""
    for key, lrs in lr_lists(config):
        if not isinstance(lrs, list):
            continue  # an lr grid's name (the schema checks it)
        if not lrs:
            raise ConfigError(f"{key}: an empty list; give at least one learning rate (e.g. [1.0e-3])")
        for i, x in enumerate(lrs):
            if isinstance(x, str) and NUMBER.fullmatch(x.strip()):
                lrs[i] = x = float(x)
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ConfigError(f"{key}[{i}]: {x!r} is not a number; a learning rate is a number > 0 (e.g. 1.0e-3)")
            if not math.isfinite(x):
                raise ConfigError(f"{key}[{i}]: {x} is not a finite number")
            if x <= 0:
                what = "trains nothing" if x == 0 else "would climb the loss"
                raise ConfigError(f"{key}[{i}]: {x:g} is not a learning rate: it {what}; a learning rate is > 0")
        if key.endswith((".range", ".scan_range")) and (len(lrs) != 2 or not lrs[0] < lrs[1]):
            raise ConfigError(f"{key}: {lrs} is not a range; give [lo, hi] with lo < hi")


def check_grid(grid) -> None:
    """Everything about a scale that the schema cannot check, naming the key: references
    between its parts, the tasks' own limits, the mixers' arguments and requirements at every
    width, batch sizes, sizes a machine can hold, and every path built from its names."""
    check_lr_lists(grid.config)
    check_finite(grid.config)
    check_text(grid.config)
    on_disk = mixer_names()
    root = str(ROOT)
    try:  # every model's card (the schema checks its fields; here what it names), one label a model where they meet
        cards(grid.models)
        for exp in grid.experiments:
            distinct_labels(grid.models, grid.experiment_models(exp), f"scales.{grid.scale_name}.experiments.{exp}")
    except CardError as e:  # the key first (arrepro.cluster.configfile.config_error names the file)
        raise ConfigError(f"{e.key}: {e.problem}") from None
    for name, m in grid.models.items():
        if on_disk is not None and m["mixer"] not in on_disk:
            raise ConfigError(f"models.{name}.mixer: unknown mixer {m['mixer']!r}; known: {sorted(on_disk)}")
        accepted = mixer_arguments(m["mixer"], root) if on_disk is not None else None
        for k in m.get("mixer_kwargs", {}):
            if accepted is not None and k not in accepted:
                raise ConfigError(f"models.{name}.mixer_kwargs.{k}: mixer {m['mixer']!r} takes no argument "
                                  f"{k!r}; it takes: {', '.join(sorted(accepted)) or 'none'}")
    base = f"scales.{grid.scale_name}"

    for name, t in grid.scale["tasks"].items():
        try:
            task_spec(t).validate()
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{base}.tasks.{name}: {err}") from None
    for exp, e in grid.experiments.items():
        kind = "plot" if exp.startswith("fig") else "table"
        if kind not in e:
            raise ConfigError(f"{base}.experiments.{exp}: a {exp[:3]}* experiment needs a '{kind}' key")
        for other in e.get("claims_of", []):
            if other not in grid.experiments or other == exp:
                raise ConfigError(f"{base}.experiments.{exp}.claims_of: {other!r} is not another experiment of this "
                                  f"scale; known: {sorted(set(grid.experiments) - {exp})}")
        for i, g in enumerate(e["grids"]):
            where = f"{base}.experiments.{exp}.grids[{i}]"
            for key, known in (("tasks", grid.task_names), ("models", grid.models)):
                for v in g[key]:
                    if v not in known:
                        raise ConfigError(f"{where}.{key}: unknown {key[:-1]} {v!r}; known: {sorted(known)}")
            if g["recipe"] not in grid.recipe_names:
                raise ConfigError(f"{where}.recipe: unknown recipe {g['recipe']!r}; known: {sorted(grid.recipe_names)}")
            grid.lrs(g, where)
            for j, seed in enumerate(g["seeds"]):
                if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
                    raise ConfigError(f"{where}.seeds[{j}]: {seed!r} is not a seed (a whole number from 0 to {MAX_SEED})")
            recipe = grid.scale["recipes"][g["recipe"]]
            for t in g["tasks"]:
                task = grid.scale["tasks"][t]
                bs = grid.batch_size(recipe, task, f"{base}.recipes.{g['recipe']}")
                if bs > task["n_train"]:
                    raise ConfigError(f"{base}.recipes.{g['recipe']}.batch_size: {bs} exceeds the {task['n_train']} "
                                      f"training examples of task {t} ({where})")
    _check_models(grid, root if on_disk is not None else None)
    _check_paths(grid)

def _check_models(grid, root: str | None) -> None:
    """Each model of each grid at each of its widths, depths and tasks: the requirements its
    mixer declares (``REQUIRES``, read with ast: arrepro.config.constraints), e.g. ``num_heads >= 1``
    and a width that ``num_heads`` divides, and a size some machine can hold
    (``costs.memory_problem``). Refused here, naming the key, not inside a job."""

    base = f"scales.{grid.scale_name}"
    seen = set()
    for exp, e in grid.experiments.items():
        for i, g in enumerate(e["grids"]):
            where = f"{base}.experiments.{exp}.grids[{i}]"
            for t, m, w, nl in itertools.product(g["tasks"], g["models"], g["widths"], g["layers"]):
                if (t, m, w, nl, g["recipe"]) in seen:
                    continue
                seen.add((t, m, w, nl, g["recipe"]))
                model = grid.models[m]
                kwargs = model.get("mixer_kwargs", {})
                sig = mixer_signature(model["mixer"], root) if root is not None else None
                if sig is not None:
                    values = {k: v for k, v in sig[0].items() if v is not NO_DEFAULT}
                    values.update(kwargs, d_model=w, max_len=task_seq_len(grid.scale["tasks"][t]))
                    if "rope" in values and model.get("position") == "rope":
                        values["rope"] = True  # as backbone.constructor_kwargs passes it (a mixer that takes it turns q, k)
                    problem = unmet(sig[1], values)
                    if problem and not {"d_model", "max_len"} & set(names_in(problem[0])):
                        raise ConfigError(f"models.{m}.mixer_kwargs: {problem[1]}")
                    if problem:
                        raise ConfigError(f"{where}.widths: model {m!r} at width {w}: {problem[1]} "
                                          f"(models.{m}.mixer_kwargs: {kwargs})")
                    _check_lookahead(grid, where, t, m, nl, values)
                cell = grid.cell(t, m, w, nl, g["recipe"], grid.lrs(g)[0], 0)
                problem = memory_problem(grid.spec_of(cell))
                if problem:
                    raise ConfigError(f"{where}.widths: model {m!r} at width {w}, {nl} layer(s): {problem}")

def _check_lookahead(grid, where: str, task: str, model: str, layers: int, values: dict) -> None:
    """A model that sees future steps (attention's centred conv) is fair only where the steps it
    sees past a scored position never hold the answer (arrepro.config.lookahead, the rule's one
    home, which the trainer applies too). Refused elsewhere, naming the grid."""
    ahead = int(layers) * layer_lookahead(values)
    problem = lookahead_problem(ahead, grid.scale["tasks"][task].get("kind"))
    if problem:
        raise ConfigError(f"{where}: model {model!r} (a centred conv) at {layers} layer(s) on task {task!r} {problem}")


def _check_paths(grid) -> None:
    """Every path built from config names stays under results/ (check_path): the data and
    cell folders, each experiment's outputs; a published CSV stays inside the repository."""
    base = f"scales.{grid.scale_name}"
    check_path(grid.out, "scale")
    for name, tid in grid.task_names.items():
        check_path(data_dir(tid), f"{base}.tasks.{name}")
    seen = set()
    for exp, e in grid.experiments.items():
        for name in grid.outputs(exp):
            check_path(name, f"{base}.experiments.{exp}")
        if "published" in e:
            check_path(e["published"], f"{base}.experiments.{exp}.published", root=None)
        for i, g in enumerate(e["grids"]):
            for t, m, lr in itertools.product(g["tasks"], g["models"], grid.lrs(g)):
                key = (t, m, g["recipe"], lr)
                if key not in seen:
                    seen.add(key)
                    cell = grid.cell(t, m, 1, 1, g["recipe"], lr, 0)
                    check_path(cell.path, f"{base}.experiments.{exp}.grids[{i}]")
