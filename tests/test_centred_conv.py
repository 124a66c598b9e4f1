"""Attention's centred short conv (``conv_mode: centred``, Table 3 as the paper most likely ran it):
what it computes, what it can see on MQAR, and that it never sees the answer it predicts.

A centred conv of kernel 3 at position t mixes t-1, t and t+1, so the model's output at t depends
on the token at t+1. On a next-token task that is a leak wherever the token at t+1 is the target
of position t. On MQAR it is not: the target of a query at p is its value, written nowhere after
the context; position p + 1 holds filler (0, or a random token drawn independently of the answer).
These tests prove it for every centred model config.yaml names and every MQAR task of every scale,
and show that the same model would see the answer if the data put it at p + 1 (the test can fail).
"""
import copy

import numpy as np
import pytest
import torch

from arrepro.config import defaults
from arrepro.config.checks import load_grid
from arrepro.config.lookahead import BLIND_LOOKAHEAD
from arrepro.config.grid import ConfigError
from arrepro.data.mqar import IGNORE, MQARSpec, generate
from arrepro.models import LanguageModel, get_mixer

from conftest import ROOT, config_models

import yaml

MODELS = config_models()
CENTRED = [n for n, m in MODELS.items() if m.get("mixer_kwargs", {}).get("conv_mode") == "centred"]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
MQAR_TASKS = [(s, n, t) for s, sc in CONFIG["scales"].items() for n, t in sc["tasks"].items() if t["kind"] == "mqar"]


def lm(name, vocab, L, width=32, layers=1):
    spec = defaults.model(MODELS[name])
    torch.manual_seed(0)
    return LanguageModel(vocab_size=vocab, d_model=width, n_layers=layers, max_len=L, mixer=spec["mixer"],
                         mixer_kwargs=spec["mixer_kwargs"], mlp=spec["mlp"], position=spec["position"]).eval()


def test_config_has_the_centred_variants_of_each_causal_one():
    causal = sorted(n for n in MODELS if n.startswith("attention_conv_") and not n.endswith("_centred"))
    assert CENTRED and sorted(CENTRED) == sorted(f"{n}_centred" for n in causal)
    for n in CENTRED:
        assert {k: v for k, v in MODELS[n]["mixer_kwargs"].items() if k != "conv_mode"} \
            == MODELS[n[: -len("_centred")]]["mixer_kwargs"]


def test_centred_conv_is_the_symmetric_window_on_every_path():
    """Output at t = w0 x[t-1] + w1 x[t] + w2 x[t+1] + b (zeros past either end), by hand, on the
    portable, reference and CPU-kernel paths."""
    torch.manual_seed(1)
    m = get_mixer("attention")(8, max_len=10, conv="v", conv_mode="centred").double()
    conv = m.convs["v"]
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    w, b = conv.conv.weight[:, 0].detach(), conv.conv.bias.detach()
    xp = torch.nn.functional.pad(x, (0, 0, 1, 1))
    want = xp[:, :-2] * w[:, 0] + xp[:, 1:-1] * w[:, 1] + xp[:, 2:] * w[:, 2] + b
    for path in ("forward_portable", "forward_reference", "forward"):
        got = m._conv("v", x, path)
        assert torch.allclose(got, want, atol=1e-12), path
    causal = get_mixer("attention")(8, max_len=10, conv="v")
    assert causal.lookahead == 0 and m.lookahead == 1
    with pytest.raises(ValueError, match="odd conv_size"):
        get_mixer("attention")(8, max_len=10, conv="v", conv_size=4, conv_mode="centred")
    with pytest.raises(ValueError, match="conv_mode"):
        get_mixer("attention")(8, max_len=10, conv="v", conv_mode="acausal")


@pytest.mark.parametrize("scale,task_name,task", MQAR_TASKS)
@pytest.mark.parametrize("random_non_queries", [False, True])
def test_the_steps_a_centred_conv_sees_past_a_query_never_hold_its_answer(scale, task_name, task, random_non_queries):
    """Every scored position p of every MQAR task: p + 1 (and every step up to BLIND_LOOKAHEAD) is
    filler: 0, or with random_non_queries the same positions hold random tokens drawn after the
    answers (the same example otherwise)."""
    spec = MQARSpec(task["vocab_size"], task["seq_len"], task["num_kv_pairs"], task.get("power_a", 0.01),
                    random_non_queries)
    n = 200
    data = generate(spec, n, 7)
    plain = generate(MQARSpec(spec.vocab_size, spec.seq_len, spec.num_kv_pairs, spec.power_a), n, 7)
    x, y = data["inputs"], data["labels"]
    filler = plain["inputs"] == 0
    rows, pos = np.nonzero(y != IGNORE)
    assert len(pos) == n * spec.num_kv_pairs
    for ahead in range(1, BLIND_LOOKAHEAD + 1):
        inside = pos + ahead < spec.seq_len
        r, p = rows[inside], pos[inside] + ahead
        assert filler[r, p].all(), f"{scale}.{task_name}: a step {ahead} after a query holds a key or value"
        if not random_non_queries:
            assert (x[r, p] == 0).all()
        assert (x[rows, pos] == plain["inputs"][rows, pos]).all()
    # two steps ahead is where it would leak: the next query's key (a value the answer is not)
    two = pos + 2 < spec.seq_len
    assert (~filler[rows[two], pos[two] + 2]).any()


@pytest.mark.parametrize("name", CENTRED)
def test_a_centred_models_prediction_does_not_depend_on_the_token_it_predicts(name):
    """The demo's MQAR task, the config's centred model at 1 layer (Table 3's depth): at every
    scored position p, the logits equal those of the model given only the prefix x[0..p] and one
    filler token (what a causal model sees, plus a constant): the answer, which no part of that
    input holds beyond the context every model sees, cannot reach the prediction. The same model
    given the answer at p + 1 instead of the filler changes its prediction: the conv does look
    there, so a layout that put the answer there would fail this test."""
    task = CONFIG["scales"]["demo"]["tasks"]["L32"]
    spec = MQARSpec(task["vocab_size"], task["seq_len"], task["num_kv_pairs"])
    data = generate(spec, 16, 3)
    x, y = torch.from_numpy(data["inputs"]).long(), torch.from_numpy(data["labels"]).long()
    model = lm(name, spec.vocab_size, spec.seq_len).double()  # fp64: a dependence at init is ~1e-6
    with torch.no_grad():
        full = model(x)
        rows, pos = torch.nonzero(y != IGNORE, as_tuple=True)
        moved = 0
        for r, p in zip(rows.tolist(), pos.tolist()):
            prefix = torch.cat([x[r, : p + 1], torch.zeros(1, dtype=torch.long)])[None, : spec.seq_len]
            alone = model(prefix)[0, p]
            assert torch.allclose(alone, full[r, p], rtol=0, atol=1e-12), f"{name}: position {p} depends on more than its prefix"
            if p + 1 < spec.seq_len:
                leaky = prefix.clone()
                leaky[0, p + 1] = y[r, p]
                moved += (model(leaky)[0, p] - alone).abs().max().item() > 1e-9
        assert moved == int((pos + 1 < spec.seq_len).sum()), f"{name}: the conv does not see one step ahead"


def test_a_causal_model_ignores_the_step_after():
    """The control: the causal conv's prediction at p does not move with the token at p + 1."""
    model = lm("attention_conv_v", 128, 32)
    x = torch.randint(1, 128, (1, 32))
    x2 = x.clone()
    x2[0, 11] = (x[0, 11] + 5) % 128
    with torch.no_grad():
        assert torch.allclose(model(x)[0, 10], model(x2)[0, 10], atol=1e-6)




def test_the_config_checks_refuse_a_centred_conv_that_could_see_its_answer():
    """Two centred layers see two steps ahead (the next query's key); the copy task's target is
    the next token itself. Both refused naming the grid; one layer on MQAR accepted."""
    cfg = copy.deepcopy(CONFIG)
    tasks = cfg["scales"]["tiny"]["tasks"]
    tasks["copy"] = {"kind": "copy", "vocab_size": 8, "min_len": 2, "max_len": 4, "n_train": 256, "n_test": 64, "seed": 0}
    cfg["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(models=["attention_conv_v_centred"])
    load_grid(cfg, "tiny")
    for task, layers in (("L16", 2), ("copy", 1)):
        bad = copy.deepcopy(cfg)
        bad["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(tasks=[task], layers=[layers])
        with pytest.raises(ConfigError, match="centred conv"):
            load_grid(bad, "tiny")
    for kwargs, msg in (({"conv_mode": "acausal"}, "conv_mode"), ({"conv_mode": "centred", "conv_size": 4}, "odd conv_size")):
        bad = copy.deepcopy(cfg)
        bad["models"]["attention_conv_v_centred"]["mixer_kwargs"].update(kwargs)
        with pytest.raises(ConfigError, match=msg):
            load_grid(bad, "tiny")


def test_a_centred_conv_mode_without_a_conv_is_refused_for_what_it_is():
    """Issue 38: ``conv_mode: centred`` with no conv was refused at 2 layers as a look-ahead (it
    sees nothing ahead: nothing is centred) and accepted at 1. Refused at any depth, saying why,
    by the config checks and by the constructor (one rule, the mixer's REQUIRES)."""
    cfg = copy.deepcopy(CONFIG)
    cfg["models"]["attention_conv_v_centred"]["mixer_kwargs"]["conv"] = ""
    cfg["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(models=["attention_conv_v_centred"])
    for layers in (1, 2):
        cfg["scales"]["tiny"]["experiments"]["fig2"]["grids"][0].update(layers=[layers])
        with pytest.raises(ConfigError, match=r"models.attention_conv_v_centred.mixer_kwargs: conv_mode centred needs a conv"):
            load_grid(cfg, "tiny")
    with pytest.raises(ValueError, match="conv_mode centred needs a conv"):
        get_mixer("attention")(8, max_len=10, conv="", conv_mode="centred")


COPY_TASK = {"kind": "copy", "vocab_size": 8, "min_len": 2, "max_len": 4, "n_train": 64, "n_test": 16, "seed": 0}


def hand_spec(task_def, layers=1):
    """A cell spec as one would give scripts/train_cell.py by hand (no config checks)."""
    return {"task": "t", "task_def": task_def, "model": "attention_conv_v_centred",
            "model_def": {"mixer": "attention", "position": "learned", "mlp": True,
                          "mixer_kwargs": {"conv": "v", "conv_mode": "centred"}},
            "width": 16, "layers": layers, "recipe": "r",
            "recipe_def": {"epochs": 1, "batch_size": 16, "warmup_frac": 0.1, "schedule": "cosine", "weight_decay": 0.1},
            "batch_size": 16, "lr": 1e-3, "seed": 0, "device": "cpu", "scale": "test"}


@pytest.mark.parametrize("task_def,layers,ahead", [
    (COPY_TASK, 1, 1),  # the copy task's target is the next token itself
    ({"kind": "mqar", "vocab_size": 64, "seq_len": 16, "num_kv_pairs": 2, "n_train": 64, "n_test": 16, "seed": 0}, 2, 2),
])
def test_the_trainer_refuses_a_centred_conv_that_could_see_its_answer(tmp_path, task_def, layers, ahead):
    """Issue 38: the look-ahead rule lived in the config checks only: scripts/train_cell.py given
    a centred conv on the copy task by hand trained it. The trainer applies the same rule
    (arrepro.config.lookahead) to the model it built, before any step, and writes no result."""
    from arrepro.data import save_task
    from arrepro.train.loop import train_cell

    save_task(task_def, tmp_path / "data")
    with pytest.raises(Exception, match=rf"sees {ahead} step\(s\) ahead on a task of kind {task_def['kind']}"):
        train_cell(hand_spec(task_def, layers), tmp_path / "data", tmp_path / "cell", log=lambda s: None)
    assert not (tmp_path / "cell" / "result.json").exists()

