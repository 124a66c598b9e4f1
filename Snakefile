# Reproduction of "Revisiting associative recall in modern recurrent models".
#   snakemake all                      the CPU demo (default scale; cores: profiles/default)
#   snakemake results/fig2.pdf         one figure of the config's scale, training only its cells
#   snakemake --profile slurm all      the paper's grid on a Slurm cluster
# The grid, the recipes and the scales live in config.yaml; the logic in src/arrepro.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, update_config, validate

min_version("9.0")

# The package: this checkout's src/, for this process and (preflight.share_package) every job it
# starts. People and tests import it installed (make setup).
ROOT = Path(workflow.basedir)
sys.path.insert(0, str(ROOT / "src"))

from arrepro.cluster import internals  # noqa: E402
from arrepro.config.checks import check_lr_lists  # noqa: E402
from arrepro.config.grid import ConfigError  # noqa: E402
from arrepro.cluster.configfile import (ConfigFileError, check_config_file, command_line_config,  # noqa: E402
                                        config_error, config_problem)
from arrepro.cluster.preflight import share_package  # noqa: E402

# Before Snakemake reads config.yaml: its size, YAML aliases that would expand without end, and
# keys given twice (YAML keeps the last silently), each refused in one line
try:
    for f in ["config.yaml", *workflow.config_settings.configfiles]:
        check_config_file(f)
    COMMAND_LINE = command_line_config(workflow.config_settings.config_args)  # --config values, read as YAML
except ConfigFileError as err:
    raise WorkflowError(str(err)) from None


configfile: "config.yaml"


update_config(config, COMMAND_LINE)  # (Snakemake reads a --config mapping's numbers as strings)

share_package(ROOT)

internals.install_group_components()  # Slurm bundles as the profile's group-components asks (Snakemake 9's merge fix)
internals.install_one_reevaluation()  # one pending wake-up of the scheduler, not one more per finished job

try:  # learning-rate lists explained (and YAML's 1e-3 taken as the number it is), then the schema
    check_lr_lists(config)
    validate(config, "workflow/schemas/config.schema.yaml")
except ConfigError as err:
    raise WorkflowError(config_error(err, COMMAND_LINE)) from None
except WorkflowError as err:  # Snakemake's own message prints the whole config and schema after its one useful line
    raise WorkflowError(config_problem(err, overrides=COMMAND_LINE)) from None


report: "workflow/report/workflow.rst"  # `make report`: results/{scale}/report.html


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/gpushare.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/cover.smk"
include: "workflow/rules/preflight.smk"  # before the DAG: what the run needs, what it must rebuild
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/current.smk"


# Snakemake reruns a job whose output is missing only when a job that needs it must run anyway:
# a deleted result.json, or tables deleted by a failed aggregate job, would leave `all` "up to
# date" beside stale figures. So `all` names every experiment's outputs and tables, the paper's
# inputs, and the cell files and searches' last plans that are missing now (naming all 20,000 cell
# files would slow the planning).
rule all:
    input:
        [f for e in EXPERIMENTS for f in GRID.outputs(e)],
        BLOCK_FIGURE,
        rules.cells_table.output,
        f"{OUT}/paper/numbers.tex",
        f"{OUT}/paper/setup.tex",
        f"{OUT}/claims.md",
        f"{OUT}/claims.csv",
        f"{OUT}/paper.pdf",
        [s.report_path(OUT) for s in SEARCHES.searches.values()],  # one file per learning-rate search
        missing_cell_files(),
        missing_final_plans(),  # a deleted last plan is rebuilt (the aggregate jobs read it)
        PACKS.targets,  # cells per GPU > 1 only: the packs of small cells that share a GPU
    default_target: True


# The paper needs a TeX engine: say so before the first job, not after hours of training. (In a
# conda deployment, envs/paper.yaml brings tectonic.) `make demo` installs it where it can.
onstart:
    from arrepro.cluster.tools import missing_tex

    if not internals.uses_conda(workflow) and any(job.rule.name == "paper" for job in internals.needrun_jobs(workflow)):
        problem = missing_tex()
        if problem:
            raise WorkflowError(f"stopping before any job: {problem}")
    preflight.stop_if_unwritable(internals.needrun_jobs(workflow))  # a read-only folder: one line, not a crash
    record_run()  # which cells this run forces to start over (workflow/rules/common.smk)
