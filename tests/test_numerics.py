"""Pinned CPU numerics (arrepro.train.numerics): a cell's weights do not depend on the caller's
ATEN_CPU_CAPABILITY or MKL_CBWR (stand-ins for the CPU: an AVX-512 machine runs other kernels
than this AVX2 one), and a run that is not pinned says so in result.json."""
import json
import os
import subprocess
import sys
from pathlib import Path

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
                        [("linear.linear_cpu", "kernel"), ("short_conv.short_conv_cpu", "kernel")])}


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

g = torch.Generator().manual_seed(0)
out = {}
if "scan" in sys.argv:
    from arrepro.models.cpu_kernels import selective_scan_cpu as k
    B, L, E, N = 3, 29, 19, 16  # 19 channels: two stripes of 8 and a remainder
    args = [torch.rand(B, L, E, generator=g) * 0.2, -torch.rand(E, N, generator=g) * 4 - 0.1,
            torch.randn(B, L, E, generator=g), torch.randn(B, L, N, generator=g), torch.randn(B, L, N, generator=g)]
    args = [a.requires_grad_() for a in args]
    dt, A, x, Bm, Cm = args
    y = k.selective_scan(x, dt, A, Bm, Cm)
    out["scan"] = digest(y, *grads_of(y, args))
if "linear" in sys.argv:  # 131 rows (odd), 45 columns: a 32-wide tile, an 8-wide one, 5 scalar
    from arrepro.models.cpu_kernels import linear_cpu as k
    args = [torch.randn(131, 37, generator=g), torch.randn(45, 37, generator=g), torch.randn(45, generator=g)]
    args = [a.requires_grad_() for a in args]
    y = k.linear(*args)
    out["linear"] = digest(y, *grads_of(y, args))
if "attention" in sys.argv:  # two heads, length 11, strided inputs
    from arrepro.models.cpu_kernels import attention_cpu as k
    args = [torch.randn(2, 11, 2, 5, generator=g).transpose(1, 2).requires_grad_() for _ in range(3)]
    y = k.attention(*args)
    out["attention"] = digest(y, *grads_of(y, args))
if "short_conv" in sys.argv:
    from arrepro.models.cpu_kernels import short_conv_cpu as k
    args = [torch.randn(3, 9, 19, generator=g), torch.randn(19, 4, generator=g), torch.randn(19, generator=g)]
    args = [a.requires_grad_() for a in args]
    y = k.short_conv(*args, True)
    out["short_conv"] = digest(y, *grads_of(y, args))
if "mamba" in sys.argv:  # the whole mixer at the demo's width, length 13
    from arrepro.models.cpu_kernels import mamba_cpu as k
    from arrepro.models.mixers.mamba import Mamba
    m = Mamba(32, max_len=13)
    with torch.no_grad():  # parameters from the generator (not torch's init, which may change between versions)
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    x = torch.randn(3, 13, 32, generator=g).requires_grad_()
    args = [x, *m.parameters()]
    y = k.mamba(x, *m.cpu_kernel_arguments())
    out["mamba"] = digest(y, *grads_of(y, args))
print(common.CODEGEN)
for name, h in out.items():
    print(name, h)
"""
KERNELS = ["scan", "linear", "attention", "short_conv", "mamba"]


@needs_avx2
@pytest.mark.slow
def test_fused_cpu_kernels_give_the_same_bits_from_their_sse2_and_avx2_builds():
    """Every fused CPU kernel (the scan, the linear layer, attention, the short conv, the Mamba
    mixer) compiled for plain x86-64 (SSE2, what a CPU without AVX2 runs: 4 lanes) and with AVX2
    (what this one and every AVX-512 CPU runs: 8 lanes, the same instructions everywhere) gives
    the same output and gradient bits: no FMA, no reassociation, sums in a fixed order, its own
    exp and log. A build of the scan for this CPU's own features (numba's default target, FMA
    available) runs too and says whether it differs (printed: LLVM contracts nothing without a
    fast-math flag, so here it does not; the generic target does not rely on that)."""
    out = {}
    for isa in ("sse2", "avx2", "host"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
        env.update(PYTHONPATH=str(ROOT / "src"), ARREPRO_CPU_KERNEL_ISA=isa)
        code = FUSED_BITS if isa != "host" else "import numba\n" + FUSED_BITS  # numba first: host target
        names = KERNELS if isa != "host" else ["scan"]
        p = subprocess.run([sys.executable, "-c", code, *names], env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        out[isa] = (lines[0], dict(line.split() for line in lines[1:]))
    assert "(SSE2)" in out["sse2"][0] and "AVX2, no FMA" in out["avx2"][0] and " host " in out["host"][0]
    assert sorted(out["sse2"][1]) == sorted(KERNELS)
    for name in KERNELS:
        assert out["sse2"][1][name] == out["avx2"][1][name], f"the SSE2 and AVX2 builds of {name} differ"
    print("host build of the scan (FMA allowed):", "same bits" if out["host"][1]["scan"] == out["avx2"][1]["scan"]
          else "other bits")
