"""The paper's Figs. 8-10 are drawn from the modules the trainer builds (arrepro.report.blocks): a model
without conv1d has no conv1d box, one without the gate no gate branch, S6 + MLP an MLP; and the
boxes follow the built modules, not the config's names (a module removed after building is not
drawn). Models built at width 16 on the CPU: about a second in all."""
import pytest
import torch

from arrepro.report import blocks
from arrepro.config.grid import Grid
from arrepro.train.prepare import build_model

WIDTH = 16


def built(config, name: str):
    torch.manual_seed(0)
    spec = {"model_def": config["models"][name], "width": WIDTH, "layers": 1, "recipe_def": {}}
    return build_model(spec, vocab_size=32, max_len=16)


def keys(model) -> list[str]:
    return [b.key for b in blocks.block_boxes(model)]


@pytest.mark.parametrize("name", list(blocks.PAPER_FIGURES))
def test_each_box_is_a_module_the_model_has(config, name):
    model = built(config, name)
    mixer = model.layers[0].mixer
    k = keys(model)
    assert ("conv1d" in k) == (mixer.conv1d is not None) == config["models"][name]["mixer_kwargs"].get("conv", True)
    assert ("silu_z" in k and "mul" in k) == config["models"][name]["mixer_kwargs"].get("gate", True)
    assert ("mlp" in k and "norm2" in k) == config["models"][name]["mlp"]
    modules = dict(model.named_modules())
    for b in blocks.block_boxes(model):
        if b.module and "{" not in b.module:
            assert b.module in modules, b
            assert b.params == sum(p.numel() for p in modules[b.module].parameters()), b
    # every parameter of the layer is in a box
    assert sum(b.params for b in blocks.block_boxes(model)) == sum(p.numel() for p in model.layers[0].parameters())


def test_the_boxes_follow_the_modules_not_the_names(config):
    """Mamba built, then its conv1d and its MLP-less block changed: the diagram changes with them."""
    model = built(config, "mamba")
    assert "conv1d" in keys(model) and "mlp" not in keys(model)
    model.layers[0].mixer.conv1d = None
    assert "conv1d" not in keys(model)
    with_mlp = built(config, "s6_mlp")
    model.layers[0].mlp, model.layers[0].norm2 = with_mlp.layers[0].mlp, with_mlp.layers[0].norm2
    assert "mlp" in keys(model)


def test_the_paper_scale_draws_figs_8_to_10_and_the_demo_what_it_trains(config):
    assert list(blocks.block_models(Grid(config, "paper"))) == ["mamba", "s6_mlp", "mamba_noconv", "mamba_nogate"]
    paper = blocks.block_models(Grid(config, "paper"))
    assert len({(s["width"], s["layers"]) for s in paper.values()}) == 1  # one setting: the counts compare
    demo = set(blocks.block_models(Grid(config, "demo")))
    trained = {m for e in Grid(config, "demo").experiments.values() for g in e["grids"] for m in g["models"]}
    assert demo == set(blocks.PAPER_FIGURES) & trained
    assert not blocks.block_models(Grid(config, "tiny"))


def test_the_figure_renders_from_the_structure_file(tmp_path, config):
    grid = Grid(config, "demo")
    specs = {m: {**s, "width": WIDTH} for m, s in blocks.specs(grid).items()}
    blocks.write_structure(specs, tmp_path / "blocks.json")
    blocks.render(tmp_path / "blocks.json", "t", "demo", [tmp_path / "b.png"])
    assert (tmp_path / "b.png").stat().st_size > 10_000
