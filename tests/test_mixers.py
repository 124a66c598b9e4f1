"""Properties every sequence mixer must have, for every model named in config.yaml:
causality, shapes, finite gradients to every parameter, agreement of the portable path with the
per-timestep reference, the parameter count of its formula, kernel/portable agreement on CUDA,
and a tiny MQAR run whose loss falls."""
import importlib
import math

import pytest
import torch

from arrepro.data.mqar import MQARSpec, generate
from arrepro.models import LanguageModel, get_mixer

from conftest import config_models

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
RUN_CASES = _unique(lambda s: (s["mixer"], repr(sorted(s.get("mixer_kwargs", {}).items())), s.get("mlp", True)))
D, L, B = 32, 24, 2
REF_TOL = 1e-4  # fp32: portable (chunked/parallel) vs per-timestep reference, max abs error
KERNEL_TOL = 3e-2  # bf16 kernels vs fp32 portable path, max abs error relative to output scale


def build_mixer(name, d=D, max_len=L):
    spec = MODELS[name]
    kwargs = dict(spec.get("mixer_kwargs", {}))
    if spec.get("position") == "rope" and getattr(get_mixer(spec["mixer"]), "supports_rope", False):
        kwargs["rope"] = True
    torch.manual_seed(0)
    return get_mixer(spec["mixer"])(d, max_len=max_len, **kwargs)


def build_lm(name, vocab=64, d=D, layers=2, max_len=L):
    spec = MODELS[name]
    torch.manual_seed(0)
    return LanguageModel(vocab_size=vocab, d_model=d, n_layers=layers, max_len=max_len, mixer=spec["mixer"],
                         mixer_kwargs=spec.get("mixer_kwargs", {}), mlp=spec.get("mlp", True),
                         position=spec.get("position", "none"))


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


@pytest.mark.parametrize("name", MODELS)
def test_causal(name):
    """Changing tokens after position t never changes outputs at or before t (whole model)."""
    lm = build_lm(name).eval()
    x = torch.randint(0, 64, (B, L))
    base = lm(x)
    for t in (0, L // 3, L - 2):
        x2 = x.clone()
        x2[:, t + 1 :] = torch.randint(0, 64, (B, L - t - 1))
        out = lm(x2)
        assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5), f"{name}: position {t} sees the future"
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-5), f"{name}: output ignores the input"


@pytest.mark.parametrize("name", MIXER_CASES)
def test_portable_matches_reference(name):
    m = build_mixer(name).eval()
    x = torch.randn(B, L, D)
    with torch.no_grad():
        err = (m.forward_portable(x) - m.forward_reference(x)).abs().max().item()
    assert err < REF_TOL, f"{name}: portable path differs from the reference by {err:.2e}"


@pytest.mark.parametrize("name", MIXER_CASES)
def test_parameter_count_matches_formula(name):
    cls = get_mixer(MODELS[name]["mixer"])
    kwargs = dict(MODELS[name].get("mixer_kwargs", {}))
    for d in (32, 64):
        m = build_mixer(name, d=d)
        assert sum(p.numel() for p in m.parameters()) == cls.expected_parameters(d, max_len=L, **kwargs)


def _kernel_available(cls) -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    pkg = getattr(cls, "kernel_package", None)
    if pkg is None or not hasattr(cls, "forward_kernel"):
        return f"{cls.__name__} has no kernel path"
    mod = {"flash-attn": "flash_attn", "mamba-ssm": "mamba_ssm", "causal-conv1d": "causal_conv1d",
           "flash-linear-attention": "fla"}.get(pkg, pkg)
    try:
        importlib.import_module(mod)
    except Exception as err:  # noqa: BLE001
        return f"{pkg} not importable: {err}"
    return None


@pytest.mark.parametrize("name", MIXER_CASES)
def test_kernel_matches_portable(name):
    """bf16 kernel vs fp32 portable path, forward and gradients (tolerance KERNEL_TOL)."""
    cls = get_mixer(MODELS[name]["mixer"])
    why = _kernel_available(cls)
    if why:
        pytest.skip(why)
    m = build_mixer(name, d=64, max_len=128).cuda().eval()
    x = torch.randn(2, 128, 64, device="cuda", requires_grad=True)
    y_ref = m.forward_portable(x)
    g_ref = torch.autograd.grad(y_ref.square().mean(), [x, *m.parameters()], allow_unused=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m.forward_kernel(x)
    g = torch.autograd.grad(y.float().square().mean(), [x, *m.parameters()], allow_unused=True)
    scale = y_ref.abs().max().item() + 1e-6
    assert (y.float() - y_ref).abs().max().item() / scale < KERNEL_TOL
    for a, b in zip(g, g_ref):
        if a is not None and b is not None:
            assert (a.float() - b).abs().max().item() / (b.abs().max().item() + 1e-6) < 5 * KERNEL_TOL


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
