# Stage 4: every figure (fig* experiments) and table (table* experiments), from the
# experiment's aggregated tables.


def _figure_inputs(wc):
    exp = GRID.experiments[wc.exp]
    inputs = {"cells": f"results/tables/{wc.exp}_cells.csv", "best": f"results/tables/{wc.exp}_best.csv"}
    if "published" in exp:
        inputs["published"] = exp["published"]
    if exp.get("plot") == "dynamics":  # per-epoch curves come from the cells' metrics
        inputs["metrics"] = [c.path + "/metrics.jsonl" for c in GRID.experiment_cells(wc.exp)]
    return inputs


rule figure:
    output:
        pdf="results/{exp}.pdf",
        png="results/{exp}.png",
    input:
        unpack(_figure_inputs),
        src=["src/arrepro/plots.py", "scripts/plot_figure.py"],
    params:
        plot=lambda wc: GRID.experiments[wc.exp]["plot"],
        title=lambda wc: GRID.experiments[wc.exp].get("title", wc.exp),
        scale=GRID.scale_name,
        metric=lambda wc: GRID.metric(wc.exp),
        reference_lrs=lambda wc: GRID.reference_lrs(wc.exp),
    wildcard_constraints:
        exp=one_of(FIGURES),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/plot_figure.py"


rule table:
    output:
        csv="results/{exp}.csv",
        tex="results/{exp}.tex",
    input:
        cells="results/tables/{exp}_cells.csv",
        best="results/tables/{exp}_best.csv",
        src=["src/arrepro/tables.py", "scripts/make_table.py"],
    params:
        table=lambda wc: GRID.experiments[wc.exp]["table"],
        models=lambda wc: GRID.experiment_models(wc.exp),
        metric=lambda wc: GRID.metric(wc.exp),
        scale=GRID.scale_name,
    wildcard_constraints:
        exp=one_of(TABLES),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/make_table.py"
