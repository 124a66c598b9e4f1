"""The copy task's Transformer as Jelassi et al. ran it: Hugging Face's GPTNeoXForCausalLM with
transformers 4.37.2's class defaults (sjelassi/transformers_ssm_copy synthetic_exps/model_utils.py:15-23
sets only the sizes and the vocabulary). Three of those defaults are model switches here, each
checked against the arithmetic GPT-NeoX states (models/gpt_neox/modeling_gpt_neox.py), written out
by hand below: a parallel residual (``residual: parallel``), rotary positions on the first quarter
of each head's channels (the attention mixer's ``rotary_fraction``) and an LM head of its own
(``tied_head: false``). Outputs and gradients at an awkward length (13), causality of the whole
model, and the config's model built with all three."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arrepro.models import LanguageModel, get_mixer, kernels

from conftest import config_models

V, D, L = 40, 32, 13


def lm(**kw) -> LanguageModel:
    torch.manual_seed(0)
    args = dict(vocab_size=V, d_model=D, n_layers=2, max_len=L, mixer="attention", mixer_kwargs={"num_heads": 2},
                position="rope")
    return LanguageModel(**{**args, **kw})


def neox_rotary(t: torch.Tensor, r: int, base: float = 10000.0) -> torch.Tensor:
    """GPT-NeoX's rotary positions on t (B, H, L, dh), by hand: the first r channels turned by the
    angles position * base^(-2i / r), i < r / 2, each repeated twice, in fp32 (cos_cached, sin_cached
    of ``GPTNeoXRotaryEmbedding(rotary_ndims)``, :535-551); t_rot cos + rotate_half(t_rot) sin with
    rotate_half(u) = (-u[r/2:], u[:r/2]) (:613-617, 644-645); the other channels as they were (:190-202)."""
    freq = 1.0 / base ** (torch.arange(0, r, 2).float() / r)
    ang = torch.outer(torch.arange(t.shape[2]).float(), freq)
    cos, sin = torch.cat([ang, ang], -1).cos().to(t.dtype), torch.cat([ang, ang], -1).sin().to(t.dtype)
    u = t[..., :r]
    half = torch.cat([-u[..., r // 2:], u[..., :r // 2]], -1)
    return torch.cat([u * cos + half * sin, t[..., r:]], -1)


def _heads(proj, x, h):
    return proj(x).unflatten(-1, (h, -1)).transpose(1, 2)


def test_attention_partial_rotary_turns_the_first_quarter_of_each_head_as_gpt_neox():
    """rotary_fraction 0.25 at head width 32: channels 0-7 of each head's queries and keys turned
    as GPT-NeoX turns them (its frequencies span those 8 channels), channels 8-31 untouched."""
    torch.manual_seed(0)
    m = get_mixer("attention")(64, max_len=L, num_heads=2, rope=True, rotary_fraction=0.25).double()
    assert m.rotary_dims == 8
    x = torch.randn(2, L, 64, dtype=torch.float64)
    q, k, _ = m._qkv(x, "forward_portable")
    q0, k0 = _heads(m.q_proj, x, 2), _heads(m.k_proj, x, 2)
    assert torch.equal(q[..., 8:], q0[..., 8:]) and torch.equal(k[..., 8:], k0[..., 8:])
    torch.testing.assert_close(q, neox_rotary(q0, 8), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k, neox_rotary(k0, 8), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(q[:, :, 1:, :8], q0[:, :, 1:, :8])  # turned past position 0
    # the full reading turns every channel (its frequencies span the head): not the same positions
    full = get_mixer("attention")(64, max_len=L, num_heads=2, rope=True)
    full.load_state_dict(m.float().state_dict())
    qf, _, _ = full._qkv(x.float(), "forward_portable")
    assert not torch.allclose(qf[..., 8:], q0.float()[..., 8:])


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_attention_partial_rotary_paths_agree_outputs_and_gradients(fraction, monkeypatch):
    """The portable path against the explicit masked softmax in fp64 (1e-10), and the fused CPU
    attention (the path ``forward`` takes on the CPU, recorded) against the portable one in fp32,
    outputs and the gradients of the input and every parameter."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    torch.manual_seed(0)
    m = get_mixer("attention")(D, max_len=L, num_heads=2, rope=True, rotary_fraction=fraction)
    for dtype, path, ref, tol in ((torch.float64, "forward_portable", "forward_reference", 1e-10),
                                  (torch.float32, "forward", "forward_portable", 1e-5)):
        m = m.to(dtype)
        x = torch.randn(3, L, D, dtype=dtype, requires_grad=True)
        args = [x, *m.parameters()]
        y, y_ref = getattr(m, path)(x), getattr(m, ref)(x)
        g = torch.autograd.grad(y.square().sum(), args)
        g_ref = torch.autograd.grad(y_ref.square().sum(), args)
        torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
        for name, a, b in zip(["input", *(n for n, _ in m.named_parameters())], g, g_ref):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, b.abs().max().item()), msg=name)
    assert {p["op"]: p["path"] for p in kernels.paths_used(m)}.get("attention.attention_cpu") == "kernel"


def _by_hand(block, x: torch.Tensor, parallel: bool) -> torch.Tensor:
    """GPT-NeoX's layer (:701-713): parallel, x + attn(LN1 x) + mlp(LN2 x); sequential, x1 = x +
    attn(LN1 x), then x1 + mlp(LN2 x1). The mixer by its explicit masked softmax, the MLP by its layers."""
    ln = lambda n, t: F.layer_norm(t, (t.shape[-1],), n.weight, n.bias, n.eps)  # noqa: E731
    mlp = lambda t: F.linear(F.gelu(F.linear(t, block.mlp.fc1.weight, block.mlp.fc1.bias)),  # noqa: E731
                             block.mlp.out_proj.weight, block.mlp.out_proj.bias)
    attn = block.mixer.forward_reference(ln(block.norm1, x))
    if parallel:
        return x + attn + mlp(ln(block.norm2, x))
    x1 = x + attn
    return x1 + mlp(ln(block.norm2, x1))


def test_a_parallel_block_is_its_input_plus_attention_plus_mlp_and_not_the_sequential_one():
    """In fp64, outputs and gradients (input and every parameter) of the block against GPT-NeoX's
    formula by hand, on every row and on a mask of kept rows (the last block's); the same weights
    in a sequential block compute the sequential formula, and the two differ. (Weights of order 0.3:
    at init the attention branch is too small for LN2 to tell x from x + attn by much.)"""
    par = lm(residual="parallel", mixer_kwargs={"num_heads": 2, "rotary_fraction": 0.25}).double()
    seq = lm(mixer_kwargs={"num_heads": 2, "rotary_fraction": 0.25}).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in par.parameters():
            p.copy_(torch.randn(p.shape, dtype=p.dtype, generator=g) * 0.3)
    seq.load_state_dict(par.state_dict())
    x = torch.randn(3, L, D, dtype=torch.float64, generator=g, requires_grad=True)
    rows = torch.rand(3, L, generator=g) < 0.4
    outs = {}
    for model, parallel in ((par, True), (seq, False)):
        block = model.layers[0]
        assert block.residual == ("parallel" if parallel else "sequential")
        args = [x, *block.parameters()]
        for keep in (None, rows):
            y = block(x, keep)
            ref = _by_hand(block, x, parallel)
            ref = ref if keep is None else ref[keep]
            torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
            gy = torch.randn(y.shape, dtype=torch.float64, generator=g)
            for a, b in zip(torch.autograd.grad(y, args, gy), torch.autograd.grad(ref, args, gy)):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        outs[parallel] = block(x).detach()
    assert (outs[True] - outs[False]).abs().max() > 1e-3


def test_a_parallel_residual_needs_the_mlp():
    with pytest.raises(ValueError, match="parallel residual .* needs mlp"):
        lm(residual="parallel", mlp=False)
    with pytest.raises(ValueError, match="residual must be one of"):
        lm(residual="parralel")


def test_an_untied_head_is_a_linear_of_its_own_trained_and_counted():
    """tied_head false: the head is its own (V, D) weight without bias (GPT-NeoX's embed_out,
    :966), drawn as every Linear (N(0, 0.02), :89-92), the logits its product with the hidden states on
    the full head and on the loss's labelled rows alike; it gets gradients and an optimiser step
    moves it; it adds V x D parameters to the tied model's."""
    tied, untied = lm(), lm(tied_head=False)
    params = dict(untied.named_parameters())
    assert params["head.weight"].shape == (V, D) and "head.bias" not in params
    assert params["head.weight"].data_ptr() != untied.embed.weight.data_ptr()
    assert untied.num_parameters() - tied.num_parameters() == V * D == params["head.weight"].numel()
    assert params["head.weight"].std().item() == pytest.approx(0.02, rel=0.1)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, V, (3, L), generator=g), torch.randint(0, V, (3, L), generator=g)
    y[:, :5] = -100
    with torch.no_grad():
        logits = untied(x)
        torch.testing.assert_close(logits, untied.hidden(x) @ params["head.weight"].T, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(logits, untied.hidden(x) @ untied.embed.weight.T)
        labelled, target = untied.labelled_logits(x, y)
        torch.testing.assert_close(labelled, logits[y != -100], rtol=1e-5, atol=1e-6)
    opt = torch.optim.AdamW(untied.parameters(), lr=1e-2)
    before = params["head.weight"].detach().clone()
    loss, _, _ = untied.loss(x, y)
    loss.backward()
    grad = params["head.weight"].grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 0
    assert untied.embed.weight.grad.abs().max() > 0
    opt.step()
    assert not torch.equal(params["head.weight"].detach(), before)


def test_the_gpt_neox_model_is_causal():
    """Every switch at once, at head width 16 (4 channels turned): changing the tokens after
    position t never changes the logits at or before t, on the full head and the loss's rows."""
    model = lm(residual="parallel", tied_head=False, mixer_kwargs={"num_heads": 2, "rotary_fraction": 0.25}).eval()
    assert model.layers[0].mixer.rotary_dims == 4
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, V, (2, L), generator=g)
    with torch.no_grad():
        base = model(x)
        for t in (0, 5, L - 2):
            x2 = x.clone()
            x2[:, t + 1:] = torch.randint(0, V, (2, L - t - 1), generator=g)
            out = model(x2)
            assert torch.equal(out[:, :t + 1], base[:, :t + 1]), f"position {t} sees the future"
            assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])
            labels = torch.full((2, L), -100)
            labels[:, :t + 1] = 0
            assert torch.equal(model.labelled_logits(x2, labels)[0], model.labelled_logits(x, labels)[0])


def test_the_configs_copy_transformer_is_gpt_neox():
    """config.yaml's transformer_rope_jelassi at the paper's width (one layer of its 12): a
    parallel residual (use_parallel_residual True), 16 of each head's 64 channels turned
    (int(64 * rotary_pct 0.25), :113), an untied head without bias (tie_word_embeddings False)."""
    from arrepro.models.backbone import model_kwargs

    model = LanguageModel(vocab_size=30, d_model=1024, n_layers=1, max_len=220,
                          **model_kwargs(config_models()["transformer_rope_jelassi"]))
    block = model.layers[0]
    assert block.residual == "parallel"
    assert (block.mixer.h, block.mixer.dh, block.mixer.rotary_dims) == (16, 64, 16)
    assert not model.tied_head and model.head.weight.shape == (30, 1024) and model.head.bias is None
