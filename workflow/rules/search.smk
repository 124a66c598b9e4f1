# Stage 2b: the learning-rate search (src/arrepro/search/protocol/: the protocol; src/arrepro/search/rounds.py:
# its rounds as files). Round 0 of every search is known from the config; round r >= 1 of a group
# of settings of similar cost is decided by ONE checkpoint job from the results of the group's
# earlier cells, and Snakemake then plans the round's cells. The group's last round adds no cell:
# the aggregate jobs read every search's outcome from it. (SEARCHES and the input functions:
# common.smk.)
if workflow.is_main_process:  # what round 0 trains, and that the rounds after it follow
    print(SEARCHES.summary(), file=sys.stderr)
checkpoint search_round:
    output:
        plan=f"{OUT}/searches/rounds/{{group}}/round{{round}}.json",
    input:
        unpack(search_round_inputs),
    params:
        code=script_code("scripts/search_round.py"),
        searches=lambda wc: SEARCHES.params(wc.group),
    log:
        f"{OUT}/logs/searches/{{group}}-round{{round}}.log",
    wildcard_constraints:
        group=one_of(SEARCHES.groups),
        round=r"[1-9][0-9]*",
    localrule: True
    message:
        "learning-rate search, group {wildcards.group}, round {wildcards.round}: decides this round's cells from the "
        "results of the earlier rounds ({output.plan}); Snakemake then plans them"
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/search_round.py"


# One file per search: its setting, spec, every round's learning rates, seeds, accuracies and
# reasons, and its outcome (results/{scale}/searches/<task>/<model>/w<W>-l<L>/<recipe>/<id>.json).
rule search_reports:
    output:
        [s.report_path(OUT) for s in SEARCHES.searches.values()],
    input:
        plans=lambda wc: [Plan.path(OUT, g, SEARCHES.final_round(g)) for g in SEARCHES.groups],
    params:
        code=script_code("scripts/search_round.py"),
        searches={g: SEARCHES.params(g) for g in SEARCHES.groups},
    log:
        f"{OUT}/logs/searches/reports.log",
    localrule: True
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/search_round.py"
