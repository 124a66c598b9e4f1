# Stage 4: every figure (fig* experiments) and table (table* experiments), from the
# experiment's aggregated tables.


rule figure:
    output:
        pdf=f"{OUT}/{{exp}}.pdf",
        png=report(f"{OUT}/{{exp}}.png", caption="../report/figure.rst", category="Figures", labels={"experiment": "{exp}"}),
    input:
        unpack(figure_inputs),
        cell_files=lambda wc: dynamics_cells(wc.exp),
    params:
        code=script_code("scripts/plot_figure.py"),
        plot=lambda wc: GRID.experiments[wc.exp]["plot"],
        title=lambda wc: GRID.experiments[wc.exp].get("title", wc.exp),
        scale=GRID.scale_name,
        metric=lambda wc: GRID.metric(wc.exp),
        reference_lrs=lambda wc: GRID.reference_lrs(wc.exp),
        models=lambda wc: json.dumps(GRID.experiment_models(wc.exp), sort_keys=True),  # their cards name the lines (a key order changes nothing)
        replication=lambda wc: GRID.replication_series(wc.exp),
    log:
        f"{OUT}/logs/figures/{{exp}}.log",
    wildcard_constraints:
        exp=one_of(FIGURES),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/plot_figure.py"


rule table:
    output:
        csv=report(f"{OUT}/{{exp}}.csv", caption="../report/table.rst", category="Tables", labels={"experiment": "{exp}"}),
        tex=f"{OUT}/{{exp}}.tex",
    input:
        cells=rules.aggregate.output.cells,
        best=rules.aggregate.output.best,
    params:
        code=script_code("scripts/make_table.py"),
        table=lambda wc: GRID.experiments[wc.exp]["table"],
        title=lambda wc: GRID.experiments[wc.exp].get("title", wc.exp),
        models=lambda wc: GRID.experiment_models(wc.exp),
        metric=lambda wc: GRID.metric(wc.exp),
        scale=GRID.scale_name,
        recipes=lambda wc: GRID.experiment_recipes(wc.exp),
    log:
        f"{OUT}/logs/tables/{{exp}}.log",
    wildcard_constraints:
        exp=one_of(TABLES),
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/make_table.py"


# The paper's Figs. 8-10 (Mamba's block, without conv1d, without gate; S6 + MLP): each of the
# scale's Mamba models built as its cells train it (the training software's env), walked into a
# structure file, then drawn (src/arrepro/report/blocks.py). Only at a scale that trains one of them.
rule block_structure:
    output:
        f"{OUT}/tables/blocks.json",
    params:
        code=script_code("scripts/block_structure.py", *train_sources("mamba", ROOT)),  # and the Mamba mixer files it builds
        specs=json.dumps(list(BLOCK_SPECS.items()), sort_keys=True),  # [[model, cell spec], ...] in panel order
    log:
        f"{OUT}/logs/figures/block_structure.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../../scripts/block_structure.py"


rule blocks:
    output:
        pdf=f"{OUT}/{blocks.FIGURE}.pdf",
        png=report(f"{OUT}/{blocks.FIGURE}.png", caption="../report/blocks.rst", category="Figures",
                   labels={"experiment": blocks.FIGURE}),
    input:
        rules.block_structure.output,
    params:
        code=script_code("scripts/plot_blocks.py"),
        title="Mamba's block and its ablations, as trained",
        scale=GRID.scale_name,
    log:
        f"{OUT}/logs/figures/blocks.log",
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/plot_blocks.py"
