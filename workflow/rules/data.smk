# Stage 1: datasets. One job per task, written once and shared by every cell that uses it.


DATA_COMMAND = "python scripts/make_data.py --task-json {params.task:q} --out results/data/{wildcards.task:q} > {log:q} 2>&1"


rule data:
    output:
        **data_files("{task}"),  # train, test
    params:
        code=script_code("scripts/make_data.py"),
        task=lambda wc: json.dumps({k: v for k, v in GRID.tasks[wc.task].items() if k != "name"}, sort_keys=True),
        command=command_param(DATA_COMMAND),
    log:
        f"{OUT}/logs/data/{{task}}.log",
    resources:
        mem_mb=4000,
        runtime=10,
    conda:
        "../../envs/data.yaml"
    shell:
        DATA_COMMAND
