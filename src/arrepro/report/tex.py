"""TeX formatting, one home: escaping text from the config so that it is typeset as written, and
the numbers of the manuscript (percentages, learning rates, counts). Pure Python (no pandas)."""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

# Text from the config (titles, series' names, labels) is typeset as written. '$' is the math font's
# dollar: LaTeX's \$ in text is \textdollar, from the TS1 fonts, which Debian's texlive-fonts-recommended
# has only as bitmaps, and microtype's font expansion then stops pdflatex ("auto expansion is only
# possible with scalable fonts"). '<', '>' and '|' in OT1 text would print as other glyphs.
TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\ensuremath{\mathdollar}", "#": r"\#", "_": r"\_",
               "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "≥": r"$\geq$", "≤": r"$\leq$",
               "×": r"$\times$", "±": r"$\pm$", "–": "--", "—": "---", "−": r"$-$"}


def tex_escape(s) -> str:
    return "".join(TEX_SPECIAL.get(ch, ch) for ch in str(s))


# The one rounding rule of every accuracy the project prints (the PDF's text and tables, the
# README's numbers, which are written by hand from the tables): a percentage with one decimal
# (a fraction with three), rounded half up (away from zero) from the number's shortest decimal
# form, the form the CSV tables hold: 0.9755 is 97.6% (0.976), never 97.5% (binary 100 * 0.9755
# is 97.54999...). ``acc`` is the rule; everything below that prints an accuracy calls it.
ACC_PLACES = 1  # decimals of a percentage


def rounded(x: float, places: int, scale: int = 0) -> Decimal:
    """``x`` times 10**``scale``, rounded half up to ``places`` decimals, from ``x``'s shortest
    decimal form (its repr: exact, no binary error from the scaling)."""
    d = Decimal(repr(float(x))).scaleb(scale)
    return d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def acc(x: float, percent: bool = True) -> str:
    """An accuracy (a fraction in [0, 1]) as printed everywhere: "97.6" (percent, the default) or
    "0.976" (``percent=False``, the README's fractions): the same digits either way."""
    return str(rounded(x, ACC_PLACES, 2) if percent else rounded(x, ACC_PLACES + 2))


def points(x: float) -> str:
    """A difference of accuracies in percentage points, signed: "+1.5", "-0.3", "0.0"."""
    r = rounded(x, ACC_PLACES)
    return f"{r:+}" if r != 0 else str(abs(r))


def pct(x: float) -> str:
    return f"{acc(x)}\\%"


def pct_range(mean: float, lo: float, hi: float) -> str:
    """A mean over seeds with its min--max range (as the claims table prints it); the mean alone
    where the seeds agree (or there is one)."""
    rng = f" [{acc(lo)}--{acc(hi)}]" if acc(hi) != acc(lo) else ""
    return f"{acc(mean)}\\%{rng}"


def pct_pm(mean: float, std: float) -> str:
    return f"{acc(mean)}\\,$\\pm$\\,{acc(std)}\\%"


def plural(n: int, word: str, many: str | None = None) -> str:
    """"1 epoch", "2 epochs", "1 model variant" (``many``: an irregular plural)."""
    return f"{fmt_int(n)} {word if int(n) == 1 else many or word + 's'}"


def tex_lr(x: float) -> str:
    """A learning rate in TeX: $10^{-3}$, $3.16\\times10^{-3}$ (grid.fmt_lr is its folder name)."""
    e = math.floor(math.log10(x) + 1e-9)
    m = x / 10 ** e
    return f"$10^{{{e}}}$" if abs(m - 1) < 5e-3 else f"${m:.3g}\\times10^{{{e}}}$"


def lr_label(lr: float) -> str:
    """A learning rate as the config writes it, for figures and tables: "1e-3", "3.16e-3"."""
    e = math.floor(math.log10(lr) + 1e-9)
    m = lr / 10 ** e
    return f"1e{e}" if abs(m - 1) < 5e-3 else f"{m:.3g}e{e}"


def fmt_count(n: float) -> str:
    n = float(n)
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def fmt_int(n) -> str:
    """A whole number with thousands separators; "--" for a missing one (None or NaN)."""
    return "--" if n is None or n != n else f"{int(n):,}"




def literal_tex(body: str) -> str:
    """pandas' escaped LaTeX with the characters it leaves to the font typeset as written
    (TEX_SPECIAL: '$' in the math font, '<', '>', '|')."""
    for ch in "<>|":
        body = body.replace(ch, TEX_SPECIAL[ch])
    return body.replace(r"\$", TEX_SPECIAL["$"])
