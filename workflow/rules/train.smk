# Stage 2: one job per cell (task, model, width, layers, recipe, lr, seed).
# The model's source files are declared inputs: editing a mixer reruns only its cells.


def _mixer(wc):
    return GRID.models[wc.model]["mixer"]


rule train:
    output:
        result=CELL_PATTERN + "/result.json",
        metrics=CELL_PATTERN + "/metrics.jsonl",
    input:
        train="results/data/{task}/train.npz",
        test="results/data/{task}/test.npz",
        src=lambda wc: train_sources(_mixer(wc)) + ["scripts/train_cell.py"],
    params:
        cell=lambda wc: json.dumps(GRID.cell_spec(**wc)),
        out=CELL_PATTERN,
    log:
        CELL_PATTERN + "/train.log",
    wildcard_constraints:
        width=r"\d+",
        layers=r"\d+",
        seed=r"\d+",
    threads: 1
    resources:
        gpu=lambda wc: int(GRID.scale.get("device") == "cuda"),
        mem_mb=4000,
    shell:
        "python scripts/train_cell.py --cell-json {params.cell:q} --data results/data/{wildcards.task} "
        "--out {params.out} --threads {threads} > {log} 2>&1"
