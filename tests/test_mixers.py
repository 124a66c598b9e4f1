"""Properties every sequence mixer must have, for every model named in config.yaml:
causality, shapes, finite gradients to every parameter, agreement of the portable path with the
per-timestep reference (outputs, and outputs and gradients across chunk boundaries), the
parameter count of its formula, kernel/portable agreement on CUDA, and a tiny MQAR run whose
loss falls."""
import contextlib
import math
from pathlib import Path

import pytest
import torch

from arrepro.config import defaults
from arrepro.config.catalogue import NO_DEFAULT, mixer_signature
from arrepro.config.constraints import unmet
from arrepro.data.mqar import MQARSpec, generate
from arrepro.models import LanguageModel, get_mixer, kernels
from arrepro.models.backbone import constructor_kwargs, model_kwargs
from arrepro.models.mixers.mamba import selective_scan

from conftest import ROOT, config_models

MODELS = config_models()


def _unique(key):
    seen, out = set(), []
    for name, spec in MODELS.items():
        k = key(spec)
        if k not in seen:
            seen.add(k)
            out.append(name)
    return out


# mixer-level properties depend on (mixer, hyperparameters) only: one model per such pair;
# a learning run on (mixer, hyperparameters, MLP); causality on every model (positions too)
MIXER_CASES = _unique(lambda s: (s["mixer"], repr(sorted(s.get("mixer_kwargs", {}).items())), s.get("position") == "rope"))
RUN_CASES = _unique(lambda s: (s["mixer"], repr(sorted(s.get("mixer_kwargs", {}).items())), defaults.model(s)["mlp"]))
D, L, B = 32, 24, 2
REF_TOL = 1e-4  # fp32: portable (chunked/parallel) vs per-timestep reference, max abs error
KERNEL_TOL = 3e-2  # bf16 kernels vs fp32 portable path, max abs error relative to output scale


def build_mixer(name, d=D, max_len=L):
    spec = MODELS[name]
    kwargs = constructor_kwargs(spec["mixer"], spec.get("mixer_kwargs"), defaults.model(spec)["position"])
    torch.manual_seed(0)
    return get_mixer(spec["mixer"])(d, max_len=max_len, **kwargs)


def build_lm(name, vocab=64, d=D, layers=2, max_len=L):
    spec = MODELS[name]
    torch.manual_seed(0)
    return LanguageModel(vocab_size=vocab, d_model=d, n_layers=layers, max_len=max_len, **model_kwargs(spec))


@pytest.mark.parametrize("name", MIXER_CASES)
def test_shape_and_finite_gradients(name):
    m = build_mixer(name)
    x = torch.randn(B, L, D, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape
    y.square().mean().backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, f"{name}: no gradient reaches {pname}"
        assert torch.isfinite(p.grad).all(), f"{name}: non-finite gradient in {pname}"
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", MIXER_CASES)
def test_portable_path_under_bf16_autocast(name):
    """A bf16 run without kernels (ARREPRO_KERNELS=0 on a GPU) takes the portable paths under
    autocast: forward and backward run and stay finite (Mamba's scan crashed in its backward)."""
    m = build_mixer(name)
    x = torch.randn(B, L, D, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m.forward_portable(x)
    y.float().square().mean().backward()
    assert torch.isfinite(y.float()).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", MODELS)
def test_causal(name):
    """Changing tokens after position t + a never changes outputs at or before t (whole model),
    where a is the steps ahead the model declares (0 but for a centred conv: its mixers'
    ``lookahead`` per layer); and a model that declares a sees exactly that far."""
    lm = build_lm(name).eval()
    ahead = sum(getattr(layer, "lookahead", 0) for layer in lm.modules())
    x = torch.randint(0, 64, (B, L))
    base = lm(x)
    for t in (0, L // 3, L - 2 - ahead):
        x2 = x.clone()
        x2[:, t + 1 + ahead :] = torch.randint(0, 64, (B, L - t - 1 - ahead))
        out = lm(x2)
        assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5), f"{name}: position {t} sees the future"
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-5), f"{name}: output ignores the input"
        if ahead and t:  # (at t = 0 attention attends to itself alone: a conv on Q or K changes nothing there)
            x3 = x.clone()
            x3[:, t + ahead] = (x[:, t + ahead] + 1) % 64
            # at init that dependence is small (~1e-7 through two layers): any change of the bits
            assert not torch.equal(lm(x3)[:, t], base[:, t]), f"{name}: does not see {ahead} step(s) ahead"


@pytest.mark.parametrize("name", MIXER_CASES)
def test_portable_matches_reference(name):
    m = build_mixer(name).eval()
    x = torch.randn(B, L, D)
    with torch.no_grad():
        err = (m.forward_portable(x) - m.forward_reference(x)).abs().max().item()
    assert err < REF_TOL, f"{name}: portable path differs from the reference by {err:.2e}"


# mixers whose portable path works chunk by chunk (a ``chunk_size`` attribute): a small chunk and
# a length that is no multiple of it, so states cross several chunk boundaries and a ragged end
CHUNKED = [n for n in MIXER_CASES if hasattr(build_mixer(n), "chunk_size")]
CHUNK, L_RAGGED = 5, 23
FP32_CORE = {"rwkv", "deltanet", "gated_deltanet"}  # cores computed in fp32 even for fp64 inputs


def assert_paths_agree(name, m, x, path, ref_path, tol, grad_tol=None, amp=contextlib.nullcontext()):
    """Outputs and gradients (to x and every parameter) of two paths of mixer ``m`` agree: max abs
    error relative to the reference's largest value, per tensor (``path`` runs under ``amp``). A
    gradient is measured against at least 1% of the largest reference gradient: one that vanishes
    in exact arithmetic (attention's key bias: softmax ignores a shift shared by all keys) is
    rounding noise, and noise over noise is no measure."""
    params, names = [x, *m.parameters()], ["input", *(n for n, _ in m.named_parameters())]
    with amp:
        y = getattr(m, path)(x)
    y_ref = getattr(m, ref_path)(x)
    y = y.to(y_ref.dtype)
    g = torch.autograd.grad(y.square().sum(), params, allow_unused=True)
    g_ref = torch.autograd.grad(y_ref.square().sum(), params, allow_unused=True)
    err = ((y - y_ref).abs().max() / y_ref.abs().max()).item()
    assert err < tol, f"{name}: {path} differs from {ref_path} by {err:.1e} (relative)"
    floor = 1e-2 * max(b.abs().max() for b in g_ref if b is not None)
    for pname, a, b in zip(names, g, g_ref):
        assert (a is None) == (b is None), f"{name}: {pname} reached by one path only"
        if a is not None:
            err = ((a.to(b.dtype) - b).abs().max() / torch.maximum(b.abs().max(), floor)).item()
            assert err < (grad_tol or tol), f"{name}: gradient of {pname} differs by {err:.1e} (relative)"


@pytest.mark.parametrize("name", CHUNKED)
def test_portable_matches_reference_across_chunks(name):
    """Outputs and gradients (input and every parameter) of the chunked portable path against the
    per-timestep reference, in fp64 (relative 1e-10; 1e-5 where the core computes in fp32); for
    Mamba this checks its hand-written backward against autograd through the reference."""
    tol = 1e-5 if MODELS[name]["mixer"] in FP32_CORE else 1e-10
    m = build_mixer(name).double()
    m.chunk_size = CHUNK
    x = torch.randn(B, L_RAGGED, D, dtype=torch.float64, requires_grad=True)
    assert_paths_agree(name, m, x, "forward_portable", "forward_reference", tol)


def test_selective_scan_backward_gradcheck():
    """Mamba's hand-written backward against finite differences, fp64, a chunk that does not divide L."""
    torch.manual_seed(0)
    L, E, N = 7, 2, 3
    x, Bm, Cm = (torch.randn(1, L, k, dtype=torch.float64, requires_grad=True) for k in (E, N, N))
    dt = torch.rand(1, L, E, dtype=torch.float64).add(0.1).requires_grad_()
    A = (-torch.rand(E, N, dtype=torch.float64) - 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: selective_scan(*a, chunk=3), (x, dt, A, Bm, Cm))


def _widths(name, candidates=(32, 64, 128)) -> list[int]:
    """The first two of ``candidates`` that the model's mixer requirements accept (its ``REQUIRES``, as the
    config checks read them: the copy Transformer turns a quarter of each of its 16 heads' channels,
    in pairs, so 64 is no width of it)."""
    spec = MODELS[name]
    sig = mixer_signature(spec["mixer"], str(ROOT))
    defaults_ = {k: v for k, v in sig[0].items() if v is not NO_DEFAULT}
    kwargs = constructor_kwargs(spec["mixer"], spec.get("mixer_kwargs"), defaults.model(spec)["position"])
    return [d for d in candidates if unmet(sig[1], {**defaults_, **kwargs, "d_model": d, "max_len": L}) is None][:2]


@pytest.mark.parametrize("name", MIXER_CASES)
def test_parameter_count_matches_formula(name):
    cls = get_mixer(MODELS[name]["mixer"])
    kwargs = dict(MODELS[name].get("mixer_kwargs", {}))
    widths = _widths(name)
    assert len(widths) == 2 and widths[0] == 32, widths
    for d in widths:
        m = build_mixer(name, d=d)
        assert sum(p.numel() for p in m.parameters()) == cls.expected_parameters(d, max_len=L, **kwargs)


def _kernel_available(cls) -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    name = getattr(cls, "kernel_name", None)
    if name is None:
        return f"{cls.__name__} has no kernel path"
    if kernels.installed(name) is None:
        return f"{kernels.KERNELS[name].dists[0]} not installed"
    kernels.function(name)  # installed but broken: an error, not a skip
    return None


@pytest.mark.parametrize("name", MIXER_CASES)
def test_kernel_matches_portable(name):
    """bf16 kernel vs fp32 portable path, forward (KERNEL_TOL) and gradients (5 KERNEL_TOL)."""
    cls = get_mixer(MODELS[name]["mixer"])
    why = _kernel_available(cls)
    if why:
        pytest.skip(why)
    d = _widths(name, (64, 128))[0]  # 64, or 128 where 64 is no width of the model (the copy Transformer's)
    m = build_mixer(name, d=d, max_len=128).cuda().eval()
    x = torch.randn(2, 128, d, device="cuda", requires_grad=True)
    assert_paths_agree(name, m, x, "forward_kernel", "forward_portable", KERNEL_TOL, 5 * KERNEL_TOL,
                       amp=torch.autocast("cuda", dtype=torch.bfloat16))


@pytest.mark.parametrize("name", RUN_CASES)
def test_tiny_mqar_run_learns(name):
    spec = MQARSpec(vocab_size=32, seq_len=16, num_kv_pairs=2)
    data = generate(spec, 256, [0, 0])
    x, y = torch.from_numpy(data["inputs"]).long(), torch.from_numpy(data["labels"]).long()
    lm = build_lm(name, vocab=32, d=32, layers=2, max_len=16)
    opt = torch.optim.AdamW(lm.parameters(), lr=3e-3)
    losses = []
    for step in range(60):
        i = torch.arange(step * 32, step * 32 + 32) % len(x)
        loss, _, _ = lm.loss(x[i], y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert math.isfinite(last) and last < first - 0.3, f"{name}: loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_positions_start_at_the_token_embeddings_scale(position):
    """An added positional signal starts at the token embeddings' RMS: at amplitude 1 a sinusoidal
    table is 50x the embeddings (init std 0.02) and swamps them (1-layer Mamba then ends under
    chance on the demo's MQAR)."""
    torch.manual_seed(0)
    m = LanguageModel(vocab_size=128, d_model=32, n_layers=1, max_len=64, mixer="attention",
                      position=position)
    table = m.pos_table if position == "sinusoidal" else m.pos_embed.weight.detach()
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    assert rms(table) == pytest.approx(rms(m.embed.weight.detach()), rel=0.15)


# ---------------------------------------------------------------- fused CPU kernels (numba)
# mixers with a fused CPU path (``cpu_kernel_name``): the path ``forward`` takes on the CPU
CPU_FUSED = [n for n in MIXER_CASES if getattr(get_mixer(MODELS[n]["mixer"]), "cpu_kernel_name", None)]


def _fused_width(name, d):
    """``d``, or the next multiple of the model's heads where it has several (Mamba2: of headdim /
    expand, so that its expanded width splits into heads)."""
    kw = MODELS[name].get("mixer_kwargs", {})
    step = kw["headdim"] // kw.get("expand", 2) if "headdim" in kw else kw.get("num_heads", 1)
    return -(-d // step) * step


def _cpu_kernel_or_skip(m):
    """Skip where numba is not installed; where it is, the kernel must pass its self-check. A mixer
    with dropout is compared in eval mode (the fused attention has no dropout: SDPA runs instead)."""
    if getattr(m, "dropout", 0):
        m.eval()
    if kernels.installed(m.cpu_kernel_name) is None:
        pytest.skip(f"{kernels.KERNELS[m.cpu_kernel_name].dists[0]} not installed")
    fn, record = kernels.choose(m.cpu_kernel_name, torch.zeros(1, 1, 1), **m.kernel_call(torch.zeros(1, 1, 1)))
    assert fn is not None, record["reason"]


@pytest.mark.parametrize("name", CPU_FUSED)
@pytest.mark.parametrize("ref_path", ["forward_portable", "forward_reference"])
def test_cpu_kernel_matches_portable_and_reference_fp64(name, ref_path):
    """Outputs and every gradient of the fused CPU path against the chunked portable path (a chunk
    of 5, so states cross its boundaries and end ragged) and the per-timestep reference, fp64, at
    awkward lengths; channel counts that are no multiple of the kernel's 8 stripes included
    (relative 1e-5 where the portable core computes in fp32: DeltaNet's; its own backward is
    checked in fp64 by finite differences below)."""
    tol = 1e-5 if MODELS[name]["mixer"] in FP32_CORE else 1e-10
    for d, length in ((D, L_RAGGED), (13, 1), (13, 37)):
        d = _fused_width(name, d)
        m = build_mixer(name, d=d, max_len=length).double()
        _cpu_kernel_or_skip(m)
        m.chunk_size = CHUNK
        x = torch.randn(B, length, d, dtype=torch.float64, requires_grad=True)
        assert_paths_agree(name, m, x, "forward_cpu_kernel", ref_path, tol)


@pytest.mark.parametrize("name", CPU_FUSED)
def test_cpu_kernel_matches_portable_fp32_demo_shape(name):
    """fp32 at the demo's shape (batch 32, length 32, width 32): within fp32 rounding of the portable path."""
    d = _fused_width(name, 32)
    m = build_mixer(name, d=d, max_len=32)
    _cpu_kernel_or_skip(m)
    x = torch.randn(32, 32, d, requires_grad=True)
    assert_paths_agree(name, m, x, "forward_cpu_kernel", "forward_portable", 1e-5, 1e-4)


def test_cpu_selective_scan_gradcheck_and_determinism():
    """The fused scan's backward against finite differences (fp64, 19 channels: two stripes of 8
    and a remainder), and the same bits on a second call."""
    from arrepro.models.cpu_kernels.selective_scan_cpu import selective_scan as fused

    _cpu_kernel_or_skip(build_mixer("mamba"))
    torch.manual_seed(0)
    L, E, N = 6, 19, 3
    x, Bm, Cm = (torch.randn(2, L, k, dtype=torch.float64, requires_grad=True) for k in (E, N, N))
    dt = torch.rand(2, L, E, dtype=torch.float64).add(0.1).requires_grad_()
    A = (-torch.rand(E, N, dtype=torch.float64) - 0.5).requires_grad_()
    assert torch.autograd.gradcheck(fused, (x, dt, A, Bm, Cm))
    args = [t.float().detach().requires_grad_() for t in (x, dt, A, Bm, Cm)]
    runs = []
    for _ in range(2):
        y = fused(*args)
        runs.append([y, *torch.autograd.grad(y.square().sum(), args)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_cpu_deltanet_gradcheck_and_determinism():
    """The fused DeltaNet mixer's backward (the delta rule's, right to left, the norms', the
    convs' and the projections') against finite differences in fp64, with two heads of 3 and one
    of 5 at lengths 1 and 6; and the same bits on a second call in fp32."""
    from arrepro.models.cpu_kernels.deltanet_cpu import deltanet
    from arrepro.models.mixers.deltanet import DeltaNet

    for d, heads, length in ((6, 2, 6), (5, 1, 1)):
        torch.manual_seed(0)
        m = DeltaNet(d, max_len=8, num_heads=heads, conv_size=3).double()
        _cpu_kernel_or_skip(m)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.3)
        *params, h, l2_eps, norm_eps = m.cpu_kernel_arguments()
        x = torch.randn(2, length, d, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, *ps: deltanet(x, *ps, h, l2_eps, norm_eps), (x, *params))
    m = DeltaNet(32, max_len=13, num_heads=2).float()
    args = [torch.randn(3, 13, 32, requires_grad=True), *m.parameters()]
    runs = []
    for _ in range(2):
        y = m.forward_cpu_kernel(args[0])
        runs.append([y, *torch.autograd.grad(y.square().sum(), args)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_cpu_mamba2_gradcheck_and_determinism():
    """The fused Mamba2 mixer's backward (the SSD scan's chunk by chunk, right to left, with the
    states entering and leaving chunks; the gated norm's, the conv's and the projections') against
    finite differences in fp64: three heads of 4 over chunks of 4 at lengths 10 (a short last chunk)
    and 1; and the same bits on a second call in fp32 at the demo's sizes."""
    from arrepro.models.cpu_kernels.mamba2_cpu import mamba2
    from arrepro.models.mixers.mamba2 import Mamba2

    for length in (10, 1):
        torch.manual_seed(0)
        m = Mamba2(6, max_len=16, d_state=3, d_conv=3, headdim=4, chunk_size=4).double()
        _cpu_kernel_or_skip(m)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.3)
        *params, P, N, T, eps = m.cpu_kernel_arguments()
        x = torch.randn(2, length, 6, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, *ps: mamba2(x, *ps, P, N, T, eps), (x, *params))
    m = Mamba2(32, max_len=32, d_state=128, headdim=64).float()
    args = [torch.randn(3, 32, 32, requires_grad=True), *m.parameters()]
    runs = []
    for _ in range(2):
        y = m.forward_cpu_kernel(args[0])
        runs.append([y, *torch.autograd.grad(y.square().sum(), args)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_cpu_kernel_path_is_recorded_and_a_failed_kernel_falls_back_loudly(monkeypatch):
    """On the CPU, Mamba runs the fused mixer and records it; where the kernel cannot be had (here a
    module that does not exist), the portable path runs, with the same outputs, and the record
    quotes the reason: never a silent fallback."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    lm = build_lm("mamba", layers=1)
    _cpu_kernel_or_skip(lm.layers[0].mixer)
    x = torch.randint(0, 64, (B, L))
    y = lm(x)
    rec = {r["op"]: r for r in kernels.paths_used(lm)}["mamba.mamba_cpu"]
    assert rec["path"] == "kernel" and rec["package"].startswith("numba ") and "self-checked" in rec["reason"], rec
    broken = kernels.Kernel(("numba",), "arrepro.models.cpu_kernels.no_such_kernel", "mamba", "the portable chunked scan",
                            device="cpu")
    monkeypatch.setitem(kernels.KERNELS, "mamba_cpu", broken)
    monkeypatch.setattr(kernels, "_cpu_checked", {})
    monkeypatch.setattr(kernels, "_decisions", {})
    lm2 = build_lm("mamba", layers=1)
    y2 = lm2(x)
    rec2 = {r["op"]: r for r in kernels.paths_used(lm2)}["mamba.mamba_cpu"]
    assert rec2["path"] == "portable" and "ModuleNotFoundError" in rec2["reason"], rec2
    assert rec2["reason"].endswith("the portable chunked scan")
    assert torch.allclose(y, y2, atol=1e-5)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_a_cpu_kernels_first_use_under_no_grad_still_runs_the_kernel(monkeypatch, mode):
    """The self-check takes gradients: a process whose first kernel call is an evaluation (under
    no_grad or inference_mode) once recorded every CPU kernel as portable ("element 0 of tensors
    does not require grad") for the rest of its life."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    lm = build_lm("mamba", layers=1)
    _cpu_kernel_or_skip(lm.layers[0].mixer)
    monkeypatch.setattr(kernels, "_cpu_checked", {})
    monkeypatch.setattr(kernels, "_decisions", {})
    lm = build_lm("mamba", layers=1)
    x = torch.randint(0, 64, (B, L))
    with mode():
        lm(x)
    recs = {r["op"]: r for r in kernels.paths_used(lm)}
    assert recs["mamba.mamba_cpu"]["path"] == "kernel", recs["mamba.mamba_cpu"]
    assert all(r["path"] == "kernel" for op, r in recs.items() if op.endswith("_cpu")), recs


def test_a_mixers_cpu_kernel_files_shape_its_cells_only():
    """The train rule's code digest and the checkpoint fingerprint (grid.train_sources) cover the
    fused CPU kernel a mixer names and what that file imports, for that mixer's cells only, and
    the kernels of the blocks every model has (ops.py's linear layer and short conv) for all."""
    from arrepro.config.catalogue import train_sources

    root = Path(__file__).resolve().parents[1]
    k = "src/arrepro/models/cpu_kernels/"
    mamba = {k + "mamba_cpu.py", k + "selective_scan_cpu.py"}
    shared = {k + f for f in ("linear_cpu.py", "short_conv_cpu.py", "common.py", "__init__.py")}  # ops.py's
    assert mamba | shared <= set(train_sources("mamba", root))
    assert shared | {k + "attention_cpu.py"} <= set(train_sources("attention", root))
    assert not mamba & set(train_sources("attention", root))
    assert not {k + "attention_cpu.py"} & set(train_sources("mamba", root))
    assert all((root / f).is_file() for f in train_sources("mamba", root))
    # Gated DeltaNet subclasses DeltaNet without its fused kernel (cpu_kernel_name = None): an edit
    # of that kernel reruns DeltaNet's cells, not Gated DeltaNet's
    assert k + "deltanet_cpu.py" in train_sources("deltanet", root)
    assert k + "deltanet_cpu.py" not in train_sources("gated_deltanet", root)
    assert k + "mamba2_cpu.py" in train_sources("mamba2", root)
    assert not {k + "mamba2_cpu.py", k + "deltanet_cpu.py"} & set(train_sources("mamba", root))
    assert k + "mamba2_cpu.py" not in train_sources("deltanet", root) and k + "deltanet_cpu.py" not in train_sources("mamba2", root)
    # a GPU cell never runs a CPU kernel (they take CPU tensors only): its sources leave them out,
    # so a CPU kernel's edit does not rerun the GPU grid; "auto" may train on the CPU and keeps them
    for mixer in ("mamba", "attention", "hyena"):
        cpu, gpu = set(train_sources(mixer, root)), set(train_sources(mixer, root, "cuda"))
        assert gpu < cpu and {f for f in cpu - gpu if not f.startswith(k)} == set(), mixer
        assert not [f for f in gpu if f.startswith(k)], mixer
        assert set(train_sources(mixer, root, "auto")) == cpu


def test_rwkv_time_mix_init_follows_zoologys_layer_formula(monkeypatch):
    """RWKV's time-mix init from the layer index, as Zoology's RWKVTimeMixer with its n_layer left at
    12 (zoology/mixers/rwkv.py): layer 0 is the init every layer had before (the layer-0 formula,
    and the whole model equal under a seed to one built without the layer index); layer 1 has
    decay exponent 0.7 + 1.3/11, mu_k = x^(11/12), mu_v = x^(11/12) + 0.3/11, mu_r = x^(11/24)."""
    from arrepro.models.mixers.rwkv import RWKV

    C = 40
    build = lambda: LanguageModel(vocab_size=64, d_model=C, n_layers=2, max_len=16, mixer="rwkv")  # noqa: E731
    torch.manual_seed(3)
    model = build()
    c = torch.arange(C, dtype=torch.float64)
    x, zig = c / C, math.log(0.3) + ((c + 1) % 3 - 1) * 0.5
    want = {0: {"time_decay": -5 + 8 * (c / (C - 1)) ** 0.7, "time_first": zig, "time_mix_k": x, "time_mix_v": x,
                "time_mix_r": x ** 0.5},
            1: {"time_decay": -5 + 8 * (c / (C - 1)) ** (0.7 + 1.3 / 11), "time_first": zig,
                "time_mix_k": x ** (11 / 12), "time_mix_v": x ** (11 / 12) + 0.3 / 11, "time_mix_r": x ** (11 / 24)}}
    for layer, params in want.items():
        mixer = model.layers[layer].mixer
        for name, value in params.items():
            torch.testing.assert_close(getattr(mixer, name).double(), value, rtol=0, atol=2e-6, msg=f"layer {layer} {name}")
    c32 = torch.arange(C, dtype=torch.float32)  # layer 0 bit for bit as the former float32 expressions
    former = {"time_decay": -5 + 8 * (c32 / (C - 1)) ** 0.7, "time_mix_k": c32 / C, "time_mix_v": c32 / C,
              "time_mix_r": (c32 / C) ** 0.5}
    assert all(torch.equal(getattr(model.layers[0].mixer, k).detach(), v) for k, v in former.items())
    monkeypatch.setattr(RWKV, "wants_layer_idx", False)  # every layer built as layer 0: the former init
    torch.manual_seed(3)
    before = build().state_dict()
    layer1_time = {k for k in before if k.startswith("layers.1.mixer.time_") and k != "layers.1.mixer.time_first"}
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]) != (k in layer1_time), k  # only layer 1's decay and mixes moved
    with pytest.raises(ValueError, match="layer_idx 12 is outside 0..11"):
        RWKV(C, max_len=16, layer_idx=12)
