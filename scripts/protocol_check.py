#!/usr/bin/env python
"""The literal grid's statistic beside the search's, setting by setting (rule protocol_check;
logic in arrepro.search.protocol_check)."""
from pathlib import Path

import pandas as pd

from arrepro.config.checks import load_grid
from arrepro.files import job_log, write_table
from arrepro.search.plans import read_report
from arrepro.search.protocol_check import compare, markdown

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        grid = load_grid(sm.config)
        reports = {p.split("/searches/", 1)[1].removesuffix(".json"): read_report(p)
                   for p in sm.input.reports}
        rows = compare(grid, reports)
        write_table(pd.DataFrame(rows), sm.output.csv)
        text = markdown(rows, {tid: t["name"] for tid, t in grid.tasks.items()})
        Path(sm.output.md).write_text(text + "\n")
        print(text)
