#!/usr/bin/env python
"""Demo cells per CPU-minute: today's path against the new one, measured in one run (a benchmark,
not a test).

Trains one cell of each demo setting (config.yaml, scales.demo: the settings of its grids, at
--lr and seed 0, the demo recipe with its early stop off, so that both paths do the same steps)
twice, alternating setting by setting:
* today's path: the train rule's command of --baseline (default c6e7164, before the fused CPU
  linear and attention kernels and the training server), exported with `git archive`, one
  process per cell;
* the new path: the train rule's command of this working tree (`train_cell.py --server`, a copy
  taken at the start): the
  cells train in children of one training server (arrepro.train.server), started here and
  counted here, its start-up and warm-up included.
CPU time is measured by the operating system (getrusage of this script's children: the cells'
processes, the server and its children), so the machine's other load counts only as it slows
the cells down; the two paths take turns, so they see the same load. Prints each setting's
CPU-seconds per cell by each path, the server's start-up, cells per CPU-minute of each path and
the ratio.

    .venv/bin/python bench/bench_cpu_throughput.py                  # 8 epochs: a demo cell
    .venv/bin/python bench/bench_cpu_throughput.py --epochs 1 --settings mamba:32:1 attention:32:2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arrepro.train import client  # noqa: E402
from arrepro.config.checks import load_grid  # noqa: E402
from arrepro.data import save_task  # noqa: E402

BASELINE = "c6e7164"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def demo_settings(grid) -> list[tuple[str, int, int]]:
    """(model, width, layers) of every demo grid, in config order."""
    out = []
    for exp in grid.experiments.values():
        for g in exp["grids"]:
            for m in g["models"]:
                for w in g["widths"]:
                    for nl in g["layers"]:
                        if (m, int(w), int(nl)) not in out:
                            out.append((m, int(w), int(nl)))
    return out


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
    """This working tree's src/ and scripts/ as they are now, under ``dest`` (edits made while the
    benchmark runs do not reach it)."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=BASELINE, help="the commit whose train rule command is today's path")
    ap.add_argument("--settings", nargs="*", help="model:width:layers (default: every demo setting)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs a cell (default: the demo recipe's)")
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    grid = load_grid(yaml.safe_load((ROOT / "config.yaml").read_text()), "demo")
    settings = ([(m, int(w), int(nl)) for m, w, nl in (s.split(":") for s in a.settings)] if a.settings
                else demo_settings(grid))
    task, recipe = next(iter(grid.tasks)), next(iter(grid.recipes))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; baseline {a.baseline}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_cpu_") as tmp:
        tmp = Path(tmp)
        base = export(a.baseline, tmp / "old")
        new = snapshot(tmp / "new")
        env = {**os.environ, "PYTHONPATH": str(base / "src")}
        spec0 = grid.cell_spec(task, settings[0][0], settings[0][1], settings[0][2], recipe, a.lr, 0)
        save_task(spec0["task_def"], tmp / "data")
        # the new path: a server of its own (its key: this tree, this idle time), started, waited for and ended here
        new_env = {**os.environ, "PYTHONPATH": str(new / "src"), client.IDLE_ENV: "3600"}
        new_env.pop(client.ENV, None)
        key = subprocess.run([sys.executable, "-c", "from arrepro.train import client; print(client.server_key())"],
                             env=new_env, capture_output=True, text=True, check=True).stdout.strip()
        # not counted: compile (or load) each tree's numba kernels once, as a first demo cell would
        warm = tmp / "warm"
        for i, (model, width, layers) in enumerate(settings):
            cell = grid.cell_spec(task, model, width, layers, recipe, a.lr, 0)
            cell = {**cell, "recipe_def": {**cell["recipe_def"], "epochs": 1}}
            save_task({**cell["task_def"], "n_train": 32, "n_test": 32}, warm / "data")
            run(command(base, cell, warm / "data", warm / f"cell{i}", server=False), env, warm / f"cell{i}")
        subprocess.run([sys.executable, "-c", "from arrepro.train import server; server._warm_up()"], env=new_env,
                       check=True, stdout=subprocess.DEVNULL)
        t0, cpu0 = time.monotonic(), children_cpu()
        proc = subprocess.Popen([sys.executable, "-m", "arrepro.train.server", key], env=new_env, cwd=new,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        while (sock := client._connect(key)) is None:  # listening once warmed up
            if proc.poll() is not None:
                sys.exit(f"the training server exited with status {proc.returncode}")
            time.sleep(0.1)
        sock.close()
        rows, served, clients = [], 0.0, 0.0
        for i, (model, width, layers) in enumerate(settings):
            cell = grid.cell_spec(task, model, width, layers, recipe, a.lr, 0)
            cell = {**cell, "recipe_def": {**cell["recipe_def"], "early_stop_accuracy": None,
                                           **({"epochs": a.epochs} if a.epochs else {})}}
            old = run(command(base, cell, tmp / "data", tmp / f"old{i}", server=False), env, tmp / f"old{i}")
            asked = run(command(new, cell, tmp / "data", tmp / f"new{i}", server=True), new_env, tmp / f"new{i}")
            child = served_cpu(tmp / f"new{i}")
            served, clients = served + child, clients + asked
            rows.append((f"{model} {width}x{layers}", old, child + asked))
            print(f"{rows[-1][0]:28} today {old:7.1f} CPU-s   new {child + asked:7.1f} CPU-s   ratio {old / (child + asked):.2f}",
                  flush=True)
        proc.terminate()  # idle: its CPU (start-up, warm-up, children) is counted once it is waited for
        proc.wait(timeout=60)
        total_cpu = children_cpu() - cpu0
        old_total = sum(r[1] for r in rows)
        new_total = total_cpu - old_total  # the server with its children, and the clients
        startup = new_total - served - clients
        n = len(rows)
        print(f"\nserver start-up and warm-up (once): {startup:.1f} CPU-s; wall {time.monotonic() - t0:.0f} s for both paths")
        print(f"today's path: {n} cells in {old_total / 60:.2f} CPU-min = {n / (old_total / 60):.2f} cells per CPU-minute")
        print(f"new path:     {n} cells in {new_total / 60:.2f} CPU-min = {n / (new_total / 60):.2f} cells per CPU-minute "
              "(the server's start-up included)")
        print(f"ratio (new / today, cells per CPU-minute): {old_total / new_total:.2f}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
