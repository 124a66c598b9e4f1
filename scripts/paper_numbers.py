#!/usr/bin/env python
"""Write the manuscript's generated inputs (results/paper/numbers.tex and setup.tex) from the
experiments' aggregated tables. By hand, from the repository root:

    paper_numbers.py [--scale NAME] [--out-dir results/paper]"""
import argparse

from arrepro.files import job_log
from arrepro.paper import grid_meta, write_paper_inputs

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        exps = list(sm.params.meta["experiments"])
        write_paper_inputs(sm.params.meta, dict(zip(exps, sm.input.best)), dict(zip(exps, sm.input.cells)),
                           sm.output.numbers, sm.output.setup, sm.input.tex)
        print(f"{len(exps)} experiments ({', '.join(exps)})")
elif __name__ == "__main__":
    import yaml

    from arrepro.grid import Grid

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--scale", help="default: the config's scale")
    ap.add_argument("--out-dir", default="results/paper")
    a = ap.parse_args()
    config = yaml.safe_load(open(a.config))
    meta = grid_meta(Grid(config, a.scale), config)
    exps = list(meta["experiments"])
    write_paper_inputs(meta, {e: f"results/tables/{e}_best.csv" for e in exps},
                       {e: f"results/tables/{e}_cells.csv" for e in exps},
                       f"{a.out_dir}/numbers.tex", f"{a.out_dir}/setup.tex")
