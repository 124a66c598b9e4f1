# results/fig1.pdf, results/table2.tex, results/paper.pdf, ...: the command users of this pipeline
# type (`snakemake results/fig1.pdf`) builds that output of the config's scale
# (results/{scale}/fig1.pdf) and links results/fig1.pdf to it. Scales keep their outputs apart; the
# link follows the scale of the last command that asked for it (`--config scale=tiny` re-points
# it), and every figure and the paper name their scale.

CURRENT = [os.path.basename(f) for e in EXPERIMENTS for f in GRID.outputs(e) if f.startswith(f"{OUT}/{e}.")]
CURRENT.append("paper.pdf")


def current_input(wc):
    if wc.name not in CURRENT:  # an output of another scale: say which, rather than "no rule"
        exp = os.path.splitext(wc.name)[0]
        other = [s for s, sc in config["scales"].items() if exp in sc.get("experiments", {})]
        hint = (f"; it is an experiment of scale(s) {', '.join(other)}: `snakemake results/{wc.name} --config "
                f"scale={other[0]}`") if other else ""
        raise WorkflowError(f"results/{wc.name}: scale {GRID.scale_name} (config.yaml's `scale`, or --config scale=...) "
                            f"has no such output; it has: {', '.join(CURRENT)}{hint}")
    return f"{OUT}/{wc.name}"


rule current:
    output:
        "results/{name}",
    input:
        current_input,
    wildcard_constraints:
        name=r"(fig|table)[A-Za-z0-9_-]*\.(pdf|png|csv|tex)|paper\.pdf",
    params:
        target=lambda wc: f"{GRID.scale_name}/{wc.name}",  # relative to results/
    localrule: True
    shell:
        "ln -sfn {params.target:q} {output:q}"
