#!/usr/bin/env bash
# Creates the `train` env of the workflow at PREFIX for `make gpu-check`: with conda where there is
# one (exactly what Snakemake's --sdm conda makes: envs/train.yaml, then envs/train.post-deploy.sh),
# else as a venv of Python 3.11 (the wheels are cp311) with train.yaml's pip pins. Adds the test
# runner (pinned in envs/kernels-cpu.txt). Usage: bash envs/gpu-env.sh PREFIX
set -euo pipefail
PREFIX="${1:?usage: gpu-env.sh PREFIX}"
HERE="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$PREFIX"
if command -v conda >/dev/null 2>&1; then
    conda env create -q -p "$PREFIX" -f "$HERE/train.yaml"
    RUN=(conda run --no-capture-output -p "$PREFIX")
else
    PY="${PYTHON:-python3.11}"
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
        echo "gpu-env: needs conda or Python 3.11 (the kernel wheels are cp311); set PYTHON=/path/to/python3.11" >&2
        exit 1
    fi
    "$PY" -m venv "$PREFIX"
    sed -n 's/^      - \([A-Za-z0-9].*==.*\)$/\1/p' "$HERE/train.yaml" > "$PREFIX/requirements.txt"
    "$PREFIX/bin/python" -m pip install -q "$(grep '^pip==' <(sed -n 's/^  - //p' "$HERE/train.yaml"))"
    "$PREFIX/bin/python" -m pip install -q -r "$PREFIX/requirements.txt"
    RUN=(env PATH="$PREFIX/bin:$PATH")
fi
"${RUN[@]}" bash "$HERE/train.post-deploy.sh"
"${RUN[@]}" python -m pip install -q --no-deps -c "$HERE/kernels-cpu.txt" pytest iniconfig pluggy pygments
"${RUN[@]}" python -m pip install -q --no-deps -e "$HERE/.."  # this package (as make setup installs it)
