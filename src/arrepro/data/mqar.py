"""Multi-query associative recall (MQAR), as Zoology defines it, vectorised.

An example of length L with K key-value pairs:

* positions ``0 .. 2K-1`` hold the context ``k0 v0 k1 v1 ...``; keys are drawn without
  replacement from ``[1, V/2)`` and values without replacement from ``[V/2, V)``;
* each key is queried once, at position ``2K + 2g`` where the gap ``g`` is one of the
  ``(L - 2K) / 2`` slots, drawn without replacement with probability proportional to
  ``a * (g + 1) ** (a - 1)`` (a power law that crowds queries right after the context);
* the label of a query sits at the query key's own position (next-token prediction of the
  value, which never appears after the query in the input); every other label is -100;
* all other positions are 0 (or random tokens with ``random_non_queries``).

Sampling without replacement with unequal probabilities is done for all rows at once with
the Gumbel-top-k trick: the K slots of largest perturbed score ``log p + Gumbel``, taken in
descending order of that score, have exactly the law of K sequential draws (Plackett-Luce), and
key i is queried at the i-th of them, as Zoology's ``np.random.choice(replace=False, p=...)``
queries key i at its i-th draw (zoology/data/associative_recall.py). The order comes from a
stable sort, whose result is unique: the data are the same bytes whichever SIMD path numpy
dispatches to (an ``argpartition``'s order is not specified and differs between them).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100


@dataclass(frozen=True)
class MQARSpec:
    vocab_size: int
    seq_len: int
    num_kv_pairs: int
    power_a: float = 0.01
    random_non_queries: bool = False

    def validate(self) -> None:
        V, L, K = self.vocab_size, self.seq_len, self.num_kv_pairs
        if L % 2:
            raise ValueError(f"MQAR seq_len must be even, got {L}")
        if V <= L:
            raise ValueError(f"MQAR vocab_size ({V}) must exceed seq_len ({L})")
        if 4 * K > L:
            raise ValueError(f"MQAR needs 4 * num_kv_pairs <= seq_len, got K={K}, L={L}")
        if K > V // 2 - 1:
            raise ValueError(f"MQAR num_kv_pairs ({K}) exceeds the {V // 2 - 1} possible keys")


def _distinct_ints(rng: np.random.Generator, n: int, k: int, low: int, high: int) -> np.ndarray:
    """``n`` rows of ``k`` distinct integers from ``[low, high)``, uniformly, in random order.

    Draws i.i.d., then redraws every repeat (all but the leftmost copy of a value) until no
    row has one. The procedure commutes with any relabelling of the values, and relabellings
    act transitively on ordered k-tuples of distinct values, so the result is uniform."""
    out = rng.integers(low, high, size=(n, k))
    active = np.arange(n)  # rows that may still hold a repeat
    while active.size:
        block = out[active]
        order = np.argsort(block, axis=1, kind="stable")
        s = np.take_along_axis(block, order, axis=1)
        rows, cols = np.nonzero(s[:, 1:] == s[:, :-1])
        rep = np.zeros_like(block, dtype=bool)
        rep[rows, order[rows, cols + 1]] = True
        block[rep] = rng.integers(low, high, size=int(rep.sum()))
        out[active] = block
        active = active[np.unique(rows)]
    return out


def generate(spec: MQARSpec, num_examples: int, seed: int | list[int]) -> dict[str, np.ndarray]:
    """``num_examples`` MQAR examples: int32 arrays ``inputs`` and ``labels`` of shape (N, L)."""
    spec.validate()
    V, L, K, N = spec.vocab_size, spec.seq_len, spec.num_kv_pairs, num_examples
    rng = np.random.default_rng(seed)

    keys = _distinct_ints(rng, N, K, 1, V // 2)
    values = _distinct_ints(rng, N, K, V // 2, V)

    space = (L - 2 * K) // 2
    slot = np.arange(1, space + 1, dtype=np.float64)
    logp = np.log(spec.power_a * slot ** (spec.power_a - 1))
    logp -= np.log(np.exp(logp).sum())
    gumbel = -np.log(-np.log(rng.random((N, space))))
    # the K slots of a row in descending score: slot of draw 1, 2, ..., K (ties: the lower slot first)
    gaps = np.argsort(-(logp + gumbel), axis=1, kind="stable")[:, :K]

    rows = np.arange(N)[:, None]
    query_pos = 2 * K + 2 * gaps
    inputs = np.zeros((N, L), dtype=np.int32)
    inputs[:, 0 : 2 * K : 2] = keys
    inputs[:, 1 : 2 * K : 2] = values
    inputs[rows, query_pos] = keys
    # Zoology writes the value one step after the query in an (L+1)-long sequence and then
    # shifts labels left by one: the label lands on the query key's own position.
    labels = np.full((N, L), IGNORE, dtype=np.int32)
    labels[rows, query_pos] = values
    if spec.random_non_queries:
        filler = inputs == 0
        inputs[filler] = rng.integers(0, V, size=int(filler.sum()))
    return {"inputs": inputs, "labels": labels}


def make_splits(spec: MQARSpec, n_train: int, n_test: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Train and test sets from disjoint random streams (SeedSequence spawn keys 0 and 1)."""
    return {
        "train": generate(spec, n_train, [seed, 0]),
        "test": generate(spec, n_test, [seed, 1]),
    }
