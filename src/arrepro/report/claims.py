"""The paper's claims, each judged against one experiment's results: consistent, contradicted or
inconclusive, with a row that says what was compared. ``CLAIMS`` lists them (id, experiment,
the paper's words, the judge: a kind of claim from arrepro.report.claim_kinds); the rules every
verdict follows, and their statement in the paper: arrepro.report.verdicts.
"""
from __future__ import annotations

from typing import Callable

from arrepro.report.claim_kinds import (a_beats_b, alike, all_of, depth_helps, fails_where_other_learns,
                                        fine_grid_helps, grows_with, pe_alike, solves_everywhere,
                                        wide_beats_deep, window_wider)
from arrepro.report.verdicts import INCONCLUSIVE, MIN_SEEDS, Judgement


def first_of(e, family: str) -> str:
    """The first model of ``family`` (its card's) the experiment trains, in the config's order: the
    copy task's Transformer (attention) and Mamba (recurrent), whichever the scale trains ("" if
    none: the claim finds no rows)."""
    return e.first_of(family) or ""


def conv_kv(e, reading: str):
    """Table 3's claim under one reading of its convolutions (the models' suffix: "" causal,
    "_centred" centred)."""
    m = {p: f"attention_conv_{p}{reading}" for p in ("qkv", "k", "v", "q")}
    return all_of([alike(e, m["qkv"], [m["k"], m["v"]]), a_beats_b(e, m["qkv"], m["q"], predicted=True)])


# (id, experiment, the paper's claim, judge)
CLAIMS: list[tuple[str, str, str, Callable]] = [
    ("lrwindow", "fig1", "Attention succeeds over a wider range of learning rates than Hyena and Mamba",
     lambda e: window_wider(e, "attention", ["hyena", "mamba"])),
    ("finegrid", "fig2", "A finer learning-rate grid than Zoology's improves the recurrent models",
     fine_grid_helps),
    ("attn2", "fig2", "2-layer attention solves MQAR in every setting",
     lambda e: solves_everywhere(e, "attention", layers=2)),  # a grid's 1-layer rows are another claim's (attn1)
    ("attn1", "fig3", "1-layer attention fails where 1-layer Mamba succeeds",
     lambda e: fails_where_other_learns(e, "attention", "mamba", layers=1)),
    ("width", "fig3", "1-layer recurrent models improve with width",
     lambda e: grows_with(e, "width", family="recurrent", predicted=True)),
    ("depth", "fig4", "Attention improves with depth", lambda e: depth_helps(e, "attention")),
    ("widthdepth", "fig4", "At equal parameter count, Mamba prefers width to depth",
     lambda e: wide_beats_deep(e, "mamba")),
    ("copylr", "fig5", "On copying, the Transformer succeeds over a wider range of learning rates than Mamba",
     lambda e: window_wider(e, first_of(e, "attention"), [first_of(e, "recurrent")])),
    # Sec. 5: "a deeper but narrower Mamba fails to copy, whereas a shallower but wider Mamba with the
    # same parameter count succeeds" (Table 1: 16% against 100%): the claim predicts the deep one's
    # failure, so a deep Mamba at chance is evidence where a model of its depth copies (Table 1's
    # Transformer at that depth) and it trained the wide one's learning rate. Fig. 4's claim on MQAR
    # says only that Mamba prefers width: there a deep one at chance is no evidence
    ("copywidth", "table1", "On copying, a deeper but narrower Mamba fails where a wider one with the same "
                            "parameter count succeeds",
     lambda e: wide_beats_deep(e, first_of(e, "recurrent"), predicted=True)),
    ("conv", "table2", "A convolution lets 1-layer attention recall; Mamba needs its conv1d",
     lambda e: all_of([a_beats_b(e, "attention_conv_qkv", "attention", predicted=True),
                       a_beats_b(e, "mamba", "mamba_noconv", predicted=True)])),
    ("backbone", "table2", "Removing Mamba's gate, or recasting it as S6 + MLP, costs no accuracy",
     lambda e: alike(e, "mamba", ["mamba_nogate", "s6_mlp"])),
    # Table 3's caption: a conv on "either the Key or Value matrix alone is sufficient to achieve the
    # same performance gains" (as on Q, K and V); on Q alone it is not. The paper does not say whether
    # its convolutions are causal: judged under both readings, each labelled (docs/fidelity.md, Table
    # 3 convolutions: a conv on V alone reaching 99% needs one that sees a step ahead, so the paper
    # most likely ran the centred one)
    ("convkv", "table3", "A convolution on K alone, or on V alone, does as well as on Q, K and V; on Q alone it does "
                         "not (read with causal convolutions)", lambda e: conv_kv(e, "")),
    ("convkvcentred", "table3", "The same, read with centred convolutions (kernel 3, one step back and one ahead: "
                                 "the reading the paper most likely ran)", lambda e: conv_kv(e, "_centred")),
    ("pe", "table4", "Positional encodings change recurrent models' accuracy little", lambda e: pe_alike(e)),
    ("deltanet", "fig7", "DeltaNet has a wider window of good learning rates than Mamba2 and Mamba",
     lambda e: window_wider(e, "deltanet", ["mamba2", "mamba"])),
    ("depth12", "fig13", "At 12 layers, attention still has a wider learning-rate window than Mamba",
     lambda e: window_wider(e, "attention", ["mamba"])),
]
# rows that judge another row's claim under another reading of the paper: one claim, two rows
READINGS = {"convkvcentred": "convkv"}


def paper_claim(cid: str) -> str:
    """The paper's claim a row judges: its own id, or the claim it reads another way."""
    return READINGS.get(cid, cid)


def _judged(fn: Callable, e) -> Judgement | None:
    """A claim's judge on one experiment's results, its verdict withheld where the rows it compares have
    fewer than MIN_SEEDS seeds."""
    if e is None or e.best.empty:
        return None
    j = fn(e)
    seeds = j.seeds if j is not None else None  # the rows the claim compares, not the experiment's other rows
    if seeds is not None and seeds < MIN_SEEDS:  # one or two seeds' word is no verdict, whatever the interval
        few = f"on {seeds} seed{'s' if seeds != 1 else ''}, fewer than {MIN_SEEDS}"
        j = Judgement(INCONCLUSIVE, f"{j.compared} ({few}: no verdict)", few, seeds)
    return j


def judge(results: dict) -> list[dict]:
    """Every claim whose experiment this scale declares and trains: id, exp, claim, verdict, compared and
    (inconclusive) the reason."""
    rows = []
    for cid, exp, text, fn in CLAIMS:
        j = _judged(fn, results.get(exp))
        if j is not None:
            rows.append({"id": cid, "exp": exp, "claim": text, "verdict": j.verdict, "compared": j.compared,
                         "reason": j.reason if j.verdict == INCONCLUSIVE else ""})
    return rows


def judge_by_recipe(results: dict, recipe_names: dict[str, str]) -> list[dict]:
    """Beyond the paper: the claims of each experiment an experiment's ``claims_of`` names, judged
    again on that experiment's rows, one recipe at a time, at the named experiment's settings (what
    a recipe does to a verdict). ``recipe_names``: a recipe's id (as the tables carry it) -> its
    config name. Rows: by (the experiment that judges), recipe, id, exp, claim, verdict, compared."""
    rows = []
    for by, e in results.items():
        for exp in e.definition.get("claims_of", []):
            settings = results[exp].rows() if exp in results else None
            if settings is None or settings.empty or e.best.empty:
                continue
            for recipe in sorted(e.best["recipe"].unique()):
                sub = e.restricted(recipe, settings)
                for cid, cexp, text, fn in CLAIMS:
                    j = _judged(fn, sub) if cexp == exp else None
                    if j is not None:
                        rows.append({"by": by, "recipe": recipe_names.get(recipe, recipe), "id": cid, "exp": exp,
                                     "claim": text, "verdict": j.verdict, "compared": j.compared})
    return rows
