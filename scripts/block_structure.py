#!/usr/bin/env python
"""Build the Mamba blocks a scale trains (arrepro.report.blocks) and write their structure as JSON."""
import json

from arrepro.report.blocks import write_structure
from arrepro.files import job_log

if "snakemake" in globals():
    sm = snakemake  # noqa: F821
    with job_log(sm):
        write_structure(dict(json.loads(sm.params.specs)), sm.output[0])
