# Stage 3: tidy tables of finished cells and best-over-LR statistics (at each search's chosen
# learning rate).


rule aggregate:
    output:
        cells=GRID.table("{exp}", "cells"),
        best=GRID.table("{exp}", "best"),
    input:
        # the last plan of each group the experiment's searches run in, and every cell they trained
        plans=lambda wc: [Plan.path(OUT, g, SEARCHES.final_round(g)) for g in SEARCHES.experiment_groups(wc.exp)],
        # with `cover`: the settings at chance at their rivals' best rates (workflow/rules/cover.smk)
        cover=lambda wc: [cover_path(wc.exp)] if wc.exp in COVERED else [],
        results=lambda wc: cell_results(searched_cells(wc.exp) + covered_cells(wc.exp)),
    params:
        code=script_code("scripts/aggregate.py"),
        series=lambda wc: SEARCHES.experiment_series(wc.exp),
        metric=lambda wc: GRID.metric(wc.exp),
        task_names={tid: t["name"] for tid, t in GRID.tasks.items()},  # cells carry no scale's names
    log:
        f"{OUT}/logs/aggregate/{{exp}}.log",
    wildcard_constraints:
        exp=one_of(EXPERIMENTS),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/aggregate.py"


# Every cell once, from the experiments' tables: one job with 20,000 result files as inputs
# would cost Snakemake over a minute to plan at the paper scale.
rule cells_table:
    output:
        GRID.cells_table,
    log:
        f"{OUT}/logs/aggregate/cells.log",
    input:
        tables=expand(rules.aggregate.output.cells, exp=EXPERIMENTS),
    params:
        code=script_code("scripts/aggregate.py"),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/aggregate.py"


# The protocol checked on real cells (`make protocol-check`; not part of `all`: it trains the
# literal grid's cells the searches did not): each search's statistic beside the literal grid's
# (the scale's `protocol_check`: a grid finer than the searches' start, for some experiments'
# searches), with the cells each spent.
rule protocol_check:
    output:
        csv=f"{OUT}/tables/protocol_check.csv",
        md=f"{OUT}/tables/protocol_check.md",
    input:
        # input functions: the check's selection is read only when the check is asked for
        reports=lambda wc: [s.report_path(OUT) for s, _ in protocol_check.selection(GRID, SEARCHES)],
        grid=lambda wc: cell_results(protocol_check.literal_cells(GRID, SEARCHES)),
    params:
        code=script_code("scripts/protocol_check.py"),
    log:
        f"{OUT}/logs/aggregate/protocol_check.log",
    localrule: True
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/protocol_check.py"
