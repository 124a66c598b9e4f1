"""The learning-rate search: which learning rates, on which seeds, a setting trains, round by round.

The paper reports, for each configuration, the best over the learning rates tried of the mean
accuracy over all its seeds (A.2). Its finding is that recurrent models succeed only in a narrow
window of learning rates, so a fixed grid either misses the window or pays for every point of a
fine grid on every seed. This protocol reports exactly the paper's statistic, the best over a set
of *candidate* learning rates of the mean over **every reported seed**, each candidate trained on
every reported seed, and spends cells only where they can change that number:

start     round 0: the start grid on the search seed(s);
refine    (at most ``rounds`` rounds of at most ``per_round`` new learning rates, never leaving
          ``[lo, hi]``, on the search seeds): a best learning rate on the edge of what was tried
          extends outward by the start grid's step; otherwise midpoints bracket the best until its
          neighbours lie within ``resolution`` decades; with ``window``, the same for the good
          window's two edges. "Best" here is the best *score*, a learning rate's mean over the
          seeds it has so far. A setting where any seed of any learning rate learned is searched
          as learned; where none has yet, a best on an edge still extends; where every cell
          diverged, the search extends towards lower learning rates;
seeds     successive halving over seeds (``ladder``): the best-scoring learning rates climb to
          more seeds in steps (e.g. the top 3 to 2 seeds, then the top 2 of those to every seed),
          so at least ``ladder[-1].take`` candidates end on every reported seed; then any learning
          rate that could still beat the best candidate climbs too. "Could still beat": accuracy
          is at most 1, so a learning rate with k of n seeds can at best reach
          (its k accuracies + (n - k)) / n, its *bound*; once the best candidate's mean reaches
          it, more seeds there cannot change the reported number.

Refinement and seeds interleave: each round asks first whether the evidence (scores over all the
seeds trained so far) wants another learning rate, then whether a learning rate must climb. It
never spends more than the setting's ``budget`` cells (exploration stops where the ladder's cells
would no longer fit) nor more than ``max_rounds`` rounds after round 0.

The reported learning rate (``State.chosen``) is the candidate with the best mean over every
reported seed (among exactly tied ones the middle, the lower of the two middle ones for an even
count), and the outcome is computed at it: "resolved" (its nearest tried neighbours within the
resolution), "plateau", "range" (it sits on a bound of the search range), "budget" (it wanted
more learning rates: a best unresolved, or a scan at chance that left lattice points untried),
"not learned" (no cell of any seed learned, after the whole scan where there is one), "fixed" (a
fixed grid). A
diverged cell (non-finite loss) is a result: its accuracy counts as 0. Every decision is a pure
function of the results so far (the same results give the same rounds, in whatever order they
arrived), and each round records its reason.

A fixed grid is the special case ``rounds = 0`` with every seed a search seed: every learning
rate on every seed, the best mean reported. This package is pure Python (no imports but its own
modules, no torch, no pandas): the thresholds it uses (``learned``, ``good``) come in the spec,
from ``arrepro.search.thresholds``. It is also the one definition of a setting's learning-rate
window (``window``), which the tables, the claims and the paper use.

Its modules, one concern each, in the order they import one another:

spec        the spec (``SearchSpec``), a round (``Round``), the state (``State``), the units (decades)
evidence    what the rounds so far trained (``Evidence``): scores, bounds, the best of a set of means
scan        the scan while nothing has learned: its lattice and its rounds (a curve's: a ring a
            round on every seed, ``curve_scan_round``)
ladder      the seeds: the ladder, contenders and the round that climbs them (``climb``)
refine      refinement: the learning rates the evidence wants next (``explore``)
decision    the next round and the state (``decide``), a whole search (``run``)
goodwindow  the window of good learning rates (``window``, ``state_window``, ``wider``)

This file names what the rest of the package uses; each name is defined in one of them.
"""

from arrepro.search.protocol.decision import cells_of, decide, outcome, run, start, state_of
from arrepro.search.protocol.evidence import Evidence, best, means
from arrepro.search.protocol.goodwindow import Window, state_window, wider, window
from arrepro.search.protocol.ladder import climb, contenders
from arrepro.search.protocol.refine import explore
from arrepro.search.protocol.scan import curve_scan_round, scan_round
from arrepro.search.protocol.spec import (EXACT, KINDS, LOG_EPS, MAX_SCAN_POINTS, MIN_SCAN, RES_TOL, Round,
                                          SearchSpec, SpecError, State, decades, midpoint, snap)
