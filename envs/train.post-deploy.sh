#!/usr/bin/env bash
# Runs inside the freshly created `train` env (Snakemake does this after `conda env create`).
# The CUDA kernels are compiled against the torch installed in this env, so they cannot be
# built in pip's isolated build environment. Pins agree with pyproject.toml [gpu] and are
# checked by tests/test_envs.py.
set -euo pipefail
if ! command -v nvcc >/dev/null 2>&1; then
    # nvcc from the cuda-toolkit[nvcc] wheel lives inside site-packages
    CUDA_HOME="$(python -c 'import nvidia, os; print(os.path.join(os.path.dirname(nvidia.__path__[0]), "nvidia", "cu13"))')"
    export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH"
fi
MAX_JOBS="${MAX_JOBS:-4}" python -m pip install --no-build-isolation --no-cache-dir \
    causal-conv1d==1.7.0 \
    mamba-ssm==2.3.2.post1 \
    flash-attn==2.8.3.post2
python -c "import torch, mamba_ssm, causal_conv1d, flash_attn, fla; print('train env: torch', torch.__version__, 'CUDA', torch.version.cuda)"
