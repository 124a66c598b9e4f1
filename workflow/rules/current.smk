# results/fig1.pdf, results/table2.tex, results/paper.pdf, ...: the command users of this pipeline
# type (`snakemake results/fig1.pdf`) builds that output of the config's scale
# (results/{scale}/fig1.pdf) and links results/fig1.pdf to it. Scales keep their outputs apart; the
# link follows the scale of the last command that asked for it (`--config scale=tiny` re-points
# it), and every figure and the paper name their scale.

rule current:
    output:
        "results/{name}",
    input:
        current_input,
    params:
        target=lambda wc: f"{GRID.scale_name}/{wc.name}",  # relative to results/
    log:
        f"{OUT}/logs/current/{{name}}.log",
    wildcard_constraints:
        name=r"(fig|table)[A-Za-z0-9_-]*\.(pdf|png|csv|tex)|blocks\.(pdf|png)|paper\.pdf",
    localrule: True
    run:
        make_link(params.target, output[0], log[0])


# results/OTHER/...: an output of another scale than this run's (`snakemake results/tiny/fig1.pdf`
# while config.yaml's scale is demo): say which --config scale=... to add, rather than Snakemake's
# bare "No rule to produce". (Never runs: its input function stops the planning.)
rule other_scale:
    output:
        "results/{scale}/{path}",
    input:
        other_scale_input,
    log:
        "results/{scale}/logs/other_scale/{path}.log",
    wildcard_constraints:
        scale=one_of(OTHER_SCALES),
        path=r".+",
    localrule: True
    run:
        raise WorkflowError(f"{output[0]}: an output of scale {wildcards.scale}, not of this run's scale")
