# Stage 4: one figure per experiment, from its aggregated tables.


rule figure:
    output:
        pdf="results/{exp}.pdf",
        png="results/{exp}.png",
    input:
        cells="results/tables/{exp}_cells.csv",
        best="results/tables/{exp}_best.csv",
        src=["src/arrepro/plots.py", "scripts/plot_figure.py"],
    params:
        plot=lambda wc: GRID.experiments[wc.exp].get("plot", "width"),
        title=lambda wc: GRID.experiments[wc.exp].get("title", wc.exp),
        scale=GRID.scale_name,
    wildcard_constraints:
        exp="|".join(EXPERIMENTS),
    script:
        "../../scripts/plot_figure.py"
