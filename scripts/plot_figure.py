#!/usr/bin/env python
"""Render one experiment's figure. By hand:
plot_figure.py --kind width --best B.csv --cells C.csv --title T --scale demo OUT.pdf [OUT.png]"""
import argparse
import json

from arrepro.files import job_log
from arrepro.report.plots import render

if "snakemake" in globals():
    sm = snakemake  # noqa: F821
    with job_log(sm):
        render(sm.params.plot, sm.input.best, sm.input.cells, sm.params.title, sm.params.scale, list(sm.output),
               metric=sm.params.metric, reference_lrs=sm.params.reference_lrs,
               published=sm.input.get("published"), models=json.loads(sm.params.models), replication=sm.params.replication)
elif __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    for k in ("kind", "best", "cells", "title", "scale"):
        ap.add_argument(f"--{k}", required=True)
    ap.add_argument("out", nargs="+")
    a = ap.parse_args()
    render(a.kind, a.best, a.cells, a.title, a.scale, a.out)
