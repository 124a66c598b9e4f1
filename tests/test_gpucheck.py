"""`make gpu-check`'s logic on CPU (arrepro.cluster.gpucheck): the check cells train, the table shows
every family with its path, tokens/s and FLOP rate, and the failure rules fire; and `make
gpu-verify`'s whole flow with CPU stand-ins (arrepro.cluster.gpuverify and the modules it runs)."""
import json

import pytest

from arrepro.cluster import gpucheck, gpucompare, gpuinstall, gpuspeed, gpuverify


def test_cpu_check_prints_a_row_per_family(tmp_path, capsys):
    code = gpucheck.main(["--device", "cpu", "--scale", "tiny", "--steps", "10", "--width", "16", "--layers", "1",
                          "--precision", "fp32", "--only", "attention", "mamba", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    rows = json.loads((tmp_path / "table.json").read_text())
    assert [r["family"] for r in rows] == ["attention", "mamba"]
    for r in rows:
        assert r["steps"] == 10 and r["tokens_per_s"] > 0 and r["model_tflops"] > 0
        assert r["mfu"] is None and r["peak_mem_mb"] is None  # no GPU: no peak, no CUDA memory
        assert r["family"] in out and r["model"] in out
    assert "tokens/s" in out.splitlines()[-3] and "MFU" in out


def test_flops_leave_out_the_mixer_time_factor():
    from arrepro.config import costs

    spec = {"task_def": {"kind": "mqar", "seq_len": 64, "num_kv_pairs": 4, "vocab_size": 8192},
            "width": 64, "layers": 2, "model": "hyena", "model_def": {"mixer": "hyena"}, "cost_factor": 1.5}  # its card's
    assert gpucheck.model_flops_per_token(spec) < costs.flops_per_token(spec)
    assert gpucheck.model_flops_per_token(spec) == costs.flops_per_token({**spec, "cost_factor": 1.0})


def test_peak_table_prefers_the_more_specific_name():
    assert gpucheck.peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert gpucheck.peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert gpucheck.peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert gpucheck.peak_tflops("Some GPU", "bf16") is None


def _row(family, paths, diverged=False):
    return {"family": family, "paths": paths, "diverged": diverged}


def test_problems_flag_divergence_and_portable_paths_when_kernels_are_required():
    kernel = {"op": "mamba.selective_scan_fn", "path": "kernel", "package": "mamba-ssm 2.3.1", "reason": ""}
    portable = {"op": "attention.flash_attn_func", "path": "portable", "package": None,
                "reason": "head dim 512 > flash-attn's limit 256: SDPA"}
    rows = [_row("mamba", [kernel]), _row("attention", [portable]), _row("hyena", []), _row("rwkv", [], True)]
    mixers = {"mamba", "attention"}
    assert gpucheck.problems(rows, mixers, require_kernels=False) == ["rwkv: diverged"]
    found = gpucheck.problems(rows, mixers, require_kernels=True)
    assert found[0] == "rwkv: diverged" and len(found) == 2 and "attention" in found[1] and "SDPA" in found[1]
    assert "not recorded" in gpucheck.problems([_row("mamba", None)], mixers, True)[0]


def test_on_the_cpu_the_default_precision_is_fp32_and_bf16_is_refused_naming_the_option(tmp_path, capsys):
    """Issue 38: `--device cpu` with the default precision (bf16, which the training loop refuses on
    the CPU) ended in a raw traceback blaming config.yaml. The default follows the device (fp32 on
    the CPU); bf16 asked for there is refused in one line naming the option, before any cell."""
    code = gpucheck.main(["--device", "cpu", "--scale", "tiny", "--steps", "2", "--width", "16", "--layers", "1",
                          "--only", "attention", "--out", str(tmp_path / "a")])
    assert code == 0 and "precision fp32" in capsys.readouterr().out
    assert gpucheck.default_precision("cuda") == "bf16"  # on a GPU every kernel runs (some need half precision)
    with pytest.raises(SystemExit) as refused:
        gpucheck.main(["--device", "cpu", "--precision", "bf16", "--scale", "tiny", "--steps", "2", "--width", "16",
                       "--layers", "1", "--only", "attention", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "--precision bf16 with --device cpu: bf16 runs only on CUDA" in err, err
    assert "config.yaml" not in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()  # refused before any cell


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gpucheck.main(["--device", "cpu", "--steps", "0"])
    with pytest.raises(SystemExit):
        gpucheck.main(["--device", "cpu", "--only", "nosuchmixer"])


# ------------------------------------------------------------------------------ gpu-verify on CPU
# `scripts/gpu_check.py verify` (`make gpu-verify`) runs its whole flow here: the install from a
# carried folder (fake packages of the real names: wheels, and source archives whose "CUDA build" is
# a setup.py that checks what the build is given and sleeps, one past the time limit), the
# comparisons and the speed table with tests/kernel_standins.py as the kernels, on tiny shapes.
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "kernel_standins.py"
TINY = ["--scale", "tiny", "--shape", "2,40,32", "--speed-width", "32", "--speed-layers", "1",
        "--speed-steps", "1", "--speed-warmup", "0"]


def _wheel(folder: Path, dist: str, version: str, module: str) -> None:
    name = dist.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{module}/__init__.py", "")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def _sdist(folder: Path, dist: str, version: str, module: str, var: str, extension: str, build_seconds: float) -> None:
    """A source archive whose build stands in for a CUDA build: without {var}_SKIP_CUDA_BUILD it
    checks the variables and the nvcc it is given (only sm_90 may remain of the targets a real
    setup.py passes), sleeps, and adds the extension module."""
    name = f"{dist.replace('-', '_')}-{version}"
    setup = textwrap.dedent(f"""\
        import os, subprocess, time
        from setuptools import setup
        extra = []
        if os.environ.get("{var}_SKIP_CUDA_BUILD") != "TRUE":
            assert os.environ["{var}_FORCE_BUILD"] == "TRUE" and os.environ["MAX_JOBS"] == "3"
            assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0", os.environ["TORCH_CUDA_ARCH_LIST"]
            nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
            said = subprocess.run([nvcc, "-gencode", "arch=compute_80,code=sm_80", "-O3",
                                   "--generate-code=arch=compute_120,code=sm_120", "-c", "x.cu"],
                                  capture_output=True, text=True, check=True).stdout.split()
            assert said == ["-O3", "-c", "x.cu", "-gencode", "arch=compute_90,code=sm_90"], said
            time.sleep({build_seconds})
            extra = ["{extension}"]
            open("{extension}.py", "w").write("")
        setup(name="{dist}", version="{version}", packages=["{module}"], py_modules=extra)
        """)
    src = folder / "tmp" / name
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text("")
    (src / "setup.py").write_text(setup)
    with tarfile.open(folder / f"{name}.tar.gz", "w:gz") as t:
        t.add(src, arcname=name)


def _fake_carry(tmp_path: Path) -> tuple[Path, Path]:
    """(a carried folder, a CUDA toolkit whose nvcc prints its arguments)."""
    carry = tmp_path / "carry"
    (carry / "wheels").mkdir(parents=True)
    (carry / "src").mkdir()
    _wheel(carry / "wheels", "fla-core", "0.6.0", "fla")
    _wheel(carry / "wheels", "flash-linear-attention", "0.6.0", "fla_layers_stand_in")
    _sdist(carry / "src", "mamba-ssm", "2.3.1", "mamba_ssm", "MAMBA", "selective_scan_cuda", 0)
    _sdist(carry / "src", "causal-conv1d", "1.6.0", "causal_conv1d", "CAUSAL_CONV1D", "causal_conv1d_cuda", 600)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "lib64").mkdir()
    (cuda / "lib64" / "libcudart.so.13").write_text("")
    (cuda / "bin" / "nvcc").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (cuda / "bin" / "nvcc").chmod(0o755)
    return carry, cuda


def test_verify_runs_its_whole_flow_on_cpu_with_stand_ins(tmp_path):
    """Install (wheels; mamba-ssm's Python code, then its "CUDA build" for sm_90 only; a build past
    the limit stopped and reported), comparisons (the Triton ones while the builds run), the speed
    table, the report: exit 0, and each kernel path's row says what ran."""
    carry, cuda = _fake_carry(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "verify", "--standins", str(STANDINS),
                        "--carry", str(carry), "--cuda-home", str(cuda), "--arch", "90", "--jobs", "3",
                        "--build-timeout", "30", *TINY, "--cases", "mamba_noconv", "short_conv", "mamba2", "deltanet",
                        "--families", "mamba", "deltanet", "--out", str(out), "--work", str(work)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((out / "verify.json").read_text())
    status = report["install"]
    assert status["fla-core"] == status["flash-linear-attention"] == "installed"
    assert status["mamba-ssm"].startswith("built for sm_90"), status
    assert status["causal-conv1d"] == "not installed (build stopped at the 30 s limit)", status
    assert (work / "site" / "selective_scan_cuda.py").is_file()  # the built package replaced the Python-only one
    assert not (work / "site" / "causal_conv1d").exists()
    rows = {r["case"]: r for r in report["agreement"]}
    assert rows["selective scan"]["status"] == "pass" and rows["selective scan"]["precision"] == "fp32"
    assert rows["causal-conv1d"]["status"] == "not run" and "causal-conv1d" in rows["causal-conv1d"]["reason"]
    for case, core, precision in (("Mamba2 chunked scan", "mamba_chunk_scan_combined", "fp32"),
                                  ("delta rule", "chunk_delta_rule", "bf16")):
        r = rows[case]
        assert r["status"] == "pass" and r["precision"] == precision, r
        paths = {p["op"].rsplit(".", 1)[1]: p["path"] for p in r["paths"]}
        assert paths[core] == "kernel" and "causal_conv1d_fn" not in paths, r["paths"]  # its conv: not causal-conv1d
        assert r["errors"]["output"] <= r["tolerance"][0] and len(r["errors"]) > 5  # output, input, parameters
    speed = [(r["family"], r["run"], r["precision"]) for r in report["speed"]]
    assert speed == [("mamba", "kernels", "fp32"), ("mamba", "portable", "fp32"), ("deltanet", "kernels", "bf16"),
                     ("deltanet", "portable", "bf16"), ("deltanet", "portable", "fp32")]
    assert all(r["tokens_per_s"] > 0 and r["model_tflops"] > 0 and r["cost_model_tflops"] > 0 for r in report["speed"])
    text = (out / "verify.md").read_text()
    for heading in ("## Install", "## Agreement", "## Speed"):
        assert heading in text
    assert "FAILED" not in text and (out / "build-causal-conv1d.log").is_file()


def test_verify_fails_on_a_wrong_kernel_and_on_one_that_raises(tmp_path):
    """The delta rule's kernel called with q scaled twice (a wrong convention), and the gated delta
    rule's raising as fla 0.6.0's does on Hopper with triton < 3.7.1: both fail the run; the right
    selective scan passes beside them."""
    wrong = tmp_path / "wrong_standins.py"
    wrong.write_text(textwrap.dedent("""\
        import kernel_standins as right

        def chunk_delta_rule(q, k, v, beta, scale=None, **kwargs):
            return right.chunk_delta_rule(q, k, v, beta, scale=q.shape[-1] ** -0.5, **kwargs)

        def chunk_gated_delta_rule(*args, **kwargs):
            raise RuntimeError("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results")

        STANDINS = {**right.STANDINS, "chunk_delta_rule": chunk_delta_rule,
                    "chunk_gated_delta_rule": chunk_gated_delta_rule}
        """))
    out = tmp_path / "out"
    code = gpuverify.verify_main(["--standins", str(wrong), "--no-install", *TINY, "--speed-steps", "0",
                          "--cases", "mamba_noconv", "deltanet", "gated_deltanet", "--out", str(out)])
    assert code == 1
    rows = {r["case"]: r for r in json.loads((out / "verify.json").read_text())["agreement"]}
    assert rows["selective scan"]["status"] == "pass"
    assert rows["delta rule"]["status"] == "FAIL" and rows["delta rule"]["max_forward"] > 0.1
    assert rows["gated delta rule"]["status"] == "error" and "Hopper" in rows["gated delta rule"]["reason"]
    text = (out / "verify.md").read_text()
    assert "## FAILED" in text and "delta rule: FAIL" in text and "gated delta rule: error" in text


def test_tolerances_are_the_kernel_tests_own():
    import test_kernels_interpret as interp
    import test_mixers as mixers

    assert gpucompare.TOLERANCES["fp32"] == (interp.FP32_TOL, interp.FP32_TOL)
    assert gpucompare.TOLERANCES["tf32"] == (interp.FWD_TOL_FP16, interp.GRAD_TOL_FP16)
    assert gpucompare.TOLERANCES["bf16"] == (mixers.KERNEL_TOL, 5 * mixers.KERNEL_TOL)


def test_every_kernel_a_paper_model_calls_is_compared():
    """Each GPU kernel function of the paper scale's models' mixers has a case (flash-attn aside:
    attention at the paper scale's tf32 runs SDPA; a fused CPU kernel, Hyena's only one, never runs on
    a GPU), and each case's kernels are those its module asks for."""
    import yaml

    from arrepro.config.checks import load_grid
    from arrepro.models import get_mixer, kernels

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    grid = load_grid(config, "paper")
    used = {getattr(get_mixer(config["models"][m]["mixer"]), "kernel_name", None)
            for exp in grid.experiments.values() for g in exp["grids"] for m in g["models"]}
    used = {k for k in used if k is None or kernels.KERNELS[k].device != "cpu"}
    checked = {c.kernels[0] for c in gpucompare.VERIFY_CASES}
    assert used - {None, "flash_attn_func"} <= checked
    assert set(gpuinstall.KERNEL_SOURCE) == checked  # causal_conv1d_fn: the short convs of most of them


def test_filtering_nvcc_keeps_only_the_devices_architecture(tmp_path):
    _, cuda = _fake_carry(tmp_path)
    home = gpuinstall.filtering_cuda_home(cuda, "90", tmp_path / "w")
    said = subprocess.run([str(home / "bin" / "nvcc"), "-gencode", "arch=compute_75,code=sm_75", "--version"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert said == ["--version", "-gencode", "arch=compute_90,code=sm_90"]
    assert subprocess.run([str(home / "bin" / "nvcc"), "-c", "x.cu"], capture_output=True, text=True).stdout.split() \
        == ["-c", "x.cu"]  # no target given: none added
    assert (home / "lib64" / "libcudart.so").resolve() == (cuda / "lib64" / "libcudart.so.13").resolve()
    with pytest.raises(ValueError):
        gpuinstall.filtering_cuda_home(cuda, "9.0", tmp_path / "w")


def test_the_first_paper_cell_is_a_target_of_the_train_rule():
    """The smallest Fig. 2 cell (L64, 2-layer attention, width 64, the paper recipe), and Snakemake's
    dry run of the command `--train-cell` gives: the data and train rules make it."""
    import yaml

    from arrepro.config.checks import load_grid

    grid = load_grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "paper")
    cell = gpuspeed.first_cell(grid)
    spec = grid.spec_of(cell)
    assert (spec["task_def"]["seq_len"], spec["model"], spec["width"], spec["layers"], spec["recipe_def"]["epochs"]) \
        == (64, "attention", 64, 2, 50)
    p = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--config", "scale=paper", "--", f"{cell.path}/result.json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    jobs = dict(line.split() for line in p.stdout.split("Job stats:")[1].splitlines()[3:6] if line.strip())
    assert jobs == {"data": "1", "train": "1", "total": "2"}


def test_verify_arguments_are_checked():
    for bad in (["--cell-only"], ["--cases", "attention"], ["--shape", "1,2"], ["--families", "hyena"]):
        with pytest.raises(SystemExit):
            gpuverify.verify_main([*bad])
