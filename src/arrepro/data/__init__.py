"""Synthetic tasks. ``make_task(task_def)`` builds the train and test splits of a config task."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from arrepro.files import atomic_write
from arrepro.data.mqar import MQARSpec, make_splits


def task_spec(task: dict):
    """The generator's spec of a config task (``MQARSpec`` or ``CopySpec``); its ``validate()``
    states the task's limits (the workflow calls it before any job starts)."""
    kind = task["kind"]
    if kind == "mqar":
        return MQARSpec(task["vocab_size"], task["seq_len"], task["num_kv_pairs"],
                        task.get("power_a", 0.01), task.get("random_non_queries", False))
    if kind == "copy":
        from arrepro.data.copying import CopySpec

        return CopySpec(**{k: v for k, v in task.items() if k in CopySpec.__dataclass_fields__})
    raise ValueError(f"task kind: unknown {kind!r}")


def task_seq_len(task: dict) -> int:
    """The length of a task's model inputs: MQAR's ``seq_len``; the copy task's padded example
    (``CopySpec.seq_len``, which depends on ``max_len``). Memoised: the workflow asks for every cell."""
    return _seq_len(json.dumps(task, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _seq_len(task_json: str) -> int:
    return int(task_spec(json.loads(task_json)).seq_len)


def make_task(task: dict) -> dict[str, dict[str, np.ndarray]]:
    spec = task_spec(task)
    if task["kind"] == "mqar":
        splits = make_splits(spec, task["n_train"], task["n_test"], task["seed"])
        vocab = task["vocab_size"]
    else:
        from arrepro.data.copying import make_copy_splits

        splits = make_copy_splits(spec, task["n_train"], task["n_test"], task["seed"])
        vocab = spec.total_vocab
    for s in splits.values():
        s["vocab_size"] = np.int64(vocab)
    return splits


def save_task(task: dict, out_dir: str | Path) -> None:
    """The task's splits, ``train.npz`` and ``test.npz`` under ``out_dir``, each written with the
    one atomic writer (``files.atomic_write``: no half-written file, no temp file left behind, a
    full disk named)."""
    out = Path(out_dir)
    for name, arrays in make_task(task).items():
        def write(tmp: Path, arrays=arrays) -> None:
            with open(tmp, "wb") as f:  # a file object: np.savez would add ".npz" to a path
                np.savez(f, **arrays)  # uncompressed: byte-identical for identical arrays

        atomic_write(out / f"{name}.npz", write)
