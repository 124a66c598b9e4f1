# Stage 2b: the learning-rate search (src/arrepro/search.py: the protocol; src/arrepro/rounds.py:
# its rounds as files). Round 0 of every search is known from the config; round r >= 1 of a group
# of settings of similar cost is decided by ONE checkpoint job from the results of the group's
# earlier cells, and Snakemake then plans the round's cells. The group's last round adds no cell:
# the aggregate jobs read every search's outcome from it.
from arrepro import rounds as lr_rounds  # noqa: E402

try:
    SEARCHES = lr_rounds.Searches(GRID)
except (ConfigError, KeyError) as err:
    raise WorkflowError(f"config.yaml: {err}")
if workflow.is_main_process:  # what round 0 trains, and that the rounds after it follow
    print(SEARCHES.summary(), file=sys.stderr)
SEARCH_CODE = code("src/arrepro/search.py", "src/arrepro/rounds.py", "src/arrepro/claims.py", "src/arrepro/files.py",
                   "scripts/search_round.py")


def plan_of(group, r):
    """The plan of a group's round r (None: round 0, from the config); waits for its checkpoint."""
    if int(r) == 0:
        return None
    return lr_rounds.read_plan(checkpoints.search_round.get(group=group, round=str(r)).output.plan)


def search_round_inputs(wc):
    """A round's inputs: the plan of the round before and the results of every cell so far."""
    r = int(wc.round)
    previous = plan_of(wc.group, r - 1)
    inputs = {"results": cell_results(lr_rounds.round_cells(SEARCHES, wc.group, previous))}
    if r > 1:
        inputs["previous"] = lr_rounds.plan_path(OUT, wc.group, r - 1)
    return inputs


def final_plans(groups):
    """group -> the plan of its last round (waits for the group's rounds)."""
    return {g: plan_of(g, SEARCHES.final_round(g)) for g in groups}


def searched_cells(exp):
    """The cells of an experiment's searches, every round's, from its groups' last plans."""
    plans = final_plans(SEARCHES.experiment_groups(exp))
    rounds = (lr_rounds.plan_rounds(plans[s.group], s.key) for _, s in SEARCHES.of_experiment(exp))
    return list(dict.fromkeys(c for (_, s), r in zip(SEARCHES.of_experiment(exp), rounds)
                              for c in lr_rounds.search_cells(s, r)))


checkpoint search_round:
    output:
        plan=f"{OUT}/searches/rounds/{{group}}/round{{round}}.json",
    input:
        unpack(search_round_inputs),
    params:
        code=SEARCH_CODE,
        searches=lambda wc: SEARCHES.params(wc.group),
    log:
        f"{OUT}/logs/searches/{{group}}/round{{round}}.log",
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
        plans=lambda wc: [lr_rounds.plan_path(OUT, g, SEARCHES.final_round(g)) for g in SEARCHES.groups],
    params:
        code=SEARCH_CODE,
        searches={g: SEARCHES.params(g) for g in SEARCHES.groups},
    log:
        f"{OUT}/logs/searches/reports.log",
    localrule: True
    conda:
        "../../envs/plots.yaml"
    script:
        "../../scripts/search_round.py"
