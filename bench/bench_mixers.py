"""Benchmark of the sequence mixers on this machine (not a test).

For every mixer file in src/arrepro/models/mixers/ (built with the mixer_kwargs of the first
config.yaml model that uses it), times one forward + backward pass of ``forward_portable`` and of
``forward_reference`` on a (batch, length, width) input and prints portable ms, reference ms and
their ratio. The reference (a Python loop over time steps for the recurrent mixers) can take
minutes at full size, so it runs once; the portable path runs --repeats times after a warm-up
and the median is reported. Then prints, for every config.yaml model, the parameter count of
one mixer and of the whole LanguageModel (vocab 8192, 2 layers, max_len 64) at d = 64 and 512.

    .venv/bin/python bench/bench_mixers.py                 # B=64, L=256, d=128
    .venv/bin/python bench/bench_mixers.py --quick         # B=8, L=64, d=64
    .venv/bin/python bench/bench_mixers.py --mixers mamba mamba2 --csv bench.csv

--csv PATH writes the timing table to PATH and the parameter table to PATH with "_params" before
the extension. On a loaded machine, each multi-threaded op can wait milliseconds for a
descheduled OpenMP thread, which inflates the (many-op) reference loops far more than the
portable paths; compare with --threads 1.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import time
import traceback
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]

from arrepro.config import defaults  # noqa: E402
from arrepro.models import LanguageModel, available_mixers, get_mixer  # noqa: E402
from arrepro.models.backbone import constructor_kwargs, model_kwargs  # noqa: E402

PARAM_WIDTHS = (64, 512)
PARAM_LM = dict(vocab_size=8192, n_layers=2, max_len=64)


def mixer_kwargs(models: dict, mixer: str) -> tuple[str | None, dict]:
    """The first config model using this mixer: its name and the mixer's constructor kwargs."""
    for name, spec in models.items():
        if spec.get("mixer") == mixer:
            return name, constructor_kwargs(mixer, spec.get("mixer_kwargs"), defaults.model(spec)["position"])
    return None, {}


def fwd_bwd_seconds(mixer: torch.nn.Module, path: str, x: torch.Tensor) -> float:
    mixer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    t0 = time.perf_counter()
    y = getattr(mixer, path)(x)
    y.square().mean().backward()
    return time.perf_counter() - t0


def time_mixers(models: dict, names: list[str], B: int, L: int, d: int, repeats: int, reference: bool) -> list[dict]:
    rows = []
    for mixer_name in names:
        row = {"mixer": mixer_name, "config_model": "", "portable_ms": "", "reference_ms": "", "ratio": "", "note": ""}
        rows.append(row)
        try:
            model_name, kwargs = mixer_kwargs(models, mixer_name)
            row["config_model"] = model_name or "(defaults)"
            torch.manual_seed(0)
            mixer = get_mixer(mixer_name)(d, max_len=L, **kwargs).train()
            x = torch.randn(B, L, d)
            fwd_bwd_seconds(mixer, "forward_portable", x)  # warm-up
            portable = statistics.median(fwd_bwd_seconds(mixer, "forward_portable", x) for _ in range(repeats))
            row["portable_ms"] = round(1e3 * portable, 1)
            print(f"  {mixer_name}: portable {1e3 * portable:.1f} ms", flush=True)
            if reference:
                ref = fwd_bwd_seconds(mixer, "forward_reference", x)
                row["reference_ms"] = round(1e3 * ref, 1)
                row["ratio"] = round(ref / portable, 1)
                print(f"  {mixer_name}: reference {1e3 * ref:.1f} ms", flush=True)
        except Exception as err:  # noqa: BLE001 - report and go on with the other mixers
            row["note"] = f"{type(err).__name__}: {err}"[:120]
            traceback.print_exc()
    return rows


def count_parameters(models: dict, names: list[str]) -> list[dict]:
    rows = []
    for model_name, spec in models.items():
        if spec.get("mixer") not in names:
            continue
        row = {"model": model_name, "mixer": spec["mixer"], "note": ""}
        rows.append(row)
        try:
            kwargs = dict(spec.get("mixer_kwargs") or {})
            cls = get_mixer(spec["mixer"])
            for d in PARAM_WIDTHS:
                mk = constructor_kwargs(spec["mixer"], kwargs, defaults.model(spec)["position"])
                row[f"mixer_d{d}"] = sum(p.numel() for p in cls(d, max_len=PARAM_LM["max_len"], **mk).parameters())
                lm = LanguageModel(d_model=d, **model_kwargs(spec), **PARAM_LM)
                row[f"lm_d{d}"] = lm.num_parameters()
        except Exception as err:  # noqa: BLE001
            row["note"] = f"{type(err).__name__}: {err}"[:120]
    return rows


def print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--width", type=int, default=128, help="d_model")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of the portable path (median)")
    ap.add_argument("--quick", action="store_true", help="small shapes: batch 8, length 64, width 64")
    ap.add_argument("--mixers", nargs="*", help="only these mixers (default: every file in mixers/)")
    ap.add_argument("--no-reference", action="store_true", help="skip timing the reference path")
    ap.add_argument("--no-params", action="store_true", help="skip the parameter-count table")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    ap.add_argument("--csv", type=Path, help="write the tables as CSV (PATH and PATH with _params)")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.length, args.width = 8, 64, 64
    torch.set_num_threads(args.threads)
    models = yaml.safe_load(args.config.read_text())["models"]
    names = args.mixers or available_mixers()

    print(f"fwd+bwd at batch {args.batch}, length {args.length}, width {args.width}, fp32, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    timing = time_mixers(models, names, args.batch, args.length, args.width, args.repeats, not args.no_reference)
    tcols = ["mixer", "config_model", "portable_ms", "reference_ms", "ratio", "note"]
    print()
    print_table(timing, tcols)
    if args.csv:
        write_csv(args.csv, timing, tcols)

    if not args.no_params:
        params = count_parameters(models, names)
        pcols = ["model", "mixer"] + [f"mixer_d{d}" for d in PARAM_WIDTHS] + [f"lm_d{d}" for d in PARAM_WIDTHS] + ["note"]
        print(f"\nparameters: one mixer, and the LanguageModel (vocab {PARAM_LM['vocab_size']}, "
              f"{PARAM_LM['n_layers']} layers, max_len {PARAM_LM['max_len']}, config's mlp/position)")
        print_table(params, pcols)
        if args.csv:
            write_csv(args.csv.with_name(args.csv.stem + "_params" + args.csv.suffix), params, pcols)


if __name__ == "__main__":
    main()
