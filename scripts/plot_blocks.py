#!/usr/bin/env python
"""Draw the paper's Figs. 8-10 from the block structure file (arrepro.report.blocks)."""
from arrepro.report.blocks import render
from arrepro.files import job_log

if "snakemake" in globals():
    sm = snakemake  # noqa: F821
    with job_log(sm):
        render(sm.input[0], sm.params.title, sm.params.scale, list(sm.output))
