"""The kernel packages of `make gpu-verify` (arrepro.cluster.gpuverify) installed from the carried
folder, on a GPU machine without network.

The carried folder (`make gpu-carry`, git-ignored, ``CARRY``) holds fla-core and
flash-linear-attention 0.6.0 (wheels: pure Python on Triton) and the source archives of
causal-conv1d 1.6.0 and mamba-ssm 2.3.1 (envs/gpu-carry-src.txt); workflow/ the wheels the
optional paper cell needs to run Snakemake on a machine without it (envs/gpu-carry.txt).

The install (``Install``), into a folder put first on sys.path and PYTHONPATH (nothing of the
machine's own Python environment changes):

* the wheels, and mamba-ssm's Python code without its CUDA extension (``MAMBA_SKIP_CUDA_BUILD``):
  its Triton kernels (Mamba2's chunked scan) run whatever happens to the builds;
* in the background meanwhile, causal-conv1d's and mamba-ssm's CUDA extensions built from their
  source archives for this one GPU's architecture (the packages' setup.py hard-code nine
  architectures for CUDA 13 and pass them as -gencode flags, which make torch ignore
  TORCH_CUDA_ARCH_LIST: they build through an nvcc that replaces every target by the device's,
  ``filtering_cuda_home``, as envs/train.post-deploy.sh does), ``MAX_JOBS`` compile jobs each,
  stopped at ``--build-timeout`` seconds from the start; a package whose build did not finish
  (or failed) is reported and its CUDA kernels are not compared (causal-conv1d stays
  uninstalled: the mixers then run its portable conv, and say so).
"""
from __future__ import annotations

import sys
from pathlib import Path

CARRY = ".gpu-carry"
SOURCE_PACKAGES = {  # distribution -> (the prefix of its build variables, the CUDA extension module)
    "causal-conv1d": ("CAUSAL_CONV1D", "causal_conv1d_cuda"),
    "mamba-ssm": ("MAMBA", "selective_scan_cuda"),
}
# which distribution provides a kernel, and whether it needs that distribution's CUDA extension
KERNEL_SOURCE = {
    "causal_conv1d_fn": ("causal-conv1d", True),
    "selective_scan_fn": ("mamba-ssm", True),
    "mamba_chunk_scan_combined": ("mamba-ssm", False),
    "chunk_delta_rule": ("fla-core", False),
    "chunk_gated_delta_rule": ("fla-core", False),
    "parallel_based": ("fla-core", False),
}
# precision -> (output, gradient) tolerance, relative. fp32: the interpreter tests' FP32_TOL
# (tests/test_kernels_interpret.py); tf32: their fp16 tolerances FWD_TOL_FP16, GRAD_TOL_FP16 (TF32
# keeps fp16's 10 mantissa bits); bf16: tests/test_mixers.py's KERNEL_TOL and 5 KERNEL_TOL


def run_logged(cmd: list[str], log_path: Path, env: dict | None = None, timeout: float | None = None,
               cwd: Path | None = None, grace: float = 0.0) -> tuple[int | None, float]:
    """Run ``cmd`` with its output in ``log_path``: (exit status, or None if it was stopped at
    ``timeout`` seconds, with its whole process group: SIGTERM, then after ``grace`` seconds
    SIGKILL; seconds it ran)."""
    import os
    import signal
    import subprocess
    import time

    t0 = time.monotonic()
    with open(log_path, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            return p.wait(timeout=timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            if grace > 0:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=grace)
                    return None, time.monotonic() - t0
                except subprocess.TimeoutExpired:
                    pass
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return None, time.monotonic() - t0


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def filtering_cuda_home(real: Path, arch: str, where: Path) -> Path:
    """A CUDA_HOME that is ``real`` but for bin/nvcc, which compiles for ``arch`` ("90": sm_90)
    only: every -gencode / --generate-code target a build passes is replaced by this one. Adds the
    ``lib64/libcudart.so`` link that torch's CUDAExtension links against where the toolkit has
    only ``libcudart.so.N`` (a pip-installed toolkit)."""
    if not arch.isdigit():
        raise ValueError(f"arch {arch!r}: a compute capability without the dot, e.g. 90")
    home = where / f"cuda-home-sm{arch}"
    if home.exists():
        import shutil

        shutil.rmtree(home)
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"""#!/usr/bin/env bash
# nvcc for sm_{arch} only (arrepro.cluster.gpuinstall.filtering_cuda_home): the build's targets replaced
args=()
targets=0
while [ $# -gt 0 ]; do
    case "$1" in
        -gencode|--generate-code) targets=1; shift 2 ;;
        -gencode=*|--generate-code=*) targets=1; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
[ $targets = 1 ] && args+=(-gencode arch=compute_{arch},code=sm_{arch})
exec "{real}/bin/nvcc" "${{args[@]}}"
""")
    nvcc.chmod(0o755)
    if not any((real / lib / "libcudart.so").exists() for lib in ("lib64", "lib")):
        found = sorted(real.glob("lib*/libcudart.so.*"))
        if found:
            if (home / "lib64").is_symlink():
                (home / "lib64").unlink()  # the link to real/lib64, replaced by a folder of links
            (home / "lib64").mkdir()
            for lib in ("lib64", "lib"):
                for f in (real / lib).glob("*") if (real / lib).is_dir() else ():
                    if not (home / "lib64" / f.name).exists():
                        (home / "lib64" / f.name).symlink_to(f)
            (home / "lib64" / "libcudart.so").symlink_to(found[0])
    return home


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-index", "--no-deps",
            "--no-build-isolation", "--no-compile", "--no-cache-dir", *args]


def source_archive(carry: Path, dist: str) -> Path | None:
    found = sorted((carry / "src").glob(dist.replace("-", "_") + "-*.tar.gz"))
    return found[-1] if found else None


def use_site(site: Path) -> None:
    """Put ``site`` first on this process's path and its children's PYTHONPATH."""
    import importlib
    import os

    site.mkdir(parents=True, exist_ok=True)
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(site)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *parts])
    importlib.invalidate_caches()


class Install:
    """The kernel packages' install (the module's docstring): ``start`` installs the wheels and the
    packages' Python code and starts the CUDA builds; ``finish`` waits for them until the time
    limit and installs what was built. ``status[dist]`` says what is there: "installed",
    "built", "Python only (...)" or "not installed (...)"."""

    def __init__(self, carry: Path, site: Path, work: Path, *, arch: str | None, cuda_home: Path | None,
                 build_timeout: float, jobs: int, log=print):
        self.carry, self.site, self.work, self.log = carry, site, work, log
        self.arch, self.cuda_home, self.build_timeout, self.jobs = arch, cuda_home, build_timeout, jobs
        self.status: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.builds: dict[str, tuple] = {}
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        import os
        import subprocess
        import time

        self.work.mkdir(parents=True, exist_ok=True)
        use_site(self.site)
        self.t0 = time.monotonic()
        wheels = sorted((self.carry / "wheels").glob("*.whl"))
        if not wheels:
            raise SystemExit(f"gpu-verify: no wheels under {self.carry / 'wheels'}: run `make gpu-carry` where the "
                             f"package registry is reachable, and carry {self.carry}")
        log_path = self.work / "install.log"
        code, secs = run_logged(_pip("--target", str(self.site), "--upgrade", *map(str, wheels)), log_path)
        if code != 0:
            raise SystemExit(f"gpu-verify: installing the carried wheels failed:\n{tail(log_path)}")
        for w in wheels:
            self.status[w.name.split("-")[0].replace("_", "-")] = "installed"
        self.log(f"installed {len(wheels)} wheels in {secs:.0f} s: {', '.join(w.name for w in wheels)}")
        for dist, (var, _) in SOURCE_PACKAGES.items():
            sdist = source_archive(self.carry, dist)
            if sdist is None:
                self.status[dist] = f"not installed (no source archive under {self.carry / 'src'})"
                continue
            self.logs[dist] = self.work / f"build-{dist}.log"
            if self.cuda_home is None or self.arch is None:
                self.status[dist] = "not installed (no CUDA toolkit: no build)"
            else:
                # PATH: this interpreter's folder first, for its ninja (torch builds in parallel, MAX_JOBS,
                # only with ninja)
                env = dict(os.environ, **{f"{var}_FORCE_BUILD": "TRUE", "CUDA_HOME": str(self.cuda_home),
                                          "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                                   os.environ.get("PATH", "")]),
                                          "MAX_JOBS": str(self.jobs),
                                          "TORCH_CUDA_ARCH_LIST": f"{self.arch[:-1]}.{self.arch[-1]}"})
                out = self.work / f"wheel-{dist}"
                if out.exists():  # an earlier run's wheel is no evidence of this build
                    import shutil

                    shutil.rmtree(out)
                cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-index", "--no-deps",
                       "--no-build-isolation", "--no-cache-dir", "-w", str(out), str(sdist)]
                with open(self.logs[dist], "ab") as f:
                    f.write(("$ " + " ".join(cmd) + "\n").encode())
                    f.flush()
                    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                self.builds[dist] = (p, out)
                self.status[dist] = "not installed (its CUDA build is running)"
                self.log(f"building {dist}'s CUDA extension for sm_{self.arch} in the background "
                         f"(MAX_JOBS={self.jobs}, at most {self.build_timeout:.0f} s): {self.logs[dist]}")
        # mamba-ssm's Python code (its Triton kernels), whatever its CUDA build does
        sdist = source_archive(self.carry, "mamba-ssm")
        if sdist is not None:
            env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE")
            code, secs = run_logged(_pip("--target", str(self.site), "--upgrade", str(sdist)), log_path, env=env)
            if code != 0:
                raise SystemExit(f"gpu-verify: installing mamba-ssm's Python code failed:\n{tail(log_path)}")
            self.status["mamba-ssm"] = f"Python only ({self.status['mamba-ssm'][len('not installed ('):-1]})"
            self.log(f"installed mamba-ssm's Python code (Triton kernels) in {secs:.0f} s")

    def finish(self) -> None:
        import os
        import signal
        import subprocess
        import time

        for dist, (p, out) in self.builds.items():
            left = self.build_timeout - (time.monotonic() - self.t0)
            try:
                code = p.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                code = None
            self.seconds[dist] = time.monotonic() - self.t0
            wheel = sorted(out.glob("*.whl"))
            if code == 0 and wheel:
                rc, _ = run_logged(_pip("--target", str(self.site), "--upgrade", str(wheel[0])), self.logs[dist])
                if rc == 0:
                    self.status[dist] = f"built for sm_{self.arch} in {self.seconds[dist]:.0f} s"
                    continue
                why = f"the built wheel did not install: {tail(self.logs[dist], 3)}"
            elif code is None:
                why = f"build stopped at the {self.build_timeout:.0f} s limit"
            else:
                why = f"build failed (exit {code}): {tail(self.logs[dist], 5)}"
            self.status[dist] = (f"Python only ({why})" if dist == "mamba-ssm" else f"not installed ({why})")
            self.log(f"{dist}: {self.status[dist]}")
        use_site(self.site)

    def usable(self, name: str) -> str | None:
        """Why kernel ``name`` cannot run from what was installed (None: it can)."""
        dist, needs_cuda = KERNEL_SOURCE[name]
        state = self.status.get(dist, "not installed (not carried)")
        if state.startswith("not installed"):
            return f"{dist} {state}"
        if needs_cuda and not state.startswith("built"):
            return f"{dist}'s CUDA extension: {state}"
        return None


def install_workflow(carry: Path, site: Path, log_path: Path) -> None:
    """Snakemake and what it needs beyond the GPU machine's own packages (``carry``/workflow: wheels
    and connection-pool's source archive, envs/gpu-carry.txt), into ``site``."""
    found = sorted((carry / "workflow").glob("*.whl")) + sorted((carry / "workflow").glob("*.tar.gz"))
    if not found:
        raise SystemExit(f"gpu-verify --train-cell: nothing under {carry / 'workflow'}: `make gpu-carry` first")
    code, _ = run_logged(_pip("--target", str(site), "--upgrade", *map(str, found)), log_path)
    if code != 0:
        raise SystemExit(f"gpu-verify: installing Snakemake from {carry / 'workflow'} failed:\n{tail(log_path)}")
    use_site(site)
