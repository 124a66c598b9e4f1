# Stage 2: one job per cell (task, model, width, layers, recipe, lr, seed).
# The code digest of a cell's sources (scripts/train_cell.py, the package modules it imports, the
# mixer and the CPU kernels its model runs: arrepro.config.catalogue.train_sources) is a param: a code
# edit in a mixer reruns only its cells, a comment edit nothing.




TRAIN_COMMAND = (
    "exec python scripts/train_cell.py --cell-json {params.cell:q} --data results/data/{wildcards.task:q} "
    "--out {params.out:q} --threads {threads} --train-log {params.out:q}/train.log --die-with-parent "
    "--run-file {params.run_file:q} --server > {log:q}"
)


rule train:
    output:
        result=CELL_RESULT,
        metrics=CELL_METRICS,
    input:
        **data_files("{task}"),  # train, test
    params:
        code=lambda wc: train_code(wc.model),
        cell=lambda wc: json.dumps(identity(GRID.cell_spec(**wc)), sort_keys=True),  # the config's key order changes nothing
        out=CELL_PATTERN,
        # this run's file (its onstart writes it): whether the run forces the cell to start over (in
        # every round: also the cells checkpoint rounds add), whether it keeps its final weights
        run_file=runfile.PATH,
        command=command_param(TRAIN_COMMAND),
    # job.log is this attempt's output; train.log gathers every attempt's (a resumed cell's history
    # stays): the script writes both itself, and its errors to the job's stderr, which Snakemake
    # shows (arrepro.train.job). `exec`: the trainer's parent is the Snakemake running the job, and
    # --die-with-parent stops it (with a checkpoint) if that Snakemake is killed. --server: a CPU
    # cell trains in a child of the training server, one start-up for every cell (arrepro.train.server).
    log:
        f"{CELL_PATTERN}/job.log",
    wildcard_constraints:
        task=one_of(GRID.tasks),
        model=one_of(GRID.models),
        recipe=one_of(GRID.recipes),
        width=r"\d+",
        layers=r"\d+",
        seed=r"\d+",
    threads: 1
    # Estimated from the cell's size (src/arrepro/config/costs.py); a retry gets twice the time.
    # Small cells share a Slurm job: see the profile's group-components (slurm/profile.yaml).
    group:
        lambda wc: costs.group(GRID.cell_spec(**wc))
    resources:
        gpu=lambda wc: costs.gpus(GRID.cell_spec(**wc), CELLS_PER_GPU),
        mem_mb=lambda wc: costs.mem_mb(GRID.cell_spec(**wc)),
        runtime=lambda wc, attempt: costs.runtime_min(GRID.cell_spec(**wc), attempt, CELLS_PER_GPU),
        train_slot=1,
        **SHARED_GPU,  # cells per GPU > 1: gres="gpu:1" instead of gpu=1 (workflow/rules/gpushare.smk)
    conda:
        "../../envs/train.yaml"
    shell:
        TRAIN_COMMAND
