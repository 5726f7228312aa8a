"""Look-by-look verdicts over the claims of one paper at one scale and stage, with the error control of
``theory.stats.sequential``.

The claims judged together (a paper's at one scale and stage: a unit of its error family, ``family.py``, whose
share of the paper's alpha is the ``alpha`` given here) are one family for each kind of wrong verdict (SUPPORTED,
CONTRADICTED, NEGLIGIBLE; the last only over the claims that have a negligible margin): Holm's step-down procedure
on each claim's repeated p-values keeps the probability of any wrong SUPPORTED verdict among them at ``alpha``, and
likewise for CONTRADICTED and for NEGLIGIBLE, whatever the looks at which the claims stop (repeated p-values are
valid under any stopping rule, and Holm needs nothing else; Maurer and Bretz 2013). Holm with K claims tests at
alpha / (K - m) once m claims of that family are rejected, so a claim's p-value is only compared with the K levels
alpha / K, ..., alpha: the tracker keeps, per comparison, whether its repeated confidence interval has crossed
at each of those levels (cumulatively over looks, which is what "repeated p-value <= level" means) and never needs
the p-values themselves.

Per comparison (mean difference mu of the per-seed values, boundary b, negligible margin delta), at level l:

* SUPPORTED side: the RCI's lower end is above b (for ">=" tests, noninferior and ratio, a zero-spread
  sample at b counts);
* CONTRADICTED side: its upper end is below b;
* NEGLIGIBLE side (superiority comparisons with delta > 0): the whole RCI lies within (-delta, +delta)
  (the two one-sided tests of TOST, each at level l).

Per claim of c comparisons (all must hold, as in ``claim.Claim``): its support p-value is the largest of its
comparisons' (an intersection-union test, no correction); its contradiction and negligible p-values are c times
the smallest (Bonferroni: one contradicted, or one negligible, comparison is enough). The claim's verdict, when
one of its families rejects it: CONTRADICTED if a comparison is contradicted and not also negligible; else
NEGLIGIBLE; else CONTRADICTED; else SUPPORTED. So a superiority claim whose advantage is shown to lie within
+-delta is NEGLIGIBLE, never SUPPORTED, and a shortfall shown negligible is NEGLIGIBLE rather than
CONTRADICTED.

Stopping: a decided claim stops all its comparisons; a comparison that has crossed on the SUPPORTED side at
its claim's current level stops (its part of the intersection is settled, since Holm's levels only grow); a
claim still open after its design's last look is INCONCLUSIVE (its seed budget is spent), and ``finish``
closes the open claims for another reason (a CPU budget).

Everything is vectorised over ``reps`` independent replicates (axis -1), so that the calibration tests run
this same code on thousands of simulated papers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPEN, SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE = 0, 1, 2, 3, 4
CODES = {SUPPORTED: "SUPPORTED", CONTRADICTED: "CONTRADICTED", NEGLIGIBLE: "NEGLIGIBLE", INCONCLUSIVE: "INCONCLUSIVE"}
SUP, CON, NEG = 0, 1, 2  # families, as indices of the arrays below
FAMILIES = ("SUPPORTED", "CONTRADICTED", "NEGLIGIBLE")  # the same, by name (the order of SUP, CON, NEG)
GE_TESTS = ("noninferior", "ratio")  # claims of the form E[x] >= b


@dataclass(frozen=True)
class Spec:
    """One comparison as the tracker sees it: its claim's index, its test, boundary and negligible margin."""

    claim: int
    test: str
    boundary: float
    negligible: float = 0.0


def crossings(test: str, b: float, delta: float, mean, se, crit) -> tuple:
    """(support, contradiction, negligible) booleans of RCIs mean -+ crit * se (arrays)."""
    lo, hi = mean - crit * se, mean + crit * se
    exact = se == 0
    sup = (lo > b) | (exact & (mean >= b) & (test in GE_TESTS))
    con = hi < b
    neg = (lo > -delta) & (hi < delta) if delta > 0 else np.zeros_like(sup)
    finite = np.isfinite(mean) & np.isfinite(se)
    return sup & finite, con & finite, neg & finite


class Tracker:
    """The state of one paper's claims across looks (see the module docstring).

    ``specs``: the comparisons, flattened over claims; ``designs``: one ``sequential.Design`` per claim.
    After each ``look``, vectorised over replicates: ``verdict`` (claims x reps, codes above), ``decided_look``
    (-1 while open), ``reason`` ("decided", "seeds", or what ``finish`` was given), ``stop_look`` and ``n_used``
    (comparisons x reps). One replicate's state by name (what ``judge`` reads): ``verdict_of``, ``reason_of``,
    ``level``, ``crossed_now``, ``stop_look_of``, ``history_of``, ``comparisons_of``, ``can_be_negligible``.
    """

    def __init__(self, specs: list[Spec], designs: list, alpha: float = 0.05, reps: int = 1):
        self.specs, self.designs, self.alpha, self.reps = list(specs), list(designs), float(alpha), int(reps)
        k, j, r = len(self.designs), len(self.specs), self.reps
        self.of_claim = [[x for x, s in enumerate(self.specs) if s.claim == i] for i in range(k)]
        if any(not c for c in self.of_claim):
            raise ValueError("every claim needs at least one comparison")
        # Holm's levels alpha / K_f, ..., alpha per family; K_NEG counts only the claims that can be NEGLIGIBLE
        k_neg = max(1, sum(any(self.specs[x].negligible > 0 for x in c) for c in self.of_claim))
        holm = self.alpha / (k - np.arange(k))
        holm_neg = self.alpha / np.maximum(k_neg - np.arange(k), 1)
        ncomp = np.array([len(self.of_claim[s.claim]) for s in self.specs], dtype=float)
        self._levels = np.stack([np.tile(holm, (j, 1)), holm[None, :] / ncomp[:, None],
                                 holm_neg[None, :] / ncomp[:, None]])
        self._crossed = np.zeros((3, j, k, r), dtype=bool)
        self.open = np.ones((j, r), dtype=bool)
        self.history = [() for _ in range(j)]
        self.stop_look = np.full((j, r), -1)
        self.n_used = np.zeros((j, r), dtype=int)
        self.verdict = np.zeros((k, r), dtype=int)
        self.decided_look = np.full((k, r), -1)
        self.reason = np.full((k, r), "", dtype=object)
        self._rejected = np.zeros((3, k, r), dtype=bool)

    def look(self, k: int, mean, sd, n, can_support=None) -> None:
        """Look ``k``: per comparison the mean and sd of its per-seed values (arrays of shape (comparisons,
        reps)) over ``n[j]`` seeds; ``can_support[j]`` False forbids the SUPPORTED side (an uninformative
        comparison). Comparisons whose claim is decided, or that are settled, ignore their values."""
        mean, sd = np.asarray(mean, float).reshape(len(self.specs), -1), np.asarray(sd, float).reshape(len(self.specs), -1)
        for j, spec in enumerate(self.specs):
            design, hist = self.designs[spec.claim], self.history[j]
            nj = int(n[j])
            if not self.open[j].any() or nj < 2 or (hist and nj <= hist[-1]) or len(hist) >= len(design.looks):
                continue
            self.history[j] = hist = hist + (nj,)
            live = self.open[j]
            se = sd[j] / np.sqrt(nj)
            self.n_used[j, live] = nj
            for f in range(3):
                if f == SUP and can_support is not None and not can_support[j]:
                    continue
                for m in range(len(self.designs)):
                    crit = design.crit(hist, self._levels[f, j, m])
                    x = crossings(spec.test, spec.boundary, spec.negligible, mean[j], se, crit)[f]
                    self._crossed[f, j, m] |= x & live
        self._decide(k)

    def _claim_level(self) -> np.ndarray:
        """(family, claim, level index, rep): the claim's family p-value is at most that Holm level."""
        k = len(self.designs)
        out = np.zeros((3, k, k, self.reps), dtype=bool)
        for i, comps in enumerate(self.of_claim):
            out[SUP, i] = self._crossed[SUP, comps].all(axis=0)
            out[CON, i] = self._crossed[CON, comps].any(axis=0)
            out[NEG, i] = self._crossed[NEG, comps].any(axis=0)
        return out

    def _holm(self, b: np.ndarray) -> np.ndarray:
        """Holm's step-down on claim-level booleans b (claim, level index, rep): rejected (claim, rep)."""
        k = b.shape[0]
        rej = np.zeros((k, self.reps), dtype=bool)
        for _ in range(k):
            m = np.minimum(rej.sum(axis=0), k - 1)
            cand = np.take_along_axis(b, np.broadcast_to(m, (k, 1, self.reps)), axis=1)[:, 0]
            if not (cand & ~rej).any():
                break
            rej |= cand
        return rej

    def _at_current(self, f: int) -> np.ndarray:
        """crossed[f] of each comparison at its family's current Holm level: (comparison, rep)."""
        k = len(self.designs)
        m = np.minimum(self._rejected[f].sum(axis=0), k - 1)
        return np.take_along_axis(self._crossed[f], np.broadcast_to(m, (len(self.specs), 1, self.reps)), axis=1)[:, 0]

    def _decide(self, k: int) -> None:
        b = self._claim_level()
        self._rejected = np.stack([self._holm(b[f]) for f in range(3)])
        con_now, neg_now, sup_now = self._at_current(CON), self._at_current(NEG), self._at_current(SUP)
        for i, comps in enumerate(self.of_claim):
            todo = self.verdict[i] == OPEN
            r_sup, r_con, r_neg = self._rejected[:, i]
            con_only = (con_now[comps] & ~neg_now[comps]).any(axis=0)
            v = np.where(r_con & con_only, CONTRADICTED, np.where(r_neg, NEGLIGIBLE, np.where(
                r_con, CONTRADICTED, np.where(r_sup, SUPPORTED, OPEN))))
            new = todo & (v != OPEN)
            self.verdict[i, new] = v[new]
            self.decided_look[i, new] = k
            self.reason[i, new] = "decided"
            for j in comps:
                stop = self.open[j] & (new | ~todo | sup_now[j])
                self._stop(j, stop, k)
        for i, design in enumerate(self.designs):  # a claim whose seeds are spent
            if k >= len(design.looks) - 1:
                self.close(i, "seeds", k)

    def _stop(self, j: int, mask, k: int) -> None:
        self.stop_look[j, mask] = k
        self.open[j, mask] = False

    def close(self, i: int, reason: str, k: int) -> None:
        """Claim ``i`` INCONCLUSIVE where still open (its budget is spent), its comparisons stopped."""
        todo = self.verdict[i] == OPEN
        self.verdict[i, todo] = INCONCLUSIVE
        self.decided_look[i, todo] = k
        self.reason[i, todo] = reason
        for j in self.of_claim[i]:
            self._stop(j, self.open[j], k)

    def finish(self, reason: str, k: int) -> None:
        """Close every open claim for ``reason`` (e.g. "cpu": the paper's CPU budget is spent)."""
        for i in range(len(self.designs)):
            self.close(i, reason, k)

    # ------------------------------------------------------------------------ one replicate's state, by name

    def _family(self, family: str) -> int:
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
        return FAMILIES.index(family)

    def _holm_index(self, f: int, rep: int) -> int:
        """The index of the Holm level a family tests at now: the number of its claims rejected so far."""
        return int(min(self._rejected[f, :, rep].sum(), len(self.designs) - 1))

    def level(self, family: str, comparison: int, rep: int = 0) -> float:
        """The one-sided level at which ``comparison`` is tested now in ``family``: its claim's current Holm level
        (for CONTRADICTED and NEGLIGIBLE divided by the claim's number of comparisons, Bonferroni)."""
        f = self._family(family)
        return float(self._levels[f, comparison, self._holm_index(f, rep)])

    def crossed_now(self, family: str, comparison: int, rep: int = 0) -> bool:
        """Whether ``comparison``'s repeated interval has crossed on ``family``'s side at its current level."""
        f = self._family(family)
        return bool(self._crossed[f, comparison, self._holm_index(f, rep), rep])

    def verdict_of(self, claim: int, rep: int = 0) -> str:
        """The claim's verdict ("SUPPORTED", ..., "INCONCLUSIVE"), or "OPEN" while undecided."""
        return CODES.get(int(self.verdict[claim, rep]), "OPEN")

    def reason_of(self, claim: int, rep: int = 0) -> str:
        """Why the claim stopped: "decided", "seeds" or the reason given to ``finish``; "" while open."""
        return str(self.reason[claim, rep])

    def stop_look_of(self, comparison: int, rep: int = 0) -> int:
        """The look at which ``comparison`` stopped (-1 while open)."""
        return int(self.stop_look[comparison, rep])

    def history_of(self, comparison: int) -> tuple:
        """The seed counts of the looks at which ``comparison`` was analysed."""
        return tuple(self.history[comparison])

    def comparisons_of(self, claim: int) -> list[int]:
        return list(self.of_claim[claim])

    def can_be_negligible(self, claim: int) -> bool:
        """Whether the claim is in the NEGLIGIBLE family (one of its comparisons has a negligible margin)."""
        return any(self.specs[j].negligible > 0 for j in self.of_claim[claim])

    @property
    def done(self) -> bool:
        return not (self.verdict == OPEN).any()

    def needed(self) -> list[int]:
        """Comparisons open in some replicate: those that want the next look's seeds."""
        return [j for j in range(len(self.specs)) if self.open[j].any()]
