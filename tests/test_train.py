"""The trainer: a tiny run learns, runs are deterministic, divergence is a recorded result."""
import json
import math
from pathlib import Path

import pytest

from arrepro.data import save_task
from arrepro.train.loop import CHECKPOINT, lr_at, train_cell

ROOT = Path(__file__).resolve().parents[1]
TASK = {"kind": "mqar", "vocab_size": 64, "seq_len": 16, "num_kv_pairs": 2, "n_train": 1024, "n_test": 128, "seed": 0}


def spec(**over):
    s = {"task": "t", "task_name": "L16", "task_def": TASK, "model": "attention",
         "model_def": {"mixer": "attention", "position": "learned", "mlp": True, "mixer_kwargs": {"num_heads": 1}},
         "width": 32, "layers": 2, "recipe": "r",
         "recipe_def": {"epochs": 4, "batch_size": 32, "warmup_frac": 0.1, "schedule": "cosine", "weight_decay": 0.1},
         "batch_size": 32, "lr": 3e-3, "seed": 0, "device": "cpu", "scale": "test"}
    s.update(over)
    return s


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    save_task(TASK, d)
    return d


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_tiny_run_learns_and_writes_its_record(data, tmp_path):
    r = train_cell(spec(), data, tmp_path, log=lambda s: None)
    m = read_metrics(tmp_path)
    assert [row["epoch"] for row in m] == [1, 2, 3, 4]
    assert m[-1]["train_loss"] < m[0]["train_loss"] - 0.3
    for key in ("epoch", "step", "lr", "train_loss", "test_loss", "test_accuracy", "seconds"):
        assert key in m[0]
    saved = json.loads((tmp_path / "result.json").read_text())
    for key in ("final_accuracy", "best_accuracy", "diverged", "parameters", "epochs_run", "train_seconds",
                "tokens_per_second", "precision", "cell"):
        assert key in saved
    assert saved["precision"] == "fp32"  # the default: no autocast
    assert saved["final_accuracy"] == m[-1]["test_accuracy"] and saved["diverged"] is False
    assert saved["best_accuracy"] == max(row["test_accuracy"] for row in m)
    assert r["epochs_run"] == 4 and r["steps"] == 4 * 1024 // 32


def test_same_cell_same_numbers(data, tmp_path):
    a = train_cell(spec(seed=5), data, tmp_path / "a", log=lambda s: None)
    b = train_cell(spec(seed=5), data, tmp_path / "b", log=lambda s: None)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(read_metrics(tmp_path / "a")) == strip(read_metrics(tmp_path / "b"))
    assert a["final_accuracy"] == b["final_accuracy"]


def test_divergence_is_a_result_not_a_crash(data, tmp_path):
    # Adam's steps are ~lr in size: at 1e30 the first one overflows fp32 (x**2 in the norms)
    r = train_cell(spec(lr=1e30, recipe_def={"epochs": 3, "batch_size": 32, "warmup_frac": 0.0,
                                            "schedule": "constant", "weight_decay": 0.0}),
                   data, tmp_path, log=lambda s: None)
    assert r["diverged"] is True
    assert r["epochs_run"] < 3 and (tmp_path / "result.json").exists()
    def no_constants(c):
        raise AssertionError(f"{c} in result.json: not valid JSON")

    json.loads((tmp_path / "result.json").read_text(), parse_constant=no_constants)
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=no_constants)


def test_a_batch_larger_than_the_training_set_is_refused(data, tmp_path):
    with pytest.raises(Exception) as err:  # TrainError (not imported: the test must run on older code)
        train_cell(spec(batch_size=2048), data, tmp_path, log=lambda s: None)
    assert "batch_size 2048 is larger than the training set (1024 examples in" in str(err.value)
    assert not (tmp_path / "result.json").exists()


def test_tokens_per_second_counts_the_short_last_batch(data, tmp_path):
    """1024 examples in batches of 48: 21 full batches and one of 16 an epoch."""
    r = train_cell(spec(batch_size=48, recipe_def={**spec()["recipe_def"], "epochs": 1}), data, tmp_path,
                   log=lambda s: None)
    assert r["steps"] == 22
    assert r["tokens_per_second"] * r["train_seconds"] == pytest.approx(1024 * TASK["seq_len"], rel=1e-9)


def test_a_full_disk_is_named_and_leaves_no_tmp_file(data, tmp_path, monkeypatch):
    """A write that runs out of space half-way (metrics.jsonl, written when the cell ends) is an
    error naming the file; the half-written .tmp file is removed. (A real full disk: test_resume.py.)"""
    import errno
    import os
    import pathlib

    real = pathlib.Path.write_text

    def half_then_full(self, text, *a, **kw):
        if not self.name.endswith(".tmp"):
            return real(self, text, *a, **kw)
        real(self, text[: len(text) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", half_then_full)
    with pytest.raises(Exception) as err:
        train_cell(spec(), data, tmp_path, log=lambda s: None)
    assert f"no space left on {tmp_path / 'metrics.jsonl'}" in str(err.value)
    assert sorted(f.name for f in tmp_path.iterdir()) == [CHECKPOINT, "train.lock"]  # no output, no .tmp


def test_device_cuda_without_cuda_is_an_error(data, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Exception) as err:  # TrainError
        train_cell(spec(device="cuda"), data, tmp_path, log=lambda s: None)
    assert "device (the scale's, in config.yaml): cuda, but torch" in str(err.value) and "sees no CUDA device" in str(err.value)
    assert not (tmp_path / "result.json").exists()


def test_bf16_is_refused_on_the_cpu_naming_the_key(data, tmp_path):
    with pytest.raises(Exception) as err:  # TrainError
        train_cell(spec(precision="bf16"), data, tmp_path, log=lambda s: None)
    assert "precision (the scale's, in config.yaml): bf16 runs only on CUDA" in str(err.value)
    assert not (tmp_path / "result.json").exists()


def test_fp32_has_no_autocast_anywhere_and_bf16_autocasts_on_cuda():
    """The context the forward passes run in, for a CUDA device (no GPU is needed to build it)."""
    import warnings

    import torch

    from arrepro.train.prepare import autocast_for

    cuda = torch.device("cuda")
    assert not isinstance(autocast_for("fp32", cuda)(), torch.autocast)
    with autocast_for("fp32", torch.device("cpu"))():
        assert not torch.is_autocast_enabled("cpu")
    with warnings.catch_warnings():  # without a GPU torch warns that it disables the context
        warnings.simplefilter("ignore")
        bf16 = autocast_for("bf16", cuda)()
    assert isinstance(bf16, torch.autocast) and bf16.device == "cuda" and bf16.fast_dtype == torch.bfloat16
    with pytest.raises(Exception, match="x.precision: unknown precision 'fp16'"):
        autocast_for("fp16", cuda, "x.precision")


def scale_key_reaches_every_spec(config, key: str, want: dict, other, bad) -> None:
    """Scale key ``key`` reaches every cell spec (``want``: scale -> its value there); set to
    ``other`` on the demo scale it is the demo cells', and the config schema refuses ``bad``."""
    import copy

    import jsonschema
    import yaml

    from arrepro.config.grid import Grid

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validate(config, schema)
    for scale, value in want.items():
        g = Grid(config, scale)
        assert {g.cell_spec(**c.__dict__)[key] for c in g.all_cells()[:50]} == {value}
    c = copy.deepcopy(config)
    c["scales"]["demo"][key] = other
    jsonschema.validate(c, schema)
    g = Grid(c, "demo")
    assert g.cell_spec(**g.all_cells()[0].__dict__)[key] == other
    c["scales"]["demo"][key] = bad
    with pytest.raises(jsonschema.ValidationError, match=bad):
        jsonschema.validate(c, schema)


def test_precision_comes_from_the_scale(config):
    """Scale key ``precision`` (default fp32) reaches every cell spec; the paper scale trains with
    TF32 matmuls (issue 26: the paper's run times imply tensor cores), the demo in fp32."""
    assert config["scales"]["paper"]["precision"] == "tf32"
    scale_key_reaches_every_spec(config, "precision", {"paper": "tf32", "demo": "fp32"}, "bf16", "fp16")


def test_warmup_then_cosine():
    lrs = [lr_at(s, 100, 1.0, 0.1, "cosine") for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:])) and lrs[-1] < 0.01


def test_per_epoch_cosine_is_zoologys_cosine_annealing_stepped_each_epoch():
    """schedule_step: epoch, no warmup: the LR of every step of epoch e is torch's
    CosineAnnealingLR(T_max=epochs, eta_min=0) after e scheduler steps (Zoology's schedule)."""
    import torch

    epochs, spe, base = 64, 7, 3e-3
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=0.0)
    for e in range(epochs):
        want = opt.param_groups[0]["lr"]
        for b in range(spe):
            got = lr_at(e * spe + b, epochs * spe, base, 0.0, "cosine", spe)
            assert got == pytest.approx(want, rel=1e-9, abs=1e-15)
        opt.step()
        sched.step()


def test_per_epoch_warmup_is_whole_epochs_then_the_decay_over_the_rest():
    epochs, spe = 10, 5
    per_epoch = [[lr_at(e * spe + b, epochs * spe, 1.0, 0.2, sched, spe) for b in range(spe)]
                 for sched in ("cosine", "linear", "constant") for e in range(epochs)]
    assert all(len(set(lrs)) == 1 for lrs in per_epoch)  # constant within an epoch
    cosine, linear, constant = ([lrs[0] for lrs in per_epoch[i * epochs : (i + 1) * epochs]] for i in range(3))
    # W = round(0.2 * 10) = 2 warmup epochs at 1/2, 2/2; then 8 epochs of decay from 1 at fractions 0, 1/8, ...
    assert cosine[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert cosine[2:] == pytest.approx([0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)])
    assert linear[2:] == pytest.approx([1 - k / 8 for k in range(8)])
    assert constant == pytest.approx([0.5] + [1.0] * 9)
    # per step (the default) is unchanged: a step-level warmup and decay
    assert lr_at(3, 50, 1.0, 0.2, "cosine") == pytest.approx(0.4) and lr_at(3, 50, 1.0, 0.2, "cosine", None) == 0.4


def test_schedule_step_epoch_holds_the_lr_for_each_epoch_in_training(data, tmp_path):
    recipe = {**spec()["recipe_def"], "schedule_step": "epoch"}
    train_cell(spec(recipe_def=recipe), data, tmp_path, log=lambda s: None)
    spe = 1024 // 32
    lrs = [row["lr"] for row in read_metrics(tmp_path)]  # the LR of each epoch's last step
    assert lrs == [lr_at(e * spe, 4 * spe, 3e-3, 0.1, "cosine", spe) for e in range(4)]
    assert lrs != [lr_at((e + 1) * spe - 1, 4 * spe, 3e-3, 0.1, "cosine") for e in range(4)]  # not per step
    with pytest.raises(Exception, match="recipe_def.schedule_step is 'batch'; it must be one of step, epoch"):
        train_cell(spec(recipe_def={**recipe, "schedule_step": "batch"}), data, tmp_path / "bad", log=lambda s: None)


def _batches_fed(data, tmp_path, monkeypatch, recipe_def):
    """The input rows of every optimiser step of a 2-epoch cell, per epoch."""
    import torch

    from arrepro.models import LanguageModel

    fed, loss = [], LanguageModel.loss
    monkeypatch.setattr(LanguageModel, "loss", lambda self, x, y: (fed.append(x.clone()), loss(self, x, y))[1])
    train_cell(spec(recipe_def={**recipe_def, "epochs": 2}), data, tmp_path, log=lambda s: None)
    spe = 1024 // 32
    assert len(fed) == 2 * spe
    return torch.cat(fed[:spe]), torch.cat(fed[spe:])


def test_the_training_order_is_the_datas_own_every_epoch_unless_shuffled(data, tmp_path, monkeypatch):
    """recipe shuffle (default false): every epoch takes the training set in its generation order,
    as Zoology's DataLoader(shuffle=False); true: a new permutation each epoch. A value that is
    not a boolean is refused, naming the key."""
    import numpy as np
    import torch

    train = torch.from_numpy(np.load(data / "train.npz")["inputs"].astype(np.int64))
    first, second = _batches_fed(data, tmp_path / "default", monkeypatch, spec()["recipe_def"])
    assert torch.equal(first, train) and torch.equal(second, train)
    first, second = _batches_fed(data, tmp_path / "shuffled", monkeypatch, {**spec()["recipe_def"], "shuffle": True})
    assert not torch.equal(first, second) and not torch.equal(first, train)
    as_rows = lambda t: sorted(map(bytes, t.numpy().astype(np.int64)))  # noqa: E731
    assert as_rows(first) == as_rows(second) == as_rows(train), "each epoch is a permutation of the training set"
    with pytest.raises(Exception, match="recipe_def.shuffle is 'yes'; it must be true or false"):
        train_cell(spec(recipe_def={**spec()["recipe_def"], "shuffle": "yes"}), data, tmp_path / "bad", log=lambda s: None)


COPY = {"kind": "copy", "vocab_size": 8, "min_len": 2, "max_len": 6, "n_train": 16, "n_test": 12, "seed": 0}


def test_copy_exact_match_is_the_copied_string_without_eos(tmp_path):
    """String accuracy as Jelassi et al.'s test_utils.py scores it: the copied string, without its
    '.' (EOS). A model right on every letter of the copy and wrong on EOS has an exact match of 1
    and a per-token accuracy below 1 (EOS stays in the loss and in the token accuracy); one wrong
    on a letter is no exact match."""
    import contextlib

    import torch

    from arrepro.data.copying import CopySpec
    from arrepro.train.loop import evaluate
    from arrepro.train.prepare import load_task

    save_task(COPY, tmp_path)
    task = load_task(tmp_path)
    xte, yte = task[2], task[3]
    counted = {"exact_mask": task[5]} if len(task) > 5 else {}  # (the code before had no mask)
    eos = CopySpec(vocab_size=8).eos

    class Oracle(torch.nn.Module):
        """Predicts every label but EOS (it says the token after EOS) and, with ``miss``, letter 0."""
        def __init__(self, miss=False):
            super().__init__()
            self.miss = miss

        def labelled_logits(self, x, y):
            target = y[y != -100]
            guess = torch.where(target == eos, eos + 1, target)
            if self.miss:
                guess = torch.where(target == 0, 1, guess)
            return torch.nn.functional.one_hot(guess, 12).float(), target

    cpu = torch.device("cpu")
    ev = evaluate(Oracle(), xte, yte, 5, cpu, contextlib.nullcontext, **counted)
    labels, strings = int((yte != -100).sum()), len(yte)
    assert ev["test_exact_match"] == 1.0
    assert ev["test_accuracy"] == pytest.approx((labels - strings) / labels), "EOS is still scored per token"
    without_0 = int((~(yte == 0).any(1)).sum()) / len(yte)  # the strings letter 0 is absent from (it is no label elsewhere)
    assert 0 < without_0 < 1
    assert evaluate(Oracle(miss=True), xte, yte, 5, cpu, contextlib.nullcontext, **counted)["test_exact_match"] == without_0


def test_a_garbled_exact_mask_is_refused_naming_the_file_and_key(tmp_path):
    import numpy as np

    from arrepro.train.prepare import TrainError, load_task

    save_task(COPY, tmp_path)
    with np.load(tmp_path / "test.npz") as z:
        arrays = dict(z)
    np.savez(tmp_path / "test.npz", **{**arrays, "exact_mask": arrays["exact_mask"].astype(np.int32)})
    with pytest.raises(TrainError, match=r"test.npz: exact_mask must be a boolean array"):
        load_task(tmp_path)
    np.savez(tmp_path / "test.npz", **{**arrays, "exact_mask": np.ones_like(arrays["exact_mask"])})
    with pytest.raises(TrainError, match="True only where a label is set"):
        load_task(tmp_path)


def test_labelled_logits_give_the_full_heads_loss_and_gradients():
    import torch
    import torch.nn.functional as F

    from arrepro.models import LanguageModel

    torch.manual_seed(0)
    lm = LanguageModel(vocab_size=64, d_model=16, n_layers=2, max_len=16, mixer="attention", position="learned")
    x = torch.randint(0, 64, (4, 16))
    y = torch.full((4, 16), -100)
    y[:, 5::3] = torch.randint(0, 64, (4, 4))
    full = F.cross_entropy(lm(x).flatten(0, 1), y.flatten(), ignore_index=-100)
    g_full = torch.autograd.grad(full, list(lm.parameters()))
    ours, _, _ = lm.loss(x, y)
    g_ours = torch.autograd.grad(ours, list(lm.parameters()))
    assert torch.allclose(full, ours, atol=1e-6)
    for a, b in zip(g_full, g_ours):
        assert torch.allclose(a, b, atol=1e-6)
