#!/usr/bin/env bash
# Runs inside the freshly created `train` env (Snakemake does this after `conda env create`; `make
# gpu-check` after creating its venv). Installs the compiled kernel packages against this env's
# torch 2.8.0 (CUDA 12.8; envs/train.yaml says why this combination):
#   --no-build-isolation  their setup.py imports the env's torch (an isolated build would get another);
#   --no-deps             nothing unpinned comes in (envs/train.yaml has every dependency).
# Each setup.py first downloads its prebuilt release wheel (cu12torch2.8cxx11abiTRUE-cp311, seconds).
# Where that fails (a node without internet: setup.py then stops at the download error; a deleted
# release asset), the package is compiled from source, which needs a CUDA 12.x toolkit on the node
# (`module load cuda/12.x`, or CUDA_HOME; pip has no nvcc 12: nvidia-cuda-nvcc-cu12 ships only
# ptxas), and only for the GPU architectures of ARREPRO_CUDA_ARCHS: compute capabilities without
# the dot, ';'-separated, default "80;90" (A100, H100; 86 = A40/A10/RTX 30xx, 89 = L40S/L4, 100 =
# B200). causal-conv1d and mamba-ssm hard-code six or more architectures and ignore
# TORCH_CUDA_ARCH_LIST, so the build runs through an nvcc that replaces every target it is given
# by these (flash-attn's FLASH_ATTN_CUDA_ARCHS and torch's TORCH_CUDA_ARCH_LIST say the same).
set -euo pipefail
ARCHS="${ARREPRO_CUDA_ARCHS:-80;90}"
if ! [[ "$ARCHS" =~ ^[0-9]{2,3}(;[0-9]{2,3})*$ ]]; then
    echo "ARREPRO_CUDA_ARCHS must look like 80;90 (compute capabilities), got '$ARCHS'" >&2
    exit 2
fi
PIP=(python -m pip install --no-build-isolation --no-deps --no-cache-dir)

# A CUDA_HOME that is the node's toolkit but for bin/nvcc, which compiles for $ARCHS only
cuda_home_for_archs() {
    local real="$1" home
    home="$(python -c 'import sys; print(sys.prefix)')/cuda-home-sm${ARCHS//;/-}"
    rm -rf "$home" && mkdir -p "$home/bin"
    for entry in "$real"/*; do [ "$(basename "$entry")" = bin ] || ln -s "$entry" "$home/"; done
    for tool in "$real"/bin/*; do [ "$(basename "$tool")" = nvcc ] || ln -s "$tool" "$home/bin/"; done
    local gencode="" a
    for a in ${ARCHS//;/ }; do gencode="$gencode -gencode arch=compute_$a,code=sm_$a"; done
    cat > "$home/bin/nvcc" <<NVCC
#!/usr/bin/env bash
# nvcc for ARREPRO_CUDA_ARCHS=$ARCHS only: the -gencode / --generate-code targets a build passes
# are replaced by these (written by envs/train.post-deploy.sh)
args=()
targets=0
while [ \$# -gt 0 ]; do
    case "\$1" in
        -gencode|--generate-code) targets=1; shift 2 ;;
        -gencode=*|--generate-code=*) targets=1; shift ;;
        *) args+=("\$1"); shift ;;
    esac
done
[ \$targets = 1 ] && args+=($gencode)
exec "$real/bin/nvcc" "\${args[@]}"
NVCC
    chmod +x "$home/bin/nvcc"
    if ! [ -e "$real/lib64/libcudart.so" ] && ! [ -e "$real/lib/libcudart.so" ]; then
        # a pip-style toolkit ships only libcudart.so.N, and torch's CUDAExtension links -lcudart:
        # without this the link fails ("cannot find -lcudart", seen with pip's CUDA 13 toolkit)
        rm -f "$home/lib64" && mkdir "$home/lib64"
        for f in "$real"/lib*/*; do ln -sf "$f" "$home/lib64/"; done
        ln -sf "$(ls "$real"/lib*/libcudart.so.* | head -n 1)" "$home/lib64/libcudart.so"
    fi
    echo "$home"
}

# install PACKAGE==VERSION FORCE_BUILD_VARIABLE: the prebuilt wheel, else a source build
install() {
    local spec="$1" force="$2" nvcc real
    if "${PIP[@]}" "$spec"; then return 0; fi
    nvcc="$(command -v nvcc || true)"
    [ -n "${CUDA_HOME:-}" ] && nvcc="$CUDA_HOME/bin/nvcc"
    if [ -z "$nvcc" ] || ! "$nvcc" --version | grep -q "release 12\."; then
        echo "train.post-deploy: no prebuilt wheel of $spec could be installed and no CUDA 12 nvcc is" \
             "available to build it (torch 2.8.0 is a CUDA 12.8 build): give this node internet access" \
             "or load a CUDA 12 toolkit (module load cuda/12.x, or set CUDA_HOME), then rerun" >&2
        return 1
    fi
    real="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
    echo "train.post-deploy: building $spec from source with $real/bin/nvcc for sm $ARCHS"
    env "$force=TRUE" CUDA_HOME="$(cuda_home_for_archs "$real")" MAX_JOBS="${MAX_JOBS:-4}" \
        TORCH_CUDA_ARCH_LIST="$(echo "$ARCHS" | sed -E 's/([0-9]+)([0-9])/\1.\2/g')" \
        FLASH_ATTN_CUDA_ARCHS="$ARCHS" "${PIP[@]}" "$spec"
}

install causal-conv1d==1.6.0 CAUSAL_CONV1D_FORCE_BUILD
install mamba-ssm==2.3.1 MAMBA_FORCE_BUILD
install flash-attn==2.8.3 FLASH_ATTENTION_FORCE_BUILD
python - <<'CHECK'
import importlib.metadata as md
import torch, causal_conv1d, flash_attn, fla  # noqa: F401  (each import fails loudly if broken)
from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # noqa: F401
print("train env: torch", torch.__version__, "CUDA", torch.version.cuda, "|",
      ", ".join(f"{p} {md.version(p)}" for p in ("causal-conv1d", "mamba-ssm", "flash-attn", "fla-core")))
CHECK
