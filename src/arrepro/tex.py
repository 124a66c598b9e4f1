"""TeX formatting, one home: escaping text from the config so that it is typeset as written, and
the numbers of the manuscript (percentages, learning rates, counts). Pure Python (no pandas)."""
from __future__ import annotations

import math

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


def pct(x: float) -> str:
    return f"{100 * x:.1f}\\%"


def pct_range(mean: float, lo: float, hi: float) -> str:
    """A mean over seeds with its min--max range (as the claims table prints it); the mean alone
    where the seeds agree (or there is one)."""
    rng = f" [{100 * lo:.1f}--{100 * hi:.1f}]" if hi > lo else ""
    return f"{100 * mean:.1f}\\%{rng}"


def pct_pm(mean: float, std: float) -> str:
    return f"{100 * mean:.1f}\\,$\\pm$\\,{100 * std:.1f}\\%"


def tex_lr(x: float) -> str:
    """A learning rate in TeX: $10^{-3}$, $3.16\\times10^{-3}$ (grid.fmt_lr is its folder name)."""
    e = math.floor(math.log10(x) + 1e-9)
    m = x / 10 ** e
    return f"$10^{{{e}}}$" if abs(m - 1) < 5e-3 else f"${m:.3g}\\times10^{{{e}}}$"


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
