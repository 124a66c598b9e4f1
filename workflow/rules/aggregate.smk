# Stage 3: tidy tables of finished cells and best-over-LR statistics.


rule aggregate:
    output:
        cells="results/tables/{exp}_cells.csv",
        best="results/tables/{exp}_best.csv",
    input:
        results=lambda wc: cell_results(GRID.experiment_cells(wc.exp)),
        src=["src/arrepro/aggregate.py", "scripts/aggregate.py"],
    params:
        series=lambda wc: GRID.series_of(wc.exp),
        metric=lambda wc: GRID.metric(wc.exp),
    log:
        "results/logs/aggregate/{exp}.log",
    wildcard_constraints:
        exp=one_of(EXPERIMENTS),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/aggregate.py"


rule cells_table:
    output:
        "results/tables/cells.csv",
    log:
        "results/logs/aggregate/cells.log",
    input:
        results=cell_results(GRID.all_cells()),
        src=["src/arrepro/aggregate.py", "scripts/aggregate.py"],
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/aggregate.py"
