# The two commands of the README:
#   make demo   set up .venv and run the CPU demo: every figure and table under results/demo/
#   make test   set up .venv and run the tests
# Both work on a fresh machine with Python 3.11 (torch's CPU build comes from the local wheel).
VENV   := .venv
PY     := $(VENV)/bin/python
CORES  ?= 2
export PATH := $(abspath $(VENV))/bin:$(PATH)

SCALE  ?= demo

.PHONY: demo test setup bench clean report
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Every external program the demo needs (TeX for the paper) is checked first: installed with
# apt-get as root, else the command that installs it is printed and nothing runs.
demo: setup
	$(PY) -m arrepro.tools --install
	snakemake --cores $(CORES) --rerun-incomplete --keep-going --show-failed-logs all

# One HTML file with every figure and table of a finished scale, captioned: results/$(SCALE)/report.html
report: setup
	snakemake --report results/$(SCALE)/report.html --config scale=$(SCALE)

test: setup
	$(PY) -m pytest -q --durations=12

bench: setup
	$(PY) scripts/bench_train_step.py
	$(PY) scripts/bench_data.py

clean:
	rm -rf results .snakemake
