"""The repository copied for a test's own workflow run, with the fused CPU kernels' compiled code.

Every copy used to compile the numba kernels from nothing: its training server's warm-up and
every job outside a server (Slurm's, forced ones) paid tens of CPU-seconds before a step.
numba 0.68 keys a cached kernel by its source file's content (a SHA-256 of the file), the
signature and the code generation, never by the file's path or time, so the checkout's compiled
kernels are valid in a copy of the same files and are copied with them; a kernel edited in the
copy misses the cache and compiles as ever. The checkout's cache is filled once per test session
(``warm_kernel_cache``: the training server's warm-up, which compiles every kernel variant a cell
uses, in a process of its own, one worker at a time)."""
from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = Path("src/arrepro/models/cpu_kernels/__pycache__")
WORKFLOW = ("workflow", "src", "scripts", "paper", "envs", "profiles")
IGNORED = ("__pycache__", "*.egg-info")
# what .gitignore keeps out of the repository, and .git
WHOLE_IGNORED = (".git", ".venv", ".venv-kernels", ".venv-gpu", "results", ".snakemake", ".pytest_cache", ".whl", ".gl",
                 ".gpu-carry", ".pytest-kernel-cache.lock") + IGNORED
_warm = False


def warm_kernel_cache() -> None:
    """Compile (or load) every fused CPU kernel variant into the checkout's numba cache, once."""
    global _warm
    if _warm:
        return
    lock = ROOT / ".pytest-kernel-cache.lock"
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # the other xdist worker waits, then finds the cache full
        p = subprocess.run([sys.executable, "-c", "from arrepro.train.server import _warm_up; _warm_up()"],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"the kernels' warm-up failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
    _warm = True


def copy_workflow(dst: Path, whole: bool = False) -> Path:
    """The workflow's files (``whole``: the repository as a user has it, without results,
    environments or caches) in ``dst``, with the checkout's compiled kernels."""
    warm_kernel_cache()
    if whole:
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(*WHOLE_IGNORED))
    else:
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("Snakefile", "config.yaml"):
            shutil.copy2(ROOT / name, dst / name)
        for name in WORKFLOW:
            if (ROOT / name).exists():
                shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns(*IGNORED))
    shutil.copytree(ROOT / KERNELS, dst / KERNELS, ignore=shutil.ignore_patterns("*.pyc"))
    return dst
