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

