"""Calibrated statistical tests behind the theory checks (HOLDS / VIOLATED / INCONCLUSIVE).

Every test takes a false-alarm rate ``alpha`` (default ``1e-3``): the probability that it reports a
violation (``passed=False``) when the claim is true. For each test the docstring states the null
hypothesis, the statistic, and whether ``alpha`` is guaranteed exactly, conservatively (the true
false-alarm rate is at most ``alpha``) or asymptotically (as the number of samples grows).

Every test returns a frozen :class:`TestResult`. ``passed`` means "the data do not reject the claim at
level ``alpha``"; it is not evidence that the claim holds unless the test also had power. Power is
made visible in ``details``: the one-sided tests report ``confirmed`` (the confidence bound on the
other side also satisfies the claim), the mean tests report the bias they could detect with 99%
probability. A claim module typically maps ``not passed`` -> VIOLATED, ``passed and confirmed`` (or
enough power) -> HOLDS, anything else -> INCONCLUSIVE.

Inputs may be numpy arrays, torch tensors or nested lists; they are converted to float64. NaN or
infinite inputs raise ``ValueError``.

Conventions:

- ``interval`` is a confidence interval for ``estimate``; its level is stated per test.
- ``to_dict()`` is JSON-serialisable with ``json.dumps(..., allow_nan=False)``: numpy values become
  plain floats/ints/lists, NaN becomes ``None`` and +-inf become the strings ``"inf"`` / ``"-inf"``.
- Per-coordinate multiplicity in :func:`mean_zero` / :func:`mean_equals` is controlled with Holm's
  step-down procedure (family-wise error rate). Note that the pass/fail decision of Holm is the same as
  Bonferroni's (some coordinate is rejected iff the smallest p-value is <= level/d); Holm only rejects
  more coordinates once one is rejected, so ``details["rejected_coordinates"]`` is Holm's list.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special

__all__ = [
    "DEFAULT_ALPHA",
    "TestResult",
    "mean_zero",
    "mean_equals",
    "upper_bound",
    "slope",
    "slope_at_most",
    "contraction",
    "contraction_at_most",
    "bernoulli_rate_interval",
    "samples_needed_for_bias",
]

DEFAULT_ALPHA = 1e-3
ZERO_TOL = 1e-12
# Relative floor on the standard error of fitted slopes, so that exactly deterministic trajectories
# (identical seeds, perfect power laws) are not rejected because of floating-point rounding.
_SLOPE_SE_FLOOR = 1e-10
# Work budget (multiply-adds) for the correlation-spectrum estimate of the aggregate test.
_SPECTRUM_BUDGET = 2e9
_MAX_LISTED = 20  # how many coordinate indices details lists at most


# ------------------------------------------------------------------------------------------ result


@dataclass(frozen=True)
class TestResult:
    """Outcome of one statistical test.

    passed:    True when the data do not reject the null hypothesis (the claim) at level ``alpha``.
    statistic: the test statistic (documented per test).
    p_value:   p-value of the whole procedure (``passed == (p_value > alpha)``), or None when no
               hypothesis was tested (pure estimation).
    estimate:  point estimate (float, or numpy array for vector means).
    interval:  confidence interval for ``estimate`` (level documented per test), or None.
    alpha:     the false-alarm rate the test was run at.
    n:         number of independent replicates (samples, or seeds for slope fits).
    details:   everything else (method names, multiplicity correction, diagnostics).
    """

    __test__ = False  # not a pytest test class despite its name

    passed: bool
    statistic: float
    p_value: float | None
    estimate: Any
    interval: tuple | None
    alpha: float
    n: int
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain-Python, JSON-serialisable (allow_nan=False) view of the result."""
        return {
            "passed": bool(self.passed),
            "statistic": _jsonable(self.statistic),
            "p_value": _jsonable(self.p_value),
            "estimate": _jsonable(self.estimate),
            "interval": _jsonable(self.interval),
            "alpha": _jsonable(self.alpha),
            "n": int(self.n),
            "details": _jsonable(self.details),
        }


def _jsonable(obj: Any) -> Any:
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()] if obj.ndim else _jsonable(obj.item())
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        return _jsonable(obj.detach().cpu().double().numpy())
    return str(obj)


# ------------------------------------------------------------------------------------------ inputs


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """float64 copy of an array-like / torch tensor; ValueError on NaN/inf."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor, without importing torch
        x = x.detach().cpu()
        if hasattr(x, "double"):
            x = x.double()
        x = x.numpy()
    try:
        arr = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot convert to a float array ({exc})") from exc
    if arr.size and not np.isfinite(arr).all():
        bad = ~np.isfinite(arr)
        kind = "NaN" if np.isnan(arr).any() else "infinite value(s)"
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} contains {int(bad.sum())} non-finite entries ({kind}; first at index "
                         f"{first}); statistical tests need finite values")
    return arr


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return alpha


def _t_sf(df: float, t):
    """P(T_df > t)."""
    return special.stdtr(df, -np.asarray(t, dtype=float))


def _t_quantile(df: float, p: float) -> float:
    """q with P(T_df <= q) = p."""
    return float(special.stdtrit(df, p))


# ------------------------------------------------------------------------------------------ mean tests


def mean_zero(samples, alpha: float = DEFAULT_ALPHA, *, method: str = "conservative",
              zero_tol: float = ZERO_TOL, aggregate: bool | None = None) -> TestResult:
    """Test H0: E[X_j] = 0 for every coordinate j, from i.i.d. rows ``samples`` of shape (n, d) or (n,).

    Typical use: unbiasedness of a stochastic operator, ``samples[i] = C(x) - x`` for independent draws.

    Procedure (``passed`` means neither part rejects):

    1. Per-coordinate two-sided one-sample tests on t_j = mean_j / (s_j / sqrt(n)), s_j the sample
       standard deviation (ddof=1), referred to Student's t with n - 1 degrees of freedom. Two versions
       of the statistic: the plain t_j (exact for Gaussian data) and Hall's (1992) skewness-corrected
       g(t_j) = t_j + a_j + 2 a_j t_j^2 + (4/3) a_j^2 t_j^3, a_j = skewness_j / (6 sqrt(n)), which
       removes the O(n^-1/2) skewness error of the t statistic. ``method="conservative"`` (default)
       rejects a coordinate only when both reject (p_j = max of the two p-values), so its false-alarm
       rate is at most the smaller of the two tests' rates; ``method="t"`` / ``"hall"`` use one.
       Why: for skewed data (compression errors, exponential-like noise) the plain t-test's two-sided
       error at the small per-coordinate levels used here is several times nominal (centered
       exponential, n = 200, level 5e-4: about 3x) while Hall's is close to nominal; for symmetric
       heavy-tailed data (t_5) the noisy skewness estimate makes Hall's test liberal (about 2x at
       n = 100, level 5e-4) while the t-test is conservative. The combination inherits the better one.
       Multiplicity over the d' tested coordinates is controlled with Holm's step-down procedure (its
       pass/fail decision equals Bonferroni's: reject iff min_j p_j <= level / d').
    2. An aggregate test on the whole mean vector, which catches small biases spread over many
       coordinates. Hotelling's T^2 needs n > d and a well-conditioned covariance, so the statistic is
       diagonal, as in Srivastava & Du (2008): the sum over coordinates of squared standardised means,
       sum_j n * mean_j^2 / s_j^2 = sum_j t_j^2 (reported as ``aggregate.sum_t2``). For the p-value each
       coordinate is first mapped to the normal score with the same two-sided p-value,
       |z_j| = Phi^-1(1 - p_j / 2) (for the t-test exactly |N(0, 1)| under Gaussian data, removing the
       heavy tails of t^2 at small n), and Q = sum_j z_j^2 is compared with its null distribution
       sum_k lambda_k chi2_1, where lambda_k are the eigenvalues of the coordinates' correlation matrix
       R (so correlated coordinates are allowed; Q ~ chi2_d when they are independent; a
       moment-matched chi-square would be several times too liberal at alpha = 1e-3 when one
       eigenvalue dominates, e.g. equicorrelated coordinates). The spectrum is the sample
       correlation spectrum shrunk towards 1 so that its second moment matches the bias-corrected
       estimate tr(R^2) ~ ((n-1) tr(Rhat^2) - d^2) / n (which corrects the eigenvalue spread of
       Rhat when d is comparable to or larger than n); the tail probability uses the Lugannani-Rice
       saddlepoint approximation. It runs when d' >= 2 and n >= 10 (``aggregate=None``); then each
       part gets level alpha / 2 (Bonferroni over the two parts), otherwise part 1 gets all of alpha.

    Coordinates whose samples are all equal (range <= ``zero_tol``, absolute) are not tested
    statistically: they pass iff |mean| <= ``zero_tol``, and a violation makes the test fail with
    p_value = 0. (For discrete variables that can be constant by chance, e.g. a two-point operator at
    the edge of its range, this rule is a deterministic rejection; use enough samples.)

    False-alarm rate: Holm/Bonferroni is conservative for any dependence between coordinates (the
    family-wise rate is <= the sum of the per-coordinate rates). Each per-coordinate test is exact for
    Gaussian data with ``method="t"``; otherwise asymptotic, with an O(1/n) error that grows with the
    skewness and kurtosis and as the per-coordinate level alpha / (2 d') shrinks
    (``details["small_sample_warning"]`` flags n < 25 max(1, skewness^2)). Part 2 is asymptotic
    (n -> infinity; saddlepoint approximation and spectrum estimate, both checked by simulation in
    tests/test_stats.py). Overall: at most alpha up to these approximations.

    Returns: ``statistic`` = max_j |mean_j| / se_j; ``p_value`` = Bonferroni combination of the parts
    (``passed == (p_value > alpha)``); ``estimate`` = sample mean (float for 1-D input, else array);
    ``interval`` = simultaneous (Bonferroni, level 1 - alpha_part) confidence interval for the mean of
    the worst coordinate (the one with the smallest p-value), from inverting its tested statistic;
    ``details`` has ``worst_coordinate``, Holm's rejected coordinates, the aggregate part, and
    ``max_detectable_bias_99`` (the largest, over coordinates, bias that the per-coordinate test would
    detect with probability ~0.99: compare it with the bias the claim must exclude to tell HOLDS
    from INCONCLUSIVE).
    """
    return _mean_test(samples, 0.0, alpha, method, zero_tol, aggregate, "mean_zero")


def mean_equals(samples, expected, alpha: float = DEFAULT_ALPHA, *, method: str = "conservative",
                zero_tol: float = ZERO_TOL, aggregate: bool | None = None) -> TestResult:
    """Test H0: E[X] = expected (a closed-form expectation, scalar or shape (d,)), rows i.i.d.

    Same procedure, statistic and false-alarm guarantees as :func:`mean_zero` applied to
    ``samples - expected``. The zero-variance rule uses the tolerance ``zero_tol * max(1, |expected_j|)``
    (so a deterministic quantity that equals a large expectation up to rounding passes).
    ``estimate``/``interval`` refer to the mean of ``samples`` itself; ``details["expected"]`` holds the
    expectation.
    """
    return _mean_test(samples, expected, alpha, method, zero_tol, aggregate, "mean_equals")


def _mean_test(samples, expected, alpha, method, zero_tol, aggregate, name) -> TestResult:
    alpha = _check_alpha(alpha)
    _check_method(method)
    X = _to_numpy(samples, "samples")
    scalar_input = X.ndim == 1
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"samples must have shape (n,) or (n, d), got {X.shape}")
    n, d = X.shape
    if n < 2:
        raise ValueError(f"need at least 2 samples (rows), got {n}")
    if d < 1:
        raise ValueError("samples have zero coordinates")
    E = _to_numpy(expected, "expected")
    try:
        E = np.broadcast_to(E, (d,)).astype(np.float64)
    except ValueError as exc:
        raise ValueError(f"expected with shape {E.shape} does not match {d} coordinates") from exc
    if zero_tol < 0:
        raise ValueError("zero_tol must be >= 0")

    D = X - E
    mean_x = X.mean(axis=0)
    mean = D.mean(axis=0)
    tol = zero_tol * np.maximum(1.0, np.abs(E))
    degenerate = (D.max(axis=0) - D.min(axis=0)) <= tol
    deg_bad = degenerate & (np.abs(mean) > tol)
    tested = np.flatnonzero(~degenerate)
    k = int(tested.size)
    df = n - 1

    sd = D.std(axis=0, ddof=1)
    se = sd / math.sqrt(n)
    t = np.zeros(d)    # plain t statistics mean_j / se_j
    h = np.zeros(d)    # Hall-corrected statistics
    a = np.zeros(d)    # Hall's coefficients skewness_j / (6 sqrt(n))
    skew = np.zeros(d)
    p = np.ones(d)
    if k:
        with np.errstate(divide="ignore", invalid="ignore"):
            t[tested] = mean[tested] / se[tested]
        skew[tested] = _skewness(D[:, tested])
        a[tested] = skew[tested] / (6.0 * math.sqrt(n))
        h[tested] = _hall(t[tested], a[tested])
        p[tested] = _combine_p(2.0 * _t_sf(df, np.abs(t[tested])), 2.0 * _t_sf(df, np.abs(h[tested])), method)
    t[deg_bad] = h[deg_bad] = np.inf
    p[deg_bad] = 0.0

    use_agg = (k >= 2 and n >= 10) if aggregate is None else bool(aggregate and k >= 2)
    alpha_coord = alpha / 2 if use_agg else alpha

    # Part 1: Holm over the tested coordinates.
    rejected: list[int] = []
    p_bonf = 1.0
    if k:
        pk = p[tested]
        order = np.argsort(pk, kind="stable")
        for rank, j in enumerate(order):
            if pk[j] <= alpha_coord / (k - rank):
                rejected.append(int(tested[j]))
            else:
                break
        p_bonf = float(min(1.0, pk.min() * k))

    # Part 2: aggregate.
    agg: dict = {"performed": bool(use_agg)}
    p_agg = 1.0
    if use_agg:
        agg.update(_aggregate_test(D[:, tested], p[tested], t[tested]))
        p_agg = agg["p_value"]

    if deg_bad.any():
        p_total = 0.0
    else:
        p_total = min(1.0, p_bonf * (alpha / alpha_coord), 2.0 * p_agg if use_agg else 1.0)
    passed = bool(p_total > alpha)

    if deg_bad.any():
        worst = int(np.flatnonzero(deg_bad)[np.argmax(np.abs(mean[deg_bad]))])
    elif k:
        worst = int(tested[np.argmin(p[tested])])
    else:
        worst = int(np.argmax(np.abs(mean)))
    stat = float(np.abs(t).max())

    # Simultaneous interval for the worst coordinate (inverting the tested statistic).
    q_sim = _t_quantile(df, 1.0 - alpha_coord / (2 * max(k, 1)))
    if degenerate[worst]:
        interval = (float(mean_x[worst]), float(mean_x[worst]))
    else:
        interval = _mean_interval(float(mean_x[worst]), float(se[worst]), float(a[worst]), q_sim, q_sim,
                                  method)
    mdb = float((q_sim + special.ndtri(0.99)) * se[tested].max()) if k else 0.0
    max_skew = float(np.abs(skew).max())

    details = {
        "test": name,
        "null": "E[X_j] = expected_j for all j" if name == "mean_equals" else "E[X_j] = 0 for all j",
        "method": method,
        "d": d,
        "tested_coordinates": k,
        "degenerate_coordinates": int(degenerate.sum()),
        "degenerate_violations": _capped(np.flatnonzero(deg_bad)),
        "multiplicity": "holm",
        "alpha_coordinates": alpha_coord,
        "alpha_aggregate": alpha / 2 if use_agg else 0.0,
        "p_coordinates_bonferroni": p_bonf,
        "rejected_coordinates": _capped(np.asarray(sorted(rejected), dtype=int)),
        "n_rejected": len(rejected) + int(deg_bad.sum()),
        "worst_coordinate": worst,
        "worst_mean_difference": float(mean[worst]),
        "worst_se": float(se[worst]),
        "worst_t": float(t[worst]),
        "worst_hall": float(h[worst]),
        "worst_p_value": float(p[worst]),
        "max_detectable_bias_99": mdb,
        "max_abs_skewness": max_skew,
        "small_sample_warning": bool(k and n < 25.0 * max(1.0, max_skew ** 2)),
        "aggregate": agg,
        "df": df,
        "guarantee": _GUARANTEE[method] + " per coordinate (Holm: conservative across coordinates); "
                     "aggregate: asymptotic",
    }
    if name == "mean_equals":
        details["expected"] = float(E[0]) if scalar_input else E
    estimate = float(mean_x[0]) if scalar_input else mean_x
    return TestResult(passed, stat, float(p_total), estimate, interval, alpha, n, details)


def _skewness(D: np.ndarray) -> np.ndarray:
    """Sample skewness m3 / m2^1.5 of each column (0 for constant columns)."""
    c = D - D.mean(axis=0)
    m2 = (c * c).mean(axis=0)
    m3 = (c * c * c).mean(axis=0)
    safe = np.where(m2 > 0, m2, 1.0)
    return np.where(m2 > 0, m3 / safe ** 1.5, 0.0)


def _hall(t, a):
    """Hall's (1992) transformation g(t) = t + a + 2 a t^2 + (4/3) a^2 t^3 of a studentised mean, with
    a = skewness / (6 sqrt(n)). g is increasing; g(t) is N(0, 1) up to O(1/n), removing the O(n^-1/2)
    skewness term of the t statistic's Edgeworth expansion."""
    t = np.asarray(t, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        out = t + a * (1.0 + 2.0 * t * t) + (4.0 / 3.0) * a * a * t ** 3
    return np.where(np.isfinite(t), out, t)


def _hall_inv(y: float, a: float) -> float:
    """Inverse of :func:`_hall` in t."""
    if abs(a) < 1e-15:
        return float(y)
    return float((np.cbrt(1.0 + 6.0 * a * (y - a)) - 1.0) / (2.0 * a))


def _capped(idx: np.ndarray) -> list:
    return [int(i) for i in idx[:_MAX_LISTED]]


_METHODS = ("conservative", "t", "hall")
_GUARANTEE = {
    "conservative": "at most the smaller of the t and Hall tests' rates: exact-or-below for Gaussian data, "
                    "asymptotic (O(1/n), with Hall's skewness protection) otherwise,",
    "t": "exact for Gaussian data, asymptotic otherwise,",
    "hall": "asymptotic (O(1/n)),",
}


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")


def _combine_p(p_t, p_h, method: str):
    """Per-test p-value of the chosen method ("conservative": reject only when both t and Hall reject)."""
    if method == "t":
        return p_t
    if method == "hall":
        return p_h
    return np.maximum(p_t, p_h)


def _mean_interval(mean: float, se: float, a: float, q_lo: float, q_hi: float, method: str):
    """Confidence set {mu: not rejected} for the mean; q_lo / q_hi are the t quantiles used on each side
    (for a one-sided bound pass inf on the other side)."""
    def one(aa):
        lo = mean - se * _hall_inv(q_lo, aa) if math.isfinite(q_lo) else -math.inf
        hi = mean - se * _hall_inv(-q_hi, aa) if math.isfinite(q_hi) else math.inf
        return lo, hi
    lt, ht = one(0.0)
    lh, hh = one(a)
    if method == "t":
        return float(lt), float(ht)
    if method == "hall":
        return float(lh), float(hh)
    return float(min(lt, lh)), float(max(ht, hh))


def _aggregate_test(D: np.ndarray, p: np.ndarray, t: np.ndarray) -> dict:
    """Diagonal (Srivastava-Du type) aggregate test; see mean_zero's docstring. p: per-coordinate
    two-sided p-values of the chosen method, t: plain t statistics (for the reported sum of t^2)."""
    z = -special.ndtri(np.minimum(p, 1.0) / 2.0)  # |normal score| with the same two-sided p-value
    Q = float(np.sum(z ** 2))
    lam, mult, info = _null_spectrum(D)
    p_agg = _weighted_chi2_sf(Q, lam, mult)
    info.update({"statistic": Q, "sum_t2": float(np.sum(t ** 2)), "p_value": float(p_agg),
                 "null": "sum_k lambda_k chi2_1 (lambda: shrunk correlation spectrum)",
                 "approximation": "Lugannani-Rice saddlepoint"})
    return info


def _null_spectrum(D: np.ndarray):
    """Eigenvalues (with multiplicities) of the shrunk estimate of the coordinates' correlation matrix.

    tr(R) = k exactly; tr(R^2) is matched to the bias-corrected estimate ((m tr(Rhat^2) - k^2) / (m + 1)),
    m the degrees of freedom of Rhat, floored at k (its value for independent coordinates).
    """
    n, k = D.shape
    # Rows used for the spectrum: all of them unless the Gram matrix would cost too much.
    if k <= n:
        rows = int(min(n, max(10, _SPECTRUM_BUDGET // max(k * k, 1))))
    else:
        rows = int(min(n, max(10, math.isqrt(int(_SPECTRUM_BUDGET // k)))))
    Dr = D[:rows]
    Z = Dr - Dr.mean(axis=0)
    s = np.sqrt((Z ** 2).sum(axis=0))
    ok = s > 0
    Z = Z[:, ok] / s[ok]  # unit columns: Z^T Z is the sample correlation matrix
    kk = Z.shape[1]
    m = rows - 1
    if kk == 0 or m < 1:
        return np.ones(1), np.array([float(k)]), {"tr_R2": float(k), "shrinkage": 1.0, "spectrum_rows": rows,
                                                   "effective_df": float(k)}
    G = Z.T @ Z if kk <= rows else Z @ Z.T
    ev = np.linalg.eigvalsh(G)
    ev = ev[ev > 1e-10 * kk]
    ev = ev * (k / ev.sum())  # trace exactly k (also rescales if some columns were constant in the subsample)
    s2 = float(np.sum(ev ** 2))
    tr2 = max(float(k), (m * s2 - k * k) / (m + 1))
    if s2 - k <= 1e-12 * k:
        a = 0.0
    else:
        a = math.sqrt(max(0.0, min(1.0, (tr2 - k) / (s2 - k))))
    lam = a * ev + (1.0 - a)
    mult = np.ones_like(lam)
    rest = k - ev.size
    if rest > 0 and a < 1.0:
        lam = np.append(lam, 1.0 - a)
        mult = np.append(mult, float(rest))
    keep = lam > 1e-12
    lam, mult = lam[keep], mult[keep]
    return lam, mult, {"tr_R2": tr2, "shrinkage": 1.0 - a, "spectrum_rows": rows,
                       "effective_df": float(k * k / tr2)}


def _weighted_chi2_sf(x: float, lam: np.ndarray, mult: np.ndarray) -> float:
    """P(sum_i lam_i * chi2_{mult_i} > x), lam > 0, by the Lugannani-Rice saddlepoint approximation.

    Exact chi-square survival function when there is a single distinct weight.
    """
    lam = np.asarray(lam, float)
    mult = np.asarray(mult, float)
    if x <= 0:
        return 1.0
    if not math.isfinite(x):
        return 0.0
    if lam.size == 1:
        return float(special.chdtrc(mult[0], x / lam[0]))
    mu = float(np.sum(mult * lam))
    var = float(np.sum(2 * mult * lam ** 2))
    lmax = float(lam.max())

    def k1(s):
        return float(np.sum(mult * lam / (1.0 - 2.0 * lam * s)))

    if abs(x - mu) < 1e-6 * math.sqrt(var):  # at the mean the formula is 0/0; use Satterthwaite
        c = var / (2 * mu)
        return float(special.chdtrc(2 * mu * mu / var, x / c))
    if x > mu:
        h_top = float(mult[np.argmax(lam)])
        lo, hi = 0.0, (1.0 - h_top * lmax / (2.0 * x)) / (2.0 * lmax)
    else:
        lo, hi = -float(mult.sum()) / x, 0.0
    s = optimize.brentq(lambda u: k1(u) - x, lo, hi, xtol=1e-300, rtol=1e-14, maxiter=500)
    kk = float(-0.5 * np.sum(mult * np.log1p(-2.0 * lam * s)))
    k2 = float(np.sum(2.0 * mult * lam ** 2 / (1.0 - 2.0 * lam * s) ** 2))
    w2 = 2.0 * (s * x - kk)
    if w2 <= 0 or s == 0.0:
        c = var / (2 * mu)
        return float(special.chdtrc(2 * mu * mu / var, x / c))
    w = math.copysign(math.sqrt(w2), s)
    v = s * math.sqrt(k2)
    p = float(special.ndtr(-w) + math.exp(-0.5 * w * w) / math.sqrt(2 * math.pi) * (1.0 / v - 1.0 / w))
    return min(1.0, max(0.0, p))


# ------------------------------------------------------------------------------------------ one-sided bound


def upper_bound(samples, bound: float, alpha: float = DEFAULT_ALPHA, *,
                value_range: tuple[float, float] | None = None, method: str = "conservative") -> TestResult:
    """Test H0: E[Z] <= bound from i.i.d. scalar samples Z (shape (n,)), e.g. squared errors against a
    variance bound.

    Statistic: t = (mean - bound) / (s / sqrt(n)) (s with ddof=1), referred to Student's t with n - 1
    degrees of freedom, one-sided: reject (``passed=False``) iff the one-sided (1 - alpha) lower
    confidence bound for E[Z] exceeds ``bound``. As in :func:`mean_zero`, ``method`` picks the plain t
    ("t"), Hall's skewness-corrected g(t) ("hall"), or rejection only when both reject
    ("conservative", default; p = max of the two). A one-sided t-test is only first-order correct for
    skewed data: for right-skewed Z (squared errors) the plain t is conservative (and loses power), for
    left-skewed Z it is liberal; Hall's correction removes that O(n^-1/2) error.

    False-alarm rate: "t": exactly alpha for Gaussian Z at E[Z] = bound (less inside H0), asymptotic
    otherwise; "hall": asymptotic with O(1/n) error; "conservative": at most the smaller of the two.
    With ``value_range=(lo, hi)`` (all samples must lie in it) Hoeffding's distribution-free bounds
    mean -+ (hi - lo) sqrt(log(1/alpha) / (2 n)) are reported in ``details["hoeffding"]``; with
    ``method="hoeffding"`` they also make the decision, and the false-alarm rate is then conservative
    (<= alpha) for every distribution on [lo, hi].

    All samples equal (zero variance): passed iff the value <= bound + 1e-12 * max(1, |bound|).

    Returns: ``statistic`` = the plain t (mean - bound for "hoeffding"); ``estimate`` = sample mean;
    ``interval`` = (lower, upper) one-sided (1 - alpha) confidence bounds of the chosen method
    (together a 1 - 2 alpha two-sided interval); ``details``:
    ``upper_confidence_bound``, ``ratio`` = estimate / bound, ``ucb_ratio``, and ``confirmed`` (the
    upper bound is <= ``bound``: positive evidence that the claim holds, not only absence of rejection).
    """
    alpha = _check_alpha(alpha)
    if method != "hoeffding":
        _check_method(method)
    Z = _to_numpy(samples, "samples")
    if Z.ndim == 2 and Z.shape[1] == 1:
        Z = Z[:, 0]
    if Z.ndim != 1:
        raise ValueError(f"upper_bound needs scalar samples of shape (n,), got {Z.shape}; reduce each sample "
                         "to the scalar the bound is about (e.g. a squared norm)")
    n = Z.size
    if n < 2:
        raise ValueError(f"need at least 2 samples, got {n}")
    b = float(_to_numpy(bound, "bound"))
    mean = float(Z.mean())
    sd = float(Z.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    skew = float(_skewness(Z[:, None])[0])

    hoeff = None
    if value_range is not None:
        lo, hi = (float(v) for v in value_range)
        if not hi > lo:
            raise ValueError(f"value_range must be (lo, hi) with lo < hi, got {value_range}")
        if Z.min() < lo or Z.max() > hi:
            raise ValueError(f"samples outside value_range {value_range}: min {Z.min()}, max {Z.max()}")
        rad = (hi - lo) * math.sqrt(math.log(1.0 / alpha) / (2.0 * n))
        gap = mean - b
        hp = math.exp(-2.0 * n * gap * gap / (hi - lo) ** 2) if gap > 0 else 1.0
        hoeff = {"lower_confidence_bound": mean - rad, "upper_confidence_bound": mean + rad,
                 "p_value": hp, "rejects": bool(hp <= alpha), "range": (lo, hi)}
    elif method == "hoeffding":
        raise ValueError("method='hoeffding' needs value_range=(lo, hi)")

    degenerate = float(Z.max() - Z.min()) <= ZERO_TOL * max(1.0, abs(mean))
    t_plain = (mean - b) / se if se > 0 else (0.0 if mean == b else math.copysign(math.inf, mean - b))
    if degenerate:
        ok = mean <= b + ZERO_TOL * max(1.0, abs(b))
        stat = t_plain
        p = 1.0 if ok else 0.0
        lcb = ucb = mean
        guarantee = "deterministic (zero variance)"
    elif method == "hoeffding":
        stat = mean - b
        lcb, ucb, p = hoeff["lower_confidence_bound"], hoeff["upper_confidence_bound"], hoeff["p_value"]
        guarantee = "conservative (Hoeffding), any distribution on value_range"
    else:
        a = skew / (6.0 * math.sqrt(n))
        stat = t_plain
        q = _t_quantile(df, 1.0 - alpha)
        lcb, ucb = _mean_interval(mean, se, a, q, q, method)
        p = float(_combine_p(_t_sf(df, t_plain), _t_sf(df, _hall(t_plain, a)), method))
        guarantee = _GUARANTEE[method].rstrip(",")
    passed = bool(p > alpha) if not degenerate else bool(p > 0)
    details = {
        "test": "upper_bound",
        "null": "E[Z] <= bound",
        "bound": b,
        "method": method,
        "t": float(t_plain),
        "hall": float(_hall(t_plain, skew / (6.0 * math.sqrt(n)))) if not degenerate else float(t_plain),
        "lower_confidence_bound": float(lcb),
        "upper_confidence_bound": float(ucb),
        "ratio": _ratio(mean, b),
        "ucb_ratio": _ratio(float(ucb), b),
        "confirmed": bool(ucb <= b),
        "sd": sd,
        "se": se,
        "df": df,
        "degenerate": bool(degenerate),
        "skewness": skew,
        "guarantee": guarantee,
    }
    if hoeff is not None:
        details["hoeffding"] = hoeff
    return TestResult(passed, float(stat), float(p), mean, (float(lcb), float(ucb)), alpha, n, details)


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b


# ------------------------------------------------------------------------------------------ rates


def _fit_slopes(x: np.ndarray, errors, name: str) -> dict:
    """OLS of log(errors) on x per seed. errors: (len(x),) or (seeds, len(x))."""
    Y = _to_numpy(errors, name)
    if Y.ndim == 1:
        Y = Y[None, :]
    if Y.ndim != 2:
        raise ValueError(f"{name} must have shape (len,) or (seeds, len), got {Y.shape}")
    S, k = Y.shape
    if k != x.size:
        raise ValueError(f"{name} has {k} points per seed but there are {x.size} x values")
    if S < 1:
        raise ValueError(f"{name} has no seeds")
    if (Y <= 0).any():
        first = tuple(int(i) for i in np.argwhere(Y <= 0)[0])
        raise ValueError(f"{name} must be strictly positive to take logs (found {Y[first]} at index "
                         f"{first}); trim points at or below the numerical floor")
    nd = np.unique(x).size
    if nd < 2 or (S == 1 and nd < 3):
        raise ValueError(f"need at least {2 if S > 1 else 3} distinct x values for a slope "
                         f"{'' if S > 1 else 'with one seed '}(got {nd})")
    logY = np.log(Y)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    slopes = (logY - logY.mean(axis=1, keepdims=True)) @ xc / sxx
    intercepts = logY.mean(axis=1) - slopes * x.mean()
    b = float(slopes.mean())
    if S >= 2:
        se = float(slopes.std(ddof=1) / math.sqrt(S))
        df = S - 1
        method = "t interval over seeds (per-seed OLS slopes)"
    else:
        resid = logY[0] - intercepts[0] - slopes[0] * x
        df = k - 2
        se = float(math.sqrt(float(resid @ resid) / df / sxx))
        method = "OLS standard error (one seed; assumes independent log-residuals)"
    se_floor = _SLOPE_SE_FLOOR * max(1.0, abs(b))
    return {"slope": b, "se": max(se, se_floor), "se_raw": se, "df": df, "seeds": S, "points": k,
            "slopes": slopes, "intercepts": intercepts, "method": method}


def _band_test(fit: dict, lo: float, hi: float, alpha: float):
    """Two-sided test that the slope lies in [lo, hi]; CI at level 1 - alpha."""
    b, se, df = fit["slope"], fit["se"], fit["df"]
    q = _t_quantile(df, 1.0 - alpha / 2)
    ci = (b - q * se, b + q * se)
    if b > hi:
        stat = (b - hi) / se
    elif b < lo:
        stat = (b - lo) / se
    else:
        stat = 0.0
    p = float(min(1.0, 2.0 * _t_sf(df, abs(stat)))) if stat != 0.0 else 1.0
    return stat, p, ci


def _as_x(values, name: str, positive: bool) -> np.ndarray:
    x = _to_numpy(values, name)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if positive and (x <= 0).any():
        raise ValueError(f"{name} must be strictly positive to take logs")
    return x


def slope(T, errors, alpha: float = DEFAULT_ALPHA, expected: float | None = None,
          tolerance: float | None = None) -> TestResult:
    """Convergence rate as the slope of log(error) against log(T); H0: slope = ``expected``
    (or, with ``tolerance``, |slope - expected| <= tolerance).

    ``errors`` has shape (len(T),) or (seeds, len(T)); each seed (an independent run) is fitted by OLS
    and the estimate is the mean slope over seeds with a Student t interval (seeds - 1 degrees of
    freedom); with a single seed the interval uses the OLS standard error (len(T) - 2 degrees of
    freedom), which assumes independent Gaussian residuals in log space: along one trajectory they
    are usually correlated, so prefer several seeds. The standard error is floored at 1e-10 * max(1,
    |slope|) so that deterministic trajectories are not rejected because of rounding.

    Decision: ``interval`` is the two-sided (1 - alpha) confidence interval for the slope; passed iff it
    contains ``expected`` (or intersects [expected - tolerance, expected + tolerance]). ``statistic`` is
    the t statistic of the distance to that set. False-alarm rate: exact for Gaussian per-seed slopes
    (the per-seed OLS slope is a weighted average of the log-errors, hence near Gaussian), conservative
    with a tolerance (<= alpha, the two tails are used at alpha / 2 each), asymptotic otherwise. Without
    ``expected`` nothing is tested: passed is True and p_value None.
    """
    alpha = _check_alpha(alpha)
    x = np.log(_as_x(T, "T", positive=True))
    fit = _fit_slopes(x, errors, "errors")
    if expected is None:
        q = _t_quantile(fit["df"], 1.0 - alpha / 2)
        ci = (fit["slope"] - q * fit["se"], fit["slope"] + q * fit["se"])
        stat, p, passed = 0.0, None, True
    else:
        tol = 0.0 if tolerance is None else float(tolerance)
        if tol < 0:
            raise ValueError("tolerance must be >= 0")
        e = float(expected)
        stat, p, ci = _band_test(fit, e - tol, e + tol, alpha)
        passed = bool(p > alpha)
    details = _rate_details("slope", fit, ci, expected=expected, tolerance=tolerance)
    details["null"] = None if expected is None else ("slope = expected" if not tolerance else
                                                     "|slope - expected| <= tolerance")
    return TestResult(passed, float(stat), p, fit["slope"], (float(ci[0]), float(ci[1])), alpha,
                      fit["seeds"], details)


def slope_at_most(T, errors, max_slope: float, alpha: float = DEFAULT_ALPHA) -> TestResult:
    """One-sided rate check. H0: slope <= ``max_slope`` (the error decays at least as fast as claimed,
    e.g. ``max_slope=-1`` for O(1/T)).

    Same fit as :func:`slope`. Statistic t = (slope - max_slope) / se; reject (``passed=False``) iff the
    one-sided (1 - alpha) lower confidence bound of the slope exceeds ``max_slope``. False-alarm rate:
    exactly alpha at slope = max_slope for Gaussian per-seed slopes, asymptotic otherwise (less inside
    H0). ``interval`` = (lower, upper) one-sided (1 - alpha) bounds; ``details["confirmed"]`` is True
    when the upper bound is <= max_slope too.
    """
    alpha = _check_alpha(alpha)
    x = np.log(_as_x(T, "T", positive=True))
    fit = _fit_slopes(x, errors, "errors")
    return _at_most("slope_at_most", fit, float(max_slope), alpha, transform=None)


def _at_most(name: str, fit: dict, limit: float, alpha: float, transform) -> TestResult:
    b, se, df = fit["slope"], fit["se"], fit["df"]
    stat = (b - limit) / se if math.isfinite(limit) else -math.inf
    p = float(_t_sf(df, stat))
    q = _t_quantile(df, 1.0 - alpha)
    lcb, ucb = b - q * se, b + q * se
    passed = bool(p > alpha)
    details = _rate_details(name, fit, (lcb, ucb))
    details["one_sided"] = True
    details["confirmed"] = bool(ucb <= limit)
    if transform is None:
        details.update({"null": "slope <= max_slope", "max_slope": limit})
        est, interval = b, (lcb, ucb)
    else:
        details.update({"null": "r <= r_max", "r_max": float(transform(limit)), "log_r_interval": (lcb, ucb)})
        est, interval = float(transform(b)), (float(transform(lcb)), float(transform(ucb)))
    return TestResult(passed, float(stat), p, est, (float(interval[0]), float(interval[1])), alpha,
                      fit["seeds"], details)


def _rate_details(name: str, fit: dict, ci, expected=None, tolerance=None) -> dict:
    return {
        "test": name,
        "method": fit["method"],
        "se": fit["se"],
        "se_raw": fit["se_raw"],
        "df": fit["df"],
        "seeds": fit["seeds"],
        "points": fit["points"],
        "per_seed_slopes": fit["slopes"],
        "mean_intercept": float(fit["intercepts"].mean()),
        "expected": expected,
        "tolerance": tolerance,
        "ci": (float(ci[0]), float(ci[1])),
    }


def contraction(errors, alpha: float = DEFAULT_ALPHA, *, rounds=None, expected: float | None = None,
                tolerance: float | None = None) -> TestResult:
    """Per-round linear contraction factor r, from log(error_t) = a + t * log(r) fitted per seed.

    ``errors``: (rounds,) or (seeds, rounds); ``rounds`` (default 0, 1, 2, ...) are the round indices t.
    The inference is on log r (mean of per-seed OLS slopes, t interval over seeds, or the OLS standard
    error with one seed; see :func:`slope`) and mapped back by exp, so ``estimate`` = exp(mean log r)
    (the geometric mean of the per-seed factors; ``details["arithmetic_mean_r"]`` has the other) and
    ``interval`` = exp of the two-sided (1 - alpha) interval for log r. With ``expected`` (and
    optional ``tolerance`` on the r scale) H0: r = expected (|r - expected| <= tolerance); passed iff
    the interval meets it; false-alarm rate as for :func:`slope`. Without ``expected`` nothing is
    tested (passed True, p_value None).
    """
    alpha = _check_alpha(alpha)
    errors = _to_numpy(errors, "errors")
    fit = _fit_slopes(_rounds(rounds, errors), errors, "errors")
    if expected is None:
        q = _t_quantile(fit["df"], 1.0 - alpha / 2)
        ci = (fit["slope"] - q * fit["se"], fit["slope"] + q * fit["se"])
        stat, p, passed = 0.0, None, True
    else:
        e = float(expected)
        tol = 0.0 if tolerance is None else float(tolerance)
        if e <= 0 or tol < 0:
            raise ValueError("expected must be > 0 and tolerance >= 0")
        lo = math.log(e - tol) if e - tol > 0 else -math.inf
        stat, p, ci = _band_test(fit, lo, math.log(e + tol), alpha)
        passed = bool(p > alpha)
    details = _rate_details("contraction", fit, ci, expected=expected, tolerance=tolerance)
    details.update({"log_r": fit["slope"], "log_r_interval": (float(ci[0]), float(ci[1])),
                    "arithmetic_mean_r": float(np.exp(fit["slopes"]).mean()),
                    "null": None if expected is None else "r = expected (within tolerance)"})
    return TestResult(passed, float(stat), p, math.exp(fit["slope"]), (math.exp(ci[0]), math.exp(ci[1])),
                      alpha, fit["seeds"], details)


def contraction_at_most(errors, r_max: float, alpha: float = DEFAULT_ALPHA, *, rounds=None) -> TestResult:
    """One-sided linear-rate check. H0: r <= ``r_max`` (the error contracts at least as fast as claimed).

    Tested on the log scale: t = (mean log r - log r_max) / se, reject iff the one-sided (1 - alpha) lower
    confidence bound of log r exceeds log r_max. False-alarm rate as for :func:`slope_at_most`.
    ``estimate`` = exp(mean log r), ``interval`` = exp of the one-sided (1 - alpha) bounds;
    ``details["confirmed"]`` when the upper bound is <= r_max.
    """
    alpha = _check_alpha(alpha)
    if not float(r_max) > 0:
        raise ValueError("r_max must be > 0")
    errors = _to_numpy(errors, "errors")
    fit = _fit_slopes(_rounds(rounds, errors), errors, "errors")
    return _at_most("contraction_at_most", fit, math.log(float(r_max)), alpha, transform=math.exp)


def _rounds(rounds, errors) -> np.ndarray:
    if rounds is not None:
        return _as_x(rounds, "rounds", positive=False)
    k = np.shape(errors)[-1] if np.ndim(errors) else 0
    return np.arange(k, dtype=np.float64)


# ------------------------------------------------------------------------------------------ helpers


def bernoulli_rate_interval(k: int, n: int, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """Clopper-Pearson two-sided (1 - alpha) confidence interval for a Bernoulli rate from k successes
    in n trials (exact: coverage >= 1 - alpha for every true rate). Use it to check an observed
    false-alarm rate (the nominal alpha should not be below the lower end) or a power (the lower end
    should reach the required power).
    """
    alpha = _check_alpha(alpha)
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    lo = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, alpha / 2))
    hi = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - alpha / 2))
    return lo, hi


def samples_needed_for_bias(bias: float, sd: float, alpha: float = DEFAULT_ALPHA, power: float = 0.99, *,
                            d: int = 1, one_sided: bool = False) -> int:
    """Smallest n for which the t-test of the mean detects a mean shift ``bias`` of a variable with
    standard deviation ``sd`` with probability >= ``power`` (exact noncentral-t power under Gaussian
    data).

    The level per test matches the library: two-sided at ``alpha`` for d = 1; for d >= 2 coordinates,
    as in :func:`mean_zero` with its aggregate part, ``alpha / (2 d)`` per coordinate (the aggregate
    can only add power, so this is conservative); ``one_sided=True`` is :func:`upper_bound`'s test at
    level alpha.
    """
    from scipy import stats  # local: only this helper needs the noncentral t

    alpha = _check_alpha(alpha)
    if not 0 < power < 1:
        raise ValueError("power must be in (0, 1)")
    if bias == 0 or sd <= 0:
        raise ValueError("need bias != 0 and sd > 0")
    d = int(d)
    level = alpha if (d == 1 or one_sided) else alpha / (2 * d)
    eff = abs(float(bias)) / float(sd)

    def pw(n: int) -> float:
        df = n - 1
        nc = eff * math.sqrt(n)
        q = _t_quantile(df, 1 - level) if one_sided else _t_quantile(df, 1 - level / 2)
        if df < 2000:  # exact noncentral t (scipy's nct is unreliable for very large df)
            out = stats.nct.sf(q, df, nc) + (0.0 if one_sided else stats.nct.cdf(-q, df, nc))
            if math.isfinite(out):
                return float(out)
        return float(special.ndtr(nc - q) + (0.0 if one_sided else special.ndtr(-nc - q)))

    z = special.ndtri(1 - (level if one_sided else level / 2)) + special.ndtri(power)
    hi = max(2, int(math.ceil((z / eff) ** 2)))
    while pw(hi) < power:
        hi = int(hi * 1.25) + 1
    lo = 1  # pw(lo) < power or lo == 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid >= 2 and pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi
