"""Running the workflow, here or on a cluster: what it asks of the machines (the cost report,
the packs of cells that share a GPU), the checks before any job (preflight), the code that
reaches into Snakemake's internals (one module, one version check), the Python the rules call,
the external tools, and the first commands on a GPU node (gpucheck: one short cell of every family;
gpuverify: the kernel packages installed, compared and timed).
"""
