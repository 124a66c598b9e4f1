"""The repository copied for a test's own workflow run, with the fused CPU kernels' compiled code.

Every copy used to compile the numba kernels from nothing: its training server's warm-up and
every job outside a server (Slurm's, forced ones) paid tens of CPU-seconds before a step.
numba 0.68 keys a cached kernel by its source file's content (a SHA-256 of the file), the
signature and the code generation, never by the file's path or time, so the checkout's compiled
kernels are valid in a copy of the same files and are copied with them; a kernel edited in the
copy misses the cache and compiles as ever. The checkout's cache is filled once per test session
(``warm_kernel_cache``: the training server's warm-up, which compiles every kernel variant a cell
uses, in a process of its own, one worker at a time).

A finished run of the tiny scale is built once per test session and shared (``finished_run``):
the tests that only read one, or edit a copy of one, used to run the workflow from nothing in
each test file (a minute of CPU or more each). With pytest-xdist each worker runs a session
fixture itself, so the run is built in the session's own temporary folder, which both workers'
folders are inside, under a file lock: the first worker to ask builds it, the other waits and
finds it. Nothing runs in the shared folder after it is built: each test module (or test)
takes its own copy (``private_copy``)."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

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
    if whole:
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(*WHOLE_IGNORED))
    else:
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("Snakefile", "config.yaml"):
            shutil.copy2(ROOT / name, dst / name)
        for name in WORKFLOW:
            if (ROOT / name).exists():
                shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns(*IGNORED))
    return with_compiled_kernels(dst)


def with_compiled_kernels(dst: Path) -> Path:
    """The workflow folder ``dst`` with the checkout's compiled kernels (filled once per session)."""
    warm_kernel_cache()
    copy_kernel_cache(ROOT / KERNELS, dst / KERNELS)
    return dst


def copy_kernel_cache(src: Path, dst: Path) -> None:
    """numba's cache folder ``src`` in ``dst`` (added to any entries already there): its index and
    data files, not its temporary ones."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.pyc", "*.tmp.*"), copy_function=_copy_cache_file,
                    dirs_exist_ok=True)


def _copy_cache_file(src: str, dst: str) -> None:
    """Copy one compiled-kernel file, or nothing if it vanished: a test in the other xdist worker
    may compile a kernel variant in the checkout meanwhile, and numba writes each entry to a
    temporary file it then renames, so a file listed a moment ago can be gone. A missing cache
    entry only means the copy compiles that variant itself."""
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass


def private_copy(src: Path, tmp_path: Path) -> Path:
    """A copy of a workflow folder, results and Snakemake's records included (``tmp_path``/wf)."""
    dst = tmp_path / "wf"
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    return dst


def session_folder(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this test session sees: the session's base temporary
    folder (each worker's own is inside it, xdist's ``popen-gwN``); without xdist, the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def finished_run(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``build`` makes (a workflow copy run to its end), built once per
    test session for every module and worker that asks: the first builds it under a file lock,
    the others wait for the lock and find it done (a failed build is tried again by the next).
    Read it or copy it (``private_copy``): never run anything in it."""
    root = session_folder(tmp_path_factory)
    wd, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(wd, ignore_errors=True)
            build(wd)
            done.touch()
    return wd
