#!/usr/bin/env python
"""Tables of finished cells and best-over-LR statistics (rule aggregate), every cell once (rule
cells_table); logic in arrepro.report.aggregate."""
from arrepro.report.aggregate import merge_cell_tables, write_tables
from arrepro.files import job_log

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        if "tables" in sm.input.keys():  # rule cells_table: every cell once, from the experiments' tables
            merge_cell_tables(sm.input.tables, sm.output[0])
        else:
            write_tables(sm.input.plans, sm.params.series, sm.params.metric, sm.output.cells, sm.output.best,
                         sm.params.task_names, cover_file=sm.input.cover[0] if sm.input.cover else None)
