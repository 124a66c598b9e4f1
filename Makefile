# The two commands of the README:
#   make demo   set up .venv and run the CPU demo: every figure and table under results/demo/
#   make test   set up .venv (and .venv-kernels) and run the tests (the kernel packages' own code
#               under Triton's interpreter first: `make kernels-cpu`)
# Both work on a fresh machine with Python 3.11. They use every core of the machine (each training
# cell takes one core, one thread); `make demo CORES=4` uses 4. torch comes from pip's package
# index as it is configured: where that serves PyPI's default wheel, it is the CUDA build
# (gigabytes); TORCH_INDEX=URL installs torch from that index instead (PyTorch's CPU wheel index
# for the CPU build: docs/guides/quickstart.md).
VENV   := .venv
PY     := $(VENV)/bin/python
KVENV  := .venv-kernels
KPY    := $(KVENV)/bin/python
CORES  ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
TORCH_INDEX ?=
# the Python the venvs are made with (3.11 or newer)
PYTHON ?= python3
TORCH  := torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
export PATH := $(abspath $(VENV))/bin:$(PATH)

SCALE  ?= demo

.PHONY: demo test setup bench clean report kernels-cpu gpu-check protocol-check gpu-carry gpu-verify
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Every external program the demo needs (TeX for the paper) is checked first: installed with
# apt-get as root, else the command that installs it is printed and nothing runs. When it ends:
# `python -m arrepro.cluster.runcost demo` prints what it cost and how long it takes on N cores.
demo: setup
	$(PY) -m arrepro.cluster.tools --install
	snakemake --cores $(CORES) --rerun-incomplete --keep-going --show-failed-logs all

# The learning-rate protocol checked on the scale's real cells: the literal grid (lr_protocol: grid)
# trained beside the search, its statistic beside the search's, setting by setting (docs/reference/protocol.md).
# Exits 1 where a search falls short of the literal grid beyond the seed spread (a check that can fail).
protocol-check: setup
	snakemake --cores $(CORES) --rerun-incomplete results/$(SCALE)/tables/protocol_check.csv --config scale=$(SCALE)
	cat results/$(SCALE)/tables/protocol_check.md
	$(PY) scripts/protocol_check.py results/$(SCALE)/tables/protocol_check.csv

# One HTML file with every figure and table of a finished scale, captioned: results/$(SCALE)/report.html
report: setup
	snakemake --report results/$(SCALE)/report.html --config scale=$(SCALE)

test: setup $(KVENV)/.installed
	$(KPY) -m pytest -q -p no:cacheprovider tests/test_kernels_interpret.py
	$(PY) -m pytest -q -n $(CORES) --dist loadfile --no-loadscope-reorder --durations=30

bench: setup
	$(PY) bench/bench_train_step.py
	$(PY) bench/bench_data.py

# The kernel packages' own code on CPU (tests/test_kernels_interpret.py): fla's and mamba-ssm's
# Triton kernels under Triton's interpreter, mamba-ssm's and causal-conv1d's references, against
# the portable paths. A separate venv: the packages install without compiling CUDA code
# (*_SKIP_CUDA_BUILD), pinned in envs/kernels-cpu.txt, every dependency listed (--no-deps).
NOCUDA := MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE

$(KVENV)/.installed: envs/kernels-cpu.txt
	$(PYTHON) -m venv $(KVENV)
	$(KPY) -m pip install -q $(TORCH)
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

# The kernel packages on a GPU machine without network (docs/reference/cluster.md, "The kernels on a GPU
# machine"). `make gpu-carry`, where the package registry is reachable: the folder that travels
# (.gpu-carry, git-ignored, ~30 MB): the source archives of causal-conv1d and mamba-ssm (their
# metadata step imports torch: .venv's; *_SKIP_CUDA_BUILD, or it fails without CUDA), fla's wheels,
# and Snakemake's for the optional paper cell (envs/gpu-carry*.txt). `make gpu-verify`, on the GPU
# machine with .gpu-carry carried: installs fla, builds causal-conv1d's and mamba-ssm's CUDA
# extensions for that GPU only (a time limit; the Triton kernels in any case), compares every kernel
# path with its portable path at a paper shape (forward, every gradient), times one training step
# per family, writes verify.md / verify.json under GPU_VERIFY_OUT ($OUT where set); a mismatch
# fails. GPU_VERIFY_ARGS passes options (`python scripts/gpu_check.py verify --help`), e.g.
# "--train-cell" (then the first paper cell through the train rule).
CARRY      := .gpu-carry
WHEEL_TAGS := --only-binary :all: --python-version 3.12 --implementation cp --abi cp312 \
	--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
GPU_PY          ?= python3
GPU_VERIFY_ARGS ?=
GPU_VERIFY_OUT  ?= $(if $(OUT),$(OUT),results/gpu-verify)

gpu-carry: $(CARRY)/.complete

$(CARRY)/.complete: envs/gpu-carry.txt envs/gpu-carry-src.txt envs/gpu-carry-workflow.txt | $(VENV)/.installed
	rm -rf $(CARRY) && mkdir -p $(CARRY)/src $(CARRY)/wheels $(CARRY)/workflow
	MAMBA_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE $(PY) -m pip download -q --no-deps \
		--no-binary :all: --no-build-isolation -d $(CARRY)/src -r envs/gpu-carry-src.txt
	$(PY) -m pip download -q --no-deps $(WHEEL_TAGS) -d $(CARRY)/wheels -r envs/gpu-carry.txt
	grep -v '^connection-pool==' envs/gpu-carry-workflow.txt > $(CARRY)/workflow-wheels.txt
	$(PY) -m pip download -q --no-deps $(WHEEL_TAGS) -d $(CARRY)/workflow -r $(CARRY)/workflow-wheels.txt
	$(PY) -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d $(CARRY)/workflow \
		$$(grep '^connection-pool==' envs/gpu-carry-workflow.txt)
	rm $(CARRY)/workflow-wheels.txt
	du -sh $(CARRY)
	touch $@

gpu-verify:
	@nvidia-smi -L >/dev/null 2>&1 || { echo "make gpu-verify: no NVIDIA GPU on this machine (nvidia-smi -L fails); on a CPU the same flow runs with stand-ins: tests/test_gpucheck.py" >&2; exit 1; }
	@test -f $(CARRY)/.complete || { echo "make gpu-verify: no $(CARRY): run make gpu-carry where the package registry is reachable, and carry $(CARRY)" >&2; exit 1; }
	PYTHONPATH=$(CURDIR)/src PYTHONUNBUFFERED=1 $(GPU_PY) scripts/gpu_check.py verify --carry $(CARRY) \
		--out $(GPU_VERIFY_OUT) --work /tmp/gpu-verify $(GPU_VERIFY_ARGS)

clean:
	rm -rf results .snakemake
