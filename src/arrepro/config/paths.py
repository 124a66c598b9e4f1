"""Where a scale's shared files live and how the workflow names their contents, where arrepro.config.grid
(the cells' folders, a scale's outputs) does not say: a dataset's folder, shared by every scale
that defines the task alike (``results/data/<task id>``: its train.npz and test.npz; the data and
train rules, the config checks and preflight read it here), and the package's and the
repository's own folders. (The data and train rules' shell commands spell the dataset's folder
too: a command's text is part of what decides whether Snakemake reruns a job, so changing them
would retrain every cell.)
"""
from __future__ import annotations

from pathlib import Path

# the package's folder (src/arrepro) and the repository's: one home, so that no module finds them
# by its own depth (a module that moves keeps its code, and with it its code digest)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_ROOT.parents[1]

DATA_ROOT = "results/data"
SPLITS = ("train", "test")


def data_dir(task: str) -> str:
    """A dataset's folder: ``task`` is its id (``Grid.tasks``' keys) or the wildcard ``{task}``."""
    return f"{DATA_ROOT}/{task}"


def data_files(task: str) -> dict[str, str]:
    """A dataset's files, by split: ``{"train": .../train.npz, "test": .../test.npz}``."""
    return {split: f"{data_dir(task)}/{split}.npz" for split in SPLITS}
