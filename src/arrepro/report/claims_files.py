"""The claims table as files beside the paper: ``results/{scale}/claims.md`` (to read in a terminal
or diff between runs) and ``claims.csv`` (to load in pandas), written by the paper's numbers job
from the same rows as the PDF's claims table (``arrepro.report.claims.judge``: the paper's
``\\ClaimRows``, arrepro.report.texkeys). One row per claim row: its id, experiment, the paper's
claim, the verdict, what was compared (the models, settings, means over seeds [min-max]), the
95% intervals on the differences of means in points (as the compared text gives them), and why
an inconclusive verdict decides nothing."""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from arrepro.files import write_text_atomic
from arrepro.report.claims import CLAIMS, paper_claim
from arrepro.report.prose import claims_summary
from arrepro.report.verdicts import rules_text

COLUMNS = ("id", "experiment", "claim", "verdict", "compared", "interval", "reason")
# the interval as arrepro.report.verdicts.diff_text words it: "95% interval +62.5 to +72.4"
INTERVAL = re.compile(r"\d+(?:\.\d+)?% interval (\S+) to ([^\s,;)]+)")


def intervals(compared: str) -> str:
    """The intervals a row's compared text gives, "lo to hi" in points, ";"-joined in its order."""
    return "; ".join(f"{lo} to {hi}" for lo, hi in INTERVAL.findall(compared))


def records(rows: list[dict]) -> list[dict]:
    """``judge``'s rows as the files' records (COLUMNS)."""
    return [{"id": r["id"], "experiment": r["exp"], "claim": r["claim"], "verdict": r["verdict"],
             "compared": r["compared"], "interval": intervals(r["compared"]), "reason": r.get("reason", "")}
            for r in rows]


def not_judged(rows: list[dict]) -> list[tuple[str, str]]:
    """(experiment, claim) of every claim of the paper this scale does not judge."""
    judged = {r["id"] for r in rows}
    return [(exp, text) for cid, exp, text, _ in CLAIMS if cid not in judged]


def summary(rows: list[dict]) -> str:
    """"This scale tests 12 of the paper's 15 claims, in 16 rows ...: our results are ..." (the PDF's words)."""
    return claims_summary([r["verdict"] for r in rows], len({paper_claim(r["id"]) for r in rows}),
                          len({paper_claim(c[0]) for c in CLAIMS}))


def claims_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(records(rows))
    return out.getvalue()


def _cell(text: str) -> str:
    return text.replace("|", r"\|").replace("\n", " ") or "-"


def claims_md(rows: list[dict], scale: str) -> str:
    lines = [f"# The paper's claims against the {scale} scale's results", "",
             f"Written by `{__spec__.name}` with the paper's claims table (results/{scale}/paper.pdf), from the "
             f"same verdicts; the same rows as `claims.csv`. {summary(rows)}.", ""]
    if rows:
        lines += ["| experiment | claim | verdict | compared (mean over seeds [min-max]) | 95% interval (points) "
                  "| why inconclusive |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['experiment']} | {_cell(r['claim'])} | **{r['verdict']}** | {_cell(r['compared'])} | "
                  f"{_cell(r['interval'])} | {_cell(r['reason'])} |" for r in records(rows)]
        lines.append("")
    missing = not_judged(rows)
    if missing:
        lines += ["Not judged at this scale (its experiment, or the models the claim needs, are not trained here):", ""]
        lines += [f"- {exp}: {text}" for exp, text in missing]
        lines.append("")
    lines += ["The rules every verdict follows: " + rules_text(), ""]
    return "\n".join(lines)


def write_claims(rows: list[dict], scale: str, md_out, csv_out) -> None:
    """Both files, each written whole or not at all."""
    Path(md_out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(md_out, claims_md(rows, scale))
    write_text_atomic(csv_out, claims_csv(rows))
