#!/usr/bin/env python
"""Tables of finished cells (and best-over-LR statistics when series are given).

By hand: aggregate.py --cells OUT.csv RESULT.json [RESULT.json ...]"""
import argparse

from arrepro.aggregate import merge_cell_tables, write_tables
from arrepro.files import job_log

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        if "tables" in sm.input.keys():  # rule cells_table: every cell once, from the experiments' tables
            merge_cell_tables(sm.input.tables, sm.output[0])
        else:
            write_tables(sm.input.results, sm.output[0], sm.output.get("best"), sm.params.get("series"),
                         sm.params.get("metric", "final_accuracy"), sm.params.get("task_names"))
elif __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cells", required=True)
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    write_tables(a.results, a.cells)
