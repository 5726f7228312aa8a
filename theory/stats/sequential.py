"""Group-sequential inference on the mean of paired per-seed differences: repeated confidence intervals with
Lan-DeMets error spending on Student-t statistics, a declared skewness allowance, and repeated p-values.

The data arrive in looks: n_1 < n_2 < ... < n_K seeds (e.g. 5, 10, 20, 40), and a comparison may stop at any
look, for any reason (decided, budget spent). At look k, with mean m_k, standard deviation s_k and
se_k = s_k / sqrt(n_k), the level-l repeated confidence interval (RCI) is

    [m_k - c_k(l) se_k, m_k + c_k(l) se_k],

and the RCIs of all looks cover the true mean simultaneously with probability >= 1 - 2 l (each side l). A
verdict read off the current RCI (its lower end above a boundary, its upper end below it, both ends within
+-margin) is therefore wrong with probability <= l on its side, whatever the stopping rule: that is the
property optional stopping needs (Jennison & Turnbull 1989; 2000, Ch. 9). The smallest l at which the RCI
of some look so far excludes a value is that value's repeated p-value (Jennison & Turnbull 2000, Sec. 9.2):
a valid p-value under any stopping, so Holm's procedure over several comparisons applies to it.

The critical value c_k(l) is built in three steps:

1. **Error spending** (Lan & DeMets 1983): the one-sided level l is spent over the information fractions
   t_k = n_k / n_K by a spending function; the Z boundaries z_k solve P(Z_1 < z_1, ..., Z_{k-1} < z_{k-1},
   Z_k >= z_k) = spend(t_k) - spend(t_{k-1}) for the Brownian-motion correlations corr(Z_j, Z_k) =
   sqrt(n_j / n_k), by the recursive numerical integration of Jennison & Turnbull (2000, Sec. 19.2; Simpson's
   rule on a grid of step 0.05). The default, the Pocock-type function spend(t) = l ln(1 + (e - 1) t), spends
   19% of l at 5 of 40 seeds; O'Brien-Fleming-type spending (2 - 2 Phi(z_{l/2} / sqrt(t))) spends about 1e-6
   there, so that only a deterministic difference could stop at the first look: with few seeds per look and
   an allowance for skewness (3.) that first look would be wasted, hence Pocock. The last planned look spends
   whatever is left (t = 1 even when failed runs left fewer seeds than planned).
2. **Student t** ("significance level approach", Jennison & Turnbull 2000, Sec. 11.2 and 3.8): the nominal
   one-sided level of look k, pi_k = 1 - Phi(z_k), is referred to Student's t with n_k - 1 degrees of
   freedom: q_k = t_{n_k - 1}^{-1}(1 - pi_k). Exact for a single look with Gaussian differences; with several
   looks a close approximation (the calibration tests measure it).
3. **Skewness allowance**: for skewed differences the studentised mean is skewed too (its Edgeworth
   expansion has the term gamma (2 x^2 + 1) / (6 sqrt(n)) phi(x); Johnson 1978, Hall 1992), so a one-sided
   t-test is liberal on the side of the short tail: a centred exponential (skewness 2) at 5 seeds needs
   t = 4.6 for a 5% lower-tail test instead of 2.13. The one-term Cornish-Fisher correction with a declared
   skewness allowance g, c_k = q_k + g / (6 sqrt(n_k)) (2 q_k^2 + 1), is applied on both sides (the direction
   of the skew is unknown). At 3 to 15 seeds the one-term correction falls short of the exact quantile (the
   expansion's 1 / n terms), most at level 0.05: for the centred exponential the g that makes a single look
   exact at 0.05 is 2.8 at 3 seeds, 3.28 at 5, 3.30 at 6 (the most), 3.17 at 10, 3.04 at 15 and 2.7 at 40
   (10^7 simulated samples per n); at the smaller levels of Holm and Bonferroni it is smaller. Hence
   g = ``SKEW_ALLOWANCE`` = 3.4, the value on a 0.1 grid that keeps every single look of 2 to 40 seeds under
   0.05 with room (0.0485 at 6 seeds; 3.3 sits at 0.0500 there). With g = 3 (the value before 0.4.0) the
   designs of one look of 5 seeds and of looks 5, 10 gave 0.055 (1e5 simulated papers): over their level.
   The calibration tests (tests/test_empirical_calibration.py) simulate every look design a claim declares,
   through the tracker that decides the verdicts, for Gaussian differences (far under nominal: the allowance
   is paid for skewness that is not there) and skewed ones up to |skewness| 2 (centred exponential and
   lognormal with sigma 0.55, both signs); skewness beyond 2 is outside what is calibrated. The price, for
   Gaussian differences with a true effect of one standard deviation under looks 5, 10, 20, 40: 23.8 seeds on
   average (g = 3: 22.7; no allowance: 12.5; 20,000 simulated papers).

Looks are checked in one place, ``check_looks``: cumulative paired seed counts, whole numbers, strictly
increasing, the first at least 2. ``Design``, a paper's (or a claims file's) ``Budget``, a replication's declared
looks, ``fedrepro claims --looks`` and the Python API (``run_claims(looks=...)``) all check through it, before
any run.

Why a group-sequential design and not an anytime-valid confidence sequence: the looks are few and declared
(4 looks of 5 to 40 seeds), and confidence sequences valid at every single seed pay for continuous
monitoring (several times wider at 5-40 seeds); those valid for unknown variance (Lai 1976; Wang and Ramdas
2023) assume Gaussian data, and the bounded-data ones (betting, Waudby-Smith and Ramdas 2023) cannot reject
anything at 5 seeds on differences bounded by +-1 whose spread is a few points. Lan-DeMets spending keeps
the error control when the look sizes drift (failed runs), and RCIs keep it when a look is skipped or the
comparison stops for an unplanned reason (a CPU budget): stopping early only spends less.

References: Lan, K. K. G. and DeMets, D. L. (1983), Discrete sequential boundaries for clinical trials,
Biometrika 70(3), 659-663. Jennison, C. and Turnbull, B. W. (1989), Interim analyses: the repeated confidence
interval approach, JRSS B 51(3), 305-361; (2000) Group Sequential Methods with Applications to Clinical
Trials, Chapman & Hall. Johnson, N. J. (1978), Modified t tests and confidence intervals for asymmetrical
populations, JASA 73, 536-544. Hall, P. (1992), On the removal of skewness by transformation, JRSS B 54,
221-228. Holm, S. (1979), Scand. J. Statist. 6, 65-70; Maurer, W. and Bretz, F. (2013), Multiple testing in
group sequential trials using graphical approaches, Statistics in Biopharmaceutical Research 5(4), 311-320.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

SKEW_ALLOWANCE = 3.4  # g of the skewness allowance (see the module docstring, step 3)
SPENDING = ("pocock", "obf")
_GRID_STEP = 0.05  # Simpson step of the recursive integration (boundaries to about 1e-7)
_Z_LOW, _Z_CAP = -8.0, 40.0  # the integration's lower end; a boundary that spends nothing sits at the cap
_P_GRID = np.logspace(-14, math.log10(0.5), 121)  # levels at which repeated p-values are interpolated


def spend(kind: str, alpha: float, t) -> np.ndarray:
    """Cumulative one-sided error spent by information fraction ``t`` (Lan & DeMets 1983)."""
    t = np.minimum(np.asarray(t, dtype=float), 1.0)
    if kind == "pocock":
        return alpha * np.log1p((math.e - 1.0) * t)
    if kind == "obf":
        return 2.0 * special.ndtr(-special.ndtri(1.0 - alpha / 2.0) / np.sqrt(t))
    raise ValueError(f"spending must be one of {SPENDING}, got {kind!r}")


def _grid(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Points and Simpson weights on [lo, hi] (an even number of intervals of about ``_GRID_STEP``)."""
    m = max(2, int(math.ceil((hi - lo) / _GRID_STEP)))
    m += m % 2
    z = np.linspace(lo, hi, m + 1)
    w = np.full(m + 1, 2.0)
    w[1::2] = 4.0
    w[0] = w[-1] = 1.0
    return z, w * (hi - lo) / (3 * m)


def z_boundaries(info: tuple, alpha: float, kind: str = "pocock", max_info: float | None = None) -> np.ndarray:
    """One-sided upper Z boundaries z_1..z_k at cumulative information levels ``info`` (seed counts) of a design
    whose maximum information is ``max_info`` (default info[-1]; fractions t = info / max_info), spending
    ``alpha`` by ``kind``: P(no crossing before k, Z_k >= z_k) = spend(t_k) - spend(t_{k-1}) under the null
    (Jennison & Turnbull 2000, Sec. 19.2). A look that spends nothing gets the boundary ``_Z_CAP`` (never
    crossed)."""
    info = tuple(float(i) for i in info)
    return np.array(_z_boundaries(info, float(alpha), kind, float(max_info or info[-1])))


@lru_cache(maxsize=4096)
def _z_boundaries(info: tuple, alpha: float, kind: str, max_info: float) -> tuple:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if any(b <= a for a, b in zip(info, info[1:])) or info[0] <= 0 or info[-1] > max_info:
        raise ValueError(f"information levels must be positive, increasing and at most {max_info}, got {info}")
    inc = np.diff(np.concatenate([[0.0], spend(kind, alpha, np.asarray(info) / max_info)]))
    c = _Z_CAP if inc[0] <= special.ndtr(-_Z_CAP) else min(float(special.ndtri(1.0 - inc[0])), _Z_CAP)
    out = [c]
    z, w = _grid(_Z_LOW, c)
    f = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)  # sub-density of Z_1 on the continuation region
    for k in range(1, len(info)):
        r0, r1, sd = math.sqrt(info[k - 1]), math.sqrt(info[k]), math.sqrt(info[k] - info[k - 1])
        mass = w * f
        if inc[k] <= 0 or _excess(_Z_CAP, mass, z, r0, r1, sd, inc[k]) >= 0:
            c = _Z_CAP
        else:
            c = float(optimize.brentq(_excess, -10.0, _Z_CAP, args=(mass, z, r0, r1, sd, inc[k]), xtol=1e-12))
        out.append(c)
        zn, wn = _grid(_Z_LOW, c)
        kern = np.exp(-0.5 * ((zn[:, None] * r1 - z[None, :] * r0) / sd) ** 2) * (r1 / (sd * math.sqrt(2 * math.pi)))
        f, z, w = kern @ mass, zn, wn
    return tuple(out)


def _excess(b, mass, z, r0, r1, sd, target):
    """P(continue to the previous look, then cross b) - target, from the previous look's sub-density."""
    return float(np.sum(mass * special.ndtr(-(b * r1 - z * r0) / sd))) - target


def allowance(q, n, skew: float = SKEW_ALLOWANCE):
    """The skewness allowance of step 3: q + skew / (6 sqrt(n)) (2 q^2 + 1)."""
    q = np.asarray(q, dtype=float)
    return q + skew / (6.0 * np.sqrt(n)) * (2.0 * q * q + 1.0)


def check_looks(looks, what: str = "looks") -> tuple:
    """``looks`` as a tuple of ints when they are a design's looks (cumulative paired seed counts: whole numbers,
    strictly increasing, the first at least 2, since a spread needs two seeds), else a ValueError of one line that
    names ``what`` (e.g. "--looks") and shows an example. The one check of a design's looks (module docstring)."""
    try:
        vals = tuple(looks)
    except TypeError:
        vals = (looks,)
    shown = ",".join(str(v) for v in vals)
    example = "e.g. 5,10,20,40 (cumulative paired seeds per comparison)"
    if not vals:
        raise ValueError(f"{what} must name at least one look, {example}")
    if not all(_whole(v) for v in vals):
        raise ValueError(f"{what} must be whole numbers, {example}; got {shown}")
    out = tuple(int(v) for v in vals)
    if out[0] < 2:
        raise ValueError(f"{what} must be at least 2 seeds each (a spread needs two), {example}; got {shown}")
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"{what} must be strictly increasing, {example}; got {shown}")
    return out


def _whole(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    return isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer()


@dataclass(frozen=True)
class Design:
    """A group-sequential design: the declared ``looks`` (cumulative seed counts), the spending function and
    the skewness allowance. ``crit(history, level)`` is the critical value of the last look of ``history``
    (the seed counts actually analysed so far, one per look: failed runs may leave fewer than planned)."""

    looks: tuple
    spending: str = "pocock"
    skew: float = SKEW_ALLOWANCE

    def __post_init__(self):
        object.__setattr__(self, "looks", check_looks(self.looks))
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {SPENDING}, got {self.spending!r}")
        if self.skew < 0:
            raise ValueError(f"the skewness allowance must be >= 0, got {self.skew}")

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    def _info(self, history: tuple) -> tuple:
        info = [min(float(n), float(self.max_seeds)) for n in history]
        if len(history) >= len(self.looks):  # the last planned look spends what is left
            info[-1] = float(self.max_seeds)
        return tuple(info)

    def nominal(self, history: tuple, level: float) -> np.ndarray:
        """pi_1..pi_k: the one-sided nominal levels of the looks of ``history`` (step 1)."""
        self._check(history)
        return special.ndtr(-z_boundaries(self._info(history), level, self.spending, float(self.max_seeds)))

    def crits(self, history: tuple, level: float) -> np.ndarray:
        """c_1..c_k of the module docstring for the looks of ``history`` at one-sided ``level``."""
        return _crits(self, tuple(int(n) for n in history), float(level))

    def crit(self, history: tuple, level: float) -> float:
        return float(self.crits(history, level)[-1])

    def repeated_p(self, t: float, history: tuple) -> float:
        """The smallest level at which the last look of ``history`` rejects with statistic ``t`` (one-sided:
        large t rejects): inf{l: t >= c_k(l)}, 1 when t is below c_k(0.5); interpolated in log l on a grid of
        121 levels from 1e-14 to 0.5 (for reporting; decisions compare with ``crit`` exactly)."""
        if not math.isfinite(t):
            return 0.0 if t > 0 else 1.0
        c = _crit_curve(self, tuple(int(n) for n in history))
        if t < c[-1]:
            return 1.0
        if t >= c[0]:
            return float(_P_GRID[0])
        i = int(np.searchsorted(-c, -t))  # c decreases along the grid: first index with c <= t
        c0, c1 = c[i - 1], c[i]
        x0, x1 = math.log(_P_GRID[i - 1]), math.log(_P_GRID[i])
        return float(math.exp(x0 + (x1 - x0) * (c0 - t) / (c0 - c1)))

    def _check(self, history: tuple) -> None:
        if not history or len(history) > len(self.looks):
            raise ValueError(f"a history has 1 to {len(self.looks)} looks, got {history}")
        if history[0] < 2 or any(b <= a for a, b in zip(history, history[1:])):
            raise ValueError(f"a history is increasing seed counts of at least 2, got {history}")


@lru_cache(maxsize=65536)
def _crits(design: Design, history: tuple, level: float) -> np.ndarray:
    pi = design.nominal(history, level)
    q = sps.t.isf(pi, np.asarray(history) - 1)
    return allowance(q, np.asarray(history, dtype=float), design.skew)


@lru_cache(maxsize=1024)
def _crit_curve(design: Design, history: tuple) -> np.ndarray:
    return np.array([design.crit(history, float(a)) for a in _P_GRID])


def seeds_to_reach(effect: float, sd: float, level: float, skew: float = SKEW_ALLOWANCE, cap: int = 100_000) -> int | None:
    """A planning figure: the smallest n at which the observed standardised effect would reach a single-look
    critical value at ``level`` (t quantile with the skewness allowance), None when no n up to ``cap`` does
    (or there is no effect or no spread). About even odds, not a promise."""
    if not (math.isfinite(effect) and sd > 0 and effect != 0):
        return None
    d = abs(effect) / sd

    def ok(n):
        return d * math.sqrt(n) >= float(allowance(sps.t.isf(level, n - 1), n, skew))

    if not ok(cap):
        return None
    lo, hi = 2, cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi if not ok(lo) else lo
