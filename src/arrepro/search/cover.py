"""Evidence, not absence: a setting at chance trained at the learning rates where its rivals learn.

A claim that model A fails where model B succeeds, or that A does as well as B, counts A's failure
as evidence only if A was trained at B's learning rate on every seed (``arrepro.report.claims``):
a search that ended at chance may simply not have looked where B learns. So, in an experiment that
asks for it (``cover: N`` in config.yaml), once every search of the experiment is done, each
setting whose reported mean is below the learned threshold is also trained, on every reported
seed, at the chosen learning rates (at most N) of the settings of its task in the experiment that
have learned and that a claim compares it with (other models at its width and depth first, then
itself at other widths and depths), where such a rate lies inside its search's range and is not
one of its candidates already. The cover's learning rates join the setting's candidates (each
is trained on every reported seed): the reported number stays the paper's statistic, the best
over the candidates of the mean over every seed, and the row's outcome and window are decided
from those points (``report``): a cover's rate that wins is the outcome ``cover``.

Pure Python (no torch, no pandas): the workflow's cover job and the tests call ``plan``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from arrepro.search import protocol

TOL = 1e-3  # relative: two learning rates this close are the same point


def same_lr(a: float, b: float) -> bool:
    """Whether two learning rates are the same point: the one definition, which the cover (a
    rival's rate already a candidate), the best tables (their candidates, written exactly) and the
    claims (``Stat.covers``) use."""
    return abs(a - b) <= TOL * max(a, b)


@dataclass(frozen=True)
class Cover:
    """One learning rate a setting trains on every reported seed, and why."""
    search: str  # the setting's search key
    lr: float
    seeds: tuple[int, ...]
    why: str

    def as_dict(self) -> dict:
        return {"search": self.search, "lr": self.lr, "seeds": list(self.seeds), "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> "Cover":
        return cls(str(d["search"]), float(d["lr"]), tuple(int(s) for s in d["seeds"]), str(d["why"]))


def _reported(entry: dict) -> tuple[float, float] | None:
    """(chosen learning rate, its mean over every reported seed) of a finished search's entry
    (a plan's ``searches[key]``), or None if it has no candidate."""
    state = entry["state"]
    points = {float(lr): float(m) for lr, m in state["points"]}
    chosen = state.get("chosen_lr")
    if chosen is None or chosen != chosen or not points:
        return None
    mean = points[float(chosen)]
    if not math.isfinite(mean):  # a search's means are finite (a diverged cell counts 0): a damaged plan
        raise ValueError(f"search of {_label(entry)}: its mean at {float(chosen):.3g} is {mean}, not a number")
    return float(chosen), mean


def _label(entry: dict) -> str:
    s = entry["setting"]
    return f"{s['model']} {s['layers']}x{s['width']}"


def _kin(a: dict, b: dict) -> int | None:
    """How a claim compares setting ``b`` with ``a`` (their ``setting`` dicts): 0, another model at
    the same width and depth; 1, the same model at another width or depth; None, neither (no
    claim compares them)."""
    if a["task"] != b["task"]:
        return None
    if (a["width"], a["layers"]) == (b["width"], b["layers"]) and a["model"] != b["model"]:
        return 0
    if a["model"] == b["model"] and (a["width"], a["layers"]) != (b["width"], b["layers"]):
        return 1
    return None


def plan(entries: dict[str, dict], most: int) -> list[Cover]:
    """The cover of one experiment: ``entries`` are its searches (search key -> the entry of its
    group's last plan: setting, spec, state), each done; ``most``: learning rates a setting trains
    at most. A setting at chance takes the best learning rates of its rivals that learned: other
    models at its width and depth first, then itself at other widths and depths, each kind by
    their means (the best first), distinct rates only, inside its range and not among its
    candidates. Deterministic."""
    out: list[Cover] = []
    reported = {k: _reported(e) for k, e in entries.items()}
    for key in sorted(entries):
        entry, rep = entries[key], reported[key]
        spec = entry["spec"]
        if rep is None or not rep[1] < spec["learned"]:
            continue  # no candidate (nothing to compare), or it has learned: its failure is not the question
        lo, hi = spec["lo"], spec["hi"]
        candidates = [float(lr) for lr, _ in entry["state"]["points"]]
        ranked = []
        for other in sorted(entries):
            o, orep = entries[other], reported[other]
            kin = _kin(entry["setting"], o["setting"])
            if other == key or orep is None or kin is None or not orep[1] >= o["spec"]["learned"]:
                continue  # no claim compares them, or the rival has not learned: no rate worth covering
            lr = orep[0]
            if lo * (1 - TOL) <= lr <= hi * (1 + TOL) and not any(same_lr(lr, c) for c in candidates):
                ranked.append((kin, -orep[1], other, lr, f"{_label(o)} ({orep[1]:.3f})"))
        rivals: dict[float, list[str]] = {}
        for _, _, _, lr, label in sorted(ranked):
            match = next((x for x in rivals if same_lr(x, lr)), None)
            if match is None and len(rivals) < most:
                rivals[lr] = [label]
            elif match is not None:
                rivals[match].append(label)
        for lr in sorted(rivals):
            out.append(Cover(key, lr, tuple(int(s) for s in spec["seeds"]),
                             f"{_label(entry)} is at chance ({rep[1]:.3f} at {rep[0]:.3g}); {lr:.3g} is the best learning "
                             f"rate of {', '.join(rivals[lr])}: trained on every seed, so that its failure there is "
                             "evidence"))
    return out


def report(entry: dict, cover_means: dict[float, float]) -> dict:
    """What a setting reports once its cover is trained: ``entry`` its search (a plan's
    ``searches[key]``, done), ``cover_means`` the cover's learning rates -> their means over every
    reported seed. The points are the search's candidates and the cover's rates; the chosen one is
    the best of them (``protocol.best``), and the window (``protocol.state_window``, the one
    definition) is the window of those points, the search's other learning rates by their bounds.
    The outcome is the search's where its own candidate is chosen, else ``cover``: the best is a
    rate the search never resolved (a rival's best, trained on every seed after the search ended;
    the cover file says whose). Returns {points, chosen, outcome, window}."""
    spec = protocol.SearchSpec.from_dict(entry["spec"])
    state = entry["state"]
    own = {float(lr): float(m) for lr, m in state["points"]}
    points = own | {float(lr): float(m) for lr, m in cover_means.items()}
    chosen = protocol.best(points)
    n = len(spec.seeds)
    scores = {float(lr): (int(k), float(m)) for lr, k, m in state.get("scores", [])}
    scores |= {lr: (n, m) for lr, m in cover_means.items()}
    outcome = state["outcome"] if chosen in own else "cover"
    window = protocol.state_window(spec, protocol.State("done", chosen, outcome, points, scores))
    return {"points": points, "chosen": chosen, "outcome": outcome, "window": window}


def max_cells(seed_counts: list[int], most: int) -> int:
    """The most cells a cover adds to these settings (each its number of reported seeds): every
    setting at chance, each at ``most`` learning rates (the planner's bound; in a run, only the
    settings at chance beside rivals that learned, at their rivals' distinct rates)."""
    return sum(most * n for n in seed_counts)


def cells(covers: list[Cover], settings: dict[str, object]) -> list:
    """The cells of a cover: ``settings`` maps a search key to its Setting (arrepro.config.grid)."""
    return list(dict.fromkeys(settings[c.search].cell(c.lr, s) for c in covers for s in c.seeds))


# --------------------------------------------------------------------------- the cover's file
def write(path, exp: str, plans: list, keys: list[str], most: int) -> list[Cover]:
    """Decide an experiment's cover from its groups' last plans (arrepro.search.plans.Plan) and
    write it (sealed): the experiment, and each learning rate a setting trains with its reason."""
    from arrepro.files import write_sealed_json

    entries = {}
    for p in plans:
        entries.update({k: e for k, e in p.searches.items() if k in keys})
    missing = sorted(set(keys) - set(entries))
    if missing:
        raise ValueError(f"cover of {exp}: search(es) {missing} are in none of its groups' last plans")
    not_done = sorted(k for k, e in entries.items() if e["state"]["phase"] != "done")
    if not_done:
        raise ValueError(f"cover of {exp}: search(es) {not_done} are not done: their groups' plans are not the last round's")
    covers = plan(entries, most)
    write_sealed_json(path, {"experiment": exp, "covers": [c.as_dict() for c in covers],
                             "settings": {c.search: entries[c.search]["setting"] for c in covers}})
    for c in covers:
        print(f"{c.search}: {c.lr:.3g} on seeds {', '.join(map(str, c.seeds))}: {c.why}")
    print(f"cover of {exp}: {len(covers)} learning rate(s), {sum(len(c.seeds) for c in covers)} cell(s) at most")
    return covers


def read(path) -> tuple[list[Cover], dict[str, dict]]:
    """An experiment's cover file, checked (its seal): (the covers, search key -> its setting)."""
    from arrepro.files import UnreadableFile, sealed_problem

    data, why = sealed_problem(path)
    if why:
        raise UnreadableFile(f"{path}: {why}; run the workflow again: it decides the cover anew from the searches")
    return [Cover.from_dict(d) for d in data["covers"]], data["settings"]
