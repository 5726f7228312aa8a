"""Shared verdict helpers: how the claims turn calibrated tests (``theory.stats``) into verdicts.

* :func:`verdict_from`: one test and its power (confirming confidence bound) -> HOLDS / VIOLATED / INCONCLUSIVE;
* :func:`combine`: (passed, confirmed) per sub-test -> verdict (any rejection VIOLATED, all confirmed HOLDS);
* :func:`bound_informative`: slack of a bound check and whether an algorithm that never moves would pass it too
  (the UNINFORMATIVE verdict, DESIGN.md "Theory checks");
* :func:`rate_window`, :func:`slope_summary`, :func:`rate_verdict`: O(1/T)-type rate checks (log-log slopes over
  seeds); :func:`bound_verdict`: a bound checked point by point (Bonferroni);
* :func:`diverged`: the INCONCLUSIVE outcome of runs that diverged;
* :func:`markov_fisher`: a distribution-free test that a non-negative mean exceeds a bound (Markov's inequality
  per independent run, combined by Fisher's method), for bounds that a fluctuating floor exceeds by orders of
  magnitude with few runs.

The verdict vocabulary itself (PREMISE FAILS, NOT REPRODUCED, and the hypotheses a VIOLATED must verify) is in
``theory.outcome``.
"""
from __future__ import annotations

import numpy as np

from theory import stats
from theory.outcome import HOLDS, INCONCLUSIVE, VIOLATED, Outcome


def bound_informative(measured, bound, frozen) -> dict:
    """Whether a bound check can tell the algorithm from a frozen one (DESIGN.md, Theory checks).

    ``measured``, ``bound``: the measured quantity and its bound at the checked points (same shape);
    ``frozen``: what an algorithm that never moves would measure at the same points (e.g. the initial gap
    at every horizon), under the same constants. Returns the slack (bound / measured: its minimum over the
    points, where the bound is tightest), the frozen reference's slack, and ``informative``: True when the
    frozen reference exceeds the bound somewhere (the check then fails for it)."""
    m, b, f = (np.asarray(v, dtype=float) for v in (measured, bound, frozen))
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = b / m
        fslack = b / f
    return {"slack_bound_over_measured_min": float(np.nanmin(slack)),
            "slack_bound_over_measured_max": float(np.nanmax(slack)),
            "frozen_reference_slack_min": float(np.nanmin(fslack)),
            "frozen_passes": bool(np.all(f <= b)), "informative": bool(np.any(f > b))}


def verdict_from(test_passed: bool, confirmed: bool | None = None) -> str:
    """Map a calibrated test to a verdict: rejection -> VIOLATED; no rejection and a confirming
    confidence bound (power) -> HOLDS; no rejection without it -> INCONCLUSIVE."""
    if not test_passed:
        return VIOLATED
    if confirmed is None or confirmed:
        return HOLDS
    return INCONCLUSIVE

def combine(parts: list[tuple[bool, bool]]) -> str:
    """(passed, confirmed) per sub-test -> verdict: any rejection VIOLATED, all confirmed HOLDS."""
    if not all(p for p, _ in parts):
        return VIOLATED
    return HOLDS if all(c for _, c in parts) else INCONCLUSIVE


def rate_window(rounds: int, points: int = 16) -> np.ndarray:
    """Log-spaced distinct rounds in [rounds/10, rounds] for the slope fits."""
    lo = max(1, rounds // 10)
    return np.unique(np.round(np.geomspace(lo, rounds, points)).astype(int))


def rate_verdict(results: list[stats.TestResult]) -> str:
    """VIOLATED if any one-sided rate test rejects; HOLDS if all are confirmed; else INCONCLUSIVE."""
    if any(not r.passed for r in results):
        return VIOLATED
    return HOLDS if all(r.details.get("confirmed") for r in results) else INCONCLUSIVE


def bound_verdict(samples: np.ndarray, alpha: float) -> tuple[str, dict]:
    """Per-index ``upper_bound`` tests of E[Z_t] <= 0 from samples Z (runs, points) = measured - bound,
    Bonferroni over the points. Returns the verdict and a summary (worst point's test)."""
    n_pts = samples.shape[1]
    tests = [stats.upper_bound(samples[:, j], 0.0, alpha / n_pts) for j in range(n_pts)]
    failed = [j for j, t in enumerate(tests) if not t.passed]
    unconfirmed = [j for j, t in enumerate(tests) if not t.details["confirmed"]]
    worst = int(np.argmax([t.details["t"] if np.isfinite(t.details["t"]) else -np.inf for t in tests]))
    verdict = VIOLATED if failed else (HOLDS if not unconfirmed else INCONCLUSIVE)
    return verdict, {
        "points_tested": n_pts,
        "alpha_per_point": alpha / n_pts,
        "rejected_points": failed[:20],
        "unconfirmed_points": unconfirmed[:20],
        "worst_point": worst,
        "worst_test": tests[worst].to_dict(),
    }


def slope_summary(x, errors, max_slope: float, alpha: float) -> tuple[stats.TestResult, dict]:
    t = stats.slope_at_most(x, errors, max_slope, alpha)
    free = stats.slope(x, errors, alpha)
    return t, {
        "slope": t.estimate,
        "one_sided_interval": t.interval,
        "two_sided_ci": free.interval,
        "per_seed_slopes": np.asarray(t.details["per_seed_slopes"]).tolist(),
        "max_slope": max_slope,
        "p_value": t.p_value,
        "passed": t.passed,
        "confirmed": t.details["confirmed"],
        "seeds": t.n,
    }


def markov_fisher(samples, bound: float, alpha: float) -> dict:
    """Test H0: E[X] <= ``bound`` for a non-negative X from independent ``samples`` (one per independent run).

    Under H0, Markov's inequality gives P(X >= x) <= bound / x, so p_i = min(1, bound / X_i) is a valid
    (super-uniform) p-value for each run; Fisher's statistic -2 sum_i ln p_i is then stochastically below
    chi^2 with 2n degrees of freedom, and its tail is a conservative p-value for any distribution of X. It needs
    no normality, so it suits a fluctuating floor with few runs, at the price of power: it rejects only when the
    runs sit far above the bound (with 3 runs at level 1e-3, about 60x on average).

    Returns {"p_value", "rejected" (at ``alpha``), "statistic", "per_run_p", "ratio_over_bound" (X_i / bound),
    "n", "alpha", "method"}."""
    from scipy import stats as st

    x = np.asarray(samples, dtype=float).reshape(-1)
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x < 0) or not bound > 0:
        raise ValueError("markov_fisher needs finite non-negative samples and a positive bound")
    with np.errstate(divide="ignore"):
        p = np.minimum(1.0, bound / x)
    stat = float(-2.0 * np.log(np.maximum(p, 1e-300)).sum())
    pv = float(st.chi2.sf(stat, 2 * x.size))
    return {"p_value": pv, "rejected": bool(pv <= alpha), "statistic": stat, "per_run_p": p.tolist(),
            "ratio_over_bound": (x / bound).tolist(), "n": int(x.size), "alpha": alpha,
            "method": "Markov per run (P(X >= x) <= E[X]/x), Fisher's combination (chi^2 with 2n df); "
                      "conservative for any distribution of X >= 0"}


def diverged(runs) -> Outcome | None:
    """INCONCLUSIVE when a run (``theory.runs.Run``: ``status``, ``params``) diverged, else None."""
    bad = [i for i, r in enumerate(runs) if r.status != "ok" or not np.isfinite(r.params).all()]
    if bad:
        return Outcome(
            INCONCLUSIVE,
            "diverged",
            {"diverged_runs": bad},
            "a run diverged (non-finite parameters); no statistics computed",
        )
    return None
