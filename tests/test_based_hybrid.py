"""Zoology's Based hybrid (the Fig. 2/11 replication's "based"): layers alternate BaseConv and Based."""
import torch

from arrepro.models.backbone import LanguageModel
from arrepro.models.mixers.based_hybrid import BasedHybrid


def test_layers_alternate_and_parameters_match_the_formula():
    lm = LanguageModel(vocab_size=64, d_model=32, n_layers=4, max_len=24, mixer="based_hybrid",
                       mixer_kwargs={"feature_dim": 8}, mlp=False)
    kinds = [b.mixer.kind for b in lm.layers]
    assert kinds == ["base_conv", "based", "base_conv", "based"]
    for i, b in enumerate(lm.layers):
        n = sum(p.numel() for p in b.mixer.parameters())
        assert n == BasedHybrid.expected_parameters(32, max_len=24, layer_idx=i, feature_dim=8)
    assert not any("conv" in name for name, _ in lm.layers[1].mixer.named_parameters())  # Based has none of its own


def test_both_layers_are_causal_and_match_their_reference():
    torch.manual_seed(0)
    for idx in (0, 1):
        m = BasedHybrid(16, max_len=12, layer_idx=idx).double()
        x = torch.randn(2, 12, 16, dtype=torch.double)
        y = m.forward_portable(x)
        assert torch.allclose(y, m.forward_reference(x), atol=1e-8)
        x2 = x.clone()
        x2[:, 7:] += 1.0  # a change at t >= 7 leaves outputs before 7 alone
        assert torch.allclose(m.forward_portable(x2)[:, :7], y[:, :7], atol=1e-10)
    m = BasedHybrid(16, max_len=12, layer_idx=0)
    x = torch.randn(1, 12, 16)
    assert torch.allclose(m(x), m.conv(x) * m.projection(x) + x)  # Zoology's BaseConv: conv(u) * W u + u
