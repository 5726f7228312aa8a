"""theory.stats: calibration (false-alarm rate <= alpha under H0), power (planted defects are caught
with probability >= 0.99) and edge cases. Every simulation uses a fixed seed, so the tests are
deterministic.

Calibration runs at alpha = 0.05 (2000 repetitions) for speed; a rate passes when it is not
significantly above alpha (the lower end of its 99% Clopper-Pearson interval is <= alpha). For the
tests that are exact under Gaussian data the rate must also not be significantly below alpha (so the
check is not vacuous). Power runs at the default alpha = 1e-3, as the checks are deployed, and
requires the lower end of the 95% Clopper-Pearson interval of the detection rate to be >= 0.99.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from theory import stats as S
from theory.stats import TestResult, bernoulli_rate_interval
from theory.stats.means import _weighted_chi2_sf as weighted_chi2_sf

ALPHA = 0.05
REPS = 2000
T_GRID = 2.0 ** np.arange(10)  # 1, 2, 4, ..., 512


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    """Thousands of tiny matrix products: BLAS threads only add overhead (badly so on a busy machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(1):
        yield


def rejections(run, reps: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    return sum(not run(rng).passed for _ in range(reps))


def assert_calibrated(k: int, reps: int, alpha: float, exact: bool = False) -> None:
    lo, hi = bernoulli_rate_interval(k, reps, 0.01)
    rate = k / reps
    ci = f"99% CI {lo:.4f}-{hi:.4f}"
    assert lo <= alpha, f"false-alarm rate {rate:.4f} significantly above alpha={alpha} ({ci})"
    if exact:
        assert hi >= alpha, f"exact test too conservative: rate {rate:.4f} ({ci})"


def assert_power(detected: int, reps: int, power: float = 0.99) -> None:
    lo, _ = bernoulli_rate_interval(detected, reps, 0.05)
    assert lo >= power, f"detection rate {detected / reps:.4f} (95% CI lower end {lo:.4f}) below {power}"


def equicorrelated(rng, n: int, d: int, rho: float) -> np.ndarray:
    return math.sqrt(1 - rho) * rng.standard_normal((n, d)) + math.sqrt(rho) * rng.standard_normal((n, 1))


# ------------------------------------------------------------------------------------------ calibration

CALIBRATION = {
    # name: (run(rng) -> TestResult, exact under H0?)
    "mean_zero/t/gauss/d1/n20": (lambda r: S.mean_zero(r.standard_normal(20), ALPHA, method="t"), True),
    "mean_zero/gauss/d1/n20": (lambda r: S.mean_zero(r.standard_normal((20, 1)), ALPHA), False),
    "mean_zero/gauss/d20>n15": (lambda r: S.mean_zero(r.standard_normal((15, 20)), ALPHA), False),
    "mean_zero/equicorrelated0.6/d30/n40": (
        lambda r: S.mean_zero(equicorrelated(r, 40, 30, 0.6), ALPHA), False),
    "mean_zero/exponential/d5/n100": (
        lambda r: S.mean_zero(r.exponential(size=(100, 5)) - 1.0, ALPHA), False),
    "mean_equals/exponential-scales/d3/n60": (
        lambda r: S.mean_equals(r.exponential([0.5, 2.0, 7.0], size=(60, 3)), [0.5, 2.0, 7.0], ALPHA), False),
    "mean_equals/torch/gauss/d4/n30": (
        lambda r: S.mean_equals(torch.from_numpy(r.normal(3.0, 2.0, (30, 4))), 3.0, ALPHA), False),
    "upper_bound/t/gauss/n30": (
        lambda r: S.upper_bound(r.normal(1.0, 1.0, 30), 1.0, ALPHA, method="t"), True),
    "upper_bound/gauss/n30": (lambda r: S.upper_bound(r.normal(1.0, 1.0, 30), 1.0, ALPHA), False),
    "upper_bound/squared-errors/n100": (
        lambda r: S.upper_bound((r.standard_normal((100, 5)) ** 2).sum(1), 5.0, ALPHA), False),
    "upper_bound/left-skewed/n200": (lambda r: S.upper_bound(-r.exponential(size=200), -1.0, ALPHA), False),
    "upper_bound/hoeffding/bernoulli/n40": (
        lambda r: S.upper_bound(r.binomial(1, 0.3, 40).astype(float), 0.3, ALPHA, value_range=(0, 1),
                                method="hoeffding"), False),
    "slope/5seeds/gauss": (
        lambda r: S.slope(T_GRID, np.exp(r.normal(0, 0.3, (5, 10))) / T_GRID, ALPHA, expected=-1.0), True),
    "slope/1seed/gauss": (
        lambda r: S.slope(T_GRID, np.exp(r.normal(0, 0.3, 10)) / T_GRID, ALPHA, expected=-1.0), True),
    "slope/tolerance-edge": (
        lambda r: S.slope(T_GRID, np.exp(r.normal(0, 0.3, (5, 10))) * T_GRID ** -1.1, ALPHA, expected=-1.0,
                          tolerance=0.1), False),
    "slope_at_most/4seeds/skewed-noise": (
        lambda r: S.slope_at_most(T_GRID, np.exp(r.exponential(0.3, (4, 10))) / T_GRID, -1.0, ALPHA), False),
    "contraction/3seeds": (
        lambda r: S.contraction(0.9 ** np.arange(20) * np.exp(r.normal(0, 0.2, (3, 20))), ALPHA,
                                expected=0.9), True),
    "contraction_at_most/3seeds": (
        lambda r: S.contraction_at_most(0.9 ** np.arange(20) * np.exp(r.normal(0, 0.2, (3, 20))), 0.9, ALPHA),
        True),
}


@pytest.mark.parametrize("name", list(CALIBRATION))
def test_false_alarm_rate_at_most_alpha(name):
    run, exact = CALIBRATION[name]
    k = rejections(run, REPS, seed=sum(map(ord, name)))
    assert_calibrated(k, REPS, ALPHA, exact=exact)


def test_aggregate_part_is_calibrated_under_strong_correlation():
    """Most rejections of strongly correlated coordinates come from the aggregate part: its own rate
    must stay at its share alpha / 2 (a moment-matched chi-square would be ~3x too liberal at 1e-3)."""
    rng = np.random.default_rng(11)
    k = 0
    for _ in range(REPS):
        r = S.mean_zero(equicorrelated(rng, 60, 40, 0.8), ALPHA)
        assert r.details["aggregate"]["performed"]
        k += r.details["aggregate"]["p_value"] <= ALPHA / 2
    assert_calibrated(k, REPS, ALPHA / 2)


# ------------------------------------------------------------------------------------------ power


def test_samples_needed_for_bias():
    n = S.samples_needed_for_bias(0.01, 1.0, 1e-3, 0.99)
    z = sps.norm.isf(5e-4) + sps.norm.isf(0.01)
    assert abs(n - (z / 0.01) ** 2) / n < 0.01  # normal approximation for large n
    # exact noncentral-t power: enough at n, not at n - 1
    for bias, sd, kw in [(0.2, 1.0, {}), (0.02, 0.1, {"d": 4}), (5.0, 11.0, {"one_sided": True})]:
        n = S.samples_needed_for_bias(bias, sd, 1e-3, 0.99, **kw)
        assert n > S.samples_needed_for_bias(bias, sd, 1e-3, 0.9, **kw)
        assert n < S.samples_needed_for_bias(bias, sd, 1e-4, 0.99, **kw)
        assert S.samples_needed_for_bias(bias, 2 * sd, 1e-3, 0.99, **kw) > 3 * n
    with pytest.raises(ValueError):
        S.samples_needed_for_bias(0.0, 1.0)


def test_power_one_percent_bias():
    """An estimator whose mean is 1% off its closed-form expectation in one of 4 coordinates."""
    expected = np.array([2.0, 2.0, 2.0, 2.0])
    bias, sd = 0.01 * expected[0], 0.1
    n = S.samples_needed_for_bias(bias, sd, 1e-3, power=0.999, d=4)
    assert 500 < n < 3000
    rng = np.random.default_rng(21)
    reps, detected, located = 1000, 0, 0
    for _ in range(reps):
        X = rng.normal(expected + np.array([bias, 0, 0, 0]), sd, (n, 4))
        r = S.mean_equals(X, expected)
        detected += not r.passed
        located += r.details["worst_coordinate"] == 0
    assert_power(detected, reps)
    assert located >= 0.99 * reps


def test_power_one_percent_bias_skewed():
    """Same defect on exponential noise (skewed): the conservative t/Hall combination keeps the power."""
    bias, sd = 0.01, 0.05  # mean 1.01 claimed to be 1, exponential-shaped noise with sd 0.05
    n = S.samples_needed_for_bias(bias, sd, 1e-3, power=0.999)
    rng = np.random.default_rng(22)
    reps = 1000
    detected = sum(not S.mean_equals(1.0 + bias + sd * (rng.exponential(size=n) - 1.0), 1.0).passed
                   for _ in range(reps))
    assert_power(detected, reps)


def test_power_diffuse_bias_caught_by_aggregate():
    """A small bias in every coordinate (d = 200 > n = 50): invisible coordinate by coordinate after
    Holm, caught by the aggregate statistic."""
    rng = np.random.default_rng(23)
    reps, detected, by_coordinates = 300, 0, 0
    for _ in range(reps):
        r = S.mean_zero(rng.normal(0.15, 1.0, (50, 200)))
        detected += not r.passed
        by_coordinates += r.details["n_rejected"] > 0
    assert_power(detected, reps, power=0.98)  # 300 reps: CP lower end <= 0.988 even with no miss
    assert detected == reps
    assert by_coordinates < 0.05 * reps


def test_power_variance_ten_percent_above_bound():
    """E||g - E g||^2 claimed <= 50 (sigma^2 = 1 in 50 dimensions); the true variance is 10% larger."""
    dim, bound = 50, 50.0
    sd_z = 1.1 * math.sqrt(2 * dim)  # sd of 1.1 * chi2_50
    n = S.samples_needed_for_bias(0.1 * bound, sd_z, 1e-3, power=0.999, one_sided=True)
    rng = np.random.default_rng(24)
    reps, detected = 1000, 0
    for _ in range(reps):
        err = rng.normal(0.0, math.sqrt(1.1), (n, dim))
        detected += not S.upper_bound((err ** 2).sum(axis=1), bound).passed
    assert_power(detected, reps)


@pytest.mark.parametrize("seeds", [1, 5])
def test_power_slower_rate(seeds):
    """Errors decay like T^-0.5 while O(1/T) is claimed."""
    rng = np.random.default_rng(25 + seeds)
    reps = 1000
    shape = (seeds, T_GRID.size) if seeds > 1 else (T_GRID.size,)
    detected = sum(
        not S.slope_at_most(T_GRID, 3.0 * T_GRID ** -0.5 * np.exp(rng.normal(0, 0.3, shape)), -1.0).passed
        for _ in range(reps))
    assert_power(detected, reps)


def test_power_slower_contraction():
    rng = np.random.default_rng(27)
    reps = 1000
    detected = sum(
        not S.contraction_at_most(0.95 ** np.arange(40) * np.exp(rng.normal(0, 0.2, (5, 40))), 0.9).passed
        for _ in range(reps))
    assert_power(detected, reps)


# ------------------------------------------------------------------------------------------ behaviour


def test_result_is_frozen_and_json_serialisable():
    r = S.mean_zero(np.random.default_rng(0).standard_normal((30, 3)))
    assert isinstance(r, TestResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.passed = False
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert set(d) == {"passed", "statistic", "p_value", "estimate", "interval", "alpha", "n", "details"}
    assert d["details"]["multiplicity"] == "holm"
    assert isinstance(d["estimate"], list) and len(d["estimate"]) == 3
    assert r.passed == (r.p_value > r.alpha)


def test_mean_zero_reports_worst_coordinate_and_holm_rejections():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 10))
    X[:, [2, 7]] += [1.0, -0.6]
    r = S.mean_zero(X)
    assert not r.passed
    assert r.details["worst_coordinate"] == 2
    assert r.details["rejected_coordinates"] == [2, 7]
    assert r.statistic == pytest.approx(abs(X[:, 2].mean()) / (X[:, 2].std(ddof=1) / 20))
    lo, hi = r.interval
    assert lo < X[:, 2].mean() < hi and lo > 0


def test_torch_and_numpy_inputs_agree():
    X = np.random.default_rng(2).normal(0.1, 1.0, (50, 4))
    a = S.mean_zero(X).to_dict()
    b = S.mean_zero(torch.from_numpy(X)).to_dict()
    assert a == b
    z = torch.tensor([1.0, 2.0, 3.0, 2.5])
    assert S.upper_bound(z, 3.0).to_dict() == S.upper_bound(z.numpy(), 3.0).to_dict()


def test_one_sided_results_carry_confirmation():
    rng = np.random.default_rng(3)
    clear = S.upper_bound(rng.normal(0.5, 0.1, 200), 1.0)
    assert clear.passed and clear.details["confirmed"] and clear.interval[1] < 1.0
    close = S.upper_bound(rng.normal(0.99, 0.5, 20), 1.0)
    assert close.passed and not close.details["confirmed"]  # not rejected, but not shown either
    assert close.details["ratio"] == pytest.approx(close.estimate)
    hoeff = S.upper_bound(rng.uniform(0, 1, 100), 0.5, value_range=(0, 1))
    assert "hoeffding" in hoeff.details
    # the distribution-free bound is wider
    assert hoeff.details["hoeffding"]["upper_confidence_bound"] > hoeff.interval[1]


def test_deterministic_power_law_and_contraction_pass_exactly():
    """Identical seeds or a perfect power law: rounding must not cause a rejection."""
    errors = np.tile(2.0 / T_GRID, (3, 1))
    assert S.slope(T_GRID, errors, expected=-1.0).passed
    assert S.slope(T_GRID, errors[0], expected=-1.0).passed
    assert S.slope_at_most(T_GRID, errors, -1.0).passed
    assert not S.slope(T_GRID, errors, expected=-0.99).passed
    assert S.slope(T_GRID, errors, expected=-0.99, tolerance=0.02).passed
    geometric = 0.7 ** np.arange(30)
    r = S.contraction(geometric, expected=0.7)
    assert r.passed and r.estimate == pytest.approx(0.7)
    assert not S.contraction_at_most(geometric, 0.69).passed


def test_estimation_only_slope():
    r = S.slope(T_GRID, np.exp(np.random.default_rng(4).normal(0, 0.1, (4, 10))) / T_GRID)
    assert r.passed and r.p_value is None
    assert r.interval[0] < -1.0 < r.interval[1]
    json.dumps(r.to_dict(), allow_nan=False)


def test_bernoulli_rate_interval_matches_scipy_exact():
    for k, n in [(0, 10), (3, 10), (10, 10), (57, 2000), (1999, 2000)]:
        ci = sps.binomtest(k, n).proportion_ci(0.95, method="exact")
        assert bernoulli_rate_interval(k, n, 0.05) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError):
        bernoulli_rate_interval(5, 3)


def test_saddlepoint_tail_of_weighted_chi_square():
    # one weight split in two: the exact chi-square tail; the approximation errs on the safe side
    for df in (1, 5, 30):
        for p in (0.05, 5e-4):
            x = sps.chi2.isf(p, df)
            approx = weighted_chi2_sf(x, np.array([1.0, 1.0 + 1e-9]), np.array([df / 2, df / 2]))
            assert p <= approx <= 1.07 * p


# ------------------------------------------------------------------------------------------ edge cases


def test_zero_variance_coordinates():
    X = np.zeros((5, 3))
    X[:, 1] = [1.0, -1.0, 2.0, 0.5, -2.5]
    r = S.mean_zero(X)
    assert r.passed and r.details["degenerate_coordinates"] == 2 and r.details["tested_coordinates"] == 1
    X[:, 2] = 1e-6  # constant but not zero: deterministic violation
    r = S.mean_zero(X)
    assert not r.passed and r.p_value == 0.0 and r.statistic == math.inf
    assert r.details["degenerate_violations"] == [2] and r.details["worst_coordinate"] == 2
    assert json.loads(json.dumps(r.to_dict(), allow_nan=False))["statistic"] == "inf"
    assert S.mean_zero(np.full((4, 2), 1e-13)).passed  # within 1e-12
    assert S.mean_equals(np.full(3, 0.1 + 0.2), 0.3).passed  # rounding is not a violation
    assert not S.mean_equals(np.full(3, 0.3001), 0.3).passed
    assert S.upper_bound(np.full(10, 2.0), 2.0).passed
    assert not S.upper_bound(np.full(10, 2.0), 1.9).passed


def test_two_samples():
    r = S.mean_zero([[1.0, 0.5], [-1.0, 0.3]])
    assert r.n == 2 and r.details["df"] == 1 and not r.details["aggregate"]["performed"]
    assert r.passed  # t = 0 and 4: far from the t_1 critical value at alpha / 2 / 2
    assert S.upper_bound([1.0, 1.2], 1.0).passed
    assert not S.mean_zero([[5.0], [5.0 + 1e-9]]).passed  # tiny spread, clearly non-zero mean


@pytest.mark.parametrize("call", [
    lambda x: S.mean_zero(x),
    lambda x: S.mean_equals(x, 0.0),
    lambda x: S.upper_bound(x[:, 1], 1.0),
    lambda x: S.slope(T_GRID[:4], abs(x) + 1.0),
    lambda x: S.slope_at_most(T_GRID[:4], abs(x) + 1.0, -1.0),
    lambda x: S.contraction(abs(x) + 1.0),
    lambda x: S.contraction_at_most(abs(x) + 1.0, 0.9),
])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_input_is_rejected(call, bad):
    x = np.random.default_rng(5).standard_normal((6, 4))
    x[3, 1] = bad
    with pytest.raises(ValueError, match="non-finite"):
        call(x)
    with pytest.raises(ValueError, match="NaN" if math.isnan(bad) else "infinite"):
        call(torch.from_numpy(x))


def test_invalid_arguments():
    x = np.random.default_rng(6).standard_normal((10, 2))
    with pytest.raises(ValueError, match="at least 2"):
        S.mean_zero(x[:1])
    with pytest.raises(ValueError, match="alpha"):
        S.mean_zero(x, alpha=0.0)
    with pytest.raises(ValueError, match="match"):
        S.mean_equals(x, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="shape"):
        S.upper_bound(x, 1.0)
    with pytest.raises(ValueError, match="value_range"):
        S.upper_bound(x[:, 0], 1.0, value_range=(0.0, 0.5))
    with pytest.raises(ValueError, match="positive"):
        S.slope(T_GRID, -np.ones(10))
    with pytest.raises(ValueError, match="points"):
        S.slope(T_GRID, np.ones(9))
    with pytest.raises(ValueError, match="distinct"):
        S.slope([1.0, 2.0], [1.0, 0.5])
    with pytest.raises(ValueError, match="method"):
        S.mean_zero(x, method="z")


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 40), d=st.integers(1, 60), scale=st.sampled_from([1e-9, 1.0, 1e6]),
       shift=st.floats(-3, 3), seed=st.integers(0, 2 ** 32 - 1), skewed=st.booleans())
def test_mean_tests_never_crash_and_always_serialise(n, d, scale, shift, seed, skewed):
    rng = np.random.default_rng(seed)
    X = (rng.exponential(size=(n, d)) - 1.0) if skewed else rng.standard_normal((n, d))
    X = scale * (X + shift)
    for r in (S.mean_zero(X), S.mean_equals(X, scale * shift), S.upper_bound(X[:, 0], scale * shift)):
        d_ = json.loads(json.dumps(r.to_dict(), allow_nan=False))
        assert d_["passed"] == (r.p_value > r.alpha)
        assert 0.0 <= r.p_value <= 1.0
        lo, hi = r.interval
        assert lo <= hi
