"""The copy task of Jelassi et al. (2024, "Repeat After Me"), as the paper's Sec. 5 uses it.

An example is ``$ s | s .``: BOS, a random string ``s`` over the first ``vocab_size`` letters,
the separator, the same string again, EOS. The loss and the metrics cover the copied part and
EOS only: a label sits on the position *before* each copied token (next-token prediction).
String accuracy (the paper's metric) is the exact match of the whole copy, which the trainer
reports as ``test_exact_match``.

Deviation, written down: Jelassi et al. pack several examples into one 220-token training
context; here each row holds one example, right-padded to ``2 * max_len + 3`` tokens (the
same per-example loss; the trainer's fixed-shape batches stay simple).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100


@dataclass(frozen=True)
class CopySpec:
    vocab_size: int = 26
    min_len: int = 5
    max_len: int = 20

    @property
    def bos(self) -> int:
        return self.vocab_size

    @property
    def sep(self) -> int:
        return self.vocab_size + 1

    @property
    def eos(self) -> int:
        return self.vocab_size + 2

    @property
    def pad(self) -> int:
        return self.vocab_size + 3

    @property
    def total_vocab(self) -> int:
        return self.vocab_size + 4

    @property
    def seq_len(self) -> int:
        return 2 * self.max_len + 2  # inputs: the full example minus its last token

    def validate(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"copy task needs 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")


def generate_copy(spec: CopySpec, n: int, seed) -> dict[str, np.ndarray]:
    spec.validate()
    rng = np.random.default_rng(seed)
    lengths = rng.integers(spec.min_len, spec.max_len + 1, size=n)
    letters = rng.integers(0, spec.vocab_size, size=(n, spec.max_len))
    T = 2 * spec.max_len + 3
    pos = np.arange(T)[None, :]
    ln = lengths[:, None]
    seq = np.full((n, T), spec.pad, dtype=np.int32)
    seq[:, 0] = spec.bos
    first = (pos >= 1) & (pos <= ln)
    second = (pos >= ln + 2) & (pos <= 2 * ln + 1)
    idx_first = np.clip(pos - 1, 0, spec.max_len - 1)
    idx_second = np.clip(pos - ln - 2, 0, spec.max_len - 1)
    seq = np.where(first, np.take_along_axis(letters, np.broadcast_to(idx_first, (n, T)), 1), seq)
    seq = np.where(second, np.take_along_axis(letters, idx_second, 1), seq)
    seq[pos.repeat(n, 0) == ln + 1] = spec.sep
    seq[pos.repeat(n, 0) == 2 * ln + 2] = spec.eos
    target = second | (pos == 2 * ln + 2)  # the copy and EOS are scored
    labels = np.where(target, seq, IGNORE).astype(np.int32)
    return {"inputs": np.ascontiguousarray(seq[:, :-1]), "labels": np.ascontiguousarray(labels[:, 1:])}


def make_copy_splits(spec: CopySpec, n_train: int, n_test: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    return {"train": generate_copy(spec, n_train, [seed, 0]), "test": generate_copy(spec, n_test, [seed, 1])}
