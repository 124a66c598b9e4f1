# Before Snakemake builds the DAG (a minute at the paper scale) and starts any job
# (src/arrepro/preflight.py): the software the run needs (conda, sbatch), another run holding
# this folder (named, with its pid), the scale's datasets against the checksums recorded beside
# them (a damaged one is regenerated), and its derived tables against their writer's checksum (a
# damaged one is moved aside, so that it is rebuilt). No rules here.
from arrepro import preflight  # noqa: E402

preflight.before_dag(workflow, GRID.tasks, [t for e in EXPERIMENTS for t in GRID.tables(e)] + [GRID.cells_table])


# Record the checksums of the datasets this run wrote (the next run's start checks them).
onsuccess:
    preflight.record_data(f"results/data/{t}" for t in GRID.tasks)
    report_forced_cells()  # common.smk


onerror:
    preflight.record_data(f"results/data/{t}" for t in GRID.tasks)
    report_forced_cells()
