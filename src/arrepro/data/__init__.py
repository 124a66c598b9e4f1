"""Synthetic tasks. ``make_task(task_def)`` builds the train and test splits of a config task."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .mqar import MQARSpec, make_splits


def make_task(task: dict) -> dict[str, dict[str, np.ndarray]]:
    kind = task["kind"]
    if kind == "mqar":
        spec = MQARSpec(task["vocab_size"], task["seq_len"], task["num_kv_pairs"],
                        task.get("power_a", 0.01), task.get("random_non_queries", False))
        splits = make_splits(spec, task["n_train"], task["n_test"], task["seed"])
        vocab = task["vocab_size"]
    elif kind == "copy":
        from .copying import CopySpec, make_copy_splits

        spec = CopySpec(**{k: v for k, v in task.items() if k in CopySpec.__dataclass_fields__})
        splits = make_copy_splits(spec, task["n_train"], task["n_test"], task["seed"])
        vocab = spec.total_vocab
    else:
        raise ValueError(f"task kind: unknown {kind!r}")
    for s in splits.values():
        s["vocab_size"] = np.int64(vocab)
    return splits


def save_task(task: dict, out_dir: str | Path) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, arrays in make_task(task).items():
        tmp = out / f".{name}.tmp.npz"
        np.savez(tmp, **arrays)  # uncompressed: byte-identical for identical arrays
        tmp.replace(out / f"{name}.npz")
