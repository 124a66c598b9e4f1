"""What the code builds, beside the code the paper ran: the paper scale's models built as its cells
build them (their recipe's first weights, optimiser, dropout and norms), read off the built model
and optimiser, each row beside the source's rule and the file and line it comes from.

A model's source is the code the paper built on for its task: Zoology for MQAR, Jelassi et al.'s
for copying. Per built model: the first weights of each parameter role (measured std and law
against the source's rule; parameters a mixer draws itself, found as those its
``reset_special_parameters`` redraws, are its own file's and left out), the weight decay the
optimiser gives each parameter, the embedding and attention dropout, the blocks' norm. A row is the
source's ("Zoology", "Jelassi") where what was built follows the source's rule, else the paper
scale's stated choice for it (``choices``, keyed "<model>: <quantity>", or "<model> (built)" for every
row of a model no source has), else a DEVIATION (tests/test_fidelity.py fails on one). Models whose
rows say the same are one group; its measured values are its first model's.

    python -m arrepro.report.fidelity_built [--format markdown|latex]   # from the repository root
"""
from __future__ import annotations

import math

import torch
from torch import nn

from arrepro.config import defaults
from arrepro.models.init import INIT_STD, is_mamba_block
from arrepro.report.fidelity import cli, longtable

ZOOLOGY, JELASSI = "Zoology", "Jelassi"
WIDTH, MAX_LAYERS = 128, 12  # built at the paper's width 128 (Figs. 1, 13), at most 12 layers
TOLERANCE = 0.1  # a measured std within 10% of the rule's (thousands of draws: a few per cent of noise)
ZOO_INIT = "zoology@0bb9665 zoology/model.py:81-124"
MAMBA_INIT = "mamba_ssm/models/mixer_seq_simple.py:51-80 (1.0.1)"
NEOX_INIT = "transformers gpt_neox/modeling_gpt_neox.py:87-99 (4.37.2)"
DECAY_SRC = {ZOOLOGY: "zoology/train.py:147-151: AdamW(model.parameters(), weight_decay)",
             JELASSI: "synthetic_exps/train_utils.py:25: AdamW(model.parameters(), weight_decay=0.1)"}


def builds(config: dict) -> list[dict]:
    """One build per paper-scale model: its first grid's task, recipe and depth (capped)."""
    scale, out = config["scales"]["paper"], {}
    for e in scale["experiments"].values():
        for g in e["grids"]:
            task = scale["tasks"][g["tasks"][0]]
            for m in g["models"]:
                out.setdefault(m, {"model": m, "recipe": g["recipe"], "layers": min(g["layers"][0], MAX_LAYERS),
                                   "task": task, "source": JELASSI if task["kind"] == "copy" else ZOOLOGY,
                                   "replication": config["models"][m]["card"]["role"] == "replication"})
    return list(out.values())


def build(config: dict, b: dict):
    """The model and optimiser a cell of ``b`` builds (arrepro.train.prepare.build_model's way)."""
    from arrepro.train.prepare import build_model

    recipe = defaults.recipe(config["scales"]["paper"]["recipes"][b["recipe"]])
    task = b["task"]
    max_len = task.get("context_len") or task.get("seq_len") or 2 * task["max_len"] + 3
    spec = {"model_def": config["models"][b["model"]], "recipe_def": recipe, "width": WIDTH, "layers": b["layers"]}
    torch.manual_seed(0)
    model = build_model(spec, task.get("vocab_size", 26) + 4, max_len)
    opt = model.configure_optimizer(lr=1e-3, weight_decay=recipe["weight_decay"], decay=recipe["decay"])
    return model, opt, recipe


def _special(model) -> set[str]:
    """The parameters the mixers draw themselves: those ``reset_special_parameters`` redraws."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(12345)
    for block in model.layers:
        if hasattr(block.mixer, "reset_special_parameters"):
            block.mixer.reset_special_parameters()
    return {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}


def _rule(b: dict, block, path: str, fan_in: int, n: int) -> tuple[str, float, str]:
    """The source's law, std and citation for a Linear weight at ``path`` in ``block``."""
    out = path in ("mixer.out_proj", "mlp.out_proj")
    if is_mamba_block(block):  # Zoology's MambaBlock / Mamba2Block, mamba-ssm's Block
        k = 2 if hasattr(block.mlp, "fc1") else 1
        return ("uniform", 1 / math.sqrt(3 * fan_in * (k * n if out else 1)),
                f"{ZOO_INIT if b['source'] == ZOOLOGY else MAMBA_INIT}: PyTorch's default"
                + (f", / sqrt({k} n_layers)" if out else ""))
    if b["source"] == JELASSI:
        return "normal", INIT_STD, f"{NEOX_INIT}: N(0, 0.02), no rescaling"
    name = "fc2" if path == "mlp.out_proj" else getattr(block.mixer, "source_output_name", "out_proj")
    scaled = out and name in ("out_proj", "fc2")
    return ("normal", INIT_STD / math.sqrt(2 * n) if scaled else INIT_STD,
            f"{ZOO_INIT}: N(0, 0.02)" + (" / sqrt(2 n_layers)" if scaled else f" ({name}: not rescaled)" if out else ""))


def _law(w: torch.Tensor, law: str, std: float) -> bool:
    measured = float(w.std())
    if abs(measured / std - 1) > TOLERANCE:
        return False
    bound = std * math.sqrt(3)  # a uniform law's half-width
    return bool(w.abs().max() <= bound * (1 + 1e-6)) == (law == "uniform")


def rows_of(config: dict, b: dict) -> list[dict]:
    model, opt, recipe = build(config, b)
    special, n, src = _special(model), b["layers"], b["source"]
    rows, groups = [], {}
    for role, ok, here, rule, where in _init_rows(b, model, special, n):
        rows.append(dict(quantity=f"init: {role}", ok=ok, here=here, rule=rule, where=where))
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        groups.setdefault(decay[id(p)], []).append(name)
    wd = recipe["weight_decay"]
    here = "; ".join(f"{v:g} on {len(ns)} of {sum(map(len, groups.values()))}" + (f" ({', '.join(sorted(set(_kind(x) for x in ns)))})"
                     if len(groups) > 1 else "") for v, ns in sorted(groups.items(), reverse=True))
    rows.append(dict(quantity="weight decay", ok=set(groups) == {wd}, here=here, rule=f"{wd:g} on every parameter",
                     where=DECAY_SRC[src]))
    rows += _structure_rows(b, model)
    return [{"model": b["model"], **r} for r in rows]


def _kind(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    return "embeddings" if "embed" in name else "norms" if "norm" in name else "biases" if leaf == "bias" else leaf


def _init_rows(b, model, special, n):
    """(role, ok, here, rule, where) of the first block's Linear layers and the embeddings: each
    weight's measured std beside the rule's (in brackets), grouped by role and the rule's source."""
    seen = {}
    block = model.layers[0]
    for path, m in block.named_modules():
        if not isinstance(m, nn.Linear) or f"layers.0.{path}.weight" in special:
            continue
        law, std, where = _rule(b, block, path, m.in_features, n)
        role = "residual outputs" if path in ("mixer.out_proj", "mlp.out_proj") else "other linear weights"
        seen.setdefault((role, law, where), []).append((path, m.weight.detach(), std))
        if m.bias is not None and f"layers.0.{path}.bias" not in special:
            seen.setdefault(("linear biases", "zero", where.split(":")[0] + ": zero"), []).append((path, m.bias.detach(), 0.0))
    out = []
    for (role, law, where), ws in seen.items():
        if law == "zero":
            ok = all(bool((w == 0).all()) for _, w, _ in ws)
            out.append((role, ok, "zero" if ok else "not zero", "zero", where))
        else:
            here = ", ".join(f"{p} {float(w.std()):.4f} ({std:.4f})" for p, w, std in ws)
            out.append((role, all(_law(w, law, std) for _, w, std in ws), here, f"{law} (std in brackets)", where))
    emb = model.embed.weight.detach()
    out.append(("embeddings", _law(emb, "normal", INIT_STD), f"{float(emb.std()):.4f}", f"normal, std {INIT_STD}",
                "every source: N(0, 0.02)"))
    return out


def _structure_rows(b, model) -> list[dict]:
    """The dropout, residual, head (and GPT-NeoX's rotary fraction) and block norm of a built model."""
    block, src = model.layers[0], b["source"]
    mamba = is_mamba_block(block)
    p_embed = model.drop.p
    if src == JELASSI:
        want_embed, where = 0.0, f"{NEOX_INIT.split(':')[0]} / mamba-ssm: no dropout (hidden_dropout 0.0)"
    elif mamba:
        want_embed, where = 0.0, "zoology/mixers/mamba.py:204-260: MambaBlock has no dropout"
    else:
        want_embed, where = 0.1, "zoology/config.py:104: ModelConfig.embed_dropout 0.1 (TransformerBlock.dropout1)"
    rows = [dict(quantity="embedding dropout", ok=abs(p_embed - want_embed) < 1e-12, here=f"{p_embed:g}",
                 rule=f"{want_embed:g}", where=where)]
    if hasattr(block.mixer, "dropout") and isinstance(block.mixer.dropout, float):
        want = 0.1 if b["replication"] else 0.0
        rows.append(dict(quantity="attention dropout", ok=abs(block.mixer.dropout - want) < 1e-12, here=f"{block.mixer.dropout:g}",
                         rule=f"{want:g}", where="zoology/experiments/iclr24_zoology_figure2/configs.py:55-60: MHA dropout 0.1"
                         if b["replication"] else ("zoology/mixers/attention.py:43: MHA class default 0.0" if src == ZOOLOGY
                                                   else f"{NEOX_INIT.split(':')[0]}: attention_dropout 0.0")))
    neox = "transformers gpt_neox/configuration_gpt_neox.py:128-131 (4.37.2)"
    if src == JELASSI and not mamba:  # GPT-NeoX's structure
        rows += [dict(quantity="residual", ok=block.residual == "parallel", here=block.residual, rule="parallel",
                      where=f"{neox}: use_parallel_residual True"),
                 dict(quantity="rotary fraction", ok=abs(getattr(block.mixer, "rotary_fraction", 1.0) - 0.25) < 1e-12,
                      here=f"{getattr(block.mixer, 'rotary_fraction', 1.0):g}", rule="0.25", where=f"{neox}: rotary_pct 0.25")]
    else:
        rows.append(dict(quantity="residual", ok=block.residual == "sequential", here=block.residual, rule="sequential",
                         where=("zoology/mixers/mamba.py:204-260 MambaBlock" if mamba else "zoology/model.py:149-159 TransformerBlock")
                         if src == ZOOLOGY else f"{MAMBA_INIT.split(':')[0]}: Block"))
    untied = src == JELASSI and not mamba
    rows.append(dict(quantity="LM head", ok=model.tied_head != untied, here="tied" if model.tied_head else "untied",
                     rule="untied" if untied else "tied",
                     where=f"{neox}: tie_word_embeddings False" if untied else "zoology/model.py:219" if src == ZOOLOGY
                     else "mamba_ssm/models/mixer_seq_simple.py:208-211 (1.0.1): tie_weights"))
    norm = type(block.norm1).__name__
    want = "RMSNorm" if mamba and src == ZOOLOGY and block.mlp is None else "LayerNorm"  # Zoology's MambaBlock
    rows.append(dict(quantity="block norm", ok=norm == want, here=norm, rule=want,
                     where="zoology/mixers/mamba.py:204-260, mamba2.py:253-309: RMSNorm" if want == "RMSNorm" else
                     "zoology/model.py:143-146 TransformerBlock" if src == ZOOLOGY else
                     "mamba_ssm mixer_seq_simple.py:91 (rms_norm False) / GPT-NeoX: LayerNorm"))
    return rows


def rows(config: dict, only: set[str] | None = None) -> list[dict]:
    """Every build's rows (model, quantity, here, rule, where, whose, and ``keys``: the ``choices`` keys
    that could state a reason for it), the models whose rows say the same (their quantity, rule,
    source and verdict; the measured values are the first one's) in one group: their names joined
    in ``model``. ``only``: these models' rows alone."""
    choices = config["scales"]["paper"].get("choices", {})
    groups: dict[tuple, list] = {}
    for b in builds(config):
        if only is not None and b["model"] not in only:
            continue
        built = []
        for r in rows_of(config, b):
            keys = (f"{r['model']}: {r['quantity']}", f"{r['model']} (built)")
            key = next((k for k in keys if k in choices), None)
            whose = b["source"] if r.pop("ok") else "DEVIATION"
            if key:  # a rule no source gives for this model (followed), or a departure (stated)
                whose = f"CHOICE: {choices[key]}"
            built.append({**r, "whose": whose, "keys": keys})
        groups.setdefault(tuple((r["quantity"], r["rule"], r["where"], r["whose"]) for r in built), []).append(built)
    out = []
    for members in groups.values():
        names = ", ".join(rows[0]["model"] for rows in members)
        out += [{**r, "model": names, "keys": [k for rows in members for k in rows[i]["keys"]]}
                for i, r in enumerate(members[0])]
    return out


COLUMNS = ("model", "quantity", "here", "rule", "whose", "where")


def markdown(config: dict, built: list[dict] | None = None) -> str:
    """The table in markdown (``built``: ``rows(config)`` if already computed)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in built if built is not None else rows(config):
        lines.append("| " + " | ".join(str(r[c]).replace("|", "/") for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def latex(config: dict) -> str:
    """A longtable (the paper's appendix)."""
    return longtable(COLUMNS, (0.1, 0.1, 0.2, 0.1, 0.18, 0.2), ([r[c] for c in COLUMNS] for r in rows(config)))


def main() -> None:
    cli(__doc__, markdown, latex)


if __name__ == "__main__":
    main()
