"""Pinned CPU numerics (arrepro.train.numerics): a cell's weights do not depend on the caller's
ATEN_CPU_CAPABILITY or MKL_CBWR (stand-ins for the CPU: an AVX-512 machine runs other kernels
than this AVX2 one), and a run that is not pinned says so in result.json."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from arrepro.train import numerics
from arrepro.data import save_task
from arrepro.train import runfile
from arrepro.train.numerics import PINS

ROOT = Path(__file__).resolve().parents[1]
# the demo's MQAR task (config.yaml, scales.demo.tasks.L32), 50 training steps of batch 32
TASK = {"kind": "mqar", "vocab_size": 128, "seq_len": 32, "num_kv_pairs": 4, "n_train": 50 * 32, "n_test": 64,
        "seed": 0}
SPEC = {"task": "L32", "task_name": "L32", "task_def": TASK, "model": "mamba",
        "model_def": {"mixer": "mamba", "position": "none", "mlp": False,
                      "mixer_kwargs": {"d_state": 16, "d_conv": 4, "expand": 2}},
        "width": 32, "layers": 1, "recipe": "demo",
        "recipe_def": {"epochs": 1, "batch_size": 32, "warmup_frac": 0.3, "schedule": "cosine", "weight_decay": 0.1},
        "batch_size": 32, "lr": 1e-2, "seed": 0, "device": "cpu", "scale": "test"}

needs_avx2 = pytest.mark.skipif(not numerics.cpu_description()["avx2"],
                                reason="this CPU has no AVX2: ATEN_CPU_CAPABILITY=avx2 cannot differ from default")

UNPINNED = ("import json, sys; from arrepro.train.loop import train_cell; "
            "train_cell(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], log=print, keep_weights=True)")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    save_task(TASK, d)
    return d


# Hyena still reaches MKL (its implicit filters' small linear layers, under 128 rows, and its FFTs):
# the model that shows MKL_CBWR's effect now that Mamba's and the big linear layers' products are
# the fused kernels' own
HYENA = {**SPEC, "model": "hyena", "model_def": {"mixer": "hyena", "position": "none", "mlp": True,
                                                 "mixer_kwargs": {"order": 2, "filter_order": 64, "short_filter": 3}}}


def run(data, out: Path, caller_env: dict, pinned: bool, spec: dict = SPEC) -> tuple[dict, dict, str]:
    """Train the cell in a fresh process whose environment has none of the pins but ``caller_env``:
    through scripts/train_cell.py (pinned) or by calling train_cell() directly (not pinned).
    Returns result.json, the trained weights and the run's output (its train.log)."""
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update(caller_env, PYTHONPATH=str(ROOT / "src"))
    cell = json.dumps(spec)
    run_file = out.parent / f"{out.name}-run.json"  # keep the final weights (arrepro.train.runfile)
    runfile.write(runfile.new([], [], keep_weights=True), run_file)
    cmd = ([sys.executable, str(ROOT / "scripts" / "train_cell.py"), "--cell-json", cell, "--data", str(data),
            "--out", str(out), "--threads", "1", "--run-file", str(run_file)] if pinned
           else [sys.executable, "-c", UNPINNED, cell, str(data), str(out)])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads((out / "result.json").read_text())
    weights = torch.load(out / "weights.pt", weights_only=True)
    return result, weights, p.stdout


def identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


CALLERS = {"ATEN_CPU_CAPABILITY": ({"ATEN_CPU_CAPABILITY": "default"}, {"ATEN_CPU_CAPABILITY": "avx2"}, SPEC,
                                   [("mamba.mamba_cpu", "kernel"), ("linear.linear_cpu", "kernel")]),
           "MKL_CBWR": ({"MKL_CBWR": "COMPATIBLE"}, {"MKL_CBWR": "AVX2"}, HYENA,
                        [("hyena.hyena_cpu", "kernel"), ("linear.linear_cpu", "kernel"), ("mlp.mlp_cpu", "kernel")])}


@needs_avx2
@pytest.mark.slow
@pytest.mark.parametrize("variable", sorted(CALLERS))
def test_unpinned_runs_differ_and_pinned_runs_are_bit_identical(data, tmp_path, variable):
    a_env, b_env, spec, paths = CALLERS[variable]
    # without the pins, the caller's variable alone changes the trained weights (the CPU would too)
    ua, wa, _ = run(data, tmp_path / "ua", a_env, pinned=False, spec=spec)
    ub, wb, _ = run(data, tmp_path / "ub", b_env, pinned=False, spec=spec)
    assert ua["steps"] == ub["steps"] == 50
    assert not identical(wa, wb), f"{variable}: {a_env} and {b_env} gave the same weights without pinning"
    # with them, whatever the caller sets, the same bits
    pa, va, _ = run(data, tmp_path / "pa", a_env, pinned=True, spec=spec)
    pb, vb, _ = run(data, tmp_path / "pb", b_env, pinned=True, spec=spec)
    assert identical(va, vb), f"{variable}: pinned runs differ between {a_env} and {b_env}"
    assert pa["final_test_loss"] == pb["final_test_loss"]
    assert ua["numerics"]["pinned"] is False and ub["numerics"]["pinned"] is False
    for r in (pa, pb):
        assert r["numerics"]["pinned"] is True, r["numerics"]["problems"]
        assert r["numerics"]["cpu_capability"] == "AVX2" and r["numerics"]["threads"] == 1
        assert r["numerics"]["env"] == PINS and r["numerics"]["mkldnn"] is False
        assert sorted((p["op"], p["path"]) for p in r["kernel_paths"]) == sorted(paths)


@needs_avx2
def test_a_run_that_imported_torch_first_does_not_claim_to_be_pinned(data, tmp_path):
    # in-process callers (tests, notebooks): torch imported with the caller's ATEN_CPU_CAPABILITY,
    # then pin_environment() too late: the record says what really ran
    code = ("import json, sys, torch; torch.ones(8).exp(); from arrepro.train import numerics; numerics.pin_environment(); "
            "from arrepro.train.loop import train_cell; "
            "r = train_cell(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], log=print); "
            "print(json.dumps(r['numerics']))")
    spec = json.dumps({**SPEC, "task_def": TASK, "recipe_def": {**SPEC["recipe_def"], "epochs": 1}})
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update(ATEN_CPU_CAPABILITY="default", PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, "-c", code, spec, str(data), str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rec = json.loads((tmp_path / "result.json").read_text())["numerics"]
    assert rec["pinned"] is False and rec["cpu_capability"] == "DEFAULT"
    assert any("torch was imported before pin_environment()" in q and "ATEN_CPU_CAPABILITY=default" in q
               for q in rec["problems"]), rec["problems"]
    assert any("ATen runs at DEFAULT, not AVX2" in q for q in rec["problems"]), rec["problems"]
    log = (p.stdout).splitlines()
    assert any("CPU numerics NOT pinned: ATen DEFAULT" in line for line in log), p.stdout


def test_train_log_prints_the_settings_once(data, tmp_path):
    r, _, out = run(data, tmp_path, {"MKL_CBWR": "AVX2", "OMP_NUM_THREADS": "2"}, pinned=True)
    lines = [line for line in out.splitlines() if "CPU numerics" in line]
    assert len(lines) == 1, out
    assert "MKL_CBWR=COMPATIBLE" in lines[0] and "OMP_NUM_THREADS=1" in lines[0]
    assert r["numerics"]["env"] == PINS and r["numerics"]["threads"] == 1


def test_the_scale_decides_whether_subnormals_flush(data, tmp_path, config):
    """The scale's ``subnormals`` (default flush: FTZ and DAZ) reaches every cell's spec, so that
    switching it reruns the cells; the cell's record and train.log say which ran, pinned either
    way (the thread's MXCSR bits, obeyed alike by every x86-64 CPU; the fused kernels' builds
    agree on inputs that underflow: test_fused_cpu_kernels_give_the_same_bits_from_every_build).
    A value the schema does not know is refused."""
    from test_train import scale_key_reaches_every_spec

    scale_key_reaches_every_spec(config, "subnormals", {"demo": "flush", "paper": "flush"}, "keep", "sometimes")
    for value, said in (("flush", "flushed"), ("keep", "kept")):
        spec = SPEC if value == "flush" else {**SPEC, "subnormals": value}  # SPEC leaves it out: the default
        r, _, out = run(data, tmp_path / value, {}, pinned=True, spec=spec)
        assert r["numerics"]["pinned"] and r["numerics"]["subnormals"] == value, r["numerics"]
        assert f"subnormals {said}," in next(line for line in out.splitlines() if "CPU numerics" in line), out
    numerics.settle(1, "keep")
    assert not numerics.flushes_subnormals()
    numerics.settle(1, "flush")
    assert numerics.flushes_subnormals()
    with pytest.raises(ValueError, match="subnormals .*'sometimes'"):
        numerics.settle(1, "sometimes")


def test_a_resumed_cell_with_other_numerics_is_not_pinned():
    now = {"pinned": True, "cpu_capability": "AVX2", "threads": 1, "env": dict(PINS), "problems": [],
           "cpu": {"model": "A"}}
    assert numerics.merge(None, now) == now
    assert numerics.merge({**now, "cpu": {"model": "B"}}, now) == now  # pinned on another CPU: same code
    other = {**now, "cpu_capability": "DEFAULT", "pinned": False, "problems": ["ATen runs at DEFAULT"]}
    merged = numerics.merge(other, now)
    assert merged["pinned"] is False and merged["earlier"] == other
    assert "an earlier attempt" in merged["problems"][-1]


FUSED_BITS = """
import hashlib, sys, torch
from arrepro.models.cpu_kernels import common

def digest(*ts):
    return hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in ts)).hexdigest()

def grads_of(y, args):
    return torch.autograd.grad(y.square().sum(), args)

def kernel(name, tiny):
    # tiny: the data inputs scaled by 1e-39 to 1e-35 an element (some subnormal, their products
    # with the weights mostly so), to see each build flush (or keep) the same subnormals; DeltaNet
    # takes them at 1e-20 to 1e-16: its delta rule multiplies three small factors (k and q scaled
    # by its norms' eps, v), so its outputs are subnormal there (from 1e-39 they are zero whatever
    # the mode, and flushing changes nothing)
    g = torch.Generator().manual_seed(0)

    def t(x, low=-39):
        return x * 10 ** (torch.rand(x.shape, generator=g) * 4 + low) if tiny else x
    if name == "scan":
        from arrepro.models.cpu_kernels import selective_scan_cpu as k
        B, L, E, N = 3, 29, 19, 16  # 19 channels: two stripes of 8 and a remainder
        args = [torch.rand(B, L, E, generator=g) * 0.2, -torch.rand(E, N, generator=g) * 4 - 0.1,
                t(torch.randn(B, L, E, generator=g)), torch.randn(B, L, N, generator=g), torch.randn(B, L, N, generator=g)]
        args = [a.requires_grad_() for a in args]
        dt, A, x, Bm, Cm = args
        y = k.selective_scan(x, dt, A, Bm, Cm)
        return digest(y, *grads_of(y, args))
    if name == "linear":
        # 131 rows (odd), 45 columns: 2-vector, 1-vector and scalar columns on every build; 300 rows and
        # a sum over 300 inputs: two blocks of the sum over k (KC 256), in the product and in the gradients
        from arrepro.models.cpu_kernels import linear_cpu as k
        hashes = []
        for M, K, N in ((131, 37, 45), (300, 37, 45), (131, 300, 53)):
            args = [t(torch.randn(M, K, generator=g)), torch.randn(N, K, generator=g), torch.randn(N, generator=g)]
            args = [a.requires_grad_() for a in args]
            y = k.linear(*args)
            hashes.append(digest(y, *grads_of(y, args)))
        return hashlib.sha256(" ".join(hashes).encode()).hexdigest()
    if name == "attention":  # two heads, length 11, strided inputs
        from arrepro.models.cpu_kernels import attention_cpu as k
        args = [t(torch.randn(2, 11, 2, 5, generator=g)).transpose(1, 2).requires_grad_() for _ in range(3)]
        y = k.attention(*args)
        return digest(y, *grads_of(y, args))
    if name == "short_conv":
        from arrepro.models.cpu_kernels import short_conv_cpu as k
        args = [t(torch.randn(3, 9, 19, generator=g)), torch.randn(19, 4, generator=g), torch.randn(19, generator=g)]
        args = [a.requires_grad_() for a in args]
        y = k.short_conv(*args, True)
        return digest(y, *grads_of(y, args))
    if name == "block":  # the attention block compiled whole: two heads, length 11, width 8, kept rows; then
        # width 20 (a vector of channels and 4 more) with centred convolutions on Q and V and rotary positions
        from arrepro.models.cpu_kernels import block_cpu as k
        hashes = []
        for D, opts in ((8, {}), (20, dict(conv="qv", lookahead=1, rope=True))):
            shapes = [(D,), (D,)] + [(D, D), (D,)] * 4 + [(D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
            shapes += [(D, 1, 3), (D,)] * len(opts.get("conv", ""))
            params = [(torch.randn(s, generator=g) * 0.5).requires_grad_() for s in shapes]
            x = t(torch.randn(2, 11, D, generator=g)).requires_grad_()
            y = k.block(x, tuple(params), torch.rand(2, 11, generator=g) < 0.5, 2, **opts)
            hashes.append(digest(y, *grads_of(y, [x] + params)))
        return hashlib.sha256(" ".join(hashes).encode()).hexdigest()
    if name in ("mamba", "deltanet", "mamba2"):  # the whole mixer at the demo's width (DeltaNet: two heads of 16;
        # Mamba2: four heads of 16, d_state 16, chunks of 5: states enter and leave chunks), length 13
        from arrepro.models.mixers.deltanet import DeltaNet
        from arrepro.models.mixers.mamba import Mamba
        from arrepro.models.mixers.mamba2 import Mamba2
        from arrepro.models.cpu_kernels import deltanet_cpu, mamba_cpu, mamba2_cpu
        cls, fused, kw = {"mamba": (Mamba, mamba_cpu.mamba, {}), "deltanet": (DeltaNet, deltanet_cpu.deltanet, {}),
                          "mamba2": (Mamba2, mamba2_cpu.mamba2, dict(d_state=16, headdim=16, chunk_size=5))}[name]
        m = cls(32, max_len=13, **kw)
        with torch.no_grad():  # parameters from the generator (not torch's init, which may change between versions)
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        x = t(torch.randn(3, 13, 32, generator=g), -20 if name == "deltanet" else -39).requires_grad_()
        args = [x, *m.parameters()]
        y = fused(x, *m.cpu_kernel_arguments())
        return digest(y, *grads_of(y, args))

    if name == "hyena":  # the fused operator at order 3, width 20 (a vector of channels and 4 more), length 13,
        # its long filters given (the filter MLP is ATen's)
        from arrepro.models.cpu_kernels import hyena_cpu
        d, n1 = 20, 2
        shapes = [((n1 + 2) * d, d), ((n1 + 2) * d,), ((n1 + 2) * d, 1, 3), ((n1 + 2) * d,), (n1, d, 13), (n1 * d,),
                  (d, d), (d,)]
        params = [(torch.randn(s, generator=g) * 0.3).requires_grad_() for s in shapes]
        x = t(torch.randn(3, 13, d, generator=g)).requires_grad_()
        y = hyena_cpu.hyena(x, *params)
        return digest(y, *grads_of(y, [x] + params))

    if name == "mlp":  # a block's MLP fused, width 20 (a vector of channels and 4 more), 2 x 11 rows
        from arrepro.models.cpu_kernels import mlp_cpu
        params = [(torch.randn(s, generator=g) * 0.5).requires_grad_() for s in ((80, 20), (80,), (20, 80), (20,))]
        x = t(torch.randn(2, 11, 20, generator=g) * 3).requires_grad_()
        y = mlp_cpu.mlp(x, *params)
        return digest(y, *grads_of(y, [x] + params))

names = [a for a in sys.argv[1:] if a != "subnormals"]
out = {name: kernel(name, False) for name in names}
if "subnormals" in sys.argv:  # the same kernels on inputs that underflow, kept (IEEE) and flushed (FTZ and DAZ)
    out.update({name + "+tiny": kernel(name, True) for name in names})
    assert torch.set_flush_denormal(True)
    out.update({name + "+tiny+flush": kernel(name, True) for name in names})
print(common.CODEGEN)
for name, h in out.items():
    print(name, h)
"""
KERNELS = ["scan", "linear", "attention", "short_conv", "mamba", "block", "deltanet", "mamba2", "hyena", "mlp"]


BUILDS = ["sse2", "avx2"] + (["avx512"] if numerics.cpu_description()["avx512f"] else [])


def fused_bits(isa: str, names: list[str]) -> tuple[str, dict]:
    """The build's description and the digest of each named kernel's outputs and gradients, from a
    fresh process whose numba builds the kernels for ``isa`` ("host": numba's own default target,
    numba imported first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(ROOT / "src"), ARREPRO_CPU_KERNEL_ISA=isa)
    code = FUSED_BITS if isa != "host" else "import numba\n" + FUSED_BITS  # numba first: host target
    p = subprocess.run([sys.executable, "-c", code, *names], env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    return lines[0], dict(line.split() for line in lines[1:])


@needs_avx2
@pytest.mark.slow
def test_fused_cpu_kernels_give_the_same_bits_from_every_build():
    """Every fused CPU kernel (the scan, the linear layer, attention, the short conv, the Mamba
    mixer, the attention block) compiled for plain x86-64 (SSE2, what a CPU without AVX2 and FMA runs: 4 lanes, each
    fused multiply-add a call of the C library's exactly rounded fmaf), with AVX2 and FMA (8 lanes,
    the FMA instruction) and, where this CPU has it, with AVX-512 (16 lanes) gives the same output
    and gradient bits: no reassociation, sums in a fixed order, fused multiply-adds only where the
    code writes them (each rounded once, whatever computes it), its own exp and log. A build of
    the scan for this CPU's own features (numba's default target) runs too and must agree: LLVM
    contracts no multiply and add of its own without a fast-math flag. The same on inputs that
    underflow (subnormals), kept (IEEE) and flushed (the cells' FTZ and DAZ: arrepro.train.numerics),
    and flushing changes their bits there (so the inputs did underflow)."""
    builds = {**{isa: KERNELS + ["subnormals"] for isa in BUILDS}, "host": ["scan"]}
    with ThreadPoolExecutor(2) as pool:  # two builds at a time, each compiling in its own process on one core
        out = dict(zip(builds, pool.map(fused_bits, builds, builds.values())))
    assert "(SSE2" in out["sse2"][0] and "AVX2 + FMA" in out["avx2"][0] and " host " in out["host"][0]
    assert "avx512" not in out or "AVX-512 + FMA" in out["avx512"][0]
    cases = [n + mode for n in KERNELS for mode in ("", "+tiny", "+tiny+flush")]
    assert sorted(out["sse2"][1]) == sorted(cases)
    for isa in BUILDS[1:]:
        for name in cases:
            assert out[isa][1][name] == out["sse2"][1][name], f"the {isa} and SSE2 builds of {name} differ"
    for name in KERNELS:  # the inputs underflow: flushing changes the bits (and so was tested)
        assert out["sse2"][1][name + "+tiny"] != out["sse2"][1][name + "+tiny+flush"], name
    assert out["host"][1]["scan"] == out["sse2"][1]["scan"], "the host build of the scan differs"


def _round_to_fp32(q) -> np.float32:
    """The fp32 nearest the rational q (ties to even), by exact comparisons."""
    from fractions import Fraction

    r = np.float32(float(q))
    near = [r, np.nextafter(r, np.float32(np.inf)), np.nextafter(r, np.float32(-np.inf))]
    return min(near, key=lambda v: (abs(Fraction(float(v)) - q), int(np.array(v).view(np.int32)) & 1))


def test_the_reference_fused_multiply_add_rounds_once():
    """common.fma_exact (the fp32 reference the fused kernels are checked against) is a * b + c
    rounded once, also where rounding the fp64 sum to fp32 would round twice: (1 + 2^-12)^2 is
    halfway between two fp32 numbers, and 2^-70 more must round it up."""
    from fractions import Fraction

    from arrepro.models.cpu_kernels.common import fma_exact

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(2000).astype(np.float32) * s for s in (1.0, 3.0, 0.01))
    a[:2], b[:2], c[:2] = np.float32(1 + 2**-12), np.float32(1 + 2**-12), (np.float32(2**-70), np.float32(-2**-70))
    got = fma_exact(a, b, c)
    want = [_round_to_fp32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
    assert np.array_equal(got, np.array(want, dtype=np.float32))
    assert got[0] == np.float32(1 + 2**-11 + 2**-23) and got[1] == np.float32(1 + 2**-11)
    assert np.float32(float(a[0]) * float(b[0]) + float(c[0])) == np.float32(1 + 2**-11)  # twice rounded: wrong


def test_the_fused_linear_product_is_a_chain_of_fused_multiply_adds():
    """linear_cpu's product, its gradients included, on every path of its blocked GEMM (tiles of
    MR rows and the edges', 2-vector, 1-vector and scalar columns, the sum over k in blocks of KC:
    27 x 300 @ 300 x 53) is bit for bit the chain over k in order of exactly rounded fused
    multiply-adds (then the bias), and that chain is not the unfused one."""
    from arrepro.models.cpu_kernels import linear_cpu
    from arrepro.models.cpu_kernels.common import fma_exact

    g = torch.Generator().manual_seed(1)
    M, K, N = 27, linear_cpu.KC + 44, 53
    x, w, b = (torch.randn(*s, generator=g) for s in ((M, K), (N, K), (N,)))
    y = linear_cpu._Linear.apply(x, w, b).numpy()  # the kernel itself (below MIN_ROWS too)
    X, W = x.numpy(), w.numpy()
    fused = unfused = np.zeros((M, N), dtype=np.float32)
    for k in range(K):
        xk, wk = np.broadcast_to(X[:, k:k + 1], (M, N)), np.broadcast_to(W[:, k][None, :], (M, N))
        fused, unfused = fma_exact(xk, wk, fused), unfused + xk * wk
    assert np.array_equal(y, fused + b.numpy()[None, :])
    assert not np.array_equal(fused, unfused)
    # the gradients: the same chains, over the rows for the weight's
    gy = torch.randn(M, N, generator=g)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    gx, gw = torch.autograd.grad(linear_cpu._Linear.apply(xg, wg, None), (xg, wg), gy)
    assert np.array_equal(gx.numpy(), linear_cpu.reference(gy.numpy(), np.ascontiguousarray(W.T)))
    assert np.array_equal(gw.numpy(), linear_cpu.reference(np.ascontiguousarray(gy.numpy().T), np.ascontiguousarray(X.T)))
