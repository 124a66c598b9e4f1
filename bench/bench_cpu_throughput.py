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
stop, lr 1e-3, seed 0) by the train command of --baseline (default ced2a16) and by this tree's,
both as the workflow runs them (``train_cell.py --server``: a child of the tree's training server
per cell, each server's start-up counted), alternating; CPU time from the operating system (the
servers' and their children's from /proc, the clients' by getrusage). Prints each cell's
CPU-seconds by both and the ratio of the totals: the issue's "232 cells in at most half their
CPU-minutes" on this sample.

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


def process_cpu(pid: int) -> float:
    """CPU-seconds of a live process and of its children it has waited for (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


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


class Server:
    """A tree's training server (arrepro.train.server), started and warmed up here; the train
    command of that tree (``train_cell.py --server``) asks it for a child per cell."""

    def __init__(self, tree: Path):
        self.tree = tree
        self.env = {**os.environ, "PYTHONPATH": str(tree / "src"), client.IDLE_ENV: "3600"}
        self.env.pop(client.ENV, None)
        key = subprocess.run([sys.executable, "-c", "from arrepro.train import client; print(client.server_key())"],
                             env=self.env, capture_output=True, text=True, check=True).stdout.strip()
        self.proc = subprocess.Popen([sys.executable, "-m", "arrepro.train.server", key], env=self.env, cwd=tree,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        while (sock := client._connect(key)) is None:  # listening once warmed up
            if self.proc.poll() is not None:
                sys.exit(f"the training server of {tree} exited with status {self.proc.returncode}")
            time.sleep(0.1)
        sock.close()

    def train(self, cell: dict, data: Path, out: Path) -> tuple[float, float]:
        """(CPU-seconds of the cell's child, of the client) for one cell."""
        cmd = [sys.executable, str(self.tree / "scripts" / "train_cell.py"), "--cell-json", json.dumps(cell), "--data",
               str(data), "--out", str(out), "--threads", "1", "--train-log", str(out / "train.log"),
               "--die-with-parent", "--server"]
        out.mkdir(parents=True)
        before = children_cpu()
        with open(out / "job.log", "w") as log:
            p = subprocess.run(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            sys.exit(f"{cmd[1]} failed (exit {p.returncode}): see {out / 'job.log'}")
        for line in (out / "job.log").read_text().splitlines():
            if "a child of the training server) used" in line:
                return float(line.rsplit(" used ", 1)[1].split()[0]), children_cpu() - before
        sys.exit(f"{out / 'job.log'}: the cell did not train in a server child")

    def stop(self) -> float:
        """Its CPU-seconds (start-up, warm-up and the children it forked), then it stops."""
        cpu = process_cpu(self.proc.pid)
        self.proc.terminate()
        self.proc.wait(timeout=60)
        return cpu


def sample_specs(lr: float, data: Path) -> list[tuple[str, dict]]:
    """(label, cell spec) of every ``SAMPLE`` cell at ``lr`` and seed 0, every epoch of its recipe
    (no early stop); each task's data saved under ``data`` (once)."""
    grid = load_grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    tasks = {t["name"]: key for key, t in grid.tasks.items()}  # the grid keys its tasks and recipes by a hash
    recipes = {r["name"]: key for key, r in grid.recipes.items()}
    out = []
    for task, model, width, layers, recipe in SAMPLE:
        cell = grid.cell_spec(tasks[task], model, width, layers, recipes[recipe], lr, 0)
        out.append((f"{task} {model} {width}x{layers} ({recipe})",
                    {**cell, "recipe_def": {**cell["recipe_def"], "early_stop_accuracy": None}}))
        if not (data / cell["task"]).exists():
            save_task(cell["task_def"], data / cell["task"])
    return out


def cells_part(baseline: str, lr: float) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_cpu_") as tmp:
        tmp = Path(tmp)
        trees = {baseline: export(baseline, tmp / "old"), "this tree": snapshot(tmp / "new")}
        labels, specs = zip(*sample_specs(lr, tmp / "data"))
        for tree in trees.values():  # not counted: compile (or load) each tree's numba kernels once
            subprocess.run([sys.executable, "-c", "from arrepro.train import server; server._warm_up()"], check=True,
                           env={**os.environ, "PYTHONPATH": str(tree / "src")}, stdout=subprocess.DEVNULL)
        t0 = time.monotonic()
        servers = {name: Server(tree) for name, tree in trees.items()}
        cells = {name: 0.0 for name in trees}
        clients = {name: 0.0 for name in trees}
        for i, (cell, label) in enumerate(zip(specs, labels)):
            cpu = {}
            for name, server in servers.items():
                child, asked = server.train(cell, tmp / "data" / cell["task"], tmp / f"{name.replace(' ', '_')}{i}")
                cells[name] += child
                clients[name] += asked
                cpu[name] = child + asked
            print(f"{label:34} {baseline} {cpu[baseline]:6.1f} CPU-s   this tree {cpu['this tree']:6.1f} CPU-s   "
                  f"ratio {cpu['this tree'] / cpu[baseline]:.2f}", flush=True)
        total = {name: server.stop() + clients[name] for name, server in servers.items()}
        for name in trees:
            print(f"{name}: server start-up and warm-up {total[name] - cells[name] - clients[name]:.1f} CPU-s, "
                  f"{len(specs)} cells {cells[name] + clients[name]:.1f} CPU-s")
        print(f"wall {time.monotonic() - t0:.0f} s for both")
        print(f"{len(specs)} cells with their server's start-up: {baseline} {total[baseline] / 60:.2f} CPU-min, this tree "
              f"{total['this tree'] / 60:.2f} CPU-min: {total['this tree'] / total[baseline]:.2f} of the CPU time "
              "(target <= 0.50)")


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
