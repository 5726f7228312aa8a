"""Convergence-rate tests: the slope of log(error) against log(T) (:func:`slope`, :func:`slope_at_most`) and the
per-round contraction factor of a linear rate (:func:`contraction`, :func:`contraction_at_most`)."""
from __future__ import annotations

import math

import numpy as np

from .core import DEFAULT_ALPHA, _SLOPE_SE_FLOOR, TestResult, _check_alpha, _t_quantile, _t_sf, _to_numpy


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
