# Before Snakemake builds the DAG (a minute at the paper scale) and starts any job
# (src/arrepro/cluster/preflight.py): the software the run needs (conda, sbatch), another run holding
# this folder (named, with its pid), the scale's datasets against the checksums recorded beside
# them (a damaged one is regenerated), its derived tables against their writer's checksum, the
# learning-rate search's plans and decision files against their seals and what they were made
# from (src/arrepro/search/plans.py), and results/NAME links (each damaged, stale or foreign one is
# rebuilt: its job is forced). No rules here.
from arrepro.search.plans import damaged_reports, stale_plans  # noqa: E402
from arrepro.cluster import preflight  # noqa: E402

preflight.before_dag(workflow, GRID.tasks, [t for e in EXPERIMENTS for t in GRID.tables(e)] + [GRID.cells_table],
                     rebuild=lambda: {**stale_plans(SEARCHES, OUT, script_code("scripts/search_round.py")),
                                      **damaged_reports(s.report_path(OUT) for s in SEARCHES.searches.values()),
                                      **preflight.foreign_links(CURRENT)})


# Record the checksums of the datasets this run wrote (the next run's start checks them).
onsuccess:
    preflight.record_data(data_dir(t) for t in GRID.tasks)
    report_forced_cells()  # common.smk


onerror:
    preflight.record_data(data_dir(t) for t in GRID.tasks)
    report_forced_cells()
