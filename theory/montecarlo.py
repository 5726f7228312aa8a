"""Monte-Carlo tests of a compression operator's moments (``algorithms/compress/``): draws of C(x),
unbiasedness with its power (the smallest detectable bias), and the mean squared error against a bound or a
closed form. Used by the quantizer claims (``theory.operator_checks``, ``theory/claims/lfl``, ``qsgd``,
``fedbat``) and the compression claims.

Monte-Carlo machinery
---------------------
Draws are ``op.compress(x, CounterRng(key))`` for consecutive int64 keys, vectorised with
``torch.func.vmap`` in chunks and converted to float64 after decoding. Each configuration (operator,
parameters, input vector) has its own key range derived from ``ctx.seed`` and the configuration's name,
so results are reproducible and configurations are independent.

Unbiasedness (:func:`unbiasedness_test`). The n draws are averaged in batches of m (``B = n / m`` rows):
batch means are i.i.d. with the same mean as one draw, so :func:`theory.stats.mean_zero` on the rows
``batch_mean - target`` tests E[C(x)] = target with n - 1 replaced by B - 1 degrees of freedom, with
less skewness and a (B, d) instead of (n, d) matrix. Coordinates whose draws are all equal are handled
by a calibrated zero-variance rule: every operator tested here is a two-point variable per coordinate
(the two neighbouring levels, spacing h); if all n draws of a coordinate sit on the lower level although
P(upper) = p, the observed deviation is p h and this happens with probability (1 - p)^n <= exp(-n p).
Rejecting a constant coordinate only when its deviation exceeds ``h log(1/a) / n`` therefore has
false-alarm rate <= a per coordinate. The level is split: 0.9 alpha for ``mean_zero`` (its coordinate
and aggregate parts), 0.1 alpha / d for each coordinate's zero-variance rule (total <= alpha). (The
library's default rule, deviation > 1e-12, is a deterministic rejection whenever a rare level is never
drawn, e.g. p = 1e-5 with n = 1e4, which happens with probability 0.9.)

Power (the HOLDS side). Not rejecting is evidence only if the test could have seen a bias. For a mean
test we report ``eps_99``: the smallest relative bias E[C(x)] = (1 +- eps) x, on the random
(non-constant) coordinates, that the test detects with probability 0.99, found by simulating the test's
decision under that alternative (:func:`bias_resolution`; it accounts for the power the conservative
t/Hall combination gives up on skewed coordinates, which a plain normal-theory value overstates by up
to 15%). Checked against the real test (QSGD s = 1, s = 4 with outliers, LFL q = 2 with outliers,
binarization): planted biases of the eps found at simulated power 0.99 were detected in 548 of 560 runs
(97.9%), slightly optimistic, so eps_99 is computed at simulated power 0.995 (SIM_POWER); the planted
tests in tests/test_calibration.py check that it is not optimistic. A deterministic coordinate with a
bias above the tolerance is caught with certainty, so it is not counted. For a 1-sparse x (x_j = 0 on
every random coordinate) the alternative is the offset eps ||x||_2 / sqrt(d) on each random coordinate,
a bias of norm ~ eps ||x||_2. HOLDS needs eps_99 at most the stated resolution: 3% in the full report,
10% in quick mode.
"""
from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from scipy import optimize, special
from scipy import stats as sps

from algorithms import compress as C
from algorithms.core import CounterRng
from theory import stats
from theory.evidence import compact

__all__ = ["ALPHA", "DEG_SHARE", "SIM_POWER", "MonteCarlo", "bias_resolution", "draw_chunks", "lattice_spacing",
           "monte_carlo", "unbiasedness_test", "variance_bound_test", "variance_identity_test"]

ALPHA = 1e-3  # every claim's false-alarm rate
DEG_SHARE = 0.1  # share of a mean test's level spent on the zero-variance rule
Z99 = float(special.ndtri(0.99))
_CHUNK_ENTRIES = 1_000_000  # entries (draws x d) per vmap call


def _key0(seed: int, stream: str) -> int:
    """First CounterRng key of a configuration: 11 bits of seed, 20 bits of the stream's hash, 32 bits
    of draw index (so up to 4e9 draws per configuration without overlap)."""
    sid = zlib.crc32(stream.encode()) & 0xFFFFF
    return ((int(seed) % (1 << 11)) << 52) | (sid << 32)


def draw_chunks(op: C.Transform, x: torch.Tensor, n: int, key0: int, multiple: int = 1):
    """Yield n independent decoded draws C(x) as float64 arrays of shape (chunk, d), from CounterRng
    keys key0, key0 + 1, ..., via ``torch.func.vmap``. Chunk sizes are multiples of ``multiple``."""
    d = int(x.shape[-1])
    chunk = max(multiple, (_CHUNK_ENTRIES // max(d, 1)) // multiple * multiple)
    f = torch.func.vmap(lambda k: op.compress(x, CounterRng(k)))
    with torch.no_grad():
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            keys = torch.arange(start, stop, dtype=torch.int64) + key0
            yield f(keys).to(torch.float64).numpy()


@dataclass(frozen=True)
class MonteCarlo:
    """n draws of C(x), summarised: ``means`` (B, d) are means of consecutive batches of ``batch``
    draws, ``sq_err`` (n,) the per-draw ||C(x) - x||^2 (float64 after decoding)."""

    n: int
    batch: int
    means: np.ndarray
    sq_err: np.ndarray
    seconds: float

    @property
    def rows(self) -> int:
        return self.means.shape[0]


_CACHE: dict = {}


def monte_carlo(op: C.Transform, x: torch.Tensor, n: int, *, seed: int, stream: str, batch: int = 1,
                cache: bool = True) -> MonteCarlo:
    """Draw n = B * batch copies of C(x) (see :func:`draw_chunks`); cached per (op, x, n, batch, seed,
    stream) within the process so that e.g. an unbiasedness and a variance claim share draws."""
    if n % batch:
        raise ValueError(f"n = {n} is not a multiple of batch = {batch}")
    x = x.detach().to(torch.float32).reshape(-1)
    key = (repr(op), type(op).__name__, x.numpy().tobytes(), n, batch, seed, stream)
    if cache and key in _CACHE:
        return _CACHE[key]
    t0 = time.perf_counter()
    x64 = x.to(torch.float64).numpy()
    means, sq = [], []
    for c in draw_chunks(op, x, n, _key0(seed, stream), multiple=batch):
        sq.append(((c - x64) ** 2).sum(axis=1))
        means.append(c.reshape(-1, batch, c.shape[1]).mean(axis=1))
    out = MonteCarlo(n, batch, np.concatenate(means), np.concatenate(sq), time.perf_counter() - t0)
    if cache:
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = out
    return out


def lattice_spacing(op: C.Transform, x: torch.Tensor) -> float:
    """Distance between the two values a coordinate of C(x) can take (0 for deterministic operators),
    from the operators' definitions: LFL (x_max - x_min)/q, QSGD ||x||_2/s, binarization 2 alpha."""
    x = x.detach().to(torch.float64).reshape(-1)
    if x.numel() == 0:
        return 0.0
    name = getattr(op, "name", "")
    inner = getattr(op, "inner", None)
    if name not in ("lfl", "qsgd", "fedpaq", "binarize") and inner is not None:
        return lattice_spacing(inner, x)
    if name == "lfl":
        a = x.abs()
        return float(a.max() - a.min()) / op.q
    if name in ("qsgd", "fedpaq"):
        return float(torch.linalg.vector_norm(x)) / op.s
    if name == "binarize":
        alpha = float(x.abs().max()) if op.alpha is None else float(np.float32(op.alpha))
        return 2.0 * alpha
    return 0.0


def _zero_tol(spacing: float, n: int, d: int, alpha_deg: float) -> float:
    """Tolerance of the calibrated zero-variance rule (module docstring): h log(d / alpha_deg) / n."""
    if spacing <= 0:
        return stats.ZERO_TOL
    return max(stats.ZERO_TOL, spacing * math.log(d / alpha_deg) / n)


def _hall(t: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Hall's (1992) transform g(t) = t + a (1 + 2 t^2) + (4/3) a^2 t^3, as in theory.stats.mean_zero."""
    t2 = t * t
    return t + a + t2 * (2.0 * a + (4.0 / 3.0) * a * a * t)


SIM_POWER = 0.995  # simulated power behind "eps_99" (margin for the simulation's plug-in approximations)


def bias_resolution(D: np.ndarray, scale: np.ndarray, res: stats.TestResult, tol: float,
                    power: float = SIM_POWER, reps: int = 1000, seed: int = 12345) -> dict:
    """Smallest eps for which a bias +-eps * scale_j on the random coordinates of the rows ``D`` (the
    tested differences) is detected with probability >= ``power`` by the test ``res`` (a mean_zero
    result on ``D``), both signs.

    Computed by simulating the test's decision under the alternative (``reps`` draws, common random
    numbers, bisection on eps): the coordinates' t statistics are N(eps scale_j / se_j, 1) (se_j from
    ``D``); each becomes ``mean_zero``'s conservative statistic min(|t_j|, |g_j|), g_j Hall's transform
    with the skewness of column j of ``D`` (the larger of the two p-values, normal approximation of the
    t with B - 1 >= 250 degrees of freedom); the test rejects if max_j of it exceeds the Bonferroni t
    quantile at the coordinate level, or if the sum of their squares exceeds the aggregate's critical
    value (the scaled chi-square with the mean and variance of the null spectrum ``mean_zero`` reports:
    c chi2_nu, c = tr(R^2)/k, nu = k^2/tr(R^2)). A plain normal-theory value (noncentral chi-square,
    no skewness) is reported as ``eps_normal_theory``; it is optimistic for skewed coordinates (the
    conservative combination gives up power there), which the simulation accounts for. Deterministic
    coordinates are excluded (a bias there is caught exactly when it exceeds the zero-variance tolerance).

    The simulation plugs in the estimated se_j, skewness and null spectrum as if known; planted biases of
    the eps found at simulated power 0.99 were detected in 548 of 560 runs (97.9%), so the default
    simulated power is SIM_POWER = 0.995, which brings the real detection rate to about 0.99
    (tests/test_calibration.py::test_reported_resolution_is_not_optimistic).
    """
    B = D.shape[0]
    rnd = (D.max(axis=0) - D.min(axis=0)) > tol
    k = int(rnd.sum())
    if k == 0:
        return {"eps_99": 0.0, "random_coordinates": 0,
                "note": "every coordinate is deterministic: checked exactly (within the tolerance)"}
    Dr = D[:, rnd]
    se = Dr.std(axis=0, ddof=1) / math.sqrt(B)
    w = scale[rnd] / se  # signed shift of t_j per unit eps
    c = Dr - Dr.mean(axis=0)
    m2 = (c * c).mean(axis=0)
    skew = np.where(m2 > 0, (c ** 3).mean(axis=0) / np.where(m2 > 0, m2, 1.0) ** 1.5, 0.0)
    a = skew / (6.0 * math.sqrt(B))
    det = res.details
    a_coord = det["alpha_coordinates"]
    q_coord = float(special.stdtrit(B - 1, 1 - a_coord / (2 * max(det["tested_coordinates"], 1))))
    agg = det.get("aggregate") or {}
    a_agg = det.get("alpha_aggregate", 0.0) if agg.get("performed") else 0.0
    crit = math.inf
    if a_agg:
        tr2 = float(agg.get("tr_R2", k))
        crit = tr2 / k * float(sps.chi2.isf(a_agg, k * k / tr2))
    if not np.any(w != 0):
        return {"eps_99": math.inf, "random_coordinates": k, "note": "the alternative has no shift"}
    noise = np.random.default_rng(seed).standard_normal((reps, k))

    def pw(eps: float, sign: float) -> float:
        t = noise + sign * eps * w
        z = np.minimum(np.abs(t), np.abs(_hall(t, a)))
        rej = z.max(axis=1) > q_coord
        if a_agg:
            rej |= (z * z).sum(axis=1) > crit
        return float(rej.mean())

    # normal theory (no skewness): the best coordinate, or the aggregate as a noncentral chi-square
    zp = float(special.ndtri(power))
    eps_nt = (q_coord + zp) / float(np.abs(w).max())
    if a_agg:
        lam = _lambda_99(k, crit, power)
        eps_nt = min(eps_nt, math.sqrt(lam / float(np.sum(w * w))))
    out = {"random_coordinates": k, "eps_normal_theory": eps_nt, "simulation_reps": reps}
    worst = 0.0
    for sign in (1.0, -1.0):
        hi = _smallest_detected(lambda eps, sign=sign: pw(eps, sign), eps_nt, power)
        out["eps_99_plus" if sign > 0 else "eps_99_minus"] = hi
        worst = max(worst, hi)
    out["eps_99"] = worst
    return out


def _smallest_detected(pw: Callable[[float], float], start: float, power: float) -> float:
    """The smallest eps with ``pw(eps) >= power`` to a relative precision of 2^-8 (``pw`` increasing): doubled
    from ``start`` until reached (or past 1e6), then bisected."""
    lo, hi = 0.0, start
    while pw(hi) < power:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            break
    for _ in range(8):  # bracket [lo, hi] with hi / lo <= 2: relative precision 2^-8
        mid = 0.5 * (lo + hi)
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _lambda_99(k: int, crit: float, power: float = 0.99) -> float:
    """Noncentrality lambda with P(chi2_k(lambda) > crit) = power."""
    def f(lam: float) -> float:
        return float(sps.ncx2.sf(crit, k, lam)) - power

    hi = 10.0 + crit
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, 1e-9, hi, xtol=1e-6))


def unbiasedness_test(mc: MonteCarlo, target: np.ndarray, spacing: float, alpha: float = ALPHA,
                      scale: np.ndarray | None = None, power: bool = True) -> dict:
    """Test E[C(x)] = target from ``mc`` (batch means): ``mean_zero`` on ``means - target`` at level
    (1 - DEG_SHARE) alpha with the calibrated zero-variance tolerance (level DEG_SHARE alpha in total).

    Returns {"passed", "p_value", "result" (compact dict), "resolution" (bias_resolution for a relative
    bias eps * scale, default scale = target; skipped with ``power=False``), "zero_tol", "max_abs_t"}.
    """
    target = np.asarray(target, dtype=np.float64)
    d = target.size
    D = mc.means - target
    tol = _zero_tol(spacing, mc.n, d, DEG_SHARE * alpha)
    res = stats.mean_zero(D, alpha=(1 - DEG_SHARE) * alpha, zero_tol=tol)
    if not power:
        reso = None
    elif scale is None:
        rnd = (D.max(axis=0) - D.min(axis=0)) > tol
        scale = target
        if not np.any(target[rnd] != 0):  # e.g. a 1-sparse x: the random coordinates have x_j = 0
            scale = np.full(d, float(np.linalg.norm(target)) / math.sqrt(max(d, 1)))
        reso = bias_resolution(D, np.asarray(scale, np.float64), res, tol)
    else:
        reso = bias_resolution(D, np.asarray(scale, np.float64), res, tol)
    return {"passed": res.passed, "p_value": res.p_value, "max_abs_t": float(res.statistic),
            "zero_tol": tol, "draws": mc.n, "batch": mc.batch, "rows": mc.rows,
            "resolution": reso, "result": compact(res.to_dict())}


def variance_bound_test(sq_err: np.ndarray, bound: float, alpha: float = ALPHA) -> dict:
    """``upper_bound`` of the per-draw squared errors against ``bound`` (H0: E||C(x) - x||^2 <= bound).
    VIOLATED if rejected; HOLDS needs the upper confidence bound <= bound (``confirmed``)."""
    res = stats.upper_bound(sq_err, bound, alpha=alpha)
    return {"passed": res.passed, "confirmed": bool(res.details["confirmed"]), "p_value": res.p_value,
            "mean": float(res.estimate), "bound": float(bound), "ratio": res.details["ratio"],
            "ucb_ratio": res.details["ucb_ratio"], "result": compact(res.to_dict())}


def variance_identity_test(sq_err: np.ndarray, expected: float, alpha: float = ALPHA,
                           rel_resolution: float = 0.01) -> dict:
    """``mean_equals`` of the per-draw squared errors against a closed form (two-sided). ``confirmed``
    when the (1 - alpha) interval lies within expected * (1 -+ rel_resolution)."""
    res = stats.mean_equals(sq_err, expected, alpha=alpha)
    lo, hi = res.interval
    e = float(expected)
    conf = bool(lo >= e * (1 - rel_resolution) - 1e-12 * max(1, e)
                and hi <= e * (1 + rel_resolution) + 1e-12 * max(1, e))
    return {"passed": res.passed, "confirmed": conf, "p_value": res.p_value, "mean": float(res.estimate),
            "expected": e, "ratio": float(res.estimate) / e if e else math.nan,
            "interval_ratio": [lo / e, hi / e] if e else None, "result": compact(res.to_dict())}
