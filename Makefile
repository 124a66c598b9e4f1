# The two commands of the README:
#   make demo   set up .venv and run the CPU demo: every figure and table under results/demo/
#   make test   set up .venv (and .venv-kernels) and run the tests (the kernel packages' own code
#               under Triton's interpreter first: `make kernels-cpu`)
# Both work on a fresh machine with Python 3.11 (torch's CPU build comes from the local wheel).
VENV   := .venv
PY     := $(VENV)/bin/python
KVENV  := .venv-kernels
KPY    := $(KVENV)/bin/python
CORES  ?= 2
export PATH := $(abspath $(VENV))/bin:$(PATH)

SCALE  ?= demo

.PHONY: demo test setup bench clean report kernels-cpu gpu-check protocol-check
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Every external program the demo needs (TeX for the paper) is checked first: installed with
# apt-get as root, else the command that installs it is printed and nothing runs.
demo: setup
	$(PY) -m arrepro.cluster.tools --install
	snakemake --cores $(CORES) --rerun-incomplete --keep-going --show-failed-logs all

# The learning-rate protocol checked on the scale's real cells: the literal grid (lr_protocol: grid)
# trained beside the search, its statistic beside the search's, setting by setting (docs/protocol.md).
protocol-check: setup
	snakemake --cores $(CORES) --rerun-incomplete results/$(SCALE)/tables/protocol_check.csv --config scale=$(SCALE)
	cat results/$(SCALE)/tables/protocol_check.md

# One HTML file with every figure and table of a finished scale, captioned: results/$(SCALE)/report.html
report: setup
	snakemake --report results/$(SCALE)/report.html --config scale=$(SCALE)

test: setup $(KVENV)/.installed
	$(KPY) -m pytest -q -p no:cacheprovider tests/test_kernels_interpret.py
	$(PY) -m pytest -q -n $(CORES) --dist loadfile --durations=12

bench: setup
	$(PY) bench/bench_train_step.py
	$(PY) bench/bench_data.py

# The kernel packages' own code on CPU (tests/test_kernels_interpret.py): fla's and mamba-ssm's
# Triton kernels under Triton's interpreter, mamba-ssm's and causal-conv1d's references, against
# the portable paths. A separate venv: the packages install without compiling CUDA code
# (*_SKIP_CUDA_BUILD), pinned in envs/kernels-cpu.txt, every dependency listed (--no-deps).
NOCUDA := MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE

$(KVENV)/.installed: envs/kernels-cpu.txt
	python3 -m venv $(KVENV)
	$(KPY) -m pip install -q torch==2.13.0
	$(KPY) -m pip install -q --no-deps -c envs/kernels-cpu.txt setuptools wheel packaging
	$(NOCUDA) $(KPY) -m pip install -q --no-deps --no-build-isolation -r envs/kernels-cpu.txt
	$(KPY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

kernels-cpu: $(KVENV)/.installed
	$(KPY) -m pytest -q -p no:cacheprovider tests/test_kernels_interpret.py

# The first command on a GPU node: sets up the train env (.venv-gpu, envs/gpu-env.sh), runs the
# kernel-vs-portable tests on the GPU (a mismatch stops here), then trains one short cell of every
# model family and prints family, path used, tokens/s, MFU, peak memory (arrepro.cluster.gpucheck).
# GPU_CHECK_ARGS passes options, e.g. GPU_CHECK_ARGS="--precision fp32 --require-kernels".
GVENV := .venv-gpu
GPU_CHECK_ARGS ?=

$(GVENV)/.installed: envs/train.yaml envs/train.post-deploy.sh envs/gpu-env.sh
	bash envs/gpu-env.sh $(GVENV)
	touch $@

gpu-check:
	@nvidia-smi -L >/dev/null 2>&1 || { echo "make gpu-check: no NVIDIA GPU on this machine (nvidia-smi -L fails); run it on a GPU node, e.g. srun --gres=gpu:1 --pty make gpu-check" >&2; exit 1; }
	$(MAKE) $(GVENV)/.installed
	$(GVENV)/bin/python -m pytest -q -rs -p no:cacheprovider tests/test_mixers.py -k kernel_matches_portable \
		|| { echo "make gpu-check: a kernel path disagrees with its portable path (above)" >&2; exit 1; }
	$(GVENV)/bin/python scripts/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf results .snakemake
