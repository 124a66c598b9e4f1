#!/usr/bin/env python
"""The CPU trainer against its limits, in one interleaved run of about 10 minutes (a benchmark,
not a test; issue 37).

Part 1, step times (``--part steps``). For each demo family at the demo's shapes (MQAR length 32,
vocabulary 128, batch 32; the copy task's) and for the paper-shaped cell (MQAR length 64,
vocabulary 8192, 2-layer attention of width 64, batch 256), the median time of one training step
(the trainer's: labelled logits, backward, fused AdamW) by three paths taking turns, cell by cell
and round by round, so that a loaded machine slows them alike (bench/cpu_steps.py, two workers):
* shipped: pinned CPU numerics and the fused CPU kernels, what a cell runs;
* kernels=0: pinned, ``ARREPRO_KERNELS=0`` (the portable paths under the pins);
* plain: not pinned (this machine's ATen, MKL and oneDNN at their best), ``ARREPRO_KERNELS=0``,
  one thread: plain PyTorch.
Beside them the arithmetic limit: the step's floating-point operations (``cpu_steps.step_flops``)
at this core's measured peak with the kernels' build (independent vector FMA chains).

Part 2, demo cells (``--part cells``): a fixed sample of demo cells (``SAMPLE``: one cell of the
settings that cost the demo most, of every family), trained whole (the recipe's epochs, no early
stop, lr 1e-3, seed 0) by the train command of --baseline (default ced2a16; one process a cell) and
by this tree's (the training server, its start-up counted), alternating; CPU time from the
operating system (getrusage of the children). Prints each cell's CPU-seconds by both and the
ratio of the totals: the issue's "232 cells in at most half their CPU-minutes" on this sample.

    .venv/bin/python bench/bench_cpu_throughput.py                 # both parts, ~10 minutes
    .venv/bin/python bench/bench_cpu_throughput.py --part steps --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arrepro.config.checks import load_grid  # noqa: E402
from arrepro.data import save_task  # noqa: E402
from arrepro.train import client  # noqa: E402
from arrepro.train.numerics import PINS  # noqa: E402

BASELINE = "ced2a16"


def _cell(model, width, layers, task="L32", batch=32):
    return {"model": model, "width": width, "layers": layers, "task": task, "batch": batch}


# (label, cell, steps a measurement): the demo's families at their shapes, then the paper-shaped cell
STEP_CELLS = [
    ("attention 1x32", _cell("attention", 32, 1), 30),
    ("attention 2x32", _cell("attention", 32, 2), 30),
    ("attention + conv QKV 1x32", _cell("attention_conv_qkv", 32, 1), 30),
    ("attention + centred conv QKV 1x32", _cell("attention_conv_qkv_centred", 32, 1), 30),
    ("Hyena 2x32", _cell("hyena", 32, 2), 30),
    ("Mamba 1x16", _cell("mamba", 16, 1), 30),
    ("Mamba 1x32", _cell("mamba", 32, 1), 30),
    ("Mamba 2x24", _cell("mamba", 24, 2), 30),
    ("S6 + MLP 1x32", _cell("s6_mlp", 32, 1), 30),
    ("Mamba2 1x32", _cell("mamba2", 32, 1), 30),
    ("DeltaNet 1x32", _cell("deltanet", 32, 1), 30),
    ("copy: Transformer 2x32", _cell("transformer_rope", 32, 2, "copy"), 30),
    ("copy: Mamba 2x48", _cell("mamba", 48, 2, "copy"), 30),
    ("copy: Mamba 4x32", _cell("mamba", 32, 4, "copy"), 30),
    ("paper-shaped: attention 2x64, L64, V8192, B256", _cell("attention", 64, 2, "L64", 256), 4),
]
# part 2: (task, model, width, layers, recipe) of the demo (config.yaml, scales.demo)
SAMPLE = [("L32", "mamba", 32, 1, "demo"), ("L32", "attention", 32, 2, "demo"), ("L32", "hyena", 32, 2, "demo"),
          ("L32", "mamba", 24, 2, "demo"), ("L32", "attention_conv_qkv", 32, 1, "demo"),
          ("L32", "mamba2", 32, 1, "short"), ("L32", "deltanet", 32, 1, "short"), ("copy", "mamba", 48, 2, "copy")]


class Worker:
    """bench/cpu_steps.py in a process of its own, pinned or plain."""

    def __init__(self, mode: str):
        env = {k: v for k, v in os.environ.items() if k not in PINS and k != "ARREPRO_KERNELS"}
        self.p = subprocess.Popen([sys.executable, str(ROOT / "bench" / "cpu_steps.py"), mode], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            sys.exit(f"bench/cpu_steps.py exited ({self.p.wait()})")
        return json.loads(line)

    def ask(self, **req) -> dict:
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=60)


def steps_part(rounds: int) -> None:
    pinned, plain = Worker("pinned"), Worker("plain")
    peak = pinned.ask(peak=True)
    print(f"pinned worker: ATen {pinned.ready['capability']}; plain worker: ATen {plain.ready['capability']}; "
          f"peak {peak['gflops']:.1f} GFLOP/s a core ({peak['build']}, measured)", flush=True)
    flops = {label: plain.ask(flops=cell)["flops"] for label, cell, _ in STEP_CELLS}
    times = {label: {"shipped": [], "kernels=0": [], "plain": []} for label, _, _ in STEP_CELLS}
    for r in range(rounds):
        for label, cell, steps in STEP_CELLS:
            t = times[label]
            t["shipped"].append(pinned.ask(cell=cell, steps=steps, kernels=True)["seconds"])
            t["kernels=0"].append(pinned.ask(cell=cell, steps=steps, kernels=False)["seconds"])
            t["plain"].append(plain.ask(cell=cell, steps=steps, kernels=False)["seconds"])
        print(f"round {r + 1}/{rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    pinned.close()
    plain.close()
    print(f"\nmedian ms a step over {rounds} interleaved rounds; limit = FLOPs at the measured peak")
    print(f"{'cell':48} {'MFLOP':>7} {'limit':>7} {'shipped':>8} {'of limit':>8} {'kernels=0':>9} {'plain':>8} "
          f"{'k0/shipped':>10} {'shipped/plain':>13}")
    for label, _, _ in STEP_CELLS:
        m = {k: 1e3 * statistics.median(v) for k, v in times[label].items()}
        limit = flops[label] / (peak["gflops"] * 1e9) * 1e3
        print(f"{label:48} {flops[label] / 1e6:7.1f} {limit:7.2f} {m['shipped']:8.2f} {limit / m['shipped']:8.0%} "
              f"{m['kernels=0']:9.2f} {m['plain']:8.2f} {m['kernels=0'] / m['shipped']:10.2f} "
              f"{m['shipped'] / m['plain']:13.2f}", flush=True)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def export(ref: str, dest: Path) -> Path:
    """``ref``'s src/ and scripts/ under ``dest`` (git archive)."""
    dest.mkdir(parents=True)
    tar = dest / "baseline.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src", "scripts"], stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest / "tree", filter="data")
    return dest / "tree"


def snapshot(dest: Path) -> Path:
    """This working tree's src/ and scripts/ as they are now (edits made while it runs do not reach it)."""
    for part in ("src", "scripts"):
        shutil.copytree(ROOT / part, dest / "tree" / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest / "tree"


def command(tree: Path, cell: dict, data: Path, out: Path, server: bool) -> list[str]:
    cmd = [sys.executable, str(tree / "scripts" / "train_cell.py"), "--cell-json", json.dumps(cell), "--data", str(data),
           "--out", str(out), "--threads", "1", "--train-log", str(out / "train.log"), "--die-with-parent"]
    return cmd + (["--server"] if server else [])


def run(cmd: list[str], env: dict, out: Path) -> float:
    """CPU-seconds of the command's process tree as far as this script sees it (its children)."""
    out.mkdir(parents=True)
    before = children_cpu()
    with open(out / "job.log", "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"{cmd[1]} failed (exit {p.returncode}): see {out / 'job.log'}")
    return children_cpu() - before


def served_cpu(out: Path) -> float:
    """The CPU-seconds the server's child reported for the cell (the client's job.log)."""
    for line in (out / "job.log").read_text().splitlines():
        if "a child of the training server) used" in line:
            return float(line.rsplit(" used ", 1)[1].split()[0])
    sys.exit(f"{out / 'job.log'}: the cell did not train in a server child")


def cells_part(baseline: str, lr: float) -> None:
    grid = load_grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    with tempfile.TemporaryDirectory(prefix="bench_cpu_") as tmp:
        tmp = Path(tmp)
        base, new = export(baseline, tmp / "old"), snapshot(tmp / "new")
        env = {**os.environ, "PYTHONPATH": str(base / "src")}
        new_env = {**os.environ, "PYTHONPATH": str(new / "src"), client.IDLE_ENV: "3600"}
        new_env.pop(client.ENV, None)
        specs = []
        for task, model, width, layers, recipe in SAMPLE:
            cell = grid.cell_spec(task, model, width, layers, recipe, lr, 0)
            specs.append({**cell, "recipe_def": {**cell["recipe_def"], "early_stop_accuracy": None}})
            if not (tmp / "data" / task).exists():
                save_task(cell["task_def"], tmp / "data" / task)
        # not counted: compile (or load) the baseline's numba kernels once, as a first demo cell would
        warm = tmp / "warm"
        for i, cell in enumerate(specs):
            short = {**cell, "recipe_def": {**cell["recipe_def"], "epochs": 1}}
            save_task({**cell["task_def"], "n_train": 32, "n_test": 32}, warm / f"data{i}")
            run(command(base, short, warm / f"data{i}", warm / f"cell{i}", server=False), env, warm / f"cell{i}")
        subprocess.run([sys.executable, "-c", "from arrepro.train import server; server._warm_up()"], env=new_env,
                       check=True, stdout=subprocess.DEVNULL)
        key = subprocess.run([sys.executable, "-c", "from arrepro.train import client; print(client.server_key())"],
                             env=new_env, capture_output=True, text=True, check=True).stdout.strip()
        t0, cpu0 = time.monotonic(), children_cpu()
        proc = subprocess.Popen([sys.executable, "-m", "arrepro.train.server", key], env=new_env, cwd=new,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        while (sock := client._connect(key)) is None:  # listening once warmed up
            if proc.poll() is not None:
                sys.exit(f"the training server exited with status {proc.returncode}")
            time.sleep(0.1)
        sock.close()
        rows, served, clients = [], 0.0, 0.0
        for i, cell in enumerate(specs):
            data = tmp / "data" / cell["task"]
            old = run(command(base, cell, data, tmp / f"old{i}", server=False), env, tmp / f"old{i}")
            asked = run(command(new, cell, data, tmp / f"new{i}", server=True), new_env, tmp / f"new{i}")
            child = served_cpu(tmp / f"new{i}")
            served, clients = served + child, clients + asked
            label = f"{cell['task']} {cell['model']} {cell['width']}x{cell['layers']} ({cell['recipe']})"
            rows.append((label, old, child + asked))
            print(f"{label:34} {baseline} {old:6.1f} CPU-s   this tree {child + asked:6.1f} CPU-s   "
                  f"ratio {(child + asked) / old:.2f}", flush=True)
        proc.terminate()  # idle: its CPU (start-up, warm-up, children) is counted once it is waited for
        proc.wait(timeout=60)
        total_cpu = children_cpu() - cpu0
        old_total = sum(r[1] for r in rows)
        new_total = total_cpu - old_total  # the server with its children, and the clients
        print(f"\nserver start-up and warm-up (once): {new_total - served - clients:.1f} CPU-s; "
              f"wall {time.monotonic() - t0:.0f} s for both")
        print(f"{len(rows)} cells: {baseline} {old_total / 60:.2f} CPU-min, this tree {new_total / 60:.2f} CPU-min "
              f"(its server's start-up included): {new_total / old_total:.2f} of the CPU time (target <= 0.50)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("steps", "cells", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of part 1")
    ap.add_argument("--baseline", default=BASELINE, help="the commit whose train command part 2 compares with")
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.monotonic()
    if a.part in ("steps", "both"):
        steps_part(a.rounds)
    if a.part in ("cells", "both"):
        cells_part(a.baseline, a.lr)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
