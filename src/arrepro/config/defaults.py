"""The defaults of config.yaml's optional model, recipe and scale settings: their one home.

A setting a model, recipe or scale leaves out means the value here, for every reader: the
trainer, the tables, the paper, the fidelity table, the benchmarks. The cell spec (a rule
param, whose bytes decide what reruns) carries config.yaml's values as written, so adding a
default here, or writing a default value out in config.yaml, changes no cell's identity but
its value does: the trainer reads the spec through these functions. (The schema gives no
``default:`` for these keys: Snakemake's validation would write them into the config, and so
into every cell's spec.)
"""
from __future__ import annotations

import types

MODEL = types.MappingProxyType({"mixer_kwargs": types.MappingProxyType({}), "mlp": True, "mlp_ratio": 4,
                                "position": "none", "norm": "layer", "residual": "sequential", "tied_head": True})
# decay "all" and init "zoology": the sources' readings (arrepro.models.backbone, arrepro.models.init);
# shuffle False: every epoch takes the training set in its generation order, as Zoology's
# DataLoader(shuffle=False) does (zoology/data/utils.py:121)
RECIPE = types.MappingProxyType({"embed_dropout": 0.0, "schedule_step": "step", "betas": (0.9, 0.999),
                                 "grad_clip": None, "early_stop_accuracy": None, "decay": "all", "init": "zoology",
                                 "shuffle": False})
SCALE = types.MappingProxyType({"device": "auto", "precision": "fp32", "subnormals": "flush"})


def model(model_def: dict) -> dict:
    """A config model (or a spec's ``model_def``) with every optional key filled in."""
    out = {**MODEL, **model_def}
    out["mixer_kwargs"] = dict(out["mixer_kwargs"])
    return out


def recipe(recipe_def: dict) -> dict:
    """A config recipe (or a spec's ``recipe_def``) with every optional key filled in."""
    return {**RECIPE, **recipe_def}


def scale(scale_or_spec: dict, key: str):
    """A scale's (or a cell spec's) ``device``, ``precision`` or ``subnormals``."""
    return scale_or_spec.get(key, SCALE[key])
