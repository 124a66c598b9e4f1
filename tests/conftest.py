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


# The longest test files first (with `-n 2 --dist loadfile --no-loadscope-reorder`, the Makefile's
# test target, workers take files in this order): a worker waiting on the Slurm cluster's
# scheduling starts at once, beside the other worker's CPU-bound files, and no long file is left
# to run alone at the end. By their durations in a CI run (seconds, two workers): Slurm ~620,
# trust ~330, cell jobs ~320, workflow ~270, numerics ~220; every other file under ~90.
FIRST = ("test_slurm.py", "test_trust_workflow.py", "test_cell_jobs.py", "test_workflow.py", "test_numerics.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: every other order kept
