"""The thresholds of a learning-rate search and of the claims about its results (one home):
the task's chance level, the accuracy at which a model **has learned** (chance + LEARNED_MARGIN *
(1 - chance)) and the one at which a learning rate is **good** (GOOD). The search reads them from
its spec (arrepro.search.rounds puts them there), the claims and the paper from here.
"""
from __future__ import annotations

LEARNED_MARGIN = 0.25  # a model has learned at chance + 0.25 * (1 - chance)
GOOD = 0.9             # a learning rate (or a setting) "succeeds" when the mean accuracy reaches this


def chance_level(task: dict, metric: str) -> float:
    """The accuracy of a model that learned only the format: 1/K among the K values of an MQAR
    context, 0 for an exact match of a whole copied string."""
    if "exact_match" in metric or task.get("kind") == "copy":
        return 0.0
    if task.get("kind") == "mqar":
        return 1.0 / int(task["num_kv_pairs"])
    raise ValueError(f"chance level: unknown task kind {task.get('kind')!r} (task {task})")


def learned_threshold(chance: float) -> float:
    return chance + LEARNED_MARGIN * (1 - chance)
