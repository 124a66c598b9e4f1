"""The fidelity table: every paper-scale setting of config.yaml beside what the paper, Zoology and
Jelassi et al. say, and where they say it.

``REFERENCE`` holds the sources' values, each with the line it comes from; ``rows(config)``
reads this config's value for each and says whose value it is: "paper", "Zoology", "Jelassi"
(the first source it equals) or "CHOICE: reason", the reason from the paper scale's
``choices`` (config.yaml) when no source's value is taken. A setting with neither is a
"DEVIATION" (tests/test_fidelity.py fails on one).

    python -m arrepro.report.fidelity [--format markdown|latex]   # from the repository root
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from arrepro.config import defaults

SILENT = "silent"
NONE = "—"
PAPER = "2508.19029"
ZOOLOGY = "HazyResearch/zoology"
JELASSI = "sjelassi/transformers_ssm_copy"


@dataclass(frozen=True)
class Ref:
    setting: str                       # also the key of a reason in the paper scale's `choices`
    value: Callable[[dict], Any]       # this config's value (the whole config in, the value out)
    paper: Any = SILENT
    zoology: Any = NONE
    jelassi: Any = NONE
    source: str = ""


def _scale(c):
    return c["scales"]["paper"]


def _task(name, *keys):
    return lambda c: tuple(_scale(c)["tasks"][name].get(k) for k in keys) if len(keys) > 1 \
        else _scale(c)["tasks"][name].get(keys[0])


def _mqar(key):
    return lambda c: sorted({t[key] for t in _scale(c)["tasks"].values() if t["kind"] == "mqar"})


def _recipe(name, key, default=None):
    return lambda c: _scale(c)["recipes"][name].get(key, default)


def _grid(exp, i, key):
    return lambda c: _scale(c)["experiments"][exp]["grids"][i][key]


def _model(name, *path):
    def get(c):
        v = c["models"][name]
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        return v
    return get


def _lrs(c, exp, i):
    g = _scale(c)["experiments"][exp]["grids"][i]
    return c["lr_grids"][g["lrs"]] if isinstance(g["lrs"], str) else g["lrs"]


def _searches_used(c):
    return sorted({g["search"] for e in _scale(c)["experiments"].values() for g in e["grids"] if g.get("search")})


def _search_text(c, name):
    from arrepro.config.grid import schema_defaults

    d = {**schema_defaults("search"), **c["lr_searches"][name]}
    start = d.get("start", "the grid's lrs")
    start = c["lr_grids"][start] if isinstance(start, str) and start in c["lr_grids"] else start
    seeds = d["search_seeds"]
    ladder = "" if seeds == "all" else f", ladder {d['ladder']}"
    budget = f", budget {d['budget']}{''.join(f' ({k} {v})' for k, v in d.get('tier_budget', {}).items())}" if d["budget"] else ""
    scan = f", scan {d['scan']:.3g} dec. over {d.get('scan_range', 'the range')} on {d['scan_seeds']} seeds" if d.get("scan") else ""
    return (f"start {start}, range {d.get('range', 'the start span')}, {d['resolution']} dec., {d['rounds']}x{d['per_round']}, "
            f"search seeds {seeds}{ladder}{scan}{budget}{', window' if d['window'] else ''}")


def _all_seeds(c):
    return sorted({s for e in _scale(c)["experiments"].values() for g in e["grids"] for s in g["seeds"]})


def _copy_scored(c) -> str:
    """What the copy task's exact match counts, read off a generated test row: the positions of its
    ``exact_mask`` against its labels (arrepro.data.copying)."""
    import numpy as np

    from arrepro.data import task_spec
    from arrepro.data.copying import IGNORE, make_copy_splits

    spec = task_spec(_scale(c)["tasks"]["copy"])
    test = make_copy_splits(spec, 1, 1, 0)["test"]
    labels, mask = test["labels"][0], test["exact_mask"][0]
    eos = labels == spec.eos
    scored = "the copied string" + (", without EOS" if not mask[eos].any() else ", with EOS")
    return scored if np.array_equal(mask | eos, labels != IGNORE) else "other positions"


def _setting(exp):
    """(L, K, width, layers) of an experiment's first grid."""
    def get(c):
        g = _scale(c)["experiments"][exp]["grids"][0]
        t = _scale(c)["tasks"][g["tasks"][0]]
        return (t["seq_len"], t["num_kv_pairs"], g["widths"][0], g["layers"][0])
    return get


A2 = "A.2 Data"
REFERENCE: list[Ref] = [
    # ---- MQAR data (A.2)
    Ref("tasks.L64", _task("L64", "seq_len", "num_kv_pairs"), (64, 4), (64, 4), source=f"{A2}: '64 tokens with 4 key-value pairs'"),
    Ref("tasks.L128", _task("L128", "seq_len", "num_kv_pairs"), (128, 8), (128, 8), source=f"{A2}: '128 tokens with 8'"),
    Ref("tasks.L256", _task("L256", "seq_len", "num_kv_pairs"), (256, 16), (256, 16), source=f"{A2}: '256 tokens with 16'"),
    Ref("tasks.L512", _task("L512", "seq_len", "num_kv_pairs"), (512, 64), NONE,
        source=f"{A2}: '512 tokens with 64' (Zoology's Fig. 2 config has (512, 64) commented out)"),
    Ref("tasks.L256K64", _task("L256K64", "seq_len", "num_kv_pairs"), (256, 64), source="Fig. 4 caption: 'Seq len: 256, KV pairs: 64'"),
    Ref("MQAR vocabulary", _mqar("vocab_size"), [8192], [8192], source=f"{A2}: 'a fixed vocabulary of 8,192 tokens'"),
    Ref("MQAR train examples", _mqar("n_train"), [100000], [100000], source=f"{A2}: '100,000 training samples'"),
    Ref("MQAR test examples", _mqar("n_test"), [3000], [3000], source=f"{A2}: '3,000 test samples'"),
    # ---- grids
    Ref("widths (Figs. 2, 3, 11, 12)", _grid("fig2", 0, "widths"), [64, 128, 256, 512, 1024, 2048], [64, 128, 256, 512],
        source="A.2 Models: 'six model dimensions: 64, 128, 256, 512, 1024 and 2048'"),
    Ref("layers (Figs. 2 / 3)", lambda c: (_grid("fig2", 0, "layers")(c), _grid("fig3", 0, "layers")(c)), ([2], [1]), ([2], NONE),
        source="A.2 Models: 'two configurations: 1-layer and 2-layer'"),
    Ref("a layer", lambda c: defaults.model(c["models"]["attention"])["mlp"], True, False,
        source="A.2 Models: 'a sequence mixer ... followed by an MLP' (Zoology's sweeps: state mixer = identity)"),
    Ref("positional information", lambda c: sorted(m for m in ("attention", "based", "hyena", "h3", "rwkv", "mamba")
                                                    if defaults.model(c["models"][m])["position"] != "none"),
        ["attention", "based"], ["attention"], source="A.2 Models: 'Positional information is used only in Attention and Based'"),
    Ref("Table 4 positional schemes", lambda c: sorted({d["position"] for d in c["models"].values() if d["card"]["role"] == "positional"}),
        SILENT, source="Table 4: 'No PE, Absolute PE, Relative PE, Learned PE' (forms not given)"),
    Ref("seeds", _all_seeds, [42, 123, 456, 777, 789], source="A.2: 'five random seeds (42, 123, 777, 456 and 789)'"),
    Ref("lr_grids.fine", lambda c: c["lr_grids"]["fine"], SILENT, source="A.2: 'a learning rate sweep' (values not given)"),
    Ref("lr_protocol", lambda c: c.get("lr_protocol", "search"), SILENT,
        source="A.2: 'each configuration undergoes a learning rate sweep', 'five random seeds'; Sec. 1: 'over 3,000 "
               "runs and approximately 20,000 GPU hours'"),
    Ref("lr_searches", lambda c: {n: _search_text(c, n) for n in _searches_used(c)}, SILENT,
        source="A.2: 'a learning rate sweep' (values not given)"),
    Ref("lr_grids.zoology", lambda c: c["lr_grids"]["zoology"], SILENT, [1.0e-4, 4.64e-4, 2.15e-3, 1.0e-2],
        source="Zoology iclr24_zoology_figure2/configs.py: np.logspace(-4, -2, 4)"),
    Ref("experiments.fig1.widths", _grid("fig1", 0, "widths"), SILENT, source="Fig. 1 caption (width not given)"),
    Ref("Fig. 4 widths", _grid("fig4", 0, "widths"), [64, 128, 256, 512, 1024, 2048],
        source="Fig. 4 caption: 'models of increasing dimension from 64 to 2048'"),
    Ref("experiments.fig4.layers", lambda c: sorted({n for g in _scale(c)["experiments"]["fig4"]["grids"] for n in g["layers"]}),
        SILENT, source="Fig. 4 caption: 'each architecture and depth' (depths not given)"),
    Ref("Fig. 7 widths", _grid("fig7", 0, "widths"), [64, 128, 256], source="Fig. 7 caption: 'model dimensions up to 256'"),
    Ref("Fig. 13 layers", _grid("fig13", 0, "layers"), [12], source="Fig. 13 caption: '12-layers models'"),
    Ref("experiments.fig13.widths", _grid("fig13", 0, "widths"), SILENT, source="Fig. 13 caption (width not given)"),
    Ref("experiments.table2.setting", _setting("table2"), SILENT,
        source="Table 2: 'Attention 2%'; Sec. 4: 1-layer attention recalls 'one key-value pair in every setting'"),
    Ref("Table 3 convolutions", lambda c: sorted({c["models"][m]["mixer_kwargs"].get("conv_mode", "causal")
                                                  for g in _scale(c)["experiments"]["table3"]["grids"] for m in g["models"]
                                                  if c["models"][m]["card"]["role"] == "ablation"
                                                  and c["models"][m]["card"]["of"] == "attention"}),
        SILENT, source="Sec. 7: 'a 1D convolution before the QKV matrix projections' (causal or not: not given); "
                       "Table 3: 'Conv on V 99%'"),
    # ---- the paper's recipe (A.2)
    Ref("recipes.paper.epochs", _recipe("paper", "epochs"), 50, 64, source="A.2 Training: 'We trained for 50 epochs'"),
    Ref("recipes.paper.batch_size", _recipe("paper", "batch_size"), {128: 512, 256: 256, 512: 128}, {128: 512, 256: 256, 512: 128},
        source="A.2 Training: '128 for sequence length 512, 256 for sequence length 256 and 512 otherwise'"),
    Ref("recipes.paper.warmup_frac", _recipe("paper", "warmup_frac"), 0.1, 0.0, source="A.2 Training: 'warmup duration 10%, linear warmup'"),
    Ref("recipes.paper.weight_decay", _recipe("paper", "weight_decay"), 0.1, 0.1, 0.1, source="A.2 Training: 'AdamW ..., weight decay 0.1'"),
    Ref("recipes.paper.schedule", _recipe("paper", "schedule"), SILENT, "cosine (per epoch)", source="A.2 (no decay stated)"),
    Ref("recipes.paper.embed_dropout", _recipe("paper", "embed_dropout", defaults.RECIPE["embed_dropout"]), SILENT, 0.1, source="Zoology ModelConfig: embed_dropout 0.1"),
    Ref("recipes.paper.shuffle", _recipe("paper", "shuffle", defaults.RECIPE["shuffle"]), SILENT, False,
        source="Zoology data/utils.py:121: DataLoader(shuffle=False), the same order every epoch"),
    Ref("precision", lambda c: defaults.scale(_scale(c), "precision"), SILENT, "fp32", source="A.2: 'GPU A100' (precision not given); Zoology: fp32"),
    Ref("aggregate.metric", lambda c: c["aggregate"]["metric"], SILENT,
        source="A.2: 'the best performance achieved across the tested learning rates'"),
    # ---- Zoology's replication (Figs. 2, 11)
    Ref("recipes.zoology", lambda c: tuple(_scale(c)["recipes"]["zoology"].get(k) for k in
                                           ("epochs", "warmup_frac", "schedule", "schedule_step", "early_stop_accuracy")),
        SILENT, (64, 0.0, "cosine", "epoch", 0.99),
        source="Zoology figure-2 config: max_epochs=64; train.py: CosineAnnealingLR stepped per epoch, stop at 0.99"),
    Ref("replication widths", _grid("fig2", 1, "widths"), SILENT, [64, 128, 256, 512], source="Zoology figure-2 config: d_model 64-512"),
    Ref("replication models: MLP", lambda c: sorted({str(defaults.model(c["models"][m])["mlp"]) for m in
                                                      _grid("fig2", 1, "models")(c) + _grid("fig11", 1, "models")(c)
                                                      if c["models"][m]["card"]["role"] == "replication"}),
        SILENT, ["identity"], source="Zoology figure-2 config: state_mixer = torch.nn.Identity, its TransformerBlock "
                                     "still adding norm2(residual) (model.py:149-159)"),
    Ref("replication attention dropout", _model("zoology_attention", "mixer_kwargs", "dropout"), SILENT, 0.1,
        source="Zoology figure-2 config: MHA dropout 0.1, 1 head"),
    Ref("replication Based", lambda c: (c["models"]["zoology_based"]["mixer"],
                                        c["models"]["zoology_based"]["mixer_kwargs"]["feature_dim"]), SILENT, ("based_hybrid", 8),
        source="Zoology figure-2 config: Hybrid([BaseConv(kernel 3), Based(feature_dim 8)])"),
    # ---- mixers
    Ref("attention heads", _model("attention", "mixer_kwargs", "num_heads"), SILENT, 1, source="Zoology figure-2 config: num_heads 1"),
    Ref("models.based", lambda c: (c["models"]["based"]["mixer"], c["models"]["based"]["mixer_kwargs"].get("feature_dim")),
        SILENT, ("based_hybrid", 8), source="Zoology figure-2 config (Based)"),
    Ref("H3 d_state", _model("h3", "mixer_kwargs", "d_state"), SILENT, "seq_len",
        source="Zoology figure-2 config: d_state = input_seq_len ('mathematically equivalent to Hyena')"),
    Ref("Hyena (order, filter order, short filter)", lambda c: tuple(c["models"]["hyena"]["mixer_kwargs"][k] for k in
                                                                     ("order", "filter_order", "short_filter")),
        SILENT, (2, 64, 3), source="Zoology mixers/hyena.py defaults"),
    Ref("Mamba (d_state, d_conv, expand)", lambda c: tuple(c["models"]["mamba"]["mixer_kwargs"][k] for k in ("d_state", "d_conv", "expand")),
        SILENT, (16, 4, 2), source="Zoology figure-2 config: Mamba() defaults (mamba-ssm: 16, 4, 2)"),
    Ref("Mamba2 (d_state, headdim)", lambda c: tuple(c["models"]["mamba2"]["mixer_kwargs"][k] for k in ("d_state", "headdim")),
        "larger than Mamba's", ("8 to 24", 64), source="Fig. 7: 'a larger hidden state ... as in Mamba2'; Zoology "
        "models_repo.py:132-150 add_mamba2: d_state 8, 16, 24 (mixers/mamba2.py:35,39 class defaults: 128, 64)"),
    Ref("DeltaNet (heads, conv, layer)", lambda c: (*(c["models"]["deltanet"]["mixer_kwargs"][k] for k in ("num_heads", "conv_size")),
                                                    c["models"]["deltanet"]["mixer"]),
        SILENT, (2, 4, "Hybrid([BaseConv, DeltaNet])"), source="Zoology models_repo.py:239-249 add_delta_net: "
        "num_heads 2, conv 4, layers alternating BaseConv and DeltaNet (hybrid.py:25-27)"),
    # ---- the copy task (Sec. 5 follows Jelassi et al.)
    Ref("copy vocabulary", _task("copy", "vocab_size"), SILENT, jelassi=26, source="Jelassi main.py: --vocab_size 26"),
    Ref("copy train lengths", _task("copy", "min_len", "max_len"), SILENT, jelassi=(5, 20), source="Jelassi main.py: --min_train_len 5 --max_train_len 20"),
    Ref("copy context", _task("copy", "context_len"), SILENT, jelassi=220, source="Jelassi main.py: --context_len 220 (examples packed)"),
    Ref("copy test lengths", _task("copy", "test_min_len", "test_max_len"), SILENT, jelassi=(10, 19),
        source="Jelassi test_utils.py: np.arange(--min_eval_len 10, --max_eval_len 20)"),
    Ref("copy training rows", _task("copy", "n_train"), SILENT, jelassi=16000, source="Jelassi main.py: --steps 2000 x --train_batch_size 8, fresh samples"),
    Ref("tasks.copy.n_test", _task("copy", "n_test"), SILENT, jelassi=240, source="Jelassi: --eval_num_batches 3 x --eval_batch_size 8 per length"),
    Ref("copy recipe (batch, epochs, warmup, schedule, clip, wd)", lambda c: tuple(_scale(c)["recipes"]["copy"].get(k) for k in
        ("batch_size", "epochs", "warmup_frac", "schedule", "grad_clip", "weight_decay")), SILENT,
        jelassi=(8, 1, 0.05, "linear", 1.0, 0.1),
        source="Jelassi train_utils.py: AdamW wd 0.1, linear schedule, 100 warmup of 2,000 steps, clip 1.0; batch 8"),
    Ref("copy Transformer (layers, width, heads)", lambda c: (_grid("table1", 0, "layers")(c)[0], _grid("table1", 0, "widths")(c)[0],
                                                              c["models"][_grid("table1", 0, "models")(c)[0]]["mixer_kwargs"]["num_heads"]),
        (12, 1024, SILENT), jelassi=(12, 1024, 16), source="Table 1: Attention (RoPE) 12 layers, width 1024; Jelassi main.py: --heads 16"),
    Ref("copy exact match", _copy_scored, SILENT, jelassi="the copied string, without EOS",
        source="Jelassi test_utils.py:23-29: the prediction against the copy without its '.'"),
    Ref("copy Mamba d_state", _model("mamba_jelassi", "mixer_kwargs", "d_state"), SILENT, jelassi=32, source="Jelassi main.py: --state_dim 32"),
    Ref("Table 1 Mamba shapes", lambda c: sorted((g["layers"][0], g["widths"][0]) for g in _scale(c)["experiments"]["table1"]["grids"][1:]),
        [(12, 1024), (12, 1408), (24, 1024)], source="Table 1: Mamba 12x1024, 24x1024, 12x1408"),
    Ref("experiments.fig5.lrs", lambda c: _lrs(c, "fig5", 0), SILENT, jelassi="1e-5 (default)", source="Fig. 5 (values not given)"),
]


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return {str(k): v for k, v in a.items()} == {str(k): v for k, v in b.items()}
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
        except (TypeError, ValueError):
            return False
    return a == b


def rows(config: dict) -> list[dict]:
    """One row per reference setting: setting, here, paper, zoology, jelassi, whose, source."""
    choices = _scale(config).get("choices", {})
    out = []
    for r in REFERENCE:
        try:
            here = r.value(config)
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(f"config.yaml (scale paper): fidelity setting {r.setting!r} not found ({err!r})") from err
        whose = next((name for name, ref in (("paper", r.paper), ("Zoology", r.zoology), ("Jelassi", r.jelassi))
                      if ref not in (SILENT, NONE) and _same(here, ref)), None)
        if whose is None:
            whose = f"CHOICE: {choices[r.setting]}" if r.setting in choices else "DEVIATION"
        out.append({"setting": r.setting, "here": here, "paper": r.paper, "zoology": r.zoology, "jelassi": r.jelassi,
                    "whose": whose, "source": r.source})
    return out


def _fmt(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt(x) for x in v) + ")" if isinstance(v, tuple) else "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def markdown(config: dict) -> str:
    lines = ["| setting | here | paper | Zoology | Jelassi | whose | source |", "|---|---|---|---|---|---|---|"]
    for r in rows(config):
        cells = [r["setting"], _fmt(r["here"]), _fmt(r["paper"]), _fmt(r["zoology"]), _fmt(r["jelassi"]), r["whose"], r["source"]]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def longtable(columns, widths, cells) -> str:
    """A longtable of plain-text cells (escaped here), one row a list: the paper's appendix tables."""
    from arrepro.report.tex import tex_escape as escape

    spec = "".join(rf">{{\raggedright{'' if i < len(widths) - 1 else chr(92) + 'arraybackslash'}}}p{{{w}\linewidth}}"
                   for i, w in enumerate(widths))
    out = [rf"\begin{{longtable}}{{{spec}}}", r"\toprule " + " & ".join(columns) + r" \\ \midrule\endhead"]
    out += [" & ".join(escape(str(c)) for c in row) + r" \\" for row in cells]
    out.append(r"\bottomrule\end{longtable}")
    return "\n".join(out) + "\n"


def latex(config: dict) -> str:
    """A longtable (the paper's appendix)."""
    return longtable(("setting", "here", "paper", "Zoology", "Jelassi", "whose", "source"),
                     (0.15, 0.13, 0.09, 0.09, 0.07, 0.16, 0.19),
                     ([r["setting"], _fmt(r["here"]), _fmt(r["paper"]), _fmt(r["zoology"]), _fmt(r["jelassi"]), r["whose"],
                       r["source"]] for r in rows(config)))


def cli(doc: str, markdown, latex) -> None:
    """``python -m`` of a fidelity table: --config, --format markdown|latex."""
    import yaml

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--format", choices=["markdown", "latex"], default="markdown")
    a = ap.parse_args()
    config = yaml.safe_load(open(a.config))
    print(markdown(config) if a.format == "markdown" else latex(config), end="")


def main() -> None:
    cli(__doc__, markdown, latex)


if __name__ == "__main__":
    main()
