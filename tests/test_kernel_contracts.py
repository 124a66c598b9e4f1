"""Kernel contracts on CPU: every model of config.yaml, at every width and sequence length the
paper grid trains it at, runs its kernel path through stand-ins (tests/kernel_standins.py) that
enforce the real kernels' checks; the dispatch must call a kernel only within its limits and
say why where it does not. Plus the dispatch's own rules (reasons, loud import errors).

Cases per mixer configuration (a mixer with its hyperparameters; positions other than rotary
do not reach the mixer): every paper width at the smallest paper length + 1, and every paper
length (plus the largest + 1) at the smallest width, so lengths that are not a multiple of any
chunk size (4, 64, 256, 512) are included. gated_deltanet is in no paper experiment: it gets the
union of all paper widths and lengths. Batch 1, one forward and backward, fp32 and bf16 autocast.
"""
import contextlib
import json
import sys

import pytest
import torch
import yaml

from arrepro.config import defaults
from arrepro.data import save_task
from arrepro.data import task_seq_len
from arrepro.config.grid import Grid
from arrepro.models import LanguageModel, get_mixer, kernels
from arrepro.models.backbone import constructor_kwargs
from arrepro.models.kernels import KernelMixer, paths_used
from arrepro.models.ops import ShortConv
from arrepro.train.loop import train_cell

import kernel_standins as si
from conftest import ROOT
from test_mixers import assert_paths_agree

CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
MODELS = CONFIG["models"]


def _mixer_key(spec):
    kwargs = constructor_kwargs(spec["mixer"], spec.get("mixer_kwargs"), defaults.model(spec)["position"])
    return spec["mixer"], tuple(sorted(kwargs.items()))


def paper_cases():
    """[(model, width, length)] as described in the module docstring, one model per mixer key."""
    grid = Grid(CONFIG, "paper")
    shapes: dict[tuple, set] = {}
    names: dict[tuple, str] = {}
    for cell in grid.all_cells():
        key = _mixer_key(MODELS[cell.model])
        names.setdefault(key, cell.model)
        shapes.setdefault(key, set()).add((cell.width, task_seq_len(grid.tasks[cell.task])))
    every = set().union(*shapes.values())
    for name, spec in MODELS.items():  # models in no paper experiment: all paper widths and lengths
        key = _mixer_key(spec)
        if key not in shapes:
            names[key], shapes[key] = name, every
    cases = set()
    for key, ws_ls in shapes.items():
        widths, lengths = sorted({w for w, _ in ws_ls}), sorted({n for _, n in ws_ls})
        cases |= {(names[key], w, lengths[0] + 1) for w in widths}
        cases |= {(names[key], widths[0], n) for n in [*lengths, lengths[-1] + 1]}
    return sorted(cases)


CASES = paper_cases()


def build(name, width, length):
    key = _mixer_key(MODELS[name])
    torch.manual_seed(0)
    return get_mixer(key[0])(width, max_len=length, **dict(key[1]))


def expected(mixer, precision, length):
    """(path, reason fragment) the dispatch must record for the mixer's own kernel, from the
    limits the stand-ins cite (not from arrepro's table); a mixer whose only kernel is a fused CPU
    one (Hyena) by its own rule of length, fp32 only."""
    name = mixer.kernel_name
    if kernels.KERNELS[name].device == "cpu":
        if precision != "fp32":
            return "portable", f"{precision} run: {name} computes in fp32/fp64"
        from arrepro.models.cpu_kernels.hyena_cpu import MAX_LEN as limit
        if length > limit:
            return "portable", f"length {length} > {name}'s direct long convolution's limit {limit}"
        return "kernel", "self-checked"
    if name in si.HALF_ONLY and precision == "fp32":
        return "portable", f"fp32 run: {name} needs bf16/fp16"
    if name == "flash_attn_func" and -(-mixer.dh // 8) * 8 > si.FLASH_MAX_HEAD_DIM:
        return "portable", f"head dim {mixer.dh} > flash-attn's limit 256: SDPA"
    if name in ("chunk_delta_rule", "chunk_gated_delta_rule") and mixer.dh > si.DELTA_MAX_HEAD_DIM:
        return "portable", f"head dim {mixer.dh} > fla's {name}'s limit 256"
    if name == "parallel_based" and mixer.f > si.BASED_MAX_FEATURE_DIM:
        return "portable", f"feature dim {mixer.f} > parallel_based's limit 128"
    if name == "selective_scan_fn" and mixer.d_state > si.SCAN_MAX_DSTATE:
        return "portable", f"d_state {mixer.d_state} > selective_scan's limit 256"
    return "kernel", "within its limits"


@pytest.fixture
def standins(monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    with kernels.override(si.STANDINS):
        yield


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name,width,length", CASES)
def test_paper_shapes_respect_kernel_contracts(standins, name, width, length, precision):
    m = build(name, width, length)
    x = torch.randn(1, length, width, requires_grad=True)
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with amp:
        y = m(x)  # a stand-in raises ContractError where the real kernel would refuse the call
    y.float().square().mean().backward()
    assert y.shape == x.shape and torch.isfinite(y).all() and torch.isfinite(x.grad).all()

    records = {r["op"]: r for r in paths_used(m)}
    assert len(records) == len(paths_used(m)), f"an op took two paths in one call: {paths_used(m)}"
    if isinstance(m, KernelMixer):
        op = f"{m.registry_name}.{m.kernel_name}"
        path, reason = expected(m, precision, length)
        assert records[op]["path"] == path and reason in records[op]["reason"], records[op]
    for sub in m.modules():  # short convs that ran (inside a kernel path, or Hyena's) use causal-conv1d
        if isinstance(sub, ShortConv) and sub.__dict__.get("_kernel_paths"):
            assert records["short_conv.causal_conv1d_fn"]["path"] == "kernel"
    for r in records.values():  # the CUDA kernels are the stand-ins; the fused CPU kernels are themselves
        op_kernel = r["op"].split(".")[1]
        assert "override" in r["package"] or kernels.KERNELS[op_kernel].device == "cpu", r


# one model per mixer configuration with a kernel path
KERNEL_MODELS = sorted({_mixer_key(s): n for n, s in reversed(MODELS.items())
                        if issubclass(get_mixer(s["mixer"]), KernelMixer)
                        and kernels.KERNELS[get_mixer(s["mixer"]).kernel_name].device != "cpu"}.values())


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_kernel_path_through_standins_matches_portable(standins, name):
    """forward_kernel's argument conventions (layouts, transposes, scales, dtypes, what the kernel
    applies itself) against forward_portable, outputs and gradients, at a ragged length: fp32 where
    the kernel takes fp32 (1e-5 relative), else bf16 autocast against fp32 (3e-2)."""
    m = build(name, 32, 23).eval()  # attention dropout (Zoology's 0.1) draws other masks in each path
    x = torch.randn(2, 23, 32, requires_grad=True)
    half = m.kernel_name in si.HALF_ONLY
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if half else contextlib.nullcontext()
    assert_paths_agree(name, m, x, "forward_kernel", "forward_portable", 3e-2 if half else 1e-5, amp=amp)


def test_cases_cover_every_model_and_the_large_head_dims():
    """Every config model's mixer configuration is a case; attention reaches head dim 2048."""
    covered = {_mixer_key(MODELS[n]) for n, _, _ in CASES}
    assert covered == {_mixer_key(s) for s in MODELS.values()}
    assert ("attention", 2048, 65) in CASES
    assert any(n % 64 and n % 4 and n > 64 for _, _, n in CASES)


def test_standins_refuse_what_the_kernels_refuse():
    """The stand-ins are not vacuous: each rejects a call outside its real limits."""
    q = torch.randn(1, 8, 1, 264, dtype=torch.bfloat16)  # head dim 264 > 256
    with pytest.raises(si.ContractError, match="head dimension at most 256"):
        si.flash_attn_func(q, q, q, causal=True)
    with pytest.raises(si.ContractError, match="fp16 and bf16"):
        si.flash_attn_func(*(torch.randn(1, 8, 1, 64),) * 3, causal=True)
    with pytest.raises(si.ContractError, match="width between 2 and 4"):
        si.causal_conv1d_fn(torch.randn(1, 8, 10), torch.randn(8, 5))
    q = torch.randn(1, 8, 1, 16, dtype=torch.float32)
    with pytest.raises(si.ContractError, match="does not support float32"):
        si.chunk_delta_rule(q, q, q, torch.rand(1, 8, 1))
    with pytest.raises(si.ContractError, match="larger than 256"):
        k = torch.randn(1, 8, 1, 512)
        si.chunk_gated_delta_rule(k, k, k, torch.zeros(1, 8, 1), torch.rand(1, 8, 1))
    with pytest.raises(si.ContractError, match="feature dim up to 128"):
        k = torch.randn(1, 8, 1, 256)
        si.parallel_based(k, k, k)
    u = torch.randn(1, 4, 8)
    with pytest.raises(si.ContractError, match="state dimension <= 256"):
        si.selective_scan_fn(u, u, -torch.ones(4, 300), torch.randn(1, 300, 8), torch.randn(1, 300, 8))
    with pytest.raises(si.ContractError, match="delta_bias must be fp32"):
        si.selective_scan_fn(u, u, -torch.ones(4, 16), torch.randn(1, 16, 8), torch.randn(1, 16, 8),
                             delta_bias=torch.zeros(4, dtype=torch.float64))


def test_reasons_without_override(monkeypatch):
    """On CPU the fused CPU kernels run (attention's block compiled whole, Mamba's mixer and its
    block's MLP, every linear layer's) and say so; ARREPRO_KERNELS=0 wins over everything."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    numba = kernels.installed("mamba_cpu")
    torch.manual_seed(0)
    for mixer in ("attention", "mamba"):
        lm = LanguageModel(vocab_size=16, d_model=16, n_layers=1, max_len=8, mixer=mixer)
        lm(torch.randint(0, 16, (1, 8)))
        ops = {"attention": ["block.block_cpu"], "mamba": ["mamba.mamba_cpu", "mlp.mlp_cpu"]}[mixer] + ["linear.linear_cpu"]
        assert [(p["op"], p["path"], p["package"]) for p in paths_used(lm)] == \
            [(op, "kernel" if numba else "portable", numba) for op in ops], paths_used(lm)
        for p in paths_used(lm):
            assert p["reason"].startswith("cpu fp32: self-checked" if numba else "numba not installed"), p
    monkeypatch.setenv(kernels.ENV, "0")
    lm(torch.randint(0, 16, (1, 8)))
    assert {"op": "mamba.mamba_cpu", "path": "portable", "package": None,
            "reason": "ARREPRO_KERNELS=0"} in paths_used(lm)
    with kernels.override(si.STANDINS):
        m = build("attention", 64, 9)
        m(torch.randn(1, 9, 64))
    assert paths_used(m)[0]["reason"] == "ARREPRO_KERNELS=0"


def test_installed_but_broken_package_is_an_error(monkeypatch):
    """A kernel whose distribution is installed but whose module fails to import raises,
    quoting the import error (pytest stands in for an installed distribution)."""
    broken = kernels.Kernel(("pytest",), "arrepro_no_such_module.sub", "fn", "nothing")
    monkeypatch.setitem(kernels.KERNELS, "broken_kernel", broken)
    with pytest.raises(kernels.KernelImportError, match=r"pytest .* is installed but .*No module named"):
        kernels.function("broken_kernel")


def test_bare_package_import_skips_the_package_init(tmp_path, monkeypatch):
    """mamba-ssm's submodules are imported without its __init__ (which imports its modules and models,
    and with them huggingface_hub and transformers)."""
    pkg = tmp_path / "fake_mamba_pkg"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the package __init__ ran')\n")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "scan.py").write_text("from fake_mamba_pkg.ops import __name__ as _\ndef scan():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert kernels._import_bare("fake_mamba_pkg.ops.scan", "fake_mamba_pkg").scan() == 1
    finally:
        for mod in [m for m in sys.modules if m.startswith("fake_mamba_pkg")]:
            del sys.modules[mod]


def test_half_precision_is_the_runs_choice():
    """compute_dtype: fp32 stays fp32; autocast to bf16 (or a half tensor) makes it half."""
    x = torch.randn(2, 3)
    assert kernels.compute_dtype(x) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernels.compute_dtype(x) == torch.bfloat16
    assert kernels.compute_dtype(x.half()) == torch.float16


def test_cell_records_and_logs_its_paths(tmp_path, monkeypatch):
    """result.json names every path with package and reason; train.log says it once, after step 1
    (a Mamba cell through the stand-ins: kernel paths in training, recorded as such)."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    task = {"kind": "mqar", "vocab_size": 32, "seq_len": 16, "num_kv_pairs": 2, "n_train": 64, "n_test": 32, "seed": 0}
    save_task(task, tmp_path / "data")
    spec = {"task": "t", "task_name": "L16", "task_def": task, "model": "mamba", "model_def": MODELS["mamba"],
            "width": 16, "layers": 1, "recipe": "r", "batch_size": 32, "lr": 1e-3, "seed": 0, "device": "cpu",
            "scale": "test", "recipe_def": {"epochs": 1, "batch_size": 32, "warmup_frac": 0.1, "schedule": "cosine",
                                            "weight_decay": 0.1}}
    lines = []
    with kernels.override(si.STANDINS):
        result = train_cell(spec, tmp_path / "data", tmp_path / "cell", log=lines.append)
    saved = json.loads((tmp_path / "cell" / "result.json").read_text())
    assert saved["kernel_paths"] == result["kernel_paths"]
    by_op = {p["op"]: p for p in saved["kernel_paths"]}
    assert set(by_op) == {"mamba.selective_scan_fn", "short_conv.causal_conv1d_fn", "linear.linear_cpu"}
    assert all(p["path"] == "kernel" for p in by_op.values())
    assert all("within its limits" in p["reason"] for op, p in by_op.items() if op != "linear.linear_cpu")
    logged = [line for line in lines if "kernel paths:" in line]
    assert len(logged) == 1 and "mamba.selective_scan_fn: kernel" in logged[0]
    assert lines.index(logged[0]) < next(i for i, line in enumerate(lines) if "epoch 1/1" in line)


def test_a_layer_with_only_a_cpu_kernel_records_nothing_off_the_cpu():
    """Every linear layer has the fused CPU product and no CUDA kernel: on another device it runs
    F.linear and records no path (a GPU cell's records, which `make gpu-check --require-kernels`
    reads, stay the mixers' own). Meta tensors stand in for a GPU."""
    from arrepro.models.ops import Linear

    layer = Linear(4, 3).to("meta")
    assert layer(torch.zeros(2, 4, device="meta")).shape == (2, 3)
    assert paths_used(layer) == []
    cpu = Linear(4, 3)
    cpu(torch.zeros(2, 4))
    assert [p["op"] for p in paths_used(cpu)] == ["linear.linear_cpu"]
