"""The shared core of ``theory.stats``: the result type, input checks, Student-t helpers and Hall's (1992)
skewness correction of a studentised mean, used by every test module of the package."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

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


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b
