"""One-sided test of a mean against a bound (:func:`upper_bound`), and the planning helpers: an exact interval for
an observed rate (:func:`bernoulli_rate_interval`) and the sample size a t-test needs (:func:`samples_needed_for_bias`)."""
from __future__ import annotations

import math

from scipy import special

from .core import (DEFAULT_ALPHA, ZERO_TOL, _GUARANTEE, TestResult, _check_alpha, _check_method, _combine_p, _hall,
                   _mean_interval, _ratio, _skewness, _t_quantile, _t_sf, _to_numpy)


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

    hoeff = _hoeffding(Z, mean, b, alpha, value_range, method)

    degenerate, t_plain, stat, p, lcb, ucb, guarantee = _decide_bound(Z, mean, se, df, skew, b, alpha, method,
                                                                       hoeff)
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


def _hoeffding(Z, mean: float, b: float, alpha: float, value_range, method: str) -> dict | None:
    """Hoeffding's distribution-free bounds of :func:`upper_bound` (None without ``value_range``)."""
    n = Z.size
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
    return hoeff


def _decide_bound(Z, mean: float, se: float, df: int, skew: float, b: float, alpha: float, method: str,
                 hoeff: dict | None):
    """(degenerate, plain t, statistic, p-value, lower bound, upper bound, guarantee) of :func:`upper_bound`."""
    n = Z.size
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
    return degenerate, t_plain, stat, p, lcb, ucb, guarantee


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
