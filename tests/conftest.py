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
# where its minutes go (docs/tests.md).
_busy: dict[str, float] = {}
_files: dict[str, float] = {}


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set on the controller only
    if node is None:
        return
    worker = node.gateway.id
    _busy[worker] = _busy.get(worker, 0.0) + report.duration
    path = report.nodeid.split("::")[0]
    _files[path] = _files.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _busy:
        return
    tr = terminalreporter
    tr.write_sep("=", "test time by worker and by file")
    tr.write_line("workers: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_busy.items())))
    top = sorted(_files.items(), key=lambda kv: -kv[1])[:15]
    tr.write_line("files: " + ", ".join(f"{Path(f).name} {s:.0f} s" for f, s in top))
