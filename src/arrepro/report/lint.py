"""The manuscript's lint: every key paper/main.tex reads with ``\\R{key}`` or ``\\Verdict{id}`` is
one numbers.tex defines or could define at some scale (a known experiment, model and statistic,
or claim); a misspelt key, which would print "n/a", fails naming it; so does a model card's
citation key that the manuscript's bibliography lacks (it would print "?")."""
from __future__ import annotations

import re
from pathlib import Path

from arrepro.report.claims import CLAIMS, judge
from arrepro.report.texkeys import EXP_FIELDS, MODEL_STATS, RUN_KEYS, COPY_ALIASES

def manuscript_keys(tex: str) -> list[str]:
    """The literal keys a manuscript reads with \\R{key} or \\Verdict{id} (comments ignored;
    keys built from a macro argument, ``#1``, are not literal)."""
    body = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())
    keys = re.findall(r"\\R\{([^{}#]+)\}", body) + [f"claim/{k}" for k in re.findall(r"\\Verdict\{([^{}#]+)\}", body)]
    return list(dict.fromkeys(keys))


def possible_key(key: str, experiments: set[str], models: set[str]) -> bool:
    """A key numbers.tex defines when the scale has that result (a known experiment, model and
    statistic): left undefined it reads "n/a"; anything else is a typo."""
    if key in RUN_KEYS:
        return True
    if key.startswith("claim/"):
        return key[len("claim/"):] in {cid for cid, *_ in CLAIMS}
    exp, _, rest = key.partition("/")
    if exp not in experiments:
        return False
    if rest in EXP_FIELDS:
        return True
    rest = rest.removeprefix("zoo/")
    model, _, stat = rest.partition("/")
    stat = re.sub(r"^L\d+/", "", stat)
    return model in models and stat in MODEL_STATS


def check_manuscript_keys(tex_path, defined: set[str], meta: dict) -> None:
    """Fail on a key the manuscript reads that numbers.tex does not define and could not define
    (a misspelt experiment, model, statistic or claim): it would print "n/a"."""
    scales = [meta] + ([meta["paper_scale"]] if meta.get("paper_scale") else [])
    experiments = {e for s in scales for e in s["experiments"]}
    models = set(meta.get("models") or ()) | set(COPY_ALIASES) | {
        m for s in scales for e in s["experiments"].values() for g in e["grids"] for m in g["models"]}
    bad = [k for k in manuscript_keys(Path(tex_path).read_text()) if k not in defined
           and not possible_key(k, experiments, models)]
    if bad:
        raise ValueError(f"{tex_path}: key(s) {', '.join(bad)} not defined by numbers.tex and not a known "
                         f"experiment/model/statistic or claim (see {__spec__.name}.MODEL_STATS, EXP_FIELDS, "
                         f"{judge.__module__}.CLAIMS)")


def check_citations(tex_path, meta: dict) -> None:
    """Fail on a citation key of a model card (its `cite` in config.yaml) that the
    bibliography beside the manuscript (``refs.bib``) does not define, naming the model."""
    bib = Path(tex_path).parent / "refs.bib"
    known = set(re.findall(r"@\w+\{\s*([^,\s]+)\s*,", bib.read_text())) if bib.exists() else set()
    bad = [f"config.yaml models.{m}.card.cite: {d['card']['cite']!r}" for m, d in (meta.get("models") or {}).items()
           if d.get("card", {}).get("cite") and d["card"]["cite"] not in known]
    if bad:
        raise ValueError(f"{'; '.join(bad)}: no such key in {bib}")
