"""Every fused CPU kernel is checked against its module's portable path at what a cell runs
(arrepro.models.cpu_kernels.check): the module itself, with its
options, at the call's shape (its length, its width), a small batch, an fp64 reference, output and
every gradient, at the module's first call. Issue 55: the kernels checked themselves only once per
process at one small shape with default arguments, so an edit of a portable path that matters only
at a cell's shape (Mamba's, halving its output beyond length 16) was trained as the unedited
kernel, to the last bit, and recorded as "self-checked"."""
import pytest
import torch

from arrepro.models import LanguageModel, kernels
from arrepro.models.mixers.attention import Attention
from arrepro.models.mixers.deltanet import DeltaNet
from arrepro.models.mixers.hyena import Hyena
from arrepro.models.mixers.mamba import Mamba
from arrepro.models.mixers.mamba2 import Mamba2
from arrepro.models.ops import MLP, Linear, ShortConv

if kernels.installed("mamba_cpu") is None:  # (not importorskip: numba must be set up by arrepro.models.cpu_kernels first)
    pytest.skip("numba not installed", allow_module_level=True)

MAMBA = {"mixer": "mamba", "mlp": False, "mixer_kwargs": {"d_state": 16, "d_conv": 4, "expand": 2}}
ATTENTION = {"mixer": "attention", "mlp": True, "position": "learned", "mixer_kwargs": {"num_heads": 1}}
HYENA = {"mixer": "hyena", "mlp": True, "mixer_kwargs": {"order": 2, "filter_order": 64, "short_filter": 3}}


def longer_than_16(x):  # an edit that matters only beyond every self-check's lengths (at most 11)
    return x.dim() == 3 and x.shape[1] > 16


def always(x):
    return True


# (the op whose record says what ran, the model, the class whose portable path is edited, where the edit
# matters); Hyena's portable path and the path it falls back to share ``_mix``, which is edited
CASES = [
    ("mamba.mamba_cpu", MAMBA, Mamba, longer_than_16),
    ("mamba2.mamba2_cpu", {"mixer": "mamba2", "mlp": False, "mixer_kwargs": {"d_state": 128, "d_conv": 4, "headdim": 64}},
     Mamba2, longer_than_16),
    ("deltanet.deltanet_cpu", {"mixer": "deltanet", "mlp": True, "mixer_kwargs": {"num_heads": 2, "conv_size": 4}},
     DeltaNet, longer_than_16),
    ("hyena.hyena_cpu", HYENA, (Hyena, "_mix"), longer_than_16),
    # the compiled block's reference is the block's modules on their portable paths: attention's among them
    ("block.block_cpu", ATTENTION, Attention, longer_than_16),
    ("attention.attention_cpu", {**ATTENTION, "mlp": False}, Attention, longer_than_16),
    ("mlp.mlp_cpu", HYENA, MLP, always),  # (Hyena's blocks run their MLP on its own)
    # (Zoology's Based: its gated convolution layers ask for the short conv's kernel themselves)
    ("short_conv.short_conv_cpu", {"mixer": "based_hybrid", "mlp": False, "mixer_kwargs": {"feature_dim": 8, "num_heads": 1,
                                                                                           "conv_size": 3}},
     ShortConv, longer_than_16),
    ("linear.linear_cpu", {"mixer": "h3", "mlp": False, "mixer_kwargs": {"d_state": 32, "head_dim": 2}}, Linear, always),
]


def fresh_checks(monkeypatch):
    """No module checked yet in this process: the test's cells check theirs afresh."""
    try:
        from arrepro.models.cpu_kernels import check
    except ImportError:  # (before issue 55's fix there was no such check)
        return
    monkeypatch.setattr(check, "_checks", {})


def step(model_def: dict, width: int = 48, length: int = 32):
    """A model of ``model_def`` (2 layers) after one training step's forward and backward: its loss,
    its parameters' gradients, its kernel paths by (op, path)."""
    torch.manual_seed(0)
    m = LanguageModel(vocab_size=64, d_model=width, n_layers=2, max_len=length, mixer=model_def["mixer"],
                      mixer_kwargs=model_def["mixer_kwargs"], mlp=model_def["mlp"], position=model_def.get("position", "none"))
    x = torch.randint(0, 64, (8, length), generator=torch.Generator().manual_seed(1))
    loss, _, _ = m.loss(x, x)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in m.parameters()], {(p["op"], p["path"]): p for p in kernels.paths_used(m)}


@pytest.mark.parametrize("op, model_def, cls, where", CASES, ids=[c[0] for c in CASES])
def test_an_edit_of_a_portable_path_that_matters_at_the_cells_shape_is_what_trains(monkeypatch, op, model_def, cls, where):
    monkeypatch.delenv(kernels.ENV, raising=False)
    width = 32 if model_def["mixer"] == "mamba2" else 48
    cls, attr = cls if isinstance(cls, tuple) else (cls, "forward_portable")
    unedited = getattr(cls, attr)

    def edited(self, x, *args):
        y = unedited(self, x, *args)
        return y * 0.5 if where(x) else y

    with monkeypatch.context() as patch:
        patch.setattr(cls, attr, edited)
        fresh_checks(patch)
        loss_edited, _, paths = step(model_def, width)
    fresh_checks(monkeypatch)
    loss, _, paths_unedited = step(model_def, width)
    assert not torch.equal(loss, loss_edited)  # the edit trains
    assert (op, "portable") in paths, paths
    assert (op, "kernel") not in paths or cls is Linear, paths  # (the tied head, unedited, is a linear op too)
    reason = paths[op, "portable"]["reason"]
    # the kernel's own self-check still passes (the edit is beyond its shapes); the cell's check does not
    assert "self-checked" in reason and "against its portable path at" in reason and "off by" in reason, reason
    assert reason.endswith(kernels.KERNELS[op.split(".")[1]].fallback), reason
    # unedited, the kernel runs, and its record says what it was checked at
    assert (op, "kernel") in paths_unedited, paths_unedited
    assert "matches its portable path at this call's shape" in paths_unedited[op, "kernel"]["reason"], paths_unedited


def test_the_issues_mamba_edit_no_longer_trains_the_unedited_kernel(monkeypatch):
    """The issue's probe: Mamba's portable path halving its output beyond length 16; a demo-shaped
    model (width 48, length 32) gave the output of the unedited kernel to the last bit. Now its
    output is the edited portable path's (as with the kernels off), and its record says why."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    unedited = Mamba.forward_portable
    monkeypatch.setattr(Mamba, "forward_portable",
                        lambda self, u, *a: unedited(self, u, *a) * (0.5 if u.shape[1] > 16 else 1.0))
    fresh_checks(monkeypatch)
    torch.manual_seed(0)
    m = LanguageModel(vocab_size=64, d_model=48, n_layers=2, max_len=32, mixer="mamba", mixer_kwargs=MAMBA["mixer_kwargs"],
                      mlp=False)
    x = torch.randint(0, 64, (4, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m(x)
        rec = {(p["op"], p["path"]): p for p in kernels.paths_used(m)}
        monkeypatch.setenv(kernels.ENV, "0")
        y_portable = m(x)
    torch.testing.assert_close(y, y_portable, rtol=1e-4, atol=1e-5)
    assert ("mamba.mamba_cpu", "kernel") not in rec, rec
    reason = rec["mamba.mamba_cpu", "portable"]["reason"]
    assert "self-checked" in reason and "Mamba's fused kernel against its portable path at 2 x 32 x 48" in reason, reason


@pytest.mark.parametrize("model_def", [MAMBA, ATTENTION, HYENA], ids=["mamba", "attention", "hyena"])
def test_the_check_changes_no_number_of_the_cell(monkeypatch, model_def):
    """The check draws from a generator of its own and runs on copies: a step with it (the first of
    a process) has the loss, gradients and random state of the same step without it (checks done)."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    fresh_checks(monkeypatch)
    with_check = step(model_def)
    state = torch.get_rng_state()
    without = step(model_def)  # (the checks of these configurations and shapes are done: none runs)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(with_check[0], without[0])
    assert all(torch.equal(a, b) for a, b in zip(with_check[1], without[1]))
