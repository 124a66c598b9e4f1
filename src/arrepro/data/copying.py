"""The copy task of Jelassi et al. (2024, "Repeat After Me"), as the paper's Sec. 5 uses it.

An example is ``$ s | s .``: BOS, a random string ``s`` over the first ``vocab_size`` letters,
the separator, the same string again, EOS. The loss and the per-token accuracy cover the copied
part and EOS: a label sits on the position *before* each copied token (next-token prediction).
String accuracy (the paper's metric) is the exact match of the copied string, EOS left out, as
Jelassi et al.'s test_utils.py compares the copy without its '.': the test split records those
positions (``exact_mask``, True on the copy's labels, False on EOS's and elsewhere), and the trainer
reports the fraction of rows right on every one of them as ``test_exact_match``.

Training rows, two ways:
- ``context_len`` 0 (the default): one example a row, right-padded to ``2 * max_len + 3`` tokens;
- ``context_len`` C > 0: as Jelassi et al.'s training data, examples packed one after another into
  rows of exactly C tokens (their default 220); the example cut off at the end of a row is kept
  as context but not scored (their mask).
Test rows always hold one example each (their evaluation), with string lengths from
``test_min_len`` to ``test_max_len`` (default: the training lengths).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

IGNORE = -100


@dataclass(frozen=True)
class CopySpec:
    vocab_size: int = 26
    min_len: int = 5
    max_len: int = 20
    context_len: int = 0    # > 0: training rows pack examples into this many tokens
    test_min_len: int = 0   # 0: min_len
    test_max_len: int = 0   # 0: max_len

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
        """The longest model input: a training row, or a test example, minus its last token."""
        return max(self.context_len - 1, 2 * self.max_len + 2, 2 * self.test_spec().max_len + 2)

    def test_spec(self) -> "CopySpec":
        """One example a row, of the test lengths."""
        if not (self.test_min_len or self.test_max_len or self.context_len):
            return self
        return replace(self, min_len=self.test_min_len or self.min_len, max_len=self.test_max_len or self.max_len,
                       context_len=0, test_min_len=0, test_max_len=0)

    def validate(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"copy task needs 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.context_len and self.context_len < 2 * self.max_len + 3:
            raise ValueError(f"copy task: context_len {self.context_len} cannot hold an example of "
                             f"max_len {self.max_len} ({2 * self.max_len + 3} tokens)")
        if self.test_min_len or self.test_max_len:
            t = self.test_spec()
            if not 1 <= t.min_len <= t.max_len:
                raise ValueError(f"copy task needs 1 <= test_min_len <= test_max_len, got {t.min_len}, {t.max_len}")


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
    return {"inputs": np.ascontiguousarray(seq[:, :-1]), "labels": np.ascontiguousarray(labels[:, 1:]),
            "exact_mask": np.ascontiguousarray(second[:, 1:])}  # the copied string: what an exact match counts


def generate_packed(spec: CopySpec, n: int, seed) -> dict[str, np.ndarray]:
    """``n`` rows of ``CopySpec.context_len`` tokens, each examples ``$ s | s .`` back to back (lengths
    uniform in [min_len, max_len]); the copies and EOS of whole examples are scored, the example
    cut off at the row's end is not."""
    spec.validate()
    C = spec.context_len
    per_row = C // (2 * spec.min_len + 3) + 1  # enough examples to overfill a row
    ex = generate_copy(replace(spec, context_len=0), n * per_row, seed)
    T = 2 * spec.max_len + 3
    full = np.concatenate([ex["inputs"], np.zeros((len(ex["inputs"]), 1), np.int32)], 1)  # the example, re-joined
    lab = np.concatenate([np.full((len(full), 1), IGNORE, np.int32), ex["labels"]], 1)  # label j scores token j
    full[np.arange(len(full)), T - 1] = np.where(lab[:, T - 1] != IGNORE, lab[:, T - 1], spec.pad)
    length = (full != spec.pad).sum(1)  # 2 * len + 3 tokens each
    inputs = np.empty((n, C), np.int32)
    scored = np.zeros((n, C), bool)
    for r in range(n):
        toks, marks, used = [], [], 0
        for j in range(r * per_row, (r + 1) * per_row):
            m = int(length[j])
            whole = used + m <= C
            take = m if whole else C - used
            toks.append(full[j, :take])
            marks.append((lab[j, :take] != IGNORE) & whole)
            used += take
            if used == C:
                break
        inputs[r], scored[r] = np.concatenate(toks), np.concatenate(marks)
    labels = np.where(scored, inputs, IGNORE).astype(np.int32)
    return {"inputs": np.ascontiguousarray(inputs[:, :-1]), "labels": np.ascontiguousarray(labels[:, 1:])}


def make_copy_splits(spec: CopySpec, n_train: int, n_test: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Train rows (packed, or one example a row) and test rows (one example each, with the
    ``exact_mask`` the evaluation reads)."""
    train = generate_packed(spec, n_train, [seed, 0]) if spec.context_len else generate_copy(spec, n_train, [seed, 0])
    return {"train": {k: train[k] for k in ("inputs", "labels")}, "test": generate_copy(spec.test_spec(), n_test, [seed, 1])}
