"""The paper's results in words: how the text names a model (its card's label), lists an
experiment's models, and says what its numbers rest on (``sentences``: main.tex reads each
passage as ``\\R{EXP/NAME}``). Each function of an experiment takes its
``arrepro.report.results.Results``."""
from __future__ import annotations

import pandas as pd

from arrepro.config import defaults
from arrepro.config.cards import cards as read_cards
from arrepro.config.grid import is_replication
from arrepro.report.claim_kinds import window_of
from arrepro.search.thresholds import GOOD
from arrepro.report.tex import fmt_int, pct_range, plural, points, tex_escape, tex_lr

GOOD_TEXT = f"{100 * GOOD:g}\\%"


POSITIONS = {"none": "no", "sinusoidal": "sinusoidal", "rope": "rotary", "learned": "learned"}  # a model's `position` in words
METRIC_NAMES = {"final_accuracy": "the test accuracy after the last epoch",
                "best_accuracy": "the best test accuracy over epochs",
                "final_exact_match": "the fraction of test sequences reproduced exactly after the last epoch"}


def model_name(cards: dict, model: str) -> str:
    """How the text names a config model: its card's label, as TeX ("Mamba", "attention with a
    convolution on K", "Zoology's Hyena", "H3 with rotary positions")."""
    if model not in cards:
        raise ValueError(f"config.yaml models.{model}.card: no card for model {model!r} (its label names it in the text)")
    return tex_escape(cards[model].label)


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def join(items, conj: str = "and") -> str:
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {conj} {items[-1]}" if items else ""


def of_total(n: int, total: int, noun: str = "") -> str:
    """"none of its 4 settings", "1 of its 4 settings", "both its settings", "its one setting",
    "no setting (it has one)": what follows "solves"."""
    noun_n = f" {noun}{'s' if total != 1 else ''}" if noun else ""
    if total == 1:
        return f"its one{noun_n}" if n else f"no {noun or 'one'} (it has one)"
    if n == 0:
        return f"none of its {total}{noun_n}"
    if n == total:
        return f"both its{noun_n}" if total == 2 else f"all {total} of its{noun_n}"
    return f"{n} of its {total}{noun_n}"


def seeds_list(seeds) -> str:
    """"seed 0", "seeds 0, 1 and 2"."""
    seeds = [str(x) for x in seeds]
    return f"seed{'s' if len(seeds) > 1 else ''} {join(seeds)}"


def row_seeds(r) -> list[str]:
    return str(r["seeds"]).split(";")


def row_candidates(r) -> list[float]:
    return [float(x) for x in str(r["candidates"]).split(";") if x]


def shape_text(r) -> str:
    """"2 layers of width 32"."""
    return f"{plural(r['layers'], 'layer')} of width {fmt_int(r['width'])}"


def rests_on(r) -> str:
    """What a best-table row's number rests on: "the best of 2 candidate learning rates
    ($10^{-3}$, $3.16\times10^{-3}$), each on seeds 0, 1 and 2"."""
    cands = row_candidates(r)
    lrs = join([tex_lr(x) for x in cands])
    which = f"the only learning rate trained on every seed, {lrs}," if len(cands) == 1 else \
        f"the best of {len(cands)} candidate learning rates ({lrs}), each"
    return f"{which} on {seeds_list(row_seeds(r))}"


def series_legend(series, replication=(), published: bool = False) -> str:
    """A width figure's series in words, as arrepro.report.plots draws them: "Solid lines, filled
    circles: the search (this work); dotted lines, open squares: replication (coarse grid)"."""
    from arrepro.report.plots import series_styles, style_text

    styles = series_styles(series, replication)
    text = cap("; ".join(f"{style_text(st)}: {tex_escape(name)}" for name, st in styles.items()))
    if len(styles) > 1:
        text += (". Each series is drawn a little to the side of the others, so that a point where both series "
                 "have the same number (their cells are shared) shows twice")
    return text + ("; stars: Zoology's published numbers" if published else "")


def rests_on_short(r) -> str:
    """``rests_on`` for a table cell: "best of $10^{-3}$ and $3.16\\times10^{-3}$; seeds 0, 1, 2"."""
    cands = row_candidates(r)
    lrs = join([tex_lr(x) for x in cands])
    return f"{'best of ' if len(cands) > 1 else ''}{lrs}; seed{'s' if len(row_seeds(r)) > 1 else ''} {', '.join(row_seeds(r))}"


def window_rank(w) -> tuple:
    """Widest first: a window before none, wider (at least, then at most) before narrower."""
    return (w.status == "window", w.width, w.width_max if w.width_max is not None else float("inf"))


def window_text(w) -> str:
    """A window in words, its widths as the window table prints them: "0.50 to 1.00 decades
    ($10^{-3}$ to $3.16\\times10^{-3}$ good)", "at least 0.25 decades (... good; open above)",
    "one good learning rate, $10^{-3}$ (at most 0.50 decades)", "no good learning rate", "not learned"."""
    if w.status == "not learned":
        return "not learned"
    if w.status != "window":
        return "no good learning rate"
    sides = [s for s, edge in (("below", w.below), ("above", w.above)) if edge is None]
    open_txt = f"open {join(sides)}"
    if w.lo == w.hi:
        return (f"one good learning rate, {tex_lr(w.lo)} (" +
                (open_txt if sides else f"at most {w.width_max:.2f} decades") + ")")
    span = f"{tex_lr(w.lo)} to {tex_lr(w.hi)} good{w.gaps_text()}"
    if sides:
        return f"at least {w.width:.2f} decades ({span}; {open_txt})"
    return f"{w.width:.2f} to {w.width_max:.2f} decades ({span})"


def sentences(e) -> dict[str, str]:
    """The passages of the text that list this experiment's models (only those it trained:
    a model it does not train is never named with a missing number) or say what its numbers
    rest on; main.tex reads each as \\R{EXP/NAME}."""
    main, models = e.rows(), e.models()
    out = {"models": join([model_name(e.cards, m) for m in models]),
           "maxlist": join([f"{model_name(e.cards, m)} {e.stat(m, 'max')}" for m in models]),
           "basis": basis(e), "goodtext": good_text(e), "besttext": best_text(e),
           "goodmain": good_text(e, ("attention", "hyena", "mamba")),
           "widest": "; ".join(f"{model_name(e.cards, m)}: {e.stat(m, 'window')}" for m in models if e.stat(m, "window")),
           "untrained": untrained_text(e)}
    if e.series["zoo"] and not e.rows(part="zoo").empty:
        out["gridtext"] = grid_text(e)
    if e.definition.get("plot") == "width":
        out["legend"] = series_legend(main["series"].tolist() + e.rows(part="zoo")["series"].tolist(),
                                      e.series["zoo"], "published" in e.definition)
    return out


def untrained_text(e) -> str:
    """The models the paper scale's experiment of this name trains that this one does not:
    "Mamba without its gate and S6 + MLP are not trained at this scale."."""
    if not e.paper_definition:
        return ""
    paper = dict.fromkeys(m for g in e.paper_definition["grids"] if not is_replication(g) for m in g["models"])
    names = {model_name(e.cards, m) for m in e.models()}
    missing = list(dict.fromkeys(model_name(e.cards, m) for m in paper if model_name(e.cards, m) not in names))
    if not missing:
        return ""
    return f"{cap(join(missing))} {'is' if len(missing) == 1 else 'are'} not trained at this scale."


def basis(e) -> str:
    """What each point of the experiment's figure (or row of its table) rests on, in a sentence."""
    b = e.rows()
    if b.empty:
        return ""
    n = sorted({len(row_candidates(r)) for _, r in b.iterrows()})
    seeds = sorted({";".join(row_seeds(r)) for _, r in b.iterrows()})
    seeds_txt = seeds_list(seeds[0].split(";")) if len(seeds) == 1 else "every seed of its grid"
    cands = (f"{n[0]} candidate learning rate{'s' if n[0] != 1 else ''}" if len(n) == 1 else
             f"{n[0]} to {n[-1]} candidate learning rates")
    spent = sorted({int(x) for x in b["n_cells"]})
    cells = plural(spent[0], "training run") if len(spent) == 1 else f"{spent[0]} to {spent[-1]} training runs"
    stat_txt = (f"the best, over its setting's {cands}, of the mean over {seeds_txt} (each candidate "
                f"trained on every one of them; the setting's search spent {cells})")
    kind = e.definition.get("plot", "table")
    if kind == "dynamics":
        return (f"Each curve: the mean over {seeds_txt} at the learning rate reported, {stat_txt}.")
    if kind == "lr":
        c = e.rows(cells=True)
        per = c.groupby(["task", "model", "width", "layers", "lr"])["seed"].nunique()
        full = per.max()
        points_txt = ("Each point: the mean over " + seeds_txt + " at that learning rate" if (per == full).all() else
                      "Each point: the mean over the seeds trained at that learning rate (" + seeds_txt +
                      " at the candidates, fewer elsewhere)")
        return (f"{points_txt}; bars from min to max over them. Rings: the learning rate reported, {stat_txt}.")
    spread = r"$\pm$ the standard deviation over those seeds" if kind == "table" else "bars from min to max over them"
    return f"Each number is {stat_txt}; {spread}."


def good_text(e, models=None) -> str:
    """Per model (of ``models``, if given), the setting with the most good learning rates:
    "attention reaches 90\\% at 3 of the 5 learning rates tried ($10^{-3}$ to $10^{-2}$), Hyena at
    none of the 4"."""
    parts = []
    for i, m in enumerate(x for x in e.models() if models is None or x in models):
        b = e.rows(m)
        if "window_status" not in b.columns:
            return ""
        ws = [(window_of(r), r) for _, r in b.iterrows()]
        w, r = max(ws, key=lambda p: (p[0].n_good, window_rank(p[0])))
        main = e.rows()
        varies = [(k, f"{k.replace('seq_len', 'length')} {fmt_int(r[k])}") for k in ("seq_len", "width", "layers")
                  if main[k].nunique() > 1]
        where = f" at {', '.join(t for _, t in varies)}" if varies else ""
        tried = int(r["n_lrs"])
        count = "none" if w.n_good == 0 else str(w.n_good)
        at = (f"at {count} of the {tried} learning rates tried" if tried > 1 else
              f"at its one learning rate" if w.n_good else "not at its one learning rate")
        verb = f"{model_name(e.cards, m)}{' reaches ' + GOOD_TEXT if i == 0 else ''} {at}"
        good = ("" if w.status != "window" else f" ({tex_lr(w.lo)})" if w.lo == w.hi else
                f" ({tex_lr(w.lo)} to {tex_lr(w.hi)})")
        parts.append(f"{verb}{where}{good}")
    return join(parts)


def best_text(e) -> str:
    """Per model, its best mean accuracy and learning rate, and what the reference grid's
    learning rates alone would have given (where the search tried them all)."""
    if not e.reference_lrs:
        return ""
    parts = []
    for m in e.models():
        top = e.rows(m).sort_values("mean").iloc[-1]
        ref = e.stat(m, "refbest")
        ref_txt = (f"; with the coarse grid's learning rates alone, {ref}" if ref else
                   "; the coarse grid's learning rates were not all tried")
        parts.append(f"{model_name(e.cards, m)}'s best mean accuracy is {pct_range(top['mean'], top['min'], top['max'])}, "
                     f"at learning rate {tex_lr(top['best_lr'])}{ref_txt}")
    return cap("; ".join(parts))


def grid_text(e) -> str:
    """The search (or fine grid) against the replication of Zoology's coarse grid."""
    main, zoo = e.rows(cells=True), e.rows(part="zoo", cells=True)
    searched = e.rows()["outcome"].ne("fixed").any() if "outcome" in e.rows().columns else False
    ours = "the search" if searched else "the fine grid"
    per, total = e.rows()["n_lrs"], main["lr"].nunique()
    tried = (f"tried {fmt_int(per.min())} to {fmt_int(per.max())} learning rates a setting"
             if per.min() != per.max() else f"tried {plural(per.max(), 'learning rate')} a setting")
    if total != per.max():
        tried += f" ({plural(total, 'learning rate')} in all)"
    zlrs = sorted(zoo["lr"].unique())
    text = (f"{cap(ours)} {tried}; the replication trains the coarse grid's {plural(len(zlrs), 'learning rate')} "
            f"({join([tex_lr(x) for x in zlrs])})")
    gain = e.zoology_gain()
    if gain is not None:
        change = ("leaves the best mean accuracy where the coarse grid has it (a mean change of 0.0 points)"
                  if points(gain) == "0.0" else f"changes the best mean accuracy by {points(gain)} points on average")
        text += f". Over the {plural(len(e.matched()), 'matched setting')} of the recurrent models, {ours} {change}"
    for m in e.models():
        zm = next((z for z in e.models("zoo") if e.card(z).base == m), None)
        if zm is None or e.card(m).attention:
            continue
        zoo = e.rows(zm, part="zoo")
        both = e.rows(m).merge(zoo[["task", "width", "layers"]], on=["task", "width", "layers"])
        if both.empty:
            continue
        top = both.sort_values("mean").iloc[-1]  # the best of the settings both trained
        z = zoo[(zoo["width"] == top["width"]) & (zoo["layers"] == top["layers"]) & (zoo["task"] == top["task"])]
        a, b = (pct_range(r["mean"], r["min"], r["max"]) for r in (top, z.iloc[0]))
        where = "" if e.rows()["seq_len"].nunique() == 1 else f", length {fmt_int(top['seq_len'])}"
        text += (f"; {fmt_int(top['layers'])}-layer {model_name(e.cards, m)}'s best setting of those (width {fmt_int(top['width'])}"
                 f"{where}) reaches " + (f"{a} with both" if a == b else f"{a} with {ours} and {b} with the coarse grid"))
    return text


def numerics_text(cells: pd.DataFrame) -> str:
    """What the manuscript says of the CPU numerics its runs trained with: every run that did
    not train with the pinned numerics (arrepro.train.numerics: another thread count, a CPU without
    AVX2, an earlier attempt with other settings) is named, by its folder."""
    unpinned = sorted(cells.loc[~cells["pinned"].astype(bool), "cell_dir"])
    if not unpinned:
        return f"All {fmt_int(len(cells))} runs trained with the pinned CPU numerics."
    names = "; ".join(r"\texttt{" + tex_escape(d.removeprefix("results/cells/")) + "}" for d in unpinned)
    return (rf"{fmt_int(len(unpinned))} of the {fmt_int(len(cells))} runs trained \emph{{without}} the pinned CPU "
            rf"numerics (their \texttt{{result.json}} says why; on another machine their numbers may differ): {names}.")


def claims_summary(verdicts: list[str], tested: int, n_claims: int) -> str:
    """"This scale tests 8 of the paper's 15 claims: our results are consistent with 5, contradict 1
    and are inconclusive on 2"; ``verdicts`` one a row, ``tested`` the paper's claims they judge
    (fewer where a claim is judged under two readings: "... 15 of the paper's 15 claims, in 16 rows
    (...): ...")."""
    n = len(verdicts)
    if not n:
        return f"This scale tests none of the paper's {n_claims} claims"
    counts = {v: sum(x == v for x in verdicts) for v in ("consistent", "contradicted", "inconclusive")}
    if n == 1:
        v = verdicts[0]
        how = {"consistent": "our results are consistent with it", "contradicted": "our results contradict it",
               "inconclusive": "our results are inconclusive on it"}[v]
        return f"This scale tests one of the paper's {n_claims} claims: {how}"
    parts = [f"consistent with {counts['consistent']}" if counts["consistent"] else "",
             f"contradict {counts['contradicted']}" if counts["contradicted"] else "",
             f"are inconclusive on {counts['inconclusive']}" if counts["inconclusive"] else ""]
    parts = [p for p in parts if p]
    first = parts[0]
    if first.startswith("consistent"):
        parts[0] = "are " + first
    rows = "" if n == tested else f", in {n} rows (a claim read more than one way has a row for each)"
    return f"This scale tests {tested} of the paper's {n_claims} claims{rows}: our results {join(parts)}"


OUTCOMES = {"resolved": "a best resolved to the search's resolution, no learning rate left that could beat it",
            "contenders": "a best resolved, but learning rates the budget left that could still beat it (the tables "
            "count them and give the most they could reach)", "plateau": "a plateau at the top",
            "closed": "a curve closed on both sides (beyond each edge, every seed below the learned threshold)",
            "range": "a best, or a curve's edge, on a bound of the search's range", "budget": "a best still unresolved, or a scan at "
            "chance with lattice points untried, when the budget (cells or rounds) ran out", "not learned": "no learning rate learned", "fixed": "a fixed grid",
            "cover": "a best at a learning rate the cover added (a rival's best, trained on every seed after the search)"}


def outcome_text(results: dict) -> str:
    """How this scale's searches ended, counted once per search (from the best tables)."""
    best = pd.concat([r.best for r in results.values() if "outcome" in r.best.columns], ignore_index=True)
    if best.empty or "search" not in best.columns:
        return ""
    per = best.drop_duplicates("search")["outcome"].value_counts()
    unknown = sorted(set(per.index) - set(OUTCOMES))
    if unknown:  # every search counted, none dropped from the sentence
        raise ValueError(f"outcome(s) {unknown} of the best tables have no words in prose.OUTCOMES")
    cells = pd.concat([r.cells for r in results.values()], ignore_index=True).drop_duplicates("cell_dir")
    parts = [f"{fmt_int(per[k])} with {v}" for k, v in OUTCOMES.items() if k in per]
    return (f"This scale's {plural(int(per.sum()), 'search', 'searches')} (one a setting) ended: {join(parts)}; "
            f"they trained {plural(len(cells), 'cell')} in all.")


def scale_models(experiments: dict) -> list[str]:
    """The config models a scale's experiments train, in the config's order of first use."""
    return list(dict.fromkeys(m for e in experiments.values() for g in e["grids"] for m in g["models"]))


def _describe(card, definition: dict) -> str:
    """A model as the Models paragraph names it: its label and citation; for attention its heads
    and positions, for a copy-task model with a state its state size."""
    d = defaults.model(definition)
    name = tex_escape(card.label)
    cite = f" \\citep{{{card.cite}}}" if card.cite else ""
    if card.attention:
        heads = d["mixer_kwargs"].get("num_heads", 1)
        pos = {"learned": "learned absolute", "rope": "rotary", "sinusoidal": "sinusoidal"}.get(d["position"], "no")
        return f"{name}{cite} ({plural(heads, 'head')}, {pos} positions)"
    if card.role == "copy" and "d_state" in d["mixer_kwargs"]:
        return f"{name}{cite} (state size {d['mixer_kwargs']['d_state']})"
    return name + cite


def _cited(cards: list) -> str:
    """" \\citep{a,b}" for the citation keys of ``cards`` (each once), "" if none."""
    keys = list(dict.fromkeys(c.cite for c in cards if c.cite))
    return f" \\citep{{{','.join(keys)}}}" if keys else ""


def models_text(meta: dict) -> str:
    """The Models paragraph: what this scale trains, grouped by the cards' roles as the paper
    does, and which of the paper scale's models it does not train (never a model it does not run
    as if it did)."""
    models, defs = scale_models(meta["experiments"]), meta.get("models") or {}
    cards = read_cards(defs)

    def group(role):
        return [cards[m] for m in models if cards[m].role == role]
    parts = []
    core, abl, copy, zoo, pe = (group(r) for r in ("core", "ablation", "copy", "replication", "positional"))
    if core:
        parts.append(join([_describe(c, defs[c.model]) for c in core]))
    if abl:
        parts.append(f"the ablations of the paper's Section~7: {join([tex_escape(c.label) for c in abl])}{_cited(abl)}")
    if copy:
        parts.append(f"for copying, {join([_describe(c, defs[c.model]) for c in copy])}")
    if zoo:
        parts.append(f"for the replication, Zoology's own forms of {join([model_name(cards, c.of) for c in zoo])} "
                     "(no MLP after the mixer)")
    if pe:
        bases = list(dict.fromkeys(model_name(cards, c.of) for c in pe))
        schemes = list(dict.fromkeys(POSITIONS[defaults.model(defs[c.model])["position"]] for c in pe))
        parts.append(f"{join(bases)} with {join(schemes)} positions")
    text = f"This scale trains {'; '.join(parts)}."
    paper = meta.get("paper_scale")
    if paper and meta["scale"] != "paper":
        trained = {cards[m].label for m in models}  # (a model of the same label, e.g. the copy task's Mamba, is trained)
        missing = [cards[m] for m in scale_models(paper["experiments"]) if m not in models and cards[m].label not in trained]
        named = list(dict.fromkeys(tex_escape(c.label) for c in missing if c.role not in ("replication", "positional")))
        extra = (["Zoology's own model forms"] if any(c.role == "replication" for c in missing) else []) + (
            ["the positional variants"] if any(c.role == "positional" for c in missing) else [])
        if named or extra:
            text += f" Of the paper's models, {join(named + extra)} are not trained at this scale."
    return text
