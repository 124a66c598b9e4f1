#!/usr/bin/env python
"""Snakemake script of rule cover: an experiment's settings at chance, trained at their rivals'
best learning rates (logic in arrepro.search.cover)."""
from arrepro.files import job_log
from arrepro.search import cover
from arrepro.search.plans import Plan

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        cover.write(sm.output.plan, sm.wildcards.exp, [Plan.read(p) for p in sm.input.plans], list(sm.params.searches),
                    int(sm.params.most))
