#!/usr/bin/env python
"""The literal grid's statistic beside the search's, setting by setting (rule protocol_check;
logic in arrepro.search.protocol_check). By hand (``make protocol-check``'s last step), on the
table the rule wrote:

    protocol_check.py results/{scale}/tables/protocol_check.csv

prints the verdict and exits 1 where a search falls short of the literal grid beyond the seed
spread, 0 where none does."""
import sys
from pathlib import Path

import pandas as pd

from arrepro.config.checks import load_grid
from arrepro.files import UnreadableFile, job_log, read_table, write_table
from arrepro.search.plans import read_report
from arrepro.search.protocol_check import compare, markdown, verdict

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
elif __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(f"usage: {sys.argv[0]} results/SCALE/tables/protocol_check.csv")
    need = ("model", "layers", "width", "task", "search", "search_lr", "search_spread", "grid", "grid_lr",
            "grid_spread", "difference", "within_spread")
    try:
        table = read_table(sys.argv[1], required=need, not_null=need)
    except (OSError, UnreadableFile) as e:
        sys.exit(f"protocol_check.py: error: {e}")
    status, line = verdict(table.to_dict("records"))
    print(line, file=sys.stderr if status else sys.stdout)
    sys.exit(status)
