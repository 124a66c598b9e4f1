"""The paper's setup in words, from the config: the tasks and recipes table (``\\SetupTables``),
each experiment's grids (``\\SetupGrids``), the learning-rate protocol, and the paper scale's
fidelity table (arrepro.report.fidelity)."""
from __future__ import annotations

from arrepro.config import defaults
from arrepro.report import fidelity
from arrepro.report.prose import join
from arrepro.report.tex import fmt_int, plural, tex_escape, tex_lr

def lr_grid(grid: dict, lr_grids: dict) -> list[float]:
    lrs = grid["lrs"]
    return [float(x) for x in (lr_grids[lrs] if isinstance(lrs, str) else lrs)]


def setup_tex(meta: dict) -> str:
    """\\SetupTables (a table float of tasks and recipes) and \\SetupGrids (each experiment's grids)."""
    out = [r"\newcommand{\SetupTables}{\begin{table}[htbp]\centering\small\FloatNumber{table}{setup}",
           r"\caption{Tasks and recipes of scale \textbf{" + tex_escape(meta["scale"]) + r"} (from config.yaml).}"
           r"\label{tab:setup}",
           r"\begin{tabular}{lllrrr}\toprule",
           r"task & kind & length & KV pairs & vocabulary & train / test \\ \midrule"]
    for name, t in meta["tasks"].items():
        out.append(f"{tex_escape(name)} & {t['kind'].upper() if t['kind'] == 'mqar' else t['kind']} & "
                   f"{_lengths(t)} & {t.get('num_kv_pairs', '--')} & "
                   f"{fmt_int(t['vocab_size']) if 'vocab_size' in t else '--'} & "
                   f"{fmt_int(t['n_train'])} / {fmt_int(t['n_test'])} \\\\")
    out += [r"\bottomrule\end{tabular}\par\medskip",
            r"\begin{tabular}{lrlrlrr}\toprule",
            r"recipe & epochs & batch size & warmup & schedule & weight decay & dropout \\ \midrule"]
    for name, r in meta["recipes"].items():
        out.append(f"{tex_escape(name)} & {r['epochs']} & {_batch(r['batch_size'])} & {100 * r['warmup_frac']:.0f}\\% & "
                   f"{r['schedule']} & {r['weight_decay']} & {defaults.recipe(r)['embed_dropout']} \\\\")
    out += [r"\bottomrule\end{tabular}", r"\end{table}}", "",
            r"\newcommand{\SetupGrids}{\begin{description}\small"]
    for exp, e in meta["experiments"].items():
        out.append(f"\\item[{tex_escape(exp)}] \\emph{{{tex_escape(e.get('title', exp))}}}.")
        for g in e["grids"]:
            out.append(
                f"Series \\emph{{{tex_escape(g.get('series', 'main'))}}}: tasks {tex_escape(', '.join(g['tasks']))}; "
                f"models {tex_escape(', '.join(g['models']))}; widths {', '.join(map(str, g['widths']))}; "
                f"layers {', '.join(map(str, g['layers']))}; learning rates: {grid_lrs_text(g, meta)}; "
                f"seeds {', '.join(map(str, g['seeds']))}; recipe {tex_escape(g['recipe'])}.")
    out.append(r"\end{description}}")
    out.append(r"\newcommand{\FidelityTable}{" + fidelity_tex(meta) + "}")
    return "\n".join(out) + "\n"


def fidelity_tex(meta: dict) -> str:
    """The paper scale's fidelity table (arrepro.report.fidelity), whatever the scale of this document."""
    if not meta.get("paper_scale") or not meta.get("models"):
        return r"\emph{The configuration declares no paper scale.}"
    config = {"models": meta["models"], "lr_grids": meta["lr_grids"], "aggregate": {"metric": meta["metric"]},
              "scales": {"paper": meta["paper_scale"]}, "lr_protocol": meta.get("lr_protocol", "search"),
              "lr_searches": meta.get("lr_searches", {})}
    return fidelity.latex(config)


def _lengths(t: dict) -> str:
    if t["kind"] == "mqar":
        return str(t["seq_len"])
    return f"{t.get('min_len', '?')}--{t.get('max_len', '?')}"


def _batch(bs) -> str:
    if isinstance(bs, int):
        return str(bs)
    items = sorted(bs.items(), key=lambda kv: int(kv[0]))
    return f"{'/'.join(str(v) for _, v in items)} ($L\\le{'/'.join(str(k) for k, _ in items)}$)"


def tasks_summary(tasks: dict) -> str:
    """One line for the title page: MQAR (length, pairs) and copying, with the shared sizes."""
    def shared(ts, key):
        return "/".join(dict.fromkeys(fmt_int(t[key]) for t in ts if key in t))

    mqar = [t for t in tasks.values() if t["kind"] == "mqar"]
    copy = [t for t in tasks.values() if t["kind"] != "mqar"]
    parts = []
    if mqar:
        pairs = ", ".join(f"({t['seq_len']}, {t['num_kv_pairs']})" for t in mqar)
        parts.append(f"MQAR with (length, key--value pairs) {pairs}, vocabulary {shared(mqar, 'vocab_size')} "
                     f"and {shared(mqar, 'n_train')} training sequences")
    if copy:
        parts.append(f"copying strings of {', '.join(_lengths(t) for t in copy)} tokens over "
                     f"{shared(copy, 'vocab_size')} symbols")
    return "; ".join(parts)


def recipes_summary(recipes: dict) -> str:
    items = [f"{tex_escape(n)}: {plural(r['epochs'], 'epoch')}" for n, r in recipes.items()]
    return f"recipe{'s' if len(items) > 1 else ''} {join(items)}"


def paper_scale_summary(paper: dict | None) -> str:
    """The config's `paper` scale in a line, for the title page of a smaller scale's document."""
    if not paper:
        return "the config declares no paper scale"
    seeds = sorted({s for e in paper["experiments"].values() for g in e["grids"] for s in g["seeds"]})
    return (f"{tasks_summary(paper['tasks'])}; {recipes_summary(paper['recipes'])}; "
            f"{len(seeds)} seeds")


def _lrs_text(lrs) -> str:
    lrs = sorted(float(x) for x in lrs)
    return f"{len(lrs)} from {tex_lr(lrs[0])} to {tex_lr(lrs[-1])}" if len(lrs) > 1 else tex_lr(lrs[0])


def searched(g: dict, meta: dict) -> dict | None:
    """The lr_searches entry (defaults filled in) a grid runs under the scale's protocol, or None
    for a fixed grid."""
    from arrepro.config.grid import schema_defaults

    if meta.get("lr_protocol", "search") != "search" or not g.get("search"):
        return None
    return {**schema_defaults("search"), **meta["lr_searches"][g["search"]]}


def grid_lrs_text(g: dict, meta: dict) -> str:
    """A grid's learning rates in words: its search (start grid, range, resolution, rounds, search
    seeds) or its fixed grid."""
    fixed = lr_grid(g, meta["lr_grids"])
    d = searched(g, meta)
    if d is None:
        named = f"grid \\emph{{{tex_escape(g['lrs'])}}}, " if isinstance(g["lrs"], str) else ""
        return f"{named}{_lrs_text(fixed)} on every seed"
    start = lr_grid({"lrs": d["start"]}, meta["lr_grids"]) if "start" in d else fixed
    lo, hi = d.get("range", (min(start), max(start)))
    seeds = "every seed" if d["search_seeds"] == "all" else (
        "the first seed" if d["search_seeds"] == 1 else f"the first {d['search_seeds']} seeds")
    if d.get("close"):
        return (f"search \\emph{{{tex_escape(g['search'])}}}: {_lrs_text(start)} on {seeds}, each edge where a seed "
                f"learned extended by the start grid's step until every seed there is below the learned threshold or "
                f"the range ({tex_lr(lo)} to {tex_lr(hi)}) ends")
    if not d["rounds"]:
        return f"search \\emph{{{tex_escape(g['search'])}}}: {_lrs_text(start)} on {seeds}, no refinement"
    return (f"search \\emph{{{tex_escape(g['search'])}}}: start {_lrs_text(start)}, within {tex_lr(lo)} to "
            f"{tex_lr(hi)}, to {d['resolution']:g} decades, {_rounds_text(d)}, on "
            f"{seeds}{', window resolved' if d['window'] else ''}")


def _rounds_text(d: dict) -> str:
    """A search's refinement budget: "at most 2 rounds of 2 learning rates", "no refinement"."""
    if not d["rounds"]:
        return "no refinement (the start grid only)"
    return f"at most {plural(d['rounds'], 'round')} of {plural(d['per_round'], 'learning rate')}"


def protocol_text(meta: dict) -> str:
    """The learning-rate protocol of the scale's grids, in words, with its parameters."""
    grids = [g for e in meta["experiments"].values() for g in e["grids"]]
    names = list(dict.fromkeys(g["search"] for g in grids if searched(g, meta) is not None))
    if not names:
        return ("Every grid trains its fixed learning rates on every seed (the literal reading of the paper's "
                "Appendix~A.2), and the learning rate with the best mean over seeds is reported; among tied best "
                "means, the middle one.")
    text = ("Every number reported is the paper's statistic (its Appendix~A.2): the best, over the learning "
            "rates, of the mean accuracy over every reported seed. Which learning rates compete is decided by a "
            "deterministic search, one per setting, which the workflow runs in rounds (\\texttt{src/arrepro/search/protocol/}; "
            "every decision and its reason is written to a file). Round~0 trains a start grid on the seeds a search starts with. "
            "Then, for at most a given number of rounds, each adding at most a given number of learning rates: a best "
            "learning rate on the edge of what was tried extends the search outward by the start grid's step, never "
            "leaving the search's range; otherwise new learning rates bracket the best at geometric midpoints until its "
            "nearest neighbours lie within the resolution; where a window is reported, its two edges are resolved the "
            "same way. ``Best'' here is a learning rate's mean over the seeds it has so far. Seeds are then spent where "
            "they can change the answer, by successive halving: the best-scoring learning rates (the \\emph{candidates}, "
            "at least two) climb to every reported seed, and any other learning rate that could still beat the best "
            "candidate (its accuracies so far, with 1 on every seed not yet trained, above the candidate's mean) climbs "
            "too, within the setting's budget of cells; an outcome says when the budget left such learning rates. "
            "Where a search has a \\emph{scan} and no cell of any seed has learned yet, it trains every learning rate of "
            "the scan's span on a lattice (at the paper scale the literal grid's own, a third of a decade), on the "
            "search seed and then on further seeds, in a fixed order that no score at chance chooses, before it goes "
            "on; without a scan, the next seed trains every learning rate tried. A setting is called ``not learned'' "
            "only when no cell of any seed learned. The reported learning rate is the candidate with the best mean over every "
            "seed; curves of accuracy against learning rate train every seed at every learning rate they show, and a "
            "curve that \\emph{closes} its window extends each edge where a seed learned, a step a round, until every "
            "seed there is below the learned threshold or the range ends. In an experiment with a \\emph{cover}, once "
            "its searches are done, a setting at chance is also trained, on every seed, at the best learning rates (a "
            "few at most) of the settings a claim compares it with that learned, and those rates join its "
            "candidates: a failure counts as evidence only where the failing model was trained at the winner's own "
            "learning rate. The searches of this scale: ")
    parts = []
    for n in names:
        d = searched({"search": n}, meta)
        start = d.get("start")
        start_txt = "the grid's own learning rates" if start is None else _lrs_text(lr_grid({"lrs": start}, meta["lr_grids"]))
        rng = f", range {tex_lr(d['range'][0])} to {tex_lr(d['range'][1])}" if "range" in d else ""
        seeds = "every seed" if d["search_seeds"] == "all" else plural(d["search_seeds"], "seed")
        ladder = "" if d["search_seeds"] == "all" else (
            ", then " + ", then ".join(f"the best {t} on {'every seed' if k == 'all' else plural(k, 'seed')}"
                                      for k, t in d["ladder"]))
        budget = d.get("budget") or 0
        tiers = "".join(f" ({v} for the {k} cost tier)" for k, v in d.get("tier_budget", {}).items())
        scan = (f", a scan {d['scan']:.2g} decades apart over "
                f"{tex_lr(d.get('scan_range', d.get('range', (0, 0)))[0])} to "
                f"{tex_lr(d.get('scan_range', d.get('range', (0, 0)))[1])} on up to {plural(d['scan_seeds'], 'seed')}"
                if d.get("scan") and d["rounds"] and d["search_seeds"] != "all" else "")
        rounds = "its window closed" if d.get("close") else _rounds_text(d)
        parts.append(f"\\emph{{{tex_escape(n)}}}: start {start_txt}{rng}, resolution {d['resolution']:g} decades, "
                     f"{rounds}{scan}, search on "
                     f"{seeds}{ladder}{', window resolved' if d['window'] else ''}"
                     f"{f', at most {budget} cells{tiers}' if budget else ''}, plateau at {d['plateau']:g}")
    fixed = any(searched(g, meta) is None for g in grids)
    return (text + "; ".join(parts) + "." + (" Grids without a search train their fixed learning rates on every "
                                             "seed." if fixed else ""))
