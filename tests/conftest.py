from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

# The tests' tensors are tiny: one thread avoids oversubscription (and is much faster on a
# loaded 2-core machine).
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]  # the package itself is installed (make setup: pip install -e .)


@pytest.fixture(scope="session")
def config():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def config_models():
    return yaml.safe_load((ROOT / "config.yaml").read_text())["models"]


# ---------------------------------------------------------------- the longest files first
# `make test` hands whole files to the xdist workers in collection order (--dist loadfile
# --no-loadscope-reorder; xdist's default order is by test count). The files that take longest
# (from the suite's own summary below, on a 2-core Intel Xeon) go first, so that what a worker
# takes last is short and the workers end together; the rest keep pytest's order.
SLOW_FIRST = ("test_slurm.py", "test_numerics.py", "test_workflow.py", "test_trust_workflow.py", "test_mixers.py",
              "test_cell_jobs.py", "test_hostile_config.py", "test_trainserver.py", "test_paper.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable


# ---------------------------------------------------------------- where the suite's time goes
# Under pytest-xdist the controller sums each worker's test time (setup, call and teardown), and
# prints it with the test files that took longest: how evenly `make test` spreads its work, and
# where its minutes go (docs/reference/tests.md).
_busy: Counter[str] = Counter()  # worker -> seconds
_files: Counter[str] = Counter()  # test file -> seconds


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set on the controller only
    if node is None:
        return
    _busy[node.gateway.id] += report.duration
    _files[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _busy:
        return
    tr = terminalreporter
    tr.write_sep("=", "test time by worker and by file")
    tr.write_line("workers: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_busy.items())))
    tr.write_line("files: " + ", ".join(f"{Path(f).name} {s:.0f} s" for f, s in _files.most_common(15)))
