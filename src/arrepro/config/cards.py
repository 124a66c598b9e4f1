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

The schema (workflow/schemas/config.schema.yaml) asks for every field a role needs; ``check``
refuses a card whose ``of`` names no model or a model that is itself a variant. A card changes
no result: a cell's spec carries the model without it (``without_card``).
"""
from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("attention", "recurrent")
ROLES = ("core", "ablation", "positional", "replication", "copy")
VARIANT_ROLES = ("ablation", "positional", "replication")  # the roles that name the model they vary (``of``)
CONFIG = "config.yaml"


class CardError(ValueError):
    """A card that is missing a field or names no model; names the file and the key."""


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
    key = f"{CONFIG} models.{name}"
    if name not in models:
        raise CardError(f"{key}: no such model (known: {', '.join(sorted(models))})")
    c = models[name].get("card")
    if not isinstance(c, dict):
        raise CardError(f"{key}.card: missing; every model says what it is (label, family, role, cost; "
                        f"see arrepro.config.cards)")
    for field in ("label", "family", "role", "cost"):
        if field not in c:
            raise CardError(f"{key}.card.{field}: missing")
    if c["family"] not in FAMILIES:
        raise CardError(f"{key}.card.family: {c['family']!r} is not one of {', '.join(FAMILIES)}")
    if c["role"] not in ROLES:
        raise CardError(f"{key}.card.role: {c['role']!r} is not one of {', '.join(ROLES)}")
    if c["role"] in VARIANT_ROLES:
        of = c.get("of")
        if of is None:
            raise CardError(f"{key}.card.of: missing; a model of role {c['role']} names the model it varies")
        if of not in models or of == name:
            raise CardError(f"{key}.card.of: {of!r} is not another model of {CONFIG} models")
        if (models[of].get("card") or {}).get("role") in VARIANT_ROLES:
            raise CardError(f"{key}.card.of: {of!r} is itself a variant; name the model it varies")
    cost = c["cost"]
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost > 0:
        raise CardError(f"{key}.card.cost: {cost!r} is not a number > 0")
    return Card(name, str(c["label"]), c["family"], c["role"], float(cost), c.get("cite"), c.get("of"))


def cards(models: dict, names=None) -> dict[str, Card]:
    """The cards of ``names`` (every model by default), checked, in the config's order."""
    return {n: card_of(models, n) for n in (models if names is None else dict.fromkeys(names))}


def without_card(model_def: dict) -> dict:
    """A config model as a cell's spec carries it: its card left out (it changes no result)."""
    return {k: v for k, v in model_def.items() if k != "card"}
