"""A model's card: what a config model is, said by its entry in config.yaml (models: NAME:
card:), the one home of it. The paper, the claims, the figures, the tables and the cost model
read a model's card; no code reads a model's name for its meaning.

    label   the model as the paper and the tables print it (plain text): "Mamba without its gate"
    cite    the citation key of the paper that introduced it (optional)
    family  attention or recurrent (the claims' "recurrent models": the figures' attention lines)
    role    core: a model of the paper's comparisons; ablation, positional or replication:
            an ablation, a positional variant, or Zoology's own form of the model ``of`` names;
            copy: a model of the copy task
    of      the model an ablation, positional variant or replication varies (a key of ``models``)
    cost    its arithmetic per token relative to softmax attention's (the cost model's mixer
            factor: arrepro.config.costs)

The schema (workflow/schemas/config.schema.yaml) asks for every field a role needs; ``card_of``
refuses a card whose ``of`` names no model or a model that is itself a variant, an ``of`` on a
card whose role varies no model (core, copy: it would be ignored), and an empty label;
``distinct_labels`` refuses two models of one experiment with one label (the figures key their
lines and the tables their rows on the label: two models would be drawn as one line, and a
table would keep one row of the two). A card changes no result: a cell's spec carries the model
without it (``without_card``).
"""
from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("attention", "recurrent")
ROLES = ("core", "ablation", "positional", "replication", "copy")
VARIANT_ROLES = ("ablation", "positional", "replication")  # the roles that name the model they vary (``of``)
CONFIG = "config.yaml"


class CardError(ValueError):
    """A card that is missing a field or names no model: ``key`` (the config key, e.g.
    models.mamba.card.of) and ``problem``; the message names the file and the key once."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{CONFIG} {key}: {problem}")
        self.key, self.problem = key, problem


@dataclass(frozen=True)
class Card:
    model: str
    label: str
    family: str
    role: str
    cost: float
    cite: str | None = None
    of: str | None = None

    @property
    def base(self) -> str:
        """The model this one is a form of (``of`` for a variant, else itself): Zoology's Hyena's
        base is Hyena, whose colour it shares in the figures and with which the claims pair it."""
        return self.of if self.role in VARIANT_ROLES else self.model

    @property
    def attention(self) -> bool:
        return self.family == "attention"


def card_of(models: dict, name: str) -> Card:
    """The card of config model ``name`` (``models``: the config's ``models``), checked."""
    key = f"models.{name}"
    if name not in models:
        raise CardError(key, f"no such model (known: {', '.join(sorted(models))})")
    c = models[name].get("card")
    if not isinstance(c, dict):
        raise CardError(f"{key}.card", "missing; every model says what it is (label, family, role, cost; "
                        "see arrepro.config.cards)")
    for field in ("label", "family", "role", "cost"):
        if field not in c:
            raise CardError(f"{key}.card.{field}", "missing")
    if not str(c["label"]).strip():
        raise CardError(f"{key}.card.label", "empty; the label is the model as the paper, its figures and its "
                        "tables print it")
    if c["family"] not in FAMILIES:
        raise CardError(f"{key}.card.family", f"{c['family']!r} is not one of {', '.join(FAMILIES)}")
    if c["role"] not in ROLES:
        raise CardError(f"{key}.card.role", f"{c['role']!r} is not one of {', '.join(ROLES)}")
    of = c.get("of")
    if c["role"] in VARIANT_ROLES:
        if of is None:
            raise CardError(f"{key}.card.of", f"missing; a model of role {c['role']} names the model it varies")
        if of not in models or of == name:
            raise CardError(f"{key}.card.of", f"{of!r} is not another model of {CONFIG} models")
        if (models[of].get("card") or {}).get("role") in VARIANT_ROLES:
            raise CardError(f"{key}.card.of", f"{of!r} is itself a variant; name the model it varies")
    elif "of" in c:
        raise CardError(f"{key}.card.of", f"{of!r} on a model of role {c['role']}, which varies no model (it would "
                        f"be ignored); only the roles {', '.join(VARIANT_ROLES)} name an `of`")
    cost = c["cost"]
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost > 0:
        raise CardError(f"{key}.card.cost", f"{cost!r} is not a number > 0")
    return Card(name, str(c["label"]), c["family"], c["role"], float(cost), c.get("cite"), of)


def cards(models: dict, names=None) -> dict[str, Card]:
    """The cards of ``names`` (every model by default), checked, in the config's order."""
    return {n: card_of(models, n) for n in (models if names is None else dict.fromkeys(names))}


def distinct_labels(models: dict, names, where: str) -> None:
    """Refuse two of ``names`` (the models of one experiment and the models they vary, whose
    labels its tables print: ``Grid.experiment_models``) with one label: a CardError at ``where``
    (the experiment's key) naming both models and their label keys."""
    seen: dict[str, str] = {}
    for name in names:
        label = card_of(models, name).label
        other = seen.setdefault(label, name)
        if other != name:
            raise CardError(where, f"models {other!r} and {name!r} have one label {label!r} (models.{other}.card.label, "
                            f"models.{name}.card.label): its figure would draw them as one line and its table keep "
                            "one row of the two; give each model of an experiment its own label")


def without_card(model_def: dict) -> dict:
    """A config model as a cell's spec carries it: its card left out (it changes no result)."""
    return {k: v for k, v in model_def.items() if k != "card"}
