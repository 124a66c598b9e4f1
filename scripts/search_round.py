#!/usr/bin/env python
"""Snakemake script of the learning-rate search (logic in arrepro.search.rounds): rule search_round
decides a group's next round; rule search_reports writes one file per search."""
from arrepro.files import job_log
from arrepro.search.plans import Plan, made_from
from arrepro.search.rounds import run_round, write_reports

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        if sm.rule == "search_round":
            previous = Plan.read(sm.input.previous) if "previous" in sm.input.keys() else None
            sources = made_from(sm.params.code, sm.params.searches, previous, sm.input.results)  # checked before a run
            run_round(sm.params.searches, sm.wildcards.group, int(sm.wildcards.round), previous, sm.output.plan,
                      made_from=sources)
        else:
            write_reports([Plan.read(p) for p in sm.input.plans], list(sm.output))
