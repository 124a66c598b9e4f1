# Stage 2c: evidence, not absence (src/arrepro/search/cover.py). In an experiment with `cover: N`,
# once its searches are done, ONE checkpoint job lists each setting at chance beside the best
# learning rates of the settings of its task that learned; Snakemake then trains those cells on
# every seed, and the aggregate counts them among the setting's candidates. (COVERED and the input
# functions: common.smk.)
checkpoint cover:
    output:
        plan=f"{OUT}/searches/cover/{{exp}}.json",
    input:
        plans=lambda wc: [Plan.path(OUT, g, SEARCHES.final_round(g)) for g in SEARCHES.experiment_groups(wc.exp)],
    params:
        code=script_code("scripts/cover.py"),
        searches=lambda wc: sorted({k for s in SEARCHES.experiment_series(wc.exp) for k in s["searches"]}),
        most=lambda wc: GRID.experiments[wc.exp]["cover"],  # learning rates a setting takes at most
    log:
        f"{OUT}/logs/searches/cover-{{exp}}.log",
    wildcard_constraints:
        exp=one_of(COVERED) if COVERED else "(?!)",
    localrule: True
    message:
        "cover of {wildcards.exp}: its settings at chance, each beside the learning rates where its rivals learned "
        "({output.plan}); Snakemake then plans those cells"
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/cover.py"
