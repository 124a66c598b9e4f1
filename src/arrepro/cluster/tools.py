"""External programs a run needs, checked before any job starts (not after 15 minutes of
training): the paper's TeX engine. ``python -m arrepro.cluster.tools [--install]`` checks them; with
``--install``, as root where apt-get exists, installs Debian's packages (as tests/test_paper.py
does); otherwise it prints the one command that installs them and exits 1."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

# pdflatex + bibtex from Debian, or tectonic (what envs/paper.yaml brings under --sdm conda)
TEX_DEBIAN = ["texlive-latex-base", "texlive-latex-recommended", "texlive-fonts-recommended"]
TEX_INSTALL = f"apt-get install -y --no-install-recommends {' '.join(TEX_DEBIAN)}"


def missing_tex() -> str | None:
    """None if the paper rule has a TeX engine on PATH, else what to do about it."""
    if shutil.which("tectonic") or (shutil.which("pdflatex") and shutil.which("bibtex")):
        return None
    sudo = "" if os.geteuid() == 0 else "sudo "
    return (f"the paper (results/<scale>/paper.pdf) needs pdflatex and bibtex, and none is on PATH; install "
            f"them with:\n    {sudo}{TEX_INSTALL}\n(or put tectonic on PATH, or run Snakemake with --sdm conda)")


LOCK_WAIT_S = 900  # how long apt-get waits for another apt-get's lock


def can_apt() -> bool:
    """Whether this process may install Debian packages: root, with apt-get on PATH."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(packages: list[str], capture: bool = False) -> str | None:
    """Install Debian packages with apt-get (root only). None on success, else why not (for a
    message or a test's skip reason). ``capture`` keeps apt-get's output out of the terminal."""
    if not can_apt():
        return f"needs root and apt-get: apt-get install {' '.join(packages)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]  # another install (a test beside this one) finishes first
    for cmd in (["apt-get", *wait, "update", "-qq"],
                ["apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends", *packages]):
        p = subprocess.run(cmd, env=env, capture_output=capture, text=True)
        if p.returncode != 0:
            return f"{' '.join(cmd)} failed" + (f": {p.stderr[-500:]}" if capture else "")
    return None


def install_tex() -> bool:
    """Install Debian's TeX packages (root and apt-get only); True if TeX is there afterwards."""
    if not can_apt():
        return False
    print(f"{__spec__.name}: installing TeX for the paper: {TEX_INSTALL}", file=sys.stderr, flush=True)
    return apt_install(TEX_DEBIAN) is None and missing_tex() is None


def main(argv: list[str]) -> int:
    problem = missing_tex()
    if problem and "--install" in argv and install_tex():
        problem = None
    if problem:
        print(f"{__spec__.name}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
