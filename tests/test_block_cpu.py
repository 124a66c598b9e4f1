"""The attention block compiled whole on the CPU (cpu_kernels/block_cpu.py, kernel ``block_cpu``):
the same model as the block's own modules (outputs and gradients, at an awkward length, two heads,
the last block on the labelled rows only; with short convolutions on any paths, causal or centred,
and with rotary positions), causal (or looking ahead exactly as far as its centred convolutions),
deterministic, recorded, and used only where it computes what the block's modules would (not with
dropout, a parallel residual or partial rotary: declined, and the record says why); the MLP of every
other block fused alone (cpu_kernels/mlp_cpu.py, kernel ``mlp_cpu``)."""
from __future__ import annotations

import pytest
import torch

from arrepro.models import kernels
from arrepro.models.backbone import _block_params, LanguageModel
from arrepro.models.cpu_kernels import block_cpu

pytestmark = pytest.mark.skipif(kernels.installed("block_cpu") is None, reason="numba not installed")


def lm(**kw) -> LanguageModel:
    torch.manual_seed(0)
    args = dict(vocab_size=40, d_model=16, n_layers=2, max_len=13, mixer="attention", mixer_kwargs={"num_heads": 2},
                position="learned")
    return LanguageModel(**{**args, **kw})


def batch():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 40, (3, 13), generator=g), torch.randint(0, 40, (3, 13), generator=g)
    y[:, :6] = -100  # the last block keeps the labelled rows only
    return x, y


def loss_and_grads(model):
    model.zero_grad(set_to_none=True)
    loss, _, _ = model.loss(*batch())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def ops(model) -> dict:
    return {p["op"]: p["path"] for p in kernels.paths_used(model)}


def assert_the_portable_paths_agree(model, loss, grads, monkeypatch):
    """The model's loss and gradients with every portable path (ARREPRO_KERNELS=0) are ``loss`` and
    ``grads`` to rounding."""
    monkeypatch.setenv(kernels.ENV, "0")
    loss0, grads0 = loss_and_grads(model)
    torch.testing.assert_close(loss, loss0, rtol=1e-6, atol=1e-6)
    assert grads.keys() == grads0.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads0[name], rtol=1e-4, atol=1e-6, msg=name)


VARIANTS = {  # the demo's attention blocks: plain, Tables 2-3's convolutions, the copy Transformer's rotary positions
    "plain": {},
    "conv qkv": dict(mixer_kwargs={"num_heads": 2, "conv": "qkv"}),
    "conv v, centred": dict(mixer_kwargs={"num_heads": 2, "conv": "v", "conv_mode": "centred"}),
    "conv q and k, centred, kernel 5": dict(mixer_kwargs={"num_heads": 2, "conv": "kq", "conv_mode": "centred",
                                                          "conv_size": 5}),
    "rope": dict(position="rope"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_compiled_block_is_the_blocks_modules_to_rounding(variant, monkeypatch):
    model = lm(**VARIANTS[variant])
    monkeypatch.delenv(kernels.ENV, raising=False)
    loss, grads = loss_and_grads(model)
    assert ops(model).get("block.block_cpu") == "kernel", kernels.paths_used(model)
    assert_the_portable_paths_agree(model, loss, grads, monkeypatch)


@pytest.mark.parametrize("variant, ahead", [("plain", 0), ("conv qkv", 0), ("conv v, centred", 1),
                                            ("conv q and k, centred, kernel 5", 2), ("rope", 0)])
def test_the_compiled_block_is_deterministic_and_sees_no_further_ahead_than_its_convolutions(variant, ahead,
                                                                                             monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    model = lm(n_layers=1, **VARIANTS[variant])
    block = model.layers[0]
    assert block.mixer.lookahead == ahead
    params = _block_params(block.fused["conv"])(block)
    x = torch.randn(2, 13, 16, generator=torch.Generator().manual_seed(2), requires_grad=True)
    y1 = block_cpu.block(x, params, **block.fused)
    (g1,) = torch.autograd.grad(y1.square().sum(), x)
    y2 = block_cpu.block(x, params, **block.fused)
    (g2,) = torch.autograd.grad(y2.square().sum(), x)
    assert torch.equal(y1, y2) and torch.equal(g1, g2)
    t = 7
    x2 = x.detach().clone()
    x2[:, t] += torch.randn(16, generator=torch.Generator().manual_seed(3))  # not a constant: the norm removes that
    y3 = block_cpu.block(x2, params, **block.fused)
    assert torch.equal(y3[:, :t - ahead], y1[:, :t - ahead].detach())
    assert not torch.equal(y3[:, t - ahead], y1[:, t - ahead].detach())


@pytest.mark.parametrize("kw, why", [
    (dict(mlp=False), "no MLP"),
    (dict(mixer="mamba", mixer_kwargs={}), "another mixer"),
])
def test_blocks_the_kernel_does_not_compute_keep_their_modules(kw, why, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    model = lm(**kw)
    model.eval()  # no dropout in the forward pass: the block's choice is the mixer's options', not the mode's
    with torch.no_grad():
        model.loss(*batch())
    assert "block.block_cpu" not in ops(model), (why, kernels.paths_used(model))
    assert all(b.fused is None for b in model.layers), why


DECLINED = {  # blocks the compiled block does not compute: its mixer's options or the block's residual
    "dropout": (dict(mixer_kwargs={"num_heads": 2, "dropout": 0.1}), "dropout 0.1 (the compiled block has none)"),
    "parallel residual": (dict(residual="parallel"), "residual parallel (the compiled block adds its MLP after its mixer)"),
    "partial rotary": (dict(position="rope", mixer_kwargs={"num_heads": 2, "rotary_fraction": 0.25}),
                       "rotary fraction 0.25 (the compiled block turns every channel of a head)"),
    "GPT-NeoX": (dict(position="rope", residual="parallel", tied_head=False,
                      mixer_kwargs={"num_heads": 2, "rotary_fraction": 0.25}), "residual parallel"),
}


@pytest.mark.parametrize("variant", DECLINED)
def test_a_declined_block_runs_its_modules_with_their_kernels_and_the_record_says_why(variant, monkeypatch):
    """The compiled block declines what it does not compute; the record names why, and the block's
    own modules run with their own fused kernels (attention_cpu, mlp_cpu): the same model as every
    portable path (ARREPRO_KERNELS=0), outputs and gradients, at an awkward length."""
    kw, why = DECLINED[variant]
    monkeypatch.delenv(kernels.ENV, raising=False)
    model = lm(**kw)
    model.eval()  # (dropout off: the decline is the options', not the mode's; the comparison is exact arithmetic)
    loss, grads = loss_and_grads(model)
    record = next(p for p in kernels.paths_used(model) if p["op"] == "block.block_cpu")
    assert record["path"] == "portable" and why in record["reason"], record
    assert record["reason"].endswith(": the block's own modules"), record
    assert ops(model).get("attention.attention_cpu") == "kernel" and ops(model).get("mlp.mlp_cpu") == "kernel", \
        kernels.paths_used(model)
    assert_the_portable_paths_agree(model, loss, grads, monkeypatch)


def test_a_fp64_model_falls_back_and_says_why(monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    model = lm().double()
    model.loss(*batch())
    record = next(p for p in kernels.paths_used(model) if p["op"] == "block.block_cpu")
    assert record["path"] == "portable" and "fp32" in record["reason"], record


@pytest.mark.parametrize("mixer, kw", [("hyena", {}), ("deltanet", {"num_heads": 2})])
def test_an_mlp_outside_a_compiled_block_runs_fused_to_rounding(mixer, kw, monkeypatch):
    """The MLP of a block that is not compiled whole (another mixer's) runs as mlp_cpu: recorded, and
    the same model as its layers with ATen's exact GELU to rounding; in fp64 it falls back and says why."""
    model = lm(mixer=mixer, mixer_kwargs=kw, position="none")
    monkeypatch.delenv(kernels.ENV, raising=False)
    loss, grads = loss_and_grads(model)
    assert ops(model).get("mlp.mlp_cpu") == "kernel" and "block.block_cpu" not in ops(model), kernels.paths_used(model)
    assert_the_portable_paths_agree(model, loss, grads, monkeypatch)
    monkeypatch.delenv(kernels.ENV)
    model = lm(mixer=mixer, mixer_kwargs=kw, position="none").double()
    model.loss(*batch())
    record = next(p for p in kernels.paths_used(model) if p["op"] == "mlp.mlp_cpu")
    assert record["path"] == "portable" and "fp32" in record["reason"], record
