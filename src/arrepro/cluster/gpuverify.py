"""`make gpu-verify` (`python scripts/gpu_check.py verify`): on a GPU machine without network, the
kernel packages installed and built from the carried folder (`make gpu-carry`;
arrepro.cluster.gpuinstall), every kernel path the paper scale uses compared with its portable
path at a paper shape, forward and every gradient (arrepro.cluster.gpucompare), one training step
per family timed with and without the kernels, optionally the first paper cell trained through the
train rule (arrepro.cluster.gpuspeed); a report under ``--out``. The Triton cases are compared
while the CUDA builds run; the CUDA ones after; the speed table last, once the compilers have
stopped. With ``--standins`` the same flow runs on the CPU (tests/test_gpucheck.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from arrepro.cluster.gpucompare import IMPORT_FAILED, VERIFY_CASES, compare_case
from arrepro.cluster.gpuinstall import CARRY, KERNEL_SOURCE, SOURCE_PACKAGES, Install, filtering_cuda_home, install_workflow
from arrepro.cluster.gpuspeed import SPEED_FAMILIES, speed_rows, train_first_cell

# ------------------------------------------------------------------------------ tables and the run
def _fmt(v, spec=".1e") -> str:
    return "n/a" if v is None else format(v, spec)


def _paths_cell(paths: list[dict]) -> str:
    return "; ".join(f"{p['op']}: " + (p.get("package") or "") if p["path"] == "kernel"
                     else f"{p['op']}: portable ({p.get('reason', '')})" for p in paths) or "-"


def markdown(report: dict) -> str:
    """The report as markdown: the environment, the install, the agreement and speed tables and,
    when it ran, the first paper cell."""
    env = report["environment"]
    lines = [f"# gpu-verify: {env['device']}", "",
             f"{env['date']}; torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, Python {env['python']}; "
             f"mode: {env['mode']}; {report['seconds']:.0f} s in all.", "", "## Install", "", "| package | state |",
             "|---|---|"]
    lines += [f"| {d} | {s} |" for d, s in report["install"].items()]
    if report["agreement"]:
        lines += agreement_lines(report["agreement"])
    if report["speed"]:
        lines += speed_lines(report["speed"])
    cell = report.get("first_cell")
    if cell:
        lines += cell_lines(cell)
    if report["problems"]:
        lines += ["", "## FAILED", ""] + [f"- {p}" for p in report["problems"]]
    return "\n".join(lines) + "\n"


def agreement_lines(rows: list[dict]) -> list[str]:
    lines = ["", "## Agreement: kernel path vs portable path (fp32 reference), forward and every gradient", "",
             "| kernel path | model | precision | shape B x L x D | output | worst gradient | tolerance | result | ran |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['model']} | {r['precision']} | {r['shape']} | {_fmt(r.get('max_forward'))} | "
                     f"{_fmt(r.get('max_gradient'))} | {r['tolerance'][0]:.0e} / {r['tolerance'][1]:.0e} | "
                     f"**{r['status']}**{(': ' + r['reason'][:300]) if r.get('reason') else ''} | {_paths_cell(r['paths'])} |")
    lines += ["", "Every gradient (max relative error):", ""]
    for r in rows:
        if r["errors"]:
            lines.append(f"- {r['case']}: " + ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items()))
    return lines


def speed_lines(rows: list[dict]) -> list[str]:
    lines = ["", "## Speed: one training step per family", "",
             "| family | run | precision | shape | tokens/s | TFLOP/s | cost model's TFLOP/s | peak memory | paths |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "skipped" in r:
            what = f"**ERROR**: {r['error'][:300]}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"| {r['family']} | {r['run']} | {r['precision']} | | {what} | | | | |")
            continue
        lines.append(f"| {r['family']} | {r['run']} | {r['precision']} | {r['shape']} | {r['tokens_per_s']:,.0f} | "
                     f"{r['model_tflops']:.3g} | {r['cost_model_tflops']:.3g} | "
                     f"{'n/a' if r['peak_mem_mb'] is None else format(r['peak_mem_mb'], ',.0f') + ' MB'} | "
                     f"{_paths_cell(r['paths'])}{(' ' + r['note']) if r.get('note') else ''} |")
    lines += ["", "TFLOP/s: `model_flops_per_token` (costs.flops_per_token without the mixer factor) times tokens/s; "
              "cost model's: the rate at which arrepro.config.costs has this cell's arithmetic run (its throughput "
              "at this width and precision over the mixer's factor)."]
    return lines


def cell_lines(cell: dict) -> list[str]:
    paper = ("none" if cell.get("paper_accuracy") is None
             else f"{cell['paper_accuracy']:.2f}, {cell.get('paper_source', '')}")
    lines = ["", "## The first paper cell, through the train rule", "", f"`{cell['command']}`", "",
             f"- status: {cell['status']}",
             f"- final accuracy: {_fmt(cell.get('final_accuracy'), '.4f')} (paper: {paper})",
             f"- wall time through Snakemake: {cell['wall_seconds']:.0f} s; training {_fmt(cell.get('train_seconds'), '.0f')} s; "
                 f"cost model: {cell['estimate_seconds']:.0f} s estimated, {cell['requested_minutes']} min requested",
             f"- paths: {_paths_cell(cell.get('kernel_paths') or [])}"]
    if cell["status"] != "done":
        lines += ["", "```", cell["log_tail"], "```"]
    return lines


def verify_problems(report: dict, require_builds: bool) -> list[str]:
    out = [f"{r['case']}: {r['status']} ({r.get('reason', '')[:300]})" for r in report["agreement"]
           if r["status"] in ("FAIL", "error")]
    out += [f"speed, {r['family']} {r['run']} {r['precision']}: {r['error'][:300]}" for r in report["speed"] if "error" in r]
    cell = report.get("first_cell")
    if cell and cell["status"].startswith("failed"):  # one stopped at the time limit is reported, not failed
        out.append(f"first paper cell: {cell['status']}")
    if require_builds:
        out += [f"{d}: its CUDA extension did not build ({s})" for d, s in report["install"].items()
                if d in SOURCE_PACKAGES and not s.startswith("built")]
    return out


def load_standins(path: Path) -> dict:
    """The ``STANDINS`` of a Python file (tests/kernel_standins.py: CPU stand-ins that enforce each
    kernel's checks and compute with the portable math)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.STANDINS)


def _environment(device, mode: str) -> dict:
    import datetime
    import platform

    import torch

    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    return {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "mode": mode,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": tv, "python": platform.python_version()}


def verify(a) -> int:
    import time

    import torch
    import yaml

    from arrepro.models import kernels

    t0 = time.monotonic()
    config = yaml.safe_load(Path(a.config).read_text())
    paper_precision = config["scales"][a.scale].get("precision", "fp32")
    cpu = a.standins is not None
    if not cpu and not torch.cuda.is_available():
        raise SystemExit("gpu-verify: CUDA is not available to torch "
                         f"(torch {torch.__version__}); on a CPU, --standins tests/kernel_standins.py runs the same flow")
    device = torch.device("cpu" if cpu else "cuda")
    mode = "cpu stand-ins" if cpu else "gpu"
    standins = load_standins(Path(a.standins)) if cpu else None
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work or tempfile.mkdtemp(prefix="gpu-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    site = Path(a.site) if a.site else work / "site"
    log = print
    log(f"gpu-verify on {_environment(device, mode)['device']} ({mode})")
    arch = a.arch
    if arch is None and not cpu:
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
    cuda_home = Path(a.cuda_home) if a.cuda_home else None
    if cuda_home is None and not cpu:
        from torch.utils.cpp_extension import CUDA_HOME

        cuda_home = Path(CUDA_HOME) if CUDA_HOME else None
    install = None
    if not a.no_install and not a.cell_only:
        filtered = filtering_cuda_home(cuda_home, arch, work) if cuda_home and arch else None
        install = Install(Path(a.carry), site, work / "install", arch=arch, cuda_home=filtered,
                          build_timeout=a.build_timeout, jobs=a.jobs, log=log)
        install.start()

    def why_not() -> dict[str, str | None]:
        found = {}
        for name in KERNEL_SOURCE:
            why = install.usable(name) if install else None
            if why is None and cpu and name not in standins:
                why = "no stand-in"
            if why is None and not cpu and kernels.installed(name) is None:
                why = f"{KERNEL_SOURCE[name][0]} not installed"
            elif why is None and not cpu:
                try:
                    kernels.function(name)
                except kernels.KernelImportError as err:
                    why = f"{IMPORT_FAILED}: {err}"
            found[name] = why
        return found

    def overrides(why: dict) -> dict | None:
        return {n: f for n, f in standins.items() if why.get(n, "not a checked kernel") is None} if cpu else None

    B, L, D = a.shape
    cases = [] if a.cell_only else [c for c in VERIFY_CASES if not a.cases or c.model in a.cases]
    rows = {}
    if cases:
        log("the Triton kernels against the portable paths")
        why = why_not()
        for c in cases:
            if not KERNEL_SOURCE[c.kernels[0]][1]:
                rows[c.name] = compare_case(c, config, batch=B, seq_len=L, width=D, device=device,
                                            paper_precision=paper_precision, why_not=why, overrides=overrides(why), log=log)
    if install:
        install.finish()
        kernels._decisions.clear()  # kernels.choose's cache: what is installed has changed
    why = why_not()
    if cases:
        log("the CUDA kernels against the portable paths")
        for c in cases:
            if c.name not in rows:
                rows[c.name] = compare_case(c, config, batch=B, seq_len=L, width=D, device=device,
                                            paper_precision=paper_precision, why_not=why, overrides=overrides(why), log=log)
    speed = []
    if a.speed_steps and not a.cell_only:
        log("one training step per family, kernels and portable")
        speed = speed_rows(config, scale=a.scale, width=a.speed_width, layers=a.speed_layers, device=device,
                           paper_precision=paper_precision, why_not=why, overrides=overrides(why), steps=a.speed_steps,
                           warmup=a.speed_warmup, families=a.families or SPEED_FAMILIES,
                           stop_at=t0 + a.deadline - 60, log=log)
    report = {"environment": _environment(device, mode),
              "install": dict(install.status) if install else {"(none)": "not installed by this run"},
              "agreement": [rows[c.name] for c in cases], "speed": speed}
    if a.train_cell:
        if not a.no_install:
            install_workflow(Path(a.carry), site, work / "install-workflow.log")
        left = a.deadline - (time.monotonic() - t0) - 30
        cell = train_first_cell(config, scale=a.scale, site=site if not a.no_install else None, cores=a.cores,
                                timeout=max(10.0, min(a.cell_timeout, left)), work=work, lr=a.cell_lr, log=log)
        report["first_cell"] = cell
        log(f"first cell: {cell['status']}, accuracy {cell.get('final_accuracy')}, {cell['wall_seconds']:.0f} s "
            f"(cost model: {cell['estimate_seconds']:.0f} s)")
    report["seconds"] = time.monotonic() - t0
    report["problems"] = verify_problems(report, a.require_cuda_builds)
    text = markdown(report)
    (out / "verify.md").write_text(text)
    (out / "verify.json").write_text(json.dumps(report, indent=1, default=str))
    for f in [*sorted((work / "install").glob("*.log")), work / "cell.log"]:
        if f.is_file():  # the end of each log (at most 2 MB), beside the tables
            (out / f.name).write_bytes(f.read_bytes()[-2_000_000:])
    print(text)
    for p in report["problems"]:
        print(f"gpu-verify FAILED: {p}", file=sys.stderr)
    return 1 if report["problems"] else 0


def _shape(text: str) -> tuple[int, int, int]:
    try:
        b, l, d = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: batch,length,width, e.g. 128,512,256") from None
    return b, l, d


def verify_main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py verify", description="The kernel packages on a GPU: installed from "
                                 "the carried folder, compared with the portable paths, timed (`make gpu-verify`).")
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--scale", default="paper", help="whose precision, tasks and recipes (default paper)")
    ap.add_argument("--out", default="results/gpu-verify", help="folder for verify.md, verify.json and the logs")
    ap.add_argument("--work", help="folder for the install and builds (default: a new temporary one)")
    ap.add_argument("--carry", default=CARRY, help=f"the carried folder (`make gpu-carry`; default {CARRY})")
    ap.add_argument("--site", help="where the packages are installed (default WORK/site)")
    ap.add_argument("--no-install", action="store_true", help="use what is importable already")
    ap.add_argument("--standins", help="CPU mode: these stand-ins (a file with STANDINS) are the kernels, on the CPU")
    ap.add_argument("--cuda-home", help="the CUDA toolkit to build with (default: torch's CUDA_HOME)")
    ap.add_argument("--arch", help="compute capability to build for, e.g. 90 (default: the GPU's)")
    ap.add_argument("--build-timeout", type=float, default=300.0,
                    help="seconds from the start after which the CUDA builds are stopped (default 300)")
    ap.add_argument("--jobs", type=int, default=16, help="MAX_JOBS of each build (default 16)")
    ap.add_argument("--require-cuda-builds", action="store_true", help="fail when a CUDA extension did not build")
    ap.add_argument("--shape", type=_shape, default=(128, 512, 256),
                    help="batch,length,width of the comparisons (default 128,512,256: the paper's L512 batch, the "
                         "widest Fig. 7 width)")
    ap.add_argument("--cases", nargs="*", help="models of the comparisons (default: all of VERIFY_CASES)")
    ap.add_argument("--families", nargs="*", help="families of the speed table (default: all)")
    ap.add_argument("--speed-width", type=int, default=1024)
    ap.add_argument("--speed-layers", type=int, default=2)
    ap.add_argument("--speed-steps", type=int, default=10, help="timed steps per row (0: no speed table)")
    ap.add_argument("--speed-warmup", type=int, default=3)
    ap.add_argument("--train-cell", action="store_true",
                    help="then train the scale's first Fig. 2 cell through the train rule (Snakemake)")
    ap.add_argument("--cell-only", action="store_true",
                    help="with --train-cell: only the cell (no kernel install, comparisons or speed table)")
    ap.add_argument("--cell-lr", type=float, default=1e-3)
    ap.add_argument("--cell-timeout", type=float, default=540.0,
                    help="seconds the cell may train (less where --deadline leaves less); then SIGTERM: it "
                         "checkpoints, and a later run resumes it")
    ap.add_argument("--deadline", type=float, default=560.0,
                    help="seconds from the start by which the run ends its cell (default 560: a 10-minute call)")
    ap.add_argument("--cores", type=int, default=16)
    a = ap.parse_args(argv)
    if a.cell_only and not a.train_cell:
        ap.error("--cell-only goes with --train-cell")
    if a.speed_steps < 0 or a.speed_warmup < 0 or a.jobs < 1 or min(a.shape) < 1:
        ap.error("--speed-steps, --speed-warmup must be >= 0; --jobs and --shape positive")
    known = {c.model for c in VERIFY_CASES}
    if set(a.cases or ()) - known:
        ap.error(f"--cases: unknown {sorted(set(a.cases) - known)}; known: {sorted(known)}")
    if set(a.families or ()) - set(SPEED_FAMILIES):
        ap.error(f"--families: unknown {sorted(set(a.families) - set(SPEED_FAMILIES))}; known: {list(SPEED_FAMILIES)}")
    return verify(a)
