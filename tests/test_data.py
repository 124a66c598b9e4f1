"""MQAR invariants (Zoology's definition), determinism, and the split's independence."""
import hashlib

import numpy as np
import pytest

from arrepro.data import save_task
from arrepro.data.mqar import IGNORE, MQARSpec, generate, make_splits

SPECS = [MQARSpec(8192, 64, 4), MQARSpec(8192, 128, 8), MQARSpec(128, 32, 4), MQARSpec(8192, 512, 64)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"L{s.seq_len}K{s.num_kv_pairs}V{s.vocab_size}")
def test_mqar_invariants(spec):
    V, L, K = spec.vocab_size, spec.seq_len, spec.num_kv_pairs
    d = generate(spec, 500, [7, 0])
    x, y = d["inputs"], d["labels"]
    assert x.shape == y.shape == (500, L)
    keys, values = x[:, 0 : 2 * K : 2], x[:, 1 : 2 * K : 2]
    assert ((keys >= 1) & (keys < V // 2)).all(), "keys come from [1, V/2)"
    assert ((values >= V // 2) & (values < V)).all(), "values come from [V/2, V)"
    for row in range(len(x)):
        assert len(set(keys[row])) == K and len(set(values[row])) == K, "keys and values are distinct in a row"
        lab = np.flatnonzero(y[row] != IGNORE)
        assert len(lab) == K, "one label per key"
        assert (lab >= 2 * K).all() and ((lab - 2 * K) % 2 == 0).all(), "queries sit on even slots after the context"
        kv = dict(zip(keys[row], values[row]))
        # the label sits on the query key's own position and is that key's value
        assert sorted(x[row, lab]) == sorted(keys[row]), "each key is queried exactly once"
        assert all(y[row, p] == kv[x[row, p]] for p in lab)
        rest = np.setdiff1d(np.arange(2 * K, L), lab)
        assert (x[row, rest] == 0).all(), "non-query positions are 0"
    # the power law (a = 0.01) crowds queries right after the context
    gaps = (np.argwhere(y != IGNORE)[:, 1] - 2 * K) // 2
    space = (L - 2 * K) // 2
    if space >= 8:
        assert np.mean(gaps < space / 2) > 0.6


_DISPATCH_PROBE = """
import hashlib, json, sys
from numpy._core import _multiarray_umath as m
from arrepro.data.mqar import MQARSpec, generate
h = hashlib.sha256()
for V, L, K in ((128, 32, 4), (8192, 64, 4), (8192, 256, 16)):
    d = generate(MQARSpec(V, L, K), 3000, [0, 0])
    h.update(d["inputs"].tobytes()); h.update(d["labels"].tobytes())
print(json.dumps({"found": [f for f in m.__cpu_dispatch__ if m.__cpu_features__.get(f)], "digest": h.hexdigest()}))
"""


def _probe(env_extra: dict) -> dict:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import arrepro

    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    env.update(PYTHONPATH=str(Path(arrepro.__file__).parents[1]), **env_extra)
    out = subprocess.run([sys.executable, "-c", _DISPATCH_PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_mqar_bytes_do_not_depend_on_numpy_simd_dispatch():
    """The same MQAR bytes whichever SIMD path numpy dispatches to: generated in a subprocess
    with every dispatchable CPU feature this machine has turned off (NPY_DISABLE_CPU_FEATURES:
    numpy's baseline path) and in one without. An argpartition's order differs between those paths
    (the audit of issue 54 measured it), and key i's query slot was its i-th column."""
    native = _probe({})
    if not native["found"]:
        pytest.skip("this CPU has no numpy dispatch target above the baseline: one path only")
    baseline = _probe({"NPY_DISABLE_CPU_FEATURES": " ".join(native["found"])})
    assert baseline["found"] == [], f"numpy still dispatches to {baseline['found']}: the baseline path was not taken"
    assert baseline["digest"] == native["digest"], (
        f"MQAR data differ between numpy's dispatch paths {native['found']} and the baseline")


def test_mqar_queries_keys_in_the_order_of_sequential_draws():
    """Zoology draws the K query slots one after another (np.random.choice without replacement)
    and queries key i at the i-th draw: which key is queried first (the nearest slot) has a law
    that a uniform assignment, or one in slot order, does not have. The generator against a
    direct sequential simulation, within 6 standard errors per key."""
    spec, n = MQARSpec(8192, 64, 4), 20000
    K, space = spec.num_kv_pairs, (spec.seq_len - 2 * spec.num_kv_pairs) // 2
    d = generate(spec, n, [5, 0])
    x, y = d["inputs"], d["labels"]
    first = np.argmax(y != IGNORE, axis=1)  # the nearest query's position
    pair = np.argmax(x[:, 0 : 2 * K : 2] == x[np.arange(n), first][:, None], axis=1)
    ours = np.bincount(pair, minlength=K) / n
    slot = np.arange(1, space + 1, dtype=np.float64)
    p = spec.power_a * slot ** (spec.power_a - 1)
    rng = np.random.default_rng(11)
    draws = np.array([rng.choice(space, K, replace=False, p=p / p.sum()) for _ in range(n)])
    ref = np.bincount(np.argmin(draws, axis=1), minlength=K) / n  # the pair whose draw is the nearest slot
    se = np.sqrt(ref * (1 - ref) / n) * np.sqrt(2)
    assert np.all(np.abs(ours - ref) < 6 * se), (ours, ref)
    assert ref[0] > 1 / K + 10 * se[0], "the check has power: the first draw is the nearest slot more often"


def test_random_non_queries_fill_the_gaps():
    d = generate(MQARSpec(128, 32, 4, random_non_queries=True), 200, [1, 0])
    assert (d["inputs"][:, 8:] != 0).mean() > 0.9


def test_a_failed_dataset_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    """The data job writes with the one atomic writer (arrepro.files): a write that fails half-way
    (here a full disk) keeps the file that was there, leaves no temp file, and names the file."""
    import errno
    import os

    import arrepro.data
    from arrepro.files import NoSpace

    task = {"kind": "mqar", "vocab_size": 64, "seq_len": 16, "num_kv_pairs": 2, "n_train": 20, "n_test": 10, "seed": 0}
    save_task(task, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def half_then_full(f, **arrays):
        if isinstance(f, (str, os.PathLike)):  # a writer that hands np.savez a path
            f = open(f, "wb")
        with f:
            f.write(b"PK half an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(arrepro.data.np, "savez", half_then_full)
    with pytest.raises(NoSpace, match="train.npz"):
        save_task(task, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("bad", [dict(seq_len=63), dict(vocab_size=64), dict(num_kv_pairs=17)])
def test_invalid_settings_are_rejected(bad):
    spec = MQARSpec(**{**dict(vocab_size=8192, seq_len=64, num_kv_pairs=4), **bad})
    with pytest.raises(ValueError):
        generate(spec, 4, 0)


def test_same_config_same_bytes_and_disjoint_splits(tmp_path):
    task = {"kind": "mqar", "vocab_size": 256, "seq_len": 64, "num_kv_pairs": 4, "n_train": 2000, "n_test": 300, "seed": 3}
    save_task(task, tmp_path / "a")
    save_task(task, tmp_path / "b")
    for split in ("train", "test"):
        a, b = ((tmp_path / d / f"{split}.npz").read_bytes() for d in "ab")
        assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    s = make_splits(MQARSpec(256, 64, 4), 2000, 300, 3)
    train_rows = {r.tobytes() for r in s["train"]["inputs"]}
    assert not any(r.tobytes() in train_rows for r in s["test"]["inputs"]), "a test example appears in train"
    other = make_splits(MQARSpec(256, 64, 4), 2000, 300, 4)
    assert not np.array_equal(other["train"]["inputs"], s["train"]["inputs"])


def test_copy_task_examples():
    from arrepro.data.copying import CopySpec, generate_copy

    spec = CopySpec(vocab_size=10, min_len=3, max_len=7)
    d = generate_copy(spec, 300, [0, 0])
    x, y = d["inputs"], d["labels"]
    assert x.shape == y.shape == (300, spec.seq_len)
    for row in range(len(x)):
        full = list(x[row]) + [None]
        n = full.index(spec.sep) - 1
        s = full[1 : n + 1]
        assert 3 <= n <= 7 and full[0] == spec.bos and all(0 <= c < 10 for c in s)
        assert full[n + 2 : 2 * n + 2] == s, "the second half repeats the string"
        lab = np.flatnonzero(y[row] != IGNORE)
        assert list(lab) == list(range(n + 1, 2 * n + 2)), "labels cover the copy and EOS"
        assert list(y[row, lab]) == s + [spec.eos]
        assert list(np.flatnonzero(d["exact_mask"][row])) == list(lab[:-1]), "an exact match counts the copy, not EOS"


def test_copy_packed_rows_as_jelassi():
    """context_len > 0: examples back to back in rows of exactly that many tokens (Jelassi et al.'s
    training contexts); whole examples' copies and EOS are scored, the cut-off one is not; test
    rows hold one example each, of the test lengths."""
    from arrepro.data.copying import CopySpec, make_copy_splits

    spec = CopySpec(vocab_size=26, min_len=5, max_len=20, context_len=220, test_min_len=10, test_max_len=19)
    s = make_copy_splits(spec, 50, 40, 0)
    x, y = s["train"]["inputs"], s["train"]["labels"]
    assert x.shape == y.shape == (50, 219) and spec.seq_len == 219
    for row in range(len(x)):
        toks = [int(t) for t in x[row]]  # the row's first 219 of 220 tokens
        assert spec.pad not in toks
        scored = set(np.flatnonzero(y[row] != IGNORE) + 1)  # label j-1 scores token j
        a = 0
        while a < 219:  # walk the examples
            assert toks[a] == spec.bos
            ex = toks[a:]
            n = ex.index(spec.sep) - 1 if spec.sep in ex else None
            if n is None or a + 2 * n + 3 > 220:  # cut off at the row's end: context only
                assert not {i for i in scored if i >= a}
                break
            assert 5 <= n <= 20 and ex[n + 2 : 2 * n + 2] == ex[1 : n + 1]
            end = a + 2 * n + 3
            assert (toks + [int(y[row, -1])])[end - 1] == spec.eos
            assert {i for i in scored if a <= i < end} == set(range(a + n + 2, end)), "copy and EOS scored"
            a = end
    t = s["test"]["inputs"]
    lens = [list(r).index(spec.sep) - 1 for r in t]
    assert min(lens) >= 10 and max(lens) <= 19 and t.shape[1] == 2 * 19 + 2


def test_copy_defaults_generate_the_same_data():
    """Without context_len or test lengths (the demo's copy task) the data are one padded example
    a row for both splits, the same generator calls as before (the demo's numbers stand)."""
    from arrepro.data.copying import CopySpec, generate_copy, make_copy_splits

    spec = CopySpec(vocab_size=8, min_len=2, max_len=8)
    s = make_copy_splits(spec, 100, 30, 0)
    for name, key, n in (("train", 0, 100), ("test", 1, 30)):
        ref = generate_copy(spec, n, [0, key])
        assert all(np.array_equal(s[name][k], ref[k]) for k in ("inputs", "labels"))
    assert spec.seq_len == 2 * 8 + 2
