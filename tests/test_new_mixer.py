"""A new mixer reaches Fig. 2 and the paper by its mixer file and config.yaml alone (issue 32):
a copy of the workflow gains a mixer file and a model of it (with its card) in the tiny scale's
Fig. 2; its cells train for real, Fig. 2's aggregated table and figure show it, and the paper
names it by its card's label. No other file changes.

Needs pdflatex, bibtex and pdftotext (tests/test_paper.py installs them where it can)."""
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from test_paper import fabricate_results, tex  # noqa: F401 (a fixture)
from workflow_copy import copy_workflow

LABEL = "Running Mean Mixer"  # the new model's card's label: what the paper and the figure print
MIXER_FILE = '''"""A sequence mixer added by tests/test_new_mixer.py: a causal running mean of a projection."""
import torch
from torch import nn

from arrepro.models.registry import register


@register("runmean")
class RunMean(nn.Module):
    def __init__(self, d_model: int, max_len: int = 0, scale: float = 1.0):
        super().__init__()
        self.scale = scale
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward_reference(self, x):
        v = self.v(x)
        steps = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype).view(1, -1, 1)
        return self.out(self.scale * v.cumsum(1) / steps)

    def forward_portable(self, x):
        return self.forward_reference(x)

    def forward(self, x):
        return self.forward_portable(x)

    @staticmethod
    def expected_parameters(d_model: int, *, max_len: int, **_) -> int:
        return 2 * (d_model * d_model + d_model)
'''
CARD = {"label": LABEL, "family": "recurrent", "role": "core", "cost": 1.2}


def smk(wd, *args):
    p = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args, "--config", "scale=tiny"],
                       cwd=wd, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


@pytest.mark.slow
def test_a_new_mixer_reaches_fig2_and_the_paper_by_its_file_and_config_alone(tex, tmp_path):
    wd = copy_workflow(tmp_path)
    (wd / "src/arrepro/models/mixers/runmean.py").write_text(MIXER_FILE)
    config = yaml.safe_load((wd / "config.yaml").read_text())
    config["models"]["runmean"] = {"mixer": "runmean", "position": "none", "mlp": True, "mixer_kwargs": {"scale": 1.0},
                                   "card": CARD}
    fig2 = config["scales"]["tiny"]["experiments"]["fig2"]
    fig2["grids"][0]["models"] = fig2["grids"][0]["models"] + ["runmean"]
    (wd / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # the other experiments' results made up (tests/test_paper.py); Fig. 2's made for real
    fabricate_results(wd, "tiny", config)
    for f in ("tables/fig2_best.csv", "tables/fig2_cells.csv", "fig2.pdf", "fig2.png"):
        (wd / "results/tiny" / f).unlink()
    smk(wd, "results/tiny/fig2.pdf")
    best = pd.read_csv(wd / "results/tiny/tables/fig2_best.csv")
    mine = best[best["model"] == "runmean"]
    assert len(mine) == 1 and mine["mixer"].iloc[0] == "runmean", best.to_string()
    assert mine["n_seeds"].iloc[0] >= 1 and 0 <= mine["mean"].iloc[0] <= 1
    drawn = subprocess.run(["pdftotext", str(wd / "results/tiny/fig2.pdf"), "-"], capture_output=True, text=True,
                           check=True).stdout
    assert LABEL in " ".join(drawn.split()), drawn  # the figure's legend: the card's label
    smk(wd, "results/tiny/paper.pdf", "--allowed-rules", "paper_numbers", "paper")
    text = subprocess.run(["pdftotext", str(wd / "results/tiny/paper.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    flat = " ".join(text.split())
    assert LABEL in flat  # the Models paragraph and Fig. 2's sentences name it by its card
    numbers = (wd / "results/tiny/paper/numbers.tex").read_text()
    assert "\\arset{fig2/runmean/max}" in numbers  # its number among Fig. 2's keys


def test_a_model_without_a_card_field_is_refused_before_any_job_naming_the_key(tmp_path):
    from test_workflow import smk as run

    wd = copy_workflow(tmp_path)
    config = yaml.safe_load((wd / "config.yaml").read_text())
    del config["models"]["mamba"]["card"]["family"]
    (wd / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    p = run(wd, "-n", "results/tiny/fig2.pdf", "--config", "scale=tiny", check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "models.mamba.card" in out and "family" in out, out[-3000:]
    assert "Job stats" not in out
