#!/usr/bin/env python
"""Write the paper scale's built-model fidelity table as LaTeX (Snakemake script; the logic:
arrepro.report.fidelity_built, which builds every paper-scale model as its cells build it)."""
import json

from arrepro.files import job_log, write_text_atomic
from arrepro.report.fidelity_built import latex

if "snakemake" in globals():
    sm = snakemake  # noqa: F821
    with job_log(sm):
        config = json.loads(sm.params.config)
        text = latex(config) if config["scales"].get("paper") else r"\emph{The configuration declares no paper scale.}"
        write_text_atomic(sm.output[0], text)
