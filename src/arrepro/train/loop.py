"""Train one cell: a model on a task's train set, evaluated on the full test set every epoch
(what it trains with, checked and built first: arrepro.train.prepare).

Recipe (paper A.2): AdamW, weight decay, linear warmup over ``warmup_frac`` of the steps, then
the decay named by ``schedule`` (cosine to zero, linear to zero, or constant), stepped every
optimiser step or, with ``schedule_step: epoch``, once per epoch (Zoology's). Every epoch takes
the training set in the data's own order (Zoology's), or with ``shuffle: true`` in a new
permutation (``prepare.epoch_order``). Precision from the
cell spec (``prepare.autocast_for``): fp32 (the default), tf32 or bf16. Logits only at labelled
positions.

Robust on a cluster: a checkpoint (model, optimiser, RNG, metrics so far) is written atomically
after every epoch and on SIGTERM or SIGINT (Ctrl-C); a restarted run resumes from it and ends with
the same metrics as an uninterrupted run. A checkpoint carries the sha256 of its contents: a
garbled or truncated one is reported and the cell starts over. It is used only if its fingerprint
(``prepare.fingerprint``: the spec, the data, the code) matches, so new data, an edited model or
``--forcerun`` never resume a stale run.
``metrics.jsonl`` and then ``result.json`` are written when the cell ends (the checkpoint carries the
metrics until then: a job that fails leaves no output for Snakemake to remove), atomically:
result.json's presence means the cell is finished; it carries the checksums of itself and of
``metrics.jsonl`` (``arrepro.config.cellfiles``). Just before them, the checkpoint becomes the
finished cell's record: its fingerprint and training state, without the model and optimiser state,
enough to rebuild a deleted result.json and metrics.jsonl without training; with ``keep_weights``
the final weights stay beside it (``weights.pt``: the model's ``state_dict``). A forced cell
(``forced_run``: the id of the Snakemake run that forces it, arrepro.train.runfile) does not resume
a checkpoint of another run. A write that fails (a full disk) leaves no ``.tmp`` file behind.
One process at a time trains a cell (``cellfiles.CellLock``); the spec is checked before anything
is read (``prepare.check_spec``). A diverging run (non-finite loss) stops and is recorded as
diverged; it is a result, not a crash.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import time
import typing
from pathlib import Path

import torch

from arrepro.train import checkpoint, numerics
from arrepro.config import defaults
from arrepro.config.cellfiles import CHECKPOINT, METRICS, RESULT, WEIGHTS, CellBusy, CellLock, metrics_text, seal
from arrepro.train.checkpoint import CorruptCheckpoint
from arrepro.files import atomic_write, remove_temporaries, write_json_atomic, write_text_atomic
from arrepro.models import LanguageModel
from arrepro.models.kernels import describe_paths, paths_used
from arrepro.train.prepare import (SCHEDULES, TrainError, autocast_for, build_model, check_lookahead, check_spec,
                                   epoch_order, fingerprint, load_task, pick_device)


class Preempted(SystemExit):
    """Raised after a SIGTERM or SIGINT checkpoint: exit non-zero so the scheduler retries the job."""


def lr_at(step: int, total: int, base: float, warmup_frac: float, schedule: str,
          steps_per_epoch: int | None = None) -> float:
    """The learning rate of optimiser step ``step`` (from 0) of ``total``: a linear warmup over
    ``warmup_frac`` of the run, then ``schedule`` (cosine or linear to 0, or constant).

    Per step (``steps_per_epoch`` None; recipe ``schedule_step: step``): the clock is the step, the
    warmup lasts ``max(1, round(warmup_frac * total))`` steps.
    Per epoch (``steps_per_epoch`` given; ``schedule_step: epoch``): the clock is the epoch
    ``e = step // steps_per_epoch`` of ``E = ceil(total / steps_per_epoch)``, so the LR is constant
    within an epoch. The warmup is ``W = round(warmup_frac * E)`` whole epochs (none if 0): epoch
    ``e < W`` runs at ``base * (e + 1) / W``; the decay then runs over the other ``E - W`` epochs,
    epoch ``e`` at fraction ``(e - W) / (E - W)``. With no warmup and cosine, epoch ``e`` gets
    ``base * (1 + cos(pi * e / E)) / 2``: torch's CosineAnnealingLR(T_max=E, eta_min=0) stepped
    after each epoch, as in Zoology."""
    if steps_per_epoch:
        step, total = step // steps_per_epoch, math.ceil(total / steps_per_epoch)
        warm = int(round(warmup_frac * total))
    else:
        warm = max(1, int(round(warmup_frac * total)))
    if step < warm:
        return base * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    if schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * frac))
    if schedule == "linear":
        return base * (1.0 - frac)
    if schedule == "constant":
        return base
    raise ValueError(f"recipe.schedule: unknown schedule {schedule!r} (one of {', '.join(SCHEDULES)})")


@torch.no_grad()
def evaluate(model, inputs, labels, batch_size, device, autocast, exact_mask=None) -> dict:
    """Test loss and per-token accuracy over every labelled position; exact match: the fraction of
    rows right at every position of ``exact_mask`` (boolean, the labels' shape; None: every
    labelled position), which for the copy task is the copied string without EOS
    (``prepare.load_task``)."""
    model.eval()
    loss_sum, correct, total, exact, n = 0.0, 0, 0, 0, 0
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i : i + batch_size].to(device), labels[i : i + batch_size].to(device)
        mask = y != -100
        counted = mask if exact_mask is None else exact_mask[i : i + batch_size].to(device)
        with autocast():
            logits, target = model.labelled_logits(x, y)
        logits = logits.float()
        loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        hit = logits.argmax(-1) == target
        correct += int(hit.sum())
        total += int(mask.sum())
        # an example is exact when every counted position is right (copy task's string accuracy)
        per_row = torch.zeros(len(x), dtype=torch.long, device=device).index_add_(
            0, mask.nonzero()[:, 0], (~hit & counted[mask]).long())
        exact += int((per_row == 0).sum())
        n += len(x)
    model.train()
    return {"test_loss": loss_sum / max(total, 1), "test_accuracy": correct / max(total, 1),
            "test_exact_match": exact / max(n, 1)}


def train_cell(spec: dict, data_dir: str | Path, out_dir: str | Path, threads: int | None = None,
               log=print, stop_after_steps: int | None = None, forced_run: str | None = None,
               keep_weights: bool = False) -> dict:
    """Train (or resume) one cell; write metrics.jsonl and result.json under ``out_dir``. The spec
    is checked first (``check_spec``); the cell is trained by one process at a time (``CellLock``:
    a second one is a TrainError naming the first).

    ``forced_run``: the id of the Snakemake run that forces this cell: a checkpoint that another
    run wrote is not resumed (one this run wrote, by an earlier attempt, is). ``keep_weights``:
    the finished cell keeps its final weights (``weights.pt``).
    ``stop_after_steps`` simulates a preemption after that many optimiser steps (tests)."""
    check_spec(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with CellLock(out) as lock:
            if lock.unsupported:
                log(f"warning: {lock.unsupported}")
            else:  # no other trainer of the cell runs: a temporary file here is an earlier attempt's
                for tmp in remove_temporaries(out):
                    log(f"removed {tmp.name}, a temporary file an earlier attempt left when it was stopped "
                        "between a write and its rename")
            return _train_cell(spec, data_dir, out, threads, log, stop_after_steps, forced_run, keep_weights)
    except CellBusy as e:
        raise TrainError(str(e)) from None


@dataclasses.dataclass
class TrainState:
    """A cell's progress, saved in its checkpoint: where training stands and what it measured."""
    epoch: int = 0
    batch: int = 0  # within the epoch
    step: int = 0
    examples: int = 0
    metrics: list = dataclasses.field(default_factory=list)  # one row per finished epoch
    loss_sum: float = 0.0  # over the epoch's steps so far
    loss_n: int = 0
    train_seconds: float = 0.0
    diverged: bool = False
    done: bool = False
    numerics: dict | None = None
    kernel_paths: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Run:
    """What one process trains a cell with (rebuilt on every start; only ``TrainState`` is saved)."""
    spec: dict
    recipe: dict
    out: Path
    log: typing.Callable
    device: torch.device
    precision: str
    autocast: typing.Callable
    fingerprint: str
    data: tuple  # train inputs, train labels, test inputs, test labels, test exact mask
    model: LanguageModel
    opt: torch.optim.Optimizer
    steps_per_epoch: int
    tag: str
    numbers: dict  # the numerics this process runs at (arrepro.train.numerics.settle)
    steps_run: int = 0  # by this process (stop_after_steps, the first step's kernel report)
    forced_run: str | None = None  # the Snakemake run that forces the cell (arrepro.train.runfile)
    keep_weights: bool = False
    from_record: bool = False  # resumed from a finished cell's record: the model was neither loaded nor trained

    @property
    def epochs(self) -> int:
        return self.recipe["epochs"]

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def lr(self, step: int) -> float:
        r = self.recipe
        per_epoch = self.steps_per_epoch if r["schedule_step"] == "epoch" else None  # lr_at's clock
        return lr_at(step, self.total_steps, self.spec["lr"], r["warmup_frac"], r["schedule"], per_epoch)


def _train_cell(spec: dict, data_dir: str | Path, out: Path, threads: int | None, log,
                stop_after_steps: int | None, forced_run: str | None, keep_weights: bool) -> dict:
    """The loop: set up, resume, then train and evaluate epoch by epoch (a checkpoint after
    each); SIGTERM and SIGINT end the step in progress, checkpoint and exit (``Preempted``)."""
    run = _setup(spec, data_dir, out, threads, log)
    run.forced_run, run.keep_weights = forced_run, keep_weights
    st = _resume(run)
    with _stop_signals() as stop:
        while st.epoch < run.epochs and not st.done:
            _train_epoch(run, st, stop, stop_after_steps)
            _end_epoch(run, st)
    return _finish(run, st)


def _setup(spec: dict, data_dir, out: Path, threads: int | None, log) -> Run:
    numbers = numerics.settle(threads, defaults.scale(spec, "subnormals"))  # one thread, oneDNN off; what ATen runs at
    device = pick_device(defaults.scale(spec, "device"), "device (the scale's, in config.yaml)")
    precision = defaults.scale(spec, "precision")
    autocast = autocast_for(precision, device, "precision (the scale's, in config.yaml)")
    recipe = defaults.recipe(spec["recipe_def"])
    fp = fingerprint(spec, data_dir)  # before the data is loaded: hashing reads each file once more
    xtr, ytr, xte, yte, vocab, exact = load_task(data_dir)
    if spec["batch_size"] > len(xtr):
        raise TrainError(f"recipe {spec['recipe']}: batch_size {spec['batch_size']} is larger than the training "
                         f"set ({len(xtr)} examples in {Path(data_dir) / 'train.npz'})")
    torch.manual_seed(spec["seed"])
    try:
        model = build_model(spec, vocab, xtr.shape[1]).to(device)
    except (ValueError, TypeError) as e:  # arguments the mixer refuses (the workflow refuses them before any job)
        raise TrainError(f"model {spec['model']} (model_def): {e}") from e
    check_lookahead(spec, model)  # (so does the workflow)
    opt = model.configure_optimizer(lr=spec["lr"], weight_decay=recipe["weight_decay"], betas=tuple(recipe["betas"]),
                                    decay=recipe["decay"], fused=device.type in ("cpu", "cuda"))  # fused: ~1 ms a step less on CPU
    tag = f"{spec['model']} w{spec['width']} l{spec['layers']} lr{spec['lr']:.3g} s{spec['seed']}"
    return Run(spec, recipe, out, log, device, precision, autocast, fp, (xtr, ytr, xte, yte, exact), model, opt,
               math.ceil(len(xtr) / spec["batch_size"]), tag, numbers)


def _resume(run: Run) -> TrainState:
    """The checkpoint's state if it is this cell's (same spec, data and code) and, for a forced
    cell, written in the run that forces it; else a new one."""
    st, path, log = TrainState(), run.out / CHECKPOINT, run.log
    ck = None
    if path.exists():
        try:
            ck = checkpoint.load(path, run.device)
        except (CorruptCheckpoint, OSError) as e:
            log(f"checkpoint {path} is corrupt ({e}): starting the cell over")
    mine = isinstance(ck, dict) and ck.get("fingerprint") == run.fingerprint
    if ck is not None and not mine:
        log("checkpoint fingerprint differs from this cell, data and code: starting afresh")
    if run.forced_run and not (mine and ck.get("forced_run") == run.forced_run):
        used = f"; its checkpoint (epoch {ck['state']['epoch']} batch {ck['state']['batch']}) is not used" if mine else ""
        log(f"forced by snakemake (run {run.forced_run}): the cell starts over{used}")
    elif mine and "model" not in ck:  # the finished cell's record (_finish): nothing left to train
        st = TrainState(**ck["state"])
        run.from_record = True
        log(f"resumed from checkpoint at epoch {st.epoch} batch {st.batch} (the finished cell's record: "
            "its files are rebuilt without training)")
    elif mine:
        run.model.load_state_dict(ck["model"])
        run.opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["torch_rng"])
        if run.device.type == "cuda" and ck.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(ck["cuda_rng"])
        st = TrainState(**ck["state"])
        log(f"resumed from checkpoint at epoch {st.epoch} batch {st.batch}")
    log(f"[{run.tag}] {run.model.num_parameters():,} parameters, {run.epochs} epochs x {run.steps_per_epoch} steps, "
        f"device {run.device}")
    st.numerics = numerics.merge(st.numerics, run.numbers)
    log(f"[{run.tag}] {numerics.describe(st.numerics)}")
    return st


def _save(run: Run, st: TrainState) -> None:
    on_cuda = run.device.type == "cuda"
    checkpoint.save(run.out / CHECKPOINT, {
        "fingerprint": run.fingerprint, "model": run.model.state_dict(), "optimizer": run.opt.state_dict(),
        "torch_rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state() if on_cuda else None,
        "state": dataclasses.asdict(st), "forced_run": run.forced_run})


def _seal_checkpoint(run: Run, st: TrainState) -> None:
    """The checkpoint of a finished cell becomes its record (its fingerprint and training state,
    no model nor optimiser state: a few KB), and its final weights are kept (``weights.pt``) if
    asked, else none stay from an earlier training. Weights of a cell rebuilt from its record
    (``from_record``: its model was not trained here) are left as they are."""
    if not run.from_record:
        weights = run.out / WEIGHTS
        if run.keep_weights:
            state = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
            atomic_write(weights, lambda tmp: torch.save(state, tmp))
        else:
            weights.unlink(missing_ok=True)
    checkpoint.save(run.out / CHECKPOINT, {"fingerprint": run.fingerprint, "state": dataclasses.asdict(st),
                                           "forced_run": run.forced_run})


def _write_metrics(run: Run, st: TrainState) -> None:
    write_text_atomic(run.out / METRICS, metrics_text(st.metrics))


def _train_epoch(run: Run, st: TrainState, stop: dict, stop_after_steps: int | None) -> None:
    """The rest of the current epoch's optimiser steps (all of them unless resumed mid-epoch)."""
    xtr, ytr = run.data[0], run.data[1]
    bs, model, opt = run.spec["batch_size"], run.model, run.opt
    perm = epoch_order(len(xtr), run.spec["seed"], st.epoch, run.recipe["shuffle"])
    t0 = time.perf_counter()
    while st.batch < run.steps_per_epoch:
        idx = perm[st.batch * bs : (st.batch + 1) * bs]
        x, y = xtr[idx].to(run.device), ytr[idx].to(run.device)
        for g in opt.param_groups:
            g["lr"] = run.lr(st.step)
        with run.autocast():
            loss, _, _ = model.loss(x, y)
        if not torch.isfinite(loss):
            st.diverged = True
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if run.recipe["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), run.recipe["grad_clip"])
        opt.step()
        st.loss_sum += loss.item()
        st.loss_n += 1
        st.batch += 1
        st.step += 1
        st.examples += len(idx)  # the last batch of an epoch may be short
        run.steps_run += 1
        if run.steps_run == 1:  # which kernel or portable path each mixer took, and why
            st.kernel_paths = paths_used(model, st.kernel_paths)
            run.log(f"[{run.tag}] {describe_paths(st.kernel_paths)}")
        if stop["name"] or (stop_after_steps is not None and run.steps_run >= stop_after_steps):
            st.train_seconds += time.perf_counter() - t0
            _save(run, st)
            run.log(f"[{run.tag}] stopping at step {st.step} ({stop['name'] or 'stop_after_steps'}): "
                    "checkpoint written, a restart resumes")
            raise Preempted(3)
    st.train_seconds += time.perf_counter() - t0


def _end_epoch(run: Run, st: TrainState) -> None:
    """Evaluate on the whole test set, record the epoch's row, decide whether to stop early,
    and write the checkpoint (which carries the metrics so far)."""
    ep, (xte, yte, exact) = st.epoch, run.data[2:]
    ev = evaluate(run.model, xte, yte, max(run.spec["batch_size"], 256), run.device, run.autocast, exact)
    row = {"epoch": ep + 1, "step": st.step, "lr": run.opt.param_groups[0]["lr"],
           "train_loss": None if st.diverged else st.loss_sum / max(st.loss_n, 1),
           **{k: (v if math.isfinite(v) else None) for k, v in ev.items()},
           "seconds": st.train_seconds}
    st.metrics.append(row)
    st.epoch, st.batch, st.loss_sum, st.loss_n = ep + 1, 0, 0.0, 0
    tps = st.examples * run.data[0].shape[1] / max(st.train_seconds, 1e-9)
    eta = st.train_seconds / (ep + 1) * (run.epochs - ep - 1)
    run.log(f"[{run.tag}] epoch {ep + 1}/{run.epochs} train_loss {row['train_loss'] or float('nan'):.4f} "
            f"test_loss {ev['test_loss']:.4f} acc {ev['test_accuracy']:.4f} | {tps:,.0f} tok/s | ETA {eta:.0f}s")
    if st.diverged:
        run.log(f"[{run.tag}] diverged (non-finite loss) at step {st.step}: recorded, stopping")
        st.done = True
    stop_at = run.recipe["early_stop_accuracy"]
    if stop_at is not None and ev["test_accuracy"] > stop_at:  # above it, as Zoology's train.py:160-162
        st.done = True
    _save(run, st)  # (metrics.jsonl is written with result.json: a job that fails leaves neither)


def _finish(run: Run, st: TrainState) -> dict:
    """result.json, written last (sealed: it carries its own and metrics.jsonl's checksums)."""
    _write_metrics(run, st)
    spec, last = run.spec, (st.metrics[-1] if st.metrics else {})
    accs = [m["test_accuracy"] for m in st.metrics]
    result = {
        **{k: spec[k] for k in ("task", "model", "width", "layers", "recipe", "lr", "seed", "batch_size")},
        "mixer": spec["model_def"]["mixer"],
        "final_accuracy": last.get("test_accuracy", 0.0), "best_accuracy": max(accs, default=0.0),
        "final_exact_match": last.get("test_exact_match", 0.0),
        "final_test_loss": last.get("test_loss"),
        "diverged": st.diverged, "parameters": run.model.num_parameters(), "epochs_run": len(st.metrics),
        "steps": st.step, "train_seconds": st.train_seconds,
        "tokens_per_second": st.examples * run.data[0].shape[1] / max(st.train_seconds, 1e-9),
        "device": run.device.type, "precision": run.precision, "tf32": torch.backends.cuda.matmul.allow_tf32,
        "numerics": st.numerics,
        "kernel_paths": paths_used(run.model, st.kernel_paths), "cell": spec,
    }
    result = seal(result, metrics_text(st.metrics))  # last: the checksums cover every key
    _seal_checkpoint(run, st)
    write_json_atomic(run.out / RESULT, result)
    return result


@contextlib.contextmanager
def _stop_signals():
    """SIGTERM (Slurm's time limit, preemption) and SIGINT (Ctrl-C) only set ``stop["name"]``:
    the loop finishes its step, checkpoints and exits. The handlers are restored after."""
    stop = {"name": None}
    prev = {sig: signal.signal(sig, lambda n, _: stop.__setitem__("name", signal.Signals(n).name))
            for sig in (signal.SIGTERM, signal.SIGINT)} if _main_thread() else {}
    try:
        yield stop
    finally:
        for sig, handler in prev.items():
            signal.signal(sig, handler)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use scripts/train_cell.py")
