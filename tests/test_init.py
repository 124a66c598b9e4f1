"""The first weights and the optimiser's groups by the recipe's rules (arrepro.models.init,
LanguageModel.configure_optimizer), the blocks' norms, the identity MLP and the embedding dropout."""
import math

import pytest
import torch
from torch import nn

from arrepro.models import LanguageModel
from arrepro.train.prepare import TrainError, check_spec

MAMBA = dict(mixer="mamba", mixer_kwargs=dict(d_state=16, d_conv=4, expand=2), mlp=False, norm="rms")


def model(init="zoology", n_layers=2, d=64, **kw):
    torch.manual_seed(0)
    args = dict(vocab_size=128, d_model=d, n_layers=n_layers, max_len=32, mixer="attention",
                mixer_kwargs={"num_heads": 1}, init=init, embed_dropout=0.1)
    return LanguageModel(**{**args, **kw})


def _std(p) -> float:
    return float(p.detach().std())


def test_mambas_blocks_take_mamba_ssms_rule_under_the_sources():
    m = model(**MAMBA)
    mixer, E = m.layers[0].mixer, 2 * 64
    for lin, fan_in in ((mixer.in_proj, 64), (mixer.x_proj, E)):  # PyTorch's default: U(+-1/sqrt(fan_in))
        w = lin.weight.detach()
        assert abs(_std(w) * math.sqrt(3 * fan_in) - 1) < 0.05 and float(w.abs().max()) <= 1 / math.sqrt(fan_in) + 1e-7
    out = mixer.out_proj.weight.detach()  # kaiming-uniform / sqrt(n_layers)
    assert abs(_std(out) * math.sqrt(3 * E * 2) - 1) < 0.05
    assert float(out.abs().max()) <= 1 / math.sqrt(E * 2) + 1e-7
    # its own parameters: dt's bias is softplus^-1 of dt in [1e-3, 0.1], not zeroed
    dt = nn.functional.softplus(mixer.dt_proj.bias.detach())
    assert float(dt.min()) >= 1e-3 * 0.999 and float(dt.max()) <= 0.1 * 1.001
    # the earlier rule: N(0, 0.02) there too, out_proj N(0, 0.02 / sqrt(2 n))
    old = model(init="normal", **MAMBA).layers[0].mixer
    assert abs(_std(old.in_proj.weight) / 0.02 - 1) < 0.05
    assert abs(_std(old.out_proj.weight) / (0.02 / 2) - 1) < 0.05


@pytest.mark.parametrize("mixer, kwargs, rescaled", [
    ("attention", {"num_heads": 1}, True),
    ("hyena", {"order": 2, "filter_order": 64, "short_filter": 3}, True),
    ("deltanet", {"num_heads": 2, "conv_size": 4}, False),  # Zoology's o_proj escapes its name test
    ("rwkv", {}, False),
    ("h3", {"d_state": "seq_len", "head_dim": 2}, False),
])
def test_zoologys_rescale_finds_an_output_by_its_sources_name(mixer, kwargs, rescaled):
    n = 2
    for init, want in (("zoology", 0.02 / math.sqrt(2 * n) if rescaled else 0.02), ("jelassi", 0.02),
                       ("normal", 0.02 / math.sqrt(2 * n))):
        block = model(init=init, n_layers=n, mixer=mixer, mixer_kwargs=kwargs).layers[0]
        assert abs(_std(block.mixer.out_proj.weight) / want - 1) < 0.08, (init, mixer)
        want_mlp = 0.02 if init == "jelassi" else 0.02 / math.sqrt(2 * n)
        assert abs(_std(block.mlp.out_proj.weight) / want_mlp - 1) < 0.05, (init, mixer)
        assert all(float(m.bias.detach().abs().max()) == 0 for m in block.modules() if isinstance(m, nn.Linear) and m.bias is not None)


def test_an_unknown_rule_is_refused_naming_its_key():
    with pytest.raises(ValueError, match="init must be one of"):
        model(init="xavier")
    spec = {"task": "t", "model": "m", "recipe": "r", "model_def": {"mixer": "attention"}, "width": 8, "layers": 1,
            "batch_size": 4, "seed": 0, "lr": 1e-3,
            "recipe_def": {"epochs": 1, "warmup_frac": 0.1, "weight_decay": 0.1, "schedule": "cosine", "init": "xavier"}}
    with pytest.raises(TrainError, match="recipe_def.init"):
        check_spec(spec)
    spec["recipe_def"].update(init="zoology", decay="norms")
    with pytest.raises(TrainError, match="recipe_def.decay"):
        check_spec(spec)


def test_weight_decay_reaches_every_parameter_or_only_the_matrices():
    m = model(**MAMBA)
    groups = m.configure_optimizer(lr=1e-3, weight_decay=0.1).param_groups
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.1
    assert sum(p.numel() for p in groups[0]["params"]) == m.num_parameters()
    decay = {id(p): g["weight_decay"] for g in m.configure_optimizer(lr=1e-3, weight_decay=0.1, decay="matrices").param_groups
             for p in g["params"]}
    named = dict(m.named_parameters())
    assert decay[id(named["embed.weight"])] == 0.0 and decay[id(named["layers.0.mixer.D"])] == 0.0
    assert decay[id(named["layers.0.norm1.weight"])] == 0.0
    assert decay[id(named["layers.0.mixer.in_proj.weight"])] == 0.1 and decay[id(named["layers.0.mixer.A_log"])] == 0.1


def test_zoologys_mamba_block_has_rms_norms_and_no_dropout():
    m = model(**MAMBA)
    assert isinstance(m.layers[0].norm1, nn.RMSNorm) and m.layers[0].norm1.eps == 1e-5
    assert not any(n.endswith("norm1.bias") for n, _ in m.named_parameters())
    assert isinstance(m.norm_f, nn.LayerNorm)  # Zoology's ln_f
    assert m.drop.p == 0.0 and model().drop.p == 0.1  # the dropout lives in Zoology's TransformerBlock
    with pytest.raises(ValueError, match="norm must be one of"):
        model(norm="batch")


def test_the_identity_mlp_keeps_its_norm_and_residual():
    """Zoology's TransformerBlock with state_mixer = Identity adds LN2(x) to the stream."""
    m = model(mlp="identity", init="zoology").eval()
    block = m.layers[0]
    with torch.no_grad():
        block.norm2.weight.uniform_(0.5, 1.5)  # an affine norm that is not the identity
        x = torch.randn(2, 7, 64)
        h = x + block.mixer(block.norm1(x))
        assert torch.allclose(block(x), h + block.norm2(h), atol=1e-6)
    assert block.fused is None  # the compiled block is a block with an MLP
    plain = model(mlp=False).layers[0]
    assert plain.norm2 is None and plain.mlp is None
