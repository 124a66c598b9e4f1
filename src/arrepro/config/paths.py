"""Where a scale's shared files live and how the workflow names their contents, where arrepro.config.grid
(the cells' folders, a scale's outputs) does not say: a dataset's folder, shared by every scale
that defines the task alike (``results/data/<task id>``: its train.npz and test.npz), and a file's
sha256, which the workflow's own records keep (a dataset's manifest, the cell results a search's
plan read: arrepro.cluster.preflight, arrepro.search.plans).

(The train and data rules' shell commands spell the dataset's folder themselves: a rule's shell
text is part of what decides whether Snakemake reruns its jobs.)
"""
from __future__ import annotations

import hashlib
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


def file_sha256(path) -> str:
    """The sha256 of a file's bytes, read in blocks (``hashlib.file_digest``)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
