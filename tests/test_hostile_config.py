"""A hostile or broken config.yaml is refused before any job starts, with a message that names the
key (issue 12): names that would reach a shell or leave results/, non-finite numbers, unknown
mixer arguments, impossible tasks, impossible batches. Snakemake runs on a copy of the workflow
(tiny scale); a few checks of grid.py's own guards run without the schema in front of them."""
import copy
import re
import subprocess

import pytest
import yaml

from arrepro.config.catalogue import mixer_arguments
from arrepro.config.checks import check_path, load_grid
from arrepro.config.grid import ConfigError, Grid, one_of
from test_workflow import ROOT, SNAKEMAKE, edit_config, smk
from workflow_copy import copy_workflow


def fig2(c):
    return c["scales"]["tiny"]["experiments"]["fig2"]


def model_named(name):
    def edit(c):
        c["models"][name] = c["models"]["attention"]
        fig2(c)["grids"][0]["models"] = [name]
    return edit


def recipe_named(name):
    def edit(c):
        c["scales"]["tiny"]["recipes"][name] = c["scales"]["tiny"]["recipes"].pop("tiny")
        fig2(c)["grids"][0]["recipe"] = name
    return edit


def task_named(name):
    def edit(c):
        c["scales"]["tiny"]["tasks"][name] = c["scales"]["tiny"]["tasks"].pop("L16")
        fig2(c)["grids"][0]["tasks"] = [name]
    return edit


def experiment_named(name):
    def edit(c):
        c["scales"]["tiny"]["experiments"][name] = c["scales"]["tiny"]["experiments"].pop("fig2")
    return edit


def refused(wd, p, *keys):
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    for k in keys:
        assert k in out, f"{k!r} not in the message:\n{out[-3000:]}"
    assert "Job stats" not in p.stdout and not (wd / "results").exists(), "a job was planned or ran"


# names that would run `touch X` in an unquoted shell word: a real run, then no X anywhere
@pytest.mark.parametrize("make, name, key", [
    (model_named, "a;touch X;b", "models"),
    (model_named, "a$(touch X)b", "models"),
    (recipe_named, "t;touch X;x", "recipes"),
    (task_named, "L16;touch X", "tasks"),
])
def test_a_name_with_shell_syntax_is_refused_and_runs_nothing(tmp_path, make, name, key):
    wd = copy_workflow(tmp_path)
    edit_config(wd, make(name))
    p = smk(wd, "--cores", "1", "results/tiny/tables/fig2_cells.csv", "--config", "scale=tiny", check=False)
    refused(wd, p, key, name)
    assert not list(tmp_path.rglob("X"))


# names that would put a path outside results/, or break a command: refused by a dry run
@pytest.mark.parametrize("make, name, key", [
    (recipe_named, "../../tmp/x", "recipes"),
    (experiment_named, "fig../../../../tmp/x", "experiments"),
    (model_named, "my model", "models"),
    (model_named, "it's", "models"),
    (model_named, 'say"hi', "models"),
    (model_named, "-rf", "models"),
    (task_named, "../L16", "tasks"),
])
def test_a_name_that_is_not_a_plain_folder_name_is_refused(tmp_path, make, name, key):
    wd = copy_workflow(tmp_path)
    edit_config(wd, make(name))
    refused(wd, smk(wd, "-n", "--config", "scale=tiny", check=False), key, name)


@pytest.mark.parametrize("edit, keys", [
    # non-finite numbers, anywhere in the config
    (lambda c: fig2(c)["grids"][0].update(lrs=[float("inf")]), ["scales.tiny.experiments.fig2.grids[0].lrs[0]", "inf"]),
    (lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(weight_decay=float("nan")),
     ["scales.tiny.recipes.tiny.weight_decay", "nan"]),
    (lambda c: c["lr_grids"]["demo"].append(float("inf")), ["lr_grids.demo[3]"]),
    (lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(betas=[0.9, float("nan")]),
     ["scales.tiny.recipes.tiny.betas[1]"]),
    # a mixer argument its constructor does not take (attention: its own __init__; gated_deltanet:
    # **kwargs handed to DeltaNet's, in a sibling file)
    (lambda c: c["models"]["attention"]["mixer_kwargs"].update(nmu_heads=1),
     ["models.attention.mixer_kwargs.nmu_heads", "num_heads"]),
    (lambda c: c["models"]["gated_deltanet"]["mixer_kwargs"].update(head_dim=4),
     ["models.gated_deltanet.mixer_kwargs.head_dim", "conv_size"]),
    # tasks the generator cannot make: its own checks (MQARSpec.validate), before the data job
    (lambda c: c["scales"]["tiny"]["tasks"]["L16"].update(num_kv_pairs=5), ["scales.tiny.tasks.L16", "num_kv_pairs"]),
    (lambda c: c["scales"]["tiny"]["tasks"]["L16"].update(vocab_size=16), ["scales.tiny.tasks.L16", "vocab_size"]),
    (lambda c: c["scales"]["tiny"]["tasks"]["L16"].pop("seq_len"), ["'seq_len' is a required property", "L16"]),
    # batches: larger than the training set; no entry for the task's length
    (lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(batch_size=512),
     ["scales.tiny.recipes.tiny.batch_size", "256 training examples"]),
    (lambda c: c["scales"]["tiny"]["recipes"]["tiny"].update(batch_size={8: 64}),
     ["scales.tiny.recipes.tiny.batch_size", "sequence length 16"]),
    # models no job could build (each mixer's REQUIRES; tests/test_model_sizes.py) or hold
    (lambda c: c["models"]["attention"]["mixer_kwargs"].update(num_heads=0),
     ["models.attention.mixer_kwargs: num_heads must be a whole number >= 1 (num_heads=0)"]),
    (lambda c: c["models"]["attention"]["mixer_kwargs"].update(num_heads=3),
     ["scales.tiny.experiments.fig2.grids[0].widths: model 'attention' at width 8: the width must be a multiple "
      "of num_heads (d_model=8, num_heads=3)"]),
    (lambda c: fig2(c)["grids"][0].update(widths=[10 ** 9]),
     ["scales.tiny.experiments.fig2.grids[0].widths: model 'attention' at width 1000000000", "192 EB"]),
    # a parallel residual adds the MLP beside the mixer: without one it is refused (the schema)
    (lambda c: c["models"]["attention"].update(residual="parallel", mlp=False), ["models.attention.mlp: True was expected"]),
])
def test_an_impossible_value_stops_before_any_job_naming_the_key(tmp_path, edit, keys):
    wd = copy_workflow(tmp_path)
    edit_config(wd, edit)
    refused(wd, smk(wd, "-n", "--config", "scale=tiny", check=False), *keys)


# -- grid.py's own guards, with no schema in front of them --------------------------------------

def test_grid_refuses_a_cell_or_output_path_outside_results(config):
    for make, key in ((recipe_named("../../../../tmp/x"), "scales.tiny.experiments.fig2.grids[0]"),
                      (experiment_named("fig../../../../tmp/x"), "scales.tiny.experiments.fig../../../../tmp/x"),
                      (model_named("a b"), "scales.tiny.experiments.fig2.grids[0]")):
        c = copy.deepcopy(config)
        make(c)
        with pytest.raises(ConfigError, match=re.escape(key)):
            load_grid(c, "tiny")


@pytest.mark.parametrize("path", ["results/../x", "/results/x", "results", "results/a b", "results/a/./b",
                                  "results/$(x)", "results/a;b", "results/'a'", "data/x", "results//x"])
def test_check_path_refuses(path):
    with pytest.raises(ConfigError, match="key"):
        check_path(path, "key")


def test_check_path_accepts_the_grids_paths(config):
    for scale in config["scales"]:
        grid = Grid(config, scale)
        for c in grid.all_cells()[:50]:
            assert check_path(c.path, "k") == c.path
    assert check_path("paper/zoology_fig2_readoffs.csv", "k", root=None)


def test_one_of_escapes_names():
    assert re.fullmatch(one_of(["a.b"]), "a.b") and not re.fullmatch(one_of(["a.b"]), "axb")
    assert not re.fullmatch(one_of([]), "")


def test_mixer_arguments_are_the_constructors():
    """The ast reading agrees with the classes' real signatures (where torch is at hand)."""
    import inspect

    from arrepro.models.registry import available_mixers, get_mixer

    for name in available_mixers():
        cls = get_mixer(name)
        params = set(inspect.signature(cls.__init__).parameters) - {"self", "d_model", "max_len", "kwargs"}
        if cls.__init__ is not object.__init__ and "kwargs" in inspect.signature(cls.__init__).parameters:
            params |= set(inspect.signature(cls.__mro__[1].__init__).parameters) - {"self", "d_model", "max_len"}
        assert mixer_arguments(name, str(ROOT)) == params, name


def test_every_configured_model_passes(config):
    for scale in config["scales"]:
        load_grid(yaml.safe_load(yaml.safe_dump(config)), scale)


# -- learning-rate folder names (issue 11): exact, never shared -------------------------------

@pytest.mark.parametrize("lr", [1.0e-3, 1.0004e-3, 3.1623e-3, 0.1 + 0.2, 4.64e-4, 1.0e-5, 2.5, 1 / 3])
def test_a_learning_rates_folder_name_round_trips(lr):
    from arrepro.config.grid import fmt_lr

    assert float(fmt_lr(lr)) == lr


def test_close_learning_rates_get_their_own_cells_and_train_their_own_value(config):
    c = copy.deepcopy(config)
    fig2(c)["grids"][0]["lrs"] = [1.0e-3, 1.0004e-3]
    grid = Grid(c, "tiny")
    cells = grid.experiment_cells("fig2")
    assert len({x.path for x in cells}) == 2
    assert sorted(grid.cell_spec(x.task, x.model, x.width, x.layers, x.recipe, x.lr, x.seed)["lr"] for x in cells) \
        == [1.0e-3, 1.0004e-3]


def test_the_configs_learning_rates_keep_their_folder_names(config):
    """Finished cells stay valid: every learning rate in config.yaml is named as before (%.3g)."""
    for scale in config["scales"]:
        for cell in Grid(config, scale).all_cells():
            assert cell.lr == f"{float(cell.lr):.3g}"


def test_a_learning_rate_given_twice_is_refused(config):
    c = copy.deepcopy(config)
    fig2(c)["grids"][0]["lrs"] = [1.0e-3, 0.001]
    with pytest.raises(ConfigError, match=re.escape("scales.tiny.experiments.fig2.grids[0].lrs")):
        load_grid(c, "tiny")


# -- issue 24: hostile values that hung or misled, each refused in one line before any job ------

def append(text):
    return lambda t: t + text


def replace(old, new):
    def edit(t):
        assert old in t
        return t.replace(old, new, 1)
    return edit


ALIAS_BOMB = "bomb:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9))
FIG2_LRS = "lrs: [1.0e-3, 1.0e-2]"


@pytest.mark.parametrize("edit, args, keys", [
    (None, ["lr_searches={tiny: {rounds: 1000000000}}"], ["--config: at lr_searches.tiny.rounds", "maximum of 20"]),
    (append(ALIAS_BOMB), [], ["config.yaml: its aliases (*name) expand to more than"]),
    (replace('title: "tiny"', 'title: "' + "x" * 10_000_000 + '"'), [], ["config.yaml: ", "bytes, more than the 1,048,576 a config may have"]),
    (replace('title: "tiny"', 'title: "' + "x" * 100_000 + '"'), [],
     ["config.yaml: at scales.tiny.experiments.fig2.title: a text of 100,000 characters; at most 200"]),
    (replace("\nscale: ", "\nscale: demo\nscale: "), [], ["config.yaml: line ", "key 'scale' given twice"]),
    (replace(FIG2_LRS, "lrs: []"), [], ["config.yaml: scales.tiny.experiments.fig2.grids[0].lrs: an empty list"]),
    (replace(FIG2_LRS, "lrs: [-1e-3]"), [], ["grids[0].lrs[0]: -0.001 is not a learning rate"]),  # ([0]: test_trust_search)
    (replace("seeds: [0]\n            recipe: tiny", "seeds: [18446744073709551616]\n            recipe: tiny"), [],
     ["config.yaml: at scales.tiny.experiments.fig2.grids[0].seeds[0]", "maximum of 4294967295"]),
    (None, ["lr_searches={tiny: {rounds: x}}"], ["--config: at lr_searches.tiny.rounds: 'x' is not of type 'integer'"]),
], ids=["rounds-1e9", "alias-bomb", "10MB-title", "100kB-title", "duplicate-key", "empty-lrs", "negative-lr", "seed-2^64",
        "config-arg"])
def test_a_hostile_value_is_one_line_naming_the_key_before_any_job(tmp_path, edit, args, keys):
    wd = copy_workflow(tmp_path)
    if edit:
        (wd / "config.yaml").write_text(edit((wd / "config.yaml").read_text()))
    try:  # (an alias bomb hung the dry run without a word)
        p = subprocess.run(SNAKEMAKE + ["-n", "--config", "scale=tiny", *args], cwd=wd, capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the dry run did not end within 2 minutes")
    refused(wd, p, *keys)
    error = [line for line in (p.stdout + p.stderr).splitlines() if line.startswith(("config.yaml", "--config"))]
    assert len(error) == 1 and len(error[0]) < 400, error


@pytest.mark.parametrize("edit, args", [
    (replace(FIG2_LRS, "lrs: [1e-3, 1e-2]"), []),  # YAML 1.1 reads 1e-3 (no dot) as a string
    (None, ["lr_searches={tiny: {start: [1e-2, 3.16e-2], range: [1e-4, 1e-1], rounds: 1}}"]),
], ids=["unquoted-1e-3", "config-mapping"])
def test_yaml_numbers_that_yaml_reads_as_strings_plan(tmp_path, edit, args):
    wd = copy_workflow(tmp_path)
    if edit:
        (wd / "config.yaml").write_text(edit((wd / "config.yaml").read_text()))
    p = smk(wd, "-n", "--config", "scale=tiny", *args, check=False)
    assert p.returncode == 0 and "Job stats" in p.stdout, (p.stdout + p.stderr)[-3000:]
    if args:  # rounds: 1 read as a number (the default tiny search has 2: "up to 2")
        assert "later rounds (up to 1:" in p.stderr, p.stderr
