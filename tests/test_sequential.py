"""theory/stats/sequential.py: the error-spending boundaries against published values and against simulation,
their consistency across looks (a look's boundary never depends on later looks), the Student-t critical values
with the skewness allowance, and repeated p-values that invert the critical values."""
import math

import numpy as np
import pytest
from scipy import special, stats

from theory.stats import sequential as S


def test_obrien_fleming_type_boundaries_match_published_values():
    """Lan-DeMets O'Brien-Fleming-type spending, 4 equally spaced looks, one-sided 0.025: 4.333, 2.963, 2.359,
    2.014 (as tabulated by the R package gsDesign for sfLDOF)."""
    assert S.z_boundaries((1, 2, 3, 4), 0.025, "obf") == pytest.approx([4.3326, 2.9631, 2.3590, 2.0141], abs=2e-4)


def test_one_look_is_the_fixed_sample_test():
    assert S.z_boundaries((7,), 0.05)[0] == pytest.approx(special.ndtri(0.95), abs=1e-12)
    d = S.Design((5,), skew=0.0)
    assert d.crit((5,), 0.05) == pytest.approx(stats.t.isf(0.05, 4), rel=1e-10)
    a = S.SKEW_ALLOWANCE / (6 * math.sqrt(5))
    q = stats.t.isf(0.05, 4)
    assert S.Design((5,)).crit((5,), 0.05) == pytest.approx(q + a * (2 * q * q + 1), rel=1e-10)


def test_two_looks_spend_exactly_against_the_bivariate_normal():
    z = S.z_boundaries((10, 40), 0.05, "pocock")
    rho = math.sqrt(10 / 40)
    cdf = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf(z)
    assert 1 - cdf == pytest.approx(0.05, abs=2e-6)
    assert special.ndtr(-z[0]) == pytest.approx(S.spend("pocock", 0.05, 0.25), rel=1e-9)


def test_crossing_probabilities_follow_the_spending_function():
    """A Brownian motion observed at 5, 10, 20, 40 seeds crosses the boundaries with the cumulative
    probabilities the spending function promises (Monte Carlo, 400,000 paths: error < 2e-4)."""
    looks = (5, 10, 20, 40)
    rng = np.random.default_rng(0)
    incr = rng.standard_normal((400_000, 4)) * np.sqrt(np.diff((0,) + looks))
    z = np.cumsum(incr, axis=1) / np.sqrt(looks)
    for kind in ("pocock", "obf"):
        c = S.z_boundaries(looks, 0.05, kind)
        crossed = np.maximum.accumulate(z >= c, axis=1).mean(axis=0)
        assert crossed == pytest.approx(S.spend(kind, 0.05, np.array(looks) / 40), abs=1.5e-3)


def test_a_look_does_not_depend_on_later_looks():
    """The boundaries of the first k looks are the same whether or not later looks have happened (planted
    defect: fractions taken against the last look analysed instead of the design's maximum, which made
    the first look spend everything)."""
    d = S.Design((5, 10, 20, 40))
    full = d.crits((5, 10, 20, 40), 0.01)
    for k in range(1, 4):
        assert d.crits((5, 10, 20, 40)[:k], 0.01) == pytest.approx(full[:k], rel=1e-9)
    assert d.nominal((5,), 0.05)[0] == pytest.approx(S.spend("pocock", 0.05, 5 / 40), rel=1e-9)
    # failed runs left 9 seeds instead of 10: the spending follows the information actually observed
    assert d.nominal((5, 9), 0.05).sum() < d.nominal((5, 10), 0.05).sum()
    # the last planned look spends what is left even when it has fewer seeds than planned
    assert d.nominal((5, 10, 20, 37), 0.05)[-1] > d.nominal((5, 10, 20, 40), 0.05)[-1] * 0.9


def test_critical_values_decrease_with_the_level_and_repeated_p_inverts_them():
    d = S.Design((5, 10, 20, 40))
    hist = (5, 10, 20)
    levels = [1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.2]
    crits = [d.crit(hist, a) for a in levels]
    assert all(a > b for a, b in zip(crits, crits[1:]))
    for a in (1e-4, 3e-3, 0.02, 0.1):
        t = d.crit(hist, a)
        assert d.repeated_p(t, hist) == pytest.approx(a, rel=0.02)
    assert d.repeated_p(-1.0, hist) == 1.0 and d.repeated_p(math.inf, hist) == 0.0


def test_designs_reject_bad_looks():
    for looks in ((), (1, 5), (5, 5), (10, 5)):
        with pytest.raises(ValueError):
            S.Design(looks)
    with pytest.raises(ValueError, match="history"):
        S.Design((5, 10)).crit((5, 10, 20), 0.05)
    with pytest.raises(ValueError, match="spending"):
        S.Design((5,), spending="linear")


def test_seeds_to_reach():
    n = S.seeds_to_reach(1.0, 1.0, 0.05)
    t = math.sqrt(n)
    assert t >= S.allowance(stats.t.isf(0.05, n - 1), n)
    assert S.allowance(stats.t.isf(0.05, n - 2), n - 1) > math.sqrt(n - 1)  # the smallest such n
    assert S.seeds_to_reach(0.5, 1.0, 0.05) > n
    assert S.seeds_to_reach(0.0, 1.0, 0.05) is None and S.seeds_to_reach(1.0, 0.0, 0.05) is None
