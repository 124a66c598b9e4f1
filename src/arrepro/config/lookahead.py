"""How far a model sees ahead, and where that is fair: the one home of the look-ahead rule (pure
Python, no torch). The config checks apply it to every grid before any job
(arrepro.config.checks, from the constructor's arguments read with ast), and the trainer to the
model it built (arrepro.train.setup: a cell given by hand to scripts/train_cell.py passes only
there); attention's constructor takes its look-ahead from ``layer_lookahead``.

A sequence mixer is causal unless built to see ahead: attention's centred conv (``conv_mode:
centred``, kernel k, on the paths ``conv`` names) sees (k - 1) / 2 steps ahead a layer; stacked
layers add up. On MQAR the queries sit at even positions 2K + 2g and every odd position after the
context is filler, so the step after a query is never its answer (nor any key or value): a model
that sees ``BLIND_LOOKAHEAD`` steps ahead in all (kernel 3, one layer) still cannot see what it
predicts (tests/test_centred_conv.py proves it on every MQAR task of config.yaml). Two steps ahead
may be the next query's key, which tells which value the answer is not: a leak. On the copy task
the target is the next token itself. (Here, not in arrepro.data.mqar: what a data module holds is
in every cell's fingerprint.)
"""
from __future__ import annotations

BLIND_LOOKAHEAD = 1


def layer_lookahead(kwargs: dict) -> int:
    """The steps one layer of a mixer built with ``kwargs`` (its constructor's arguments, defaults
    included) sees ahead: (conv_size - 1) / 2 for a centred conv on some path, else none (a causal
    conv, or ``conv_mode: centred`` with no conv: nothing is centred)."""
    if kwargs.get("conv_mode", "causal") != "centred" or not kwargs.get("conv"):
        return 0
    return (int(kwargs.get("conv_size", 3)) - 1) // 2


def lookahead_problem(ahead: int, kind: str | None) -> str | None:
    """Why a model that sees ``ahead`` steps ahead in all is unfair on a task of ``kind`` (None:
    fair): anywhere but MQAR, or more than ``BLIND_LOOKAHEAD`` steps ahead on it."""
    if ahead <= 0 or (kind == "mqar" and ahead <= BLIND_LOOKAHEAD):
        return None
    return (f"sees {ahead} step(s) ahead on a task of kind {kind}: a prediction could see its own answer; a model "
            f"that sees ahead (a centred conv) is fair on MQAR only, at most {BLIND_LOOKAHEAD} step(s) ahead in all")
