# Reproduction of "Revisiting associative recall in modern recurrent models".
import json
#   snakemake --cores 2 all                        the CPU demo (default scale)
#   snakemake --cores 2 results/fig2.pdf           one figure, training only its cells
#   snakemake --profile slurm all                  the paper's grid on a Slurm cluster
# The grid, the recipes and the scales live in config.yaml; the logic in src/arrepro.
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")

ROOT = Path(workflow.basedir)
# Jobs find the package and the interpreter running this workflow (a conda env, when one is
# used, is activated in front of it).
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
sys.path.insert(0, str(ROOT / "src"))

from arrepro.grid import CELL_PATTERN, ConfigError, Grid, train_sources  # noqa: E402

try:
    GRID = Grid(config)
except (ConfigError, KeyError) as err:
    raise WorkflowError(f"config.yaml: {err}")

EXPERIMENTS = list(GRID.experiments)
FIGURES = [e for e in EXPERIMENTS if "plot" in GRID.experiments[e]]
TABLES = [e for e in EXPERIMENTS if "table" in GRID.experiments[e]]


def one_of(names):
    """A wildcard constraint matching exactly these names (nothing at all if there are none)."""
    return "|".join(names) or "(?!x)x"



include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        [f"results/{e}.pdf" for e in FIGURES],
        [f"results/{e}.tex" for e in TABLES],
        "results/tables/cells.csv",
        "results/paper.pdf",
    default_target: True
