"""Tests of a mean vector: :func:`mean_zero` and :func:`mean_equals` (per-coordinate t / Hall tests with Holm's
step-down procedure, and a diagonal aggregate test whose null distribution is a weighted chi-square)."""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from .core import (DEFAULT_ALPHA, ZERO_TOL, _SPECTRUM_BUDGET, _GUARANTEE, TestResult, _capped, _check_alpha,
                   _check_method, _combine_p, _hall, _mean_interval, _skewness, _t_quantile, _t_sf, _to_numpy)


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


def _mean_inputs(samples, expected, zero_tol):
    """(X as (n, d), expected broadcast to (d,), whether the input was 1-D) with the checks of _mean_test."""
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
    return X, E, scalar_input


def _coordinate_tests(D, tested, deg_bad, method):
    """Per-coordinate plain t, Hall-corrected statistic, Hall coefficient, skewness and p-value."""
    n, d = D.shape
    df = n - 1
    mean = D.mean(axis=0)
    sd = D.std(axis=0, ddof=1)
    se = sd / math.sqrt(n)
    t = np.zeros(d)    # plain t statistics mean_j / se_j
    h = np.zeros(d)    # Hall-corrected statistics
    a = np.zeros(d)    # Hall's coefficients skewness_j / (6 sqrt(n))
    skew = np.zeros(d)
    p = np.ones(d)
    if tested.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            t[tested] = mean[tested] / se[tested]
        skew[tested] = _skewness(D[:, tested])
        a[tested] = skew[tested] / (6.0 * math.sqrt(n))
        h[tested] = _hall(t[tested], a[tested])
        p[tested] = _combine_p(2.0 * _t_sf(df, np.abs(t[tested])), 2.0 * _t_sf(df, np.abs(h[tested])), method)
    t[deg_bad] = h[deg_bad] = np.inf
    p[deg_bad] = 0.0
    return se, t, h, a, skew, p


def _holm(p, tested, alpha_coord):
    """Holm's step-down over the tested coordinates: (rejected coordinates, Bonferroni p-value)."""
    k = int(tested.size)
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
    return rejected, p_bonf


def _mean_test(samples, expected, alpha, method, zero_tol, aggregate, name) -> TestResult:
    alpha = _check_alpha(alpha)
    _check_method(method)
    X, E, scalar_input = _mean_inputs(samples, expected, zero_tol)
    n, d = X.shape
    D = X - E
    mean_x = X.mean(axis=0)
    mean = D.mean(axis=0)
    tol = zero_tol * np.maximum(1.0, np.abs(E))
    degenerate = (D.max(axis=0) - D.min(axis=0)) <= tol
    deg_bad = degenerate & (np.abs(mean) > tol)
    tested = np.flatnonzero(~degenerate)
    k = int(tested.size)
    df = n - 1
    se, t, h, a, skew, p = _coordinate_tests(D, tested, deg_bad, method)

    use_agg = (k >= 2 and n >= 10) if aggregate is None else bool(aggregate and k >= 2)
    alpha_coord = alpha / 2 if use_agg else alpha
    rejected, p_bonf = _holm(p, tested, alpha_coord)  # part 1: Holm over the tested coordinates
    agg: dict = {"performed": bool(use_agg)}  # part 2: aggregate
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
    details = _mean_details(name, method, d, k, degenerate, deg_bad, alpha, alpha_coord, use_agg, p_bonf, rejected,
                            worst, mean, se, t, h, p, mdb, skew, n, agg)
    if name == "mean_equals":
        details["expected"] = float(E[0]) if scalar_input else E
    estimate = float(mean_x[0]) if scalar_input else mean_x
    return TestResult(passed, stat, float(p_total), estimate, interval, alpha, n, details)


def _mean_details(name, method, d, k, degenerate, deg_bad, alpha, alpha_coord, use_agg, p_bonf, rejected, worst,
                  mean, se, t, h, p, mdb, skew, n, agg) -> dict:
    max_skew = float(np.abs(skew).max())
    return {
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
        "df": n - 1,
        "guarantee": _GUARANTEE[method] + " per coordinate (Holm: conservative across coordinates); "
                     "aggregate: asymptotic",
    }

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
