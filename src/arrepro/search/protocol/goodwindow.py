"""A setting's window of good learning rates (``window``: the one definition, which the tables,
the claims and the paper use), from a search's state (``state_window``), and which of two is wider."""
from __future__ import annotations

from dataclasses import dataclass

from arrepro.search.protocol.evidence import best
from arrepro.search.protocol.spec import LOG_EPS, SearchSpec, State, _at_bound, decades, snap_error


@dataclass(frozen=True)
class Window:
    """A setting's window of good learning rates (mean over every reported seed >= good), as the
    tried points bound it.

    ``status``: "not learned" (no candidate's mean reaches the learned threshold: no window at
    all), "none" (learned, but no learning rate is good), or "window". For a window, ``lo``/``hi``
    are the lowest and highest learning rates shown good, ``below``/``above`` the nearest tried
    ones beyond them shown not good (None: none on that side), so the true edges lie in [below, lo]
    and [hi, above]; ``width`` = log10(hi/lo) is the window's width at least and ``width_max`` =
    log10(above/below) at most (None: unbounded, the window is open on that side);
    ``open_lo``/``open_hi`` say why a side is open ("range": the search range stops it, "edge":
    nothing tried beyond). A learning rate is shown good by its mean over every seed, shown not
    good by that mean or, with fewer seeds, by its bound (its accuracies so far and 1 on every
    seed not trained: below ``good``); the rest are ``unknown`` and widen the uncertainty.
    ``gaps``: not-good learning rates tried inside [lo, hi]."""

    status: str
    best: float | None = None
    best_mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    below: float | None = None
    above: float | None = None
    open_lo: str | None = None
    open_hi: str | None = None
    n_good: int = 0
    n_tried: int = 0
    gaps: int = 0
    unknown: int = 0

    @property
    def width(self) -> float:
        return decades(self.lo, self.hi) if self.status == "window" else 0.0

    @property
    def width_max(self) -> float | None:
        if self.status != "window":
            return 0.0
        if self.below is None or self.above is None:
            return None
        return decades(self.below, self.above)

    @property
    def resolution(self) -> float | None:
        """The larger uncertainty of the two edges, in decades (None: an open edge)."""
        if self.status != "window" or self.below is None or self.above is None:
            return None
        return max(decades(self.below, self.lo), decades(self.hi, self.above))

    def gaps_text(self) -> str:
        """"" or ", 1 rate inside not good": the window's gaps (``gaps``), which its span hides."""
        return f", {self.gaps} rate{'s' if self.gaps != 1 else ''} inside not good" if self.gaps else ""

    def short(self) -> str:
        """E.g. "1e-4 to 3.16e-3 (1.5 to 2 decades)", "3.16e-3 (0 to 0.5 decades)", "none",
        "1e-3 to 1e-2 (1 to 1.5 decades, 1 rate inside not good)"."""
        if self.status != "window":
            return self.status
        span = f"{self.lo:.3g}" if self.lo == self.hi else f"{self.lo:.3g} to {self.hi:.3g}"
        hi = "open" if self.width_max is None else f"{self.width_max:.2g}"
        return f"{span} ({self.width:.2g} to {hi} decades{self.gaps_text()})"

    @classmethod
    def from_dict(cls, d: dict | None) -> "Window":
        """From ``window_dict``'s keys (or a best table's ``window_*`` columns, prefix removed)."""
        if not d or d.get("status") in (None, "") or d.get("status") != d.get("status"):  # missing or NaN
            return cls("not learned")
        def num(k):
            v = d.get(k)
            return None if v is None or v != v else float(v)
        def txt(k):
            v = d.get(k)
            return None if v is None or v != v else str(v)
        return cls(str(d["status"]), None, None, num("lo"), num("hi"), num("below"), num("above"),
                   txt("open_lo"), txt("open_hi"), int(num("n_good") or 0), int(num("n_tried") or 0),
                   int(num("gaps") or 0), int(num("unknown") or 0))

    def text(self) -> str:
        if self.status != "window":
            return self.status
        lo = f"[{self.below:.3g}, {self.lo:.3g}]" if self.below else f"<= {self.lo:.3g} ({self.open_lo})"
        hi = f"[{self.hi:.3g}, {self.above:.3g}]" if self.above else f">= {self.hi:.3g} ({self.open_hi})"
        return f"lower edge {lo}, upper edge {hi}{self.gaps_text()}"


def window(points: dict[float, float], learned: float, good: float, lo: float | None = None,
           hi: float | None = None, bounds: dict[float, float] | None = None) -> Window:
    """The one definition of a learning-rate window (see ``Window``): from ``points`` (lr ->
    mean accuracy over every seed), the ``learned`` and ``good`` thresholds, the search range
    [lo, hi] (None: unknown, an open side is then "edge"), and ``bounds``: learning rates tried on
    fewer seeds -> the best mean they can still reach."""
    bounds = {lr: b for lr, b in (bounds or {}).items() if lr not in points}
    if not points:
        return Window("not learned")
    b = best(points)
    top = points[b]
    tried = sorted(set(points) | set(bounds))
    if top < learned:
        return Window("not learned", b, top, n_tried=len(tried))
    good_lrs = sorted(lr for lr, m in points.items() if m >= good)
    if not good_lrs:
        return Window("none", b, top, n_tried=len(tried), unknown=sum(v >= good for v in bounds.values()))
    g_lo, g_hi = good_lrs[0], good_lrs[-1]
    not_good = [lr for lr in tried if points.get(lr, bounds.get(lr)) < good]
    below = max((t for t in not_good if t < g_lo), default=None)
    above = min((t for t in not_good if t > g_hi), default=None)
    unknown = sum(1 for t, v in bounds.items() if v >= good and not g_lo < t < g_hi)

    def why_open(x, bound):
        return None if bound is None else ("range" if _at_bound(x, bound) else "edge")

    return Window("window", b, top, g_lo, g_hi, below, above,
                  None if below is not None else (why_open(g_lo, lo) or "edge"),
                  None if above is not None else (why_open(g_hi, hi) or "edge"),
                  len(good_lrs), len(tried), sum(1 for t in not_good if g_lo < t < g_hi), unknown)


def state_window(spec: SearchSpec, state: State) -> Window:
    """A search's window, from its state: candidates' means, and the others' bounds."""
    n = len(spec.seeds)
    bounds = {lr: (k * m + (n - k)) / n for lr, (k, m) in state.scores.items() if k < n}
    return window(state.points, spec.learned, spec.good, spec.lo, spec.hi, bounds)


def wider(a: Window, b: Window) -> int:
    """+1 if ``a`` is conclusively wider than ``b``, -1 if the reverse, 0 if it is open. ``a`` spans
    at least ``a.width``; ``b``'s true edges lie strictly inside its nearest tried learning rates
    shown not good, so it spans less than ``b.width_max``: ``a`` is wider when a.width >=
    b.width_max. Widths are compared as the lattice the rates stand for: learning rates snapped to
    three digits miss their lattice points by up to ``snap_error`` each, so two widths within the
    four rates' errors are equal (attention's 5.62e-4 to 3.16e-3, 0.74995 decades, spans Mamba's
    3.16e-3 to 1.78e-2, 0.75073: both 0.75 on the quarter-decade lattice). A model that learned
    without a good learning rate ("none") has an empty window, narrower than any; "not learned"
    (at chance) is no window at all: 0, for the claims to judge (a failure is evidence only where
    the claim predicts it)."""
    if "not learned" in (a.status, b.status):
        return 0

    def spans(x: Window, y: Window) -> bool:
        """x's narrowest width reaches y's widest (None: open, unbounded), within their rates' errors."""
        if x.status != "window" or y.width_max is None:
            return False
        tol = LOG_EPS + sum(snap_error(r) for r in (x.lo, x.hi, y.below, y.above) if r is not None)
        return x.width >= y.width_max - tol

    if spans(a, b):
        return 1
    if spans(b, a):
        return -1
    return 0
