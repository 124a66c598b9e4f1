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
