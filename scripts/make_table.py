#!/usr/bin/env python
"""Render one experiment's table as CSV and LaTeX (Snakemake script; logic in arrepro.report.tables)."""
from arrepro.files import job_log
from arrepro.report.tables import render_table

if "snakemake" in globals():
    sm = snakemake  # noqa: F821
    with job_log(sm):
        render_table(sm.params.table, sm.input.best, sm.input.cells, sm.params.models, sm.params.metric,
                     sm.params.scale, sm.output.csv, sm.output.tex, sm.params.recipes)
