"""What a cell is trained with, checked and built before its first step: the spec the trainer
can run (``check_spec``), the device and precision (``pick_device``, ``autocast_for``: the one
place that sets the matmul precision), the task's data (``load_task``) and the order an epoch
takes it in (``epoch_order``), the model (``build_model``), and the fingerprint a checkpoint must match to be resumed (``fingerprint``).
arrepro.train.loop trains the cell; a ``TrainError`` is a cell that cannot run as asked."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import torch

from arrepro.config import defaults
from arrepro.config.catalogue import cell_sources, data_sources
from arrepro.config.lookahead import lookahead_problem
from arrepro.config.paths import REPO_ROOT
from arrepro.digest import file_digest, source_digest
from arrepro.models import LanguageModel
from arrepro.models.backbone import DECAYS, IGNORE, NORMS, model_kwargs
from arrepro.models.init import RULES as INIT_RULES
from arrepro.models.kernels import kernels_enabled


class TrainError(RuntimeError):
    """A cell that cannot run as asked (its spec, its data, the machine, a full disk); the message
    names the key or file and why. scripts/train_cell.py prints it and exits 1."""


SCHEDULE_STEPS = ("step", "epoch")
SCHEDULES = ("cosine", "linear", "constant")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(lo: int):
    return lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= lo


# What a cell spec must hold for the trainer to run it (the workflow's spec passes the config
# schema first; a spec given by hand to scripts/train_cell.py passes only here): key, required,
# check, what the value must be.
SPEC_RULES = (
    ("task", True, lambda x: isinstance(x, str) and x != "", "a name"),
    ("model", True, lambda x: isinstance(x, str) and x != "", "a name"),
    ("recipe", True, lambda x: isinstance(x, str) and x != "", "a name"),
    ("model_def", True, lambda x: isinstance(x, dict), "an object"),
    ("model_def.mixer", True, lambda x: isinstance(x, str) and x != "", "a mixer's name"),
    ("model_def.mixer_kwargs", False, lambda x: isinstance(x, dict), "an object"),
    ("recipe_def", True, lambda x: isinstance(x, dict), "an object"),
    ("width", True, _count(1), "a whole number >= 1"),
    ("layers", True, _count(1), "a whole number >= 1"),
    ("batch_size", True, _count(1), "a whole number >= 1"),
    ("seed", True, _count(0), "a whole number >= 0"),
    ("lr", True, lambda x: _number(x) and x > 0, "a finite number > 0"),
    ("recipe_def.epochs", True, _count(1), "a whole number >= 1"),
    ("recipe_def.warmup_frac", True, lambda x: _number(x) and 0 <= x <= 1, "a number in [0, 1]"),
    ("recipe_def.weight_decay", True, lambda x: _number(x) and x >= 0, "a finite number >= 0"),
    ("recipe_def.schedule", True, lambda x: x in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
    ("recipe_def.schedule_step", False, lambda x: x in SCHEDULE_STEPS, f"one of {', '.join(SCHEDULE_STEPS)}"),
    ("recipe_def.embed_dropout", False, lambda x: _number(x) and 0 <= x < 1, "a number in [0, 1)"),
    ("recipe_def.grad_clip", False, lambda x: x is None or (_number(x) and x > 0), "null or a number > 0"),
    ("recipe_def.early_stop_accuracy", False, lambda x: x is None or (_number(x) and 0 <= x <= 1),
     "null or a number in [0, 1]"),
    ("recipe_def.decay", False, lambda x: x in DECAYS, f"one of {', '.join(DECAYS)}"),
    ("recipe_def.init", False, lambda x: x in INIT_RULES, f"one of {', '.join(INIT_RULES)}"),
    ("recipe_def.shuffle", False, lambda x: x is True or x is False, "true or false"),
    ("model_def.norm", False, lambda x: x in NORMS, f"one of {', '.join(NORMS)}"),
    ("model_def.mlp", False, lambda x: x is True or x is False or x == "identity", "true, false or identity"),
    ("recipe_def.betas", False, lambda x: isinstance(x, list) and len(x) == 2 and all(_number(b) and 0 <= b < 1 for b in x),
     "two numbers in [0, 1)"),
)


def check_spec(spec) -> None:
    """Refuse a cell spec the trainer cannot run as asked (``epochs: 0`` would write a finished
    result of accuracy 0.0), naming the key; also a value of ``ARREPRO_KERNELS`` that is not a yes
    or a no. TrainError."""
    if not isinstance(spec, dict):
        raise TrainError(f"the cell spec is a {type(spec).__name__}, not an object")
    for key, required, ok, what in SPEC_RULES:
        node, parts = spec, key.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue  # its parent is missing or wrong: reported under the parent's key
        if parts[-1] not in node:
            if required:
                raise TrainError(f"cell spec: {key} is missing (it must be {what})")
            continue
        if not ok(node[parts[-1]]):
            raise TrainError(f"cell spec: {key} is {node[parts[-1]]!r}; it must be {what}")
    try:
        kernels_enabled()
    except ValueError as e:
        raise TrainError(str(e)) from None


def load_task(data_dir: str | Path):
    """(train inputs, train labels, test inputs, test labels, vocabulary size, test exact mask) of
    a task. The exact mask marks the labelled test positions an exact match counts (test.npz's
    ``exact_mask``: the copy task's string without EOS); a task without one counts every labelled
    position (MQAR). A missing or unreadable file, or a mask that is not a boolean array of the
    labels' shape within their labelled positions, is a TrainError naming it."""
    d = Path(data_dir)
    loaded = {}
    for name in ("train.npz", "test.npz"):
        try:
            with np.load(d / name) as z:
                loaded[name] = {k: z[k] for k in ("inputs", "labels", "vocab_size")}
                if "exact_mask" in z:
                    loaded[name]["exact_mask"] = z["exact_mask"]
        except Exception as e:  # missing, truncated, garbled (BadZipFile, bad CRC), a key missing
            raise TrainError(f"{d / name}: cannot read the task's data ({type(e).__name__}: {e}); the data rule "
                             "writes it (delete it and run the workflow again)") from e
    tr, te = loaded["train.npz"], loaded["test.npz"]
    arrays = [torch.from_numpy(a[k].astype(np.int64)) for a in (tr, te) for k in ("inputs", "labels")]
    labelled = te["labels"] != IGNORE
    exact = te.get("exact_mask", labelled)
    if exact.dtype != np.bool_ or exact.shape != labelled.shape or (exact & ~labelled).any():
        raise TrainError(f"{d / 'test.npz'}: exact_mask must be a boolean array of the labels' shape "
                         f"{labelled.shape}, True only where a label is set (it is {exact.dtype} {exact.shape}); "
                         "the data rule writes it (delete it and run the workflow again)")
    return (*arrays, int(tr["vocab_size"]), torch.from_numpy(exact))


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> torch.Tensor:
    """The order an epoch takes the ``n`` training examples in: their generation order every
    epoch (recipe ``shuffle: false``, the default: Zoology's DataLoader with shuffle=False), or a
    permutation of its own for each (seed, epoch) (``shuffle: true``)."""
    if not shuffle:
        return torch.arange(n)
    return torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n))


def build_model(spec: dict, vocab_size: int, max_len: int) -> LanguageModel:
    recipe = defaults.recipe(spec["recipe_def"])
    return LanguageModel(
        vocab_size=vocab_size, d_model=spec["width"], n_layers=spec["layers"], max_len=max_len,
        **model_kwargs(spec["model_def"]), embed_dropout=recipe["embed_dropout"], init=recipe["init"],
    )


def check_lookahead(spec: dict, model: LanguageModel) -> None:
    """Refuse a built model that sees ahead where a prediction could see its own answer
    (arrepro.config.lookahead: the config checks' rule, here for a spec given by hand): the steps
    its layers' mixers see ahead (their ``lookahead``), added up, on the spec's task. TrainError."""
    ahead = sum(getattr(block.mixer, "lookahead", 0) for block in model.layers)
    task = spec.get("task_def") if isinstance(spec.get("task_def"), dict) else {}
    problem = lookahead_problem(ahead, task.get("kind"))
    if problem:
        raise TrainError(f"model {spec['model']} (model_def) at {spec['layers']} layer(s) on task {spec['task']} {problem}")


def fingerprint(spec: dict, data_dir: str | Path) -> str:
    """What a checkpoint must match to be resumed: the cell spec, the task's data files (their
    bytes), and the code that trains the cell (``cell_sources``: the files whose digest the train
    rule records, scripts/train_cell.py included) and that generated its data (``source_digest``:
    comments and docstrings do not count, code does)."""
    repo = REPO_ROOT
    data = {}
    for f in ("train.npz", "test.npz"):
        try:
            data[f] = file_digest(Path(data_dir) / f)
        except OSError as e:
            raise TrainError(f"{Path(data_dir) / f}: cannot read the task's data ({e.strerror}); the data rule "
                             "writes it") from e
    parts = {
        "spec": spec,
        "data": data,
        "train_code": source_digest(cell_sources(spec["model_def"], repo, spec["device"]), repo),
        "data_code": source_digest(data_sources(repo), repo),
    }
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()


PRECISIONS = ("fp32", "tf32", "bf16")


def autocast_for(precision: str, device: torch.device, where: str = "precision"):
    """The context every forward pass runs in, with the matmul precision set here, the one place
    (``torch.backends.cuda.matmul.allow_tf32`` and cuDNN's, which the result records as ``tf32``).
    ``fp32``: no autocast, TF32 off (full fp32 matmuls). ``tf32``: no autocast, fp32 weights and
    activations, TF32 tensor-core matmuls on CUDA (on the CPU there is no TF32: the same as fp32,
    and the result says ``tf32: false``). ``bf16``: autocast to bfloat16, on CUDA only: on the
    CPU it would only change the numbers (no bf16 speed-up on the CPUs this project runs on, and
    no mixer has been checked under CPU autocast)."""
    if precision not in PRECISIONS:
        raise TrainError(f"{where}: unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    tf32 = precision == "tf32" and device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision != "bf16":
        return contextlib.nullcontext
    if device.type != "cuda":
        raise TrainError(f"{where}: bf16 runs only on CUDA (this cell runs on {device.type}); use fp32 on the CPU")
    return lambda: torch.autocast("cuda", dtype=torch.bfloat16)


def pick_device(requested: str, where: str = "device") -> torch.device:
    """``auto``: CUDA if there is a device, else the CPU. ``cuda`` without CUDA is an error, not a
    slow CPU run on a GPU allocation."""
    if requested not in ("auto", "cuda", "cpu"):
        raise TrainError(f"{where}: unknown device {requested!r} (auto, cuda or cpu)")
    if requested == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "none: a CPU-only build"
        raise TrainError(f"{where}: cuda, but torch {torch.__version__} sees no CUDA device (built for CUDA "
                         f"{built}); on a CPU machine use a scale with device cpu")
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")
