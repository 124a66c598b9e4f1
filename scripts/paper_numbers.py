#!/usr/bin/env python
"""Write the manuscript's generated inputs (results/{scale}/paper/numbers.tex and setup.tex) from
the experiments' aggregated tables (results/{scale}/tables/), and the claims table as files
(results/{scale}/claims.md and claims.csv). By hand, from the repository root,
once the scale's tables are built (e.g. by `snakemake results/demo/tables/cells.csv`):

    paper_numbers.py [--scale NAME] [--out-dir results/{scale}/paper]"""
import argparse
import os

from arrepro.files import job_log
from arrepro.report.paper import grid_meta, write_paper_inputs

if "snakemake" in globals():
    sm = snakemake  # noqa: F821 - set by Snakemake's script directive
    with job_log(sm):
        exps = list(sm.params.meta["experiments"])
        write_paper_inputs(sm.params.meta, dict(zip(exps, sm.input.best)), dict(zip(exps, sm.input.cells)),
                           sm.output.numbers, sm.output.setup, sm.input.tex, (sm.output.claims_md, sm.output.claims_csv))
        print(f"{len(exps)} experiments ({', '.join(exps)})")
elif __name__ == "__main__":
    import yaml

    from arrepro.config.checks import load_grid

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--scale", help="default: the config's scale")
    ap.add_argument("--out-dir", help="default: results/{scale}/paper, where the workflow writes them (the claims' "
                                      "files one folder up)")
    a = ap.parse_args()
    config = yaml.safe_load(open(a.config))
    grid = load_grid(config, a.scale)
    meta = grid_meta(grid, config)
    exps = list(meta["experiments"])
    out = a.out_dir or f"{grid.out}/paper"
    claims = tuple(os.path.join(os.path.dirname(os.path.normpath(out)), f"claims.{ext}") for ext in ("md", "csv"))
    # the tables of this scale, where the workflow writes them (GRID.tables: cells, best)
    write_paper_inputs(meta, {e: grid.tables(e)[1] for e in exps}, {e: grid.tables(e)[0] for e in exps},
                       f"{out}/numbers.tex", f"{out}/setup.tex", claims_out=claims)
    print(f"wrote {out}/numbers.tex, setup.tex and {claims[0]}, {claims[1]} from {grid.out}/tables/ "
          f"({len(exps)} experiments)")
