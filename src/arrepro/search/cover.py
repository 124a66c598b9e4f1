"""Evidence, not absence: a setting at chance trained at the learning rates where its rivals learn.

A claim that model A fails where model B succeeds, or that A does as well as B, counts A's failure
as evidence only if A was trained at B's learning rate on every seed (``arrepro.report.claims``):
a search that ended at chance may simply not have looked where B learns. So, in an experiment that
asks for it (``cover: true`` in config.yaml), once every search of the experiment is done, each
setting whose reported mean is below the learned threshold is also trained, on every reported
seed, at the chosen learning rate of every setting of the same task in the experiment that has
learned (the settings the experiment's claims compare it with: other models at its width and
depth, itself at other widths and depths), where that rate lies inside its search's range and is
not one of its candidates already. The cover's learning rates join the setting's candidates (each
is trained on every reported seed): the reported number stays the paper's statistic, the best
over the candidates of the mean over every seed.

Pure Python (no torch, no pandas): the workflow's cover job and the tests call ``plan``.
"""
from __future__ import annotations

from dataclasses import dataclass

TOL = 1e-3  # relative: two learning rates this close are the same point (3-digit snapping)


def same_lr(a: float, b: float) -> bool:
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
    return float(chosen), points[float(chosen)]


def _label(entry: dict) -> str:
    s = entry["setting"]
    return f"{s['model']} {s['layers']}x{s['width']}"


def plan(entries: dict[str, dict]) -> list[Cover]:
    """The cover of one experiment: ``entries`` are its searches (search key -> the entry of its
    group's last plan: setting, spec, state), each done. Deterministic: sorted by search key and
    learning rate."""
    out: list[Cover] = []
    reported = {k: _reported(e) for k, e in entries.items()}
    for key in sorted(entries):
        entry, rep = entries[key], reported[key]
        spec = entry["spec"]
        if rep is None or rep[1] >= spec["learned"]:
            continue  # no candidate (nothing to compare), or it has learned: its failure is not the question
        lo, hi = spec["lo"], spec["hi"]
        candidates = [float(lr) for lr, _ in entry["state"]["points"]]
        rivals: dict[float, list[str]] = {}
        for other in sorted(entries):
            o, orep = entries[other], reported[other]
            if other == key or orep is None or o["setting"]["task"] != entry["setting"]["task"]:
                continue
            if orep[1] < o["spec"]["learned"]:
                continue  # a rival that has not learned shows no rate worth covering
            lr = orep[0]
            if not lo * (1 - TOL) <= lr <= hi * (1 + TOL) or any(same_lr(lr, c) for c in candidates):
                continue
            match = next((x for x in rivals if same_lr(x, lr)), lr)
            rivals.setdefault(match, []).append(f"{_label(o)} ({orep[1]:.3f})")
        for lr in sorted(rivals):
            out.append(Cover(key, lr, tuple(int(s) for s in spec["seeds"]),
                             f"{_label(entry)} is at chance ({rep[1]:.3f} at {rep[0]:.3g}); {lr:.3g} is the best learning "
                             f"rate of {', '.join(rivals[lr])}: trained on every seed, so that its failure there is "
                             "evidence"))
    return out


def max_pairs(n: int) -> int:
    """The most (setting at chance, rival that learned) pairs among ``n`` settings of one task in
    one experiment: with k of them at chance, k * (n - k), at most n * n / 4. Each pair adds at
    most one learning rate, trained on the setting's seeds (the planner's bound)."""
    return max((k * (n - k) for k in range(n + 1)), default=0)


def cells(covers: list[Cover], settings: dict[str, object]) -> list:
    """The cells of a cover: ``settings`` maps a search key to its Setting (arrepro.config.grid)."""
    return list(dict.fromkeys(settings[c.search].cell(c.lr, s) for c in covers for s in c.seeds))


# --------------------------------------------------------------------------- the cover's file
def write(path, exp: str, plans: list, keys: list[str]) -> list[Cover]:
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
    covers = plan(entries)
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
