# Cells per GPU: with config `cells_per_gpu` N > 1 (the Slurm profile's CELLS_PER_GPU), the small
# (grouped) cells of one setting run N at a time on one GPU of a grouped Slurm job. Inside a
# Slurm job the executor plugin runs one connected component of the group at a time, so N cells
# share a GPU only as one component: the `gpu_pack` marker below takes them as input and joins
# them (src/arrepro/cluster/packs.py explains what Snakemake does with it). N = 1: no packs, no change.

try:
    CELLS_PER_GPU = costs.cells_per_gpu_of(config)
except ValueError as err:
    raise WorkflowError(f"config: {err}")

# shared cells ask for the GPU as the string resource gres="gpu:1": a group job takes a string
# as it is, where it adds `gpu` up over the cells that run side by side
SHARED_GPU = {"gres": lambda wc: costs.gres(GRID.cell_spec(**wc), CELLS_PER_GPU)} if CELLS_PER_GPU > 1 else {}
PACKS = packs.Packs(GRID, CELLS_PER_GPU, lambda: SEARCHES.round0_cells())  # SEARCHES: search.smk


PACK_COMMAND = "printf '%s\\n' {input:q} > {log:q}"  # the cells that shared a GPU


rule gpu_pack:
    output:
        touch(packs.PACK_PATTERN),
    input:
        lambda wc: cell_results(PACKS.cells(packs.PACK_PATTERN.format(**wc))),
    log:
        packs.PACK_LOG,
    wildcard_constraints:
        width=r"\d+",
        layers=r"\d+",
        npack=r"\d+",
        kpack=r"\d+",
    group:
        lambda wc: costs.group(PACKS.spec(packs.PACK_PATTERN.format(**wc)))
    resources:
        runtime=1,
        mem_mb=500,
        gpu=0,
        train_slot=0,
        gres=lambda wc: costs.gres(PACKS.spec(packs.PACK_PATTERN.format(**wc)), CELLS_PER_GPU),
    conda:
        "../../envs/train.yaml"  # it runs in its cells' Slurm job, where this env is
    params:
        command=command_param(PACK_COMMAND),
    shell:
        PACK_COMMAND
