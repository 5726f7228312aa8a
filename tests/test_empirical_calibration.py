"""Calibration of the sequential verdicts WITH the stopping rule in place (theory/empirical/tracker.py on
theory/stats/sequential.py): simulated papers whose per-seed differences are Gaussian or skewed, at the claim's
boundary, at 0 and at +-the negligible margin, looked at after 5, 10, 20 and 40 seeds and stopped as soon as
decided. The measured rate of each wrong verdict must be at most its nominal level (0.05 per paper and kind of
verdict) up to the simulation's own error: with R = 20,000 simulated papers the Monte Carlo standard error of a
rate near 0.05 is sqrt(0.05 * 0.95 / R) = 0.0015, and a rate passes when it is at most 0.05 + 3 * that error.
The measured rates are pinned (to within 4 standard errors) so that a change of the procedure shows.

Planted defects: testing at every look at the full level (no error spending) and leaving out the skewness
allowance must both fail this calibration. Power: a planted difference of 0.5, 1 and 2 standard deviations is
decided with the pinned expected number of seeds.

The per-seed differences have standard deviation 1 (so margins are in units of the spread): negligible margin
delta = 0.5, non-inferiority margin m = 0.5.
"""
import math

import numpy as np
import pytest

from theory.empirical.tracker import CONTRADICTED, NEGLIGIBLE, SUPPORTED, Spec, Tracker
from theory.stats.sequential import Design

ALPHA = 0.05
LOOKS = (5, 10, 20, 40)
R = 20_000
DELTA = 0.5
MC = math.sqrt(ALPHA * (1 - ALPHA) / R)  # 0.0015


def _gauss(rng, shape):
    return rng.standard_normal(shape)


def _exp(rng, shape):  # centred exponential: skewness +2
    return rng.exponential(1.0, shape) - 1.0


def _lognormal(rng, shape, s=0.55):  # centred, unit variance, skewness +2.0
    m, v = math.exp(s * s / 2), (math.exp(s * s) - 1) * math.exp(s * s)
    return (rng.lognormal(0.0, s, shape) - m) / math.sqrt(v)


DISTS = {"gaussian": _gauss, "exponential": _exp, "-exponential": lambda r, s: -_exp(r, s),
         "lognormal": _lognormal, "-lognormal": lambda r, s: -_lognormal(r, s)}


def simulate(specs: list[Spec], k_claims: int, dist: str, mu, design: Design | None = None, reps: int = R,
             seed: int = 0) -> Tracker:
    """``reps`` simulated papers: comparison j's per-seed values are mu[j] + noise (sd 1), looked at after each of
    LOOKS seeds, through the library's Tracker (stopping as it decides)."""
    rng = np.random.default_rng(seed)
    mu = np.broadcast_to(np.asarray(mu, float), (len(specs),))
    x = DISTS[dist](rng, (len(specs), reps, LOOKS[-1])) + mu[:, None, None]
    tr = Tracker(specs, [design or Design(LOOKS)] * k_claims, ALPHA, reps)
    for k, n in enumerate(LOOKS):
        xs = x[:, :, :n]
        tr.look(k, xs.mean(-1), xs.std(-1, ddof=1), [n] * len(specs))
        if tr.done:
            break
    return tr


def rate(tr: Tracker, verdict: int, any_claim: bool = False) -> float:
    hit = tr.verdict == verdict
    return float((hit.any(axis=0) if any_claim else hit[0]).mean())


def calibrated(r: float, level: float = ALPHA) -> bool:
    return r <= level + 3 * math.sqrt(level * (1 - level) / R)


SUP0 = [Spec(0, "superior", 0.0, DELTA)]
NONINF = [Spec(0, "noninferior", -0.5, 0.0)]

# (name, specs, claims, true mean, the wrong verdicts there) -> pinned rates per distribution
SCENARIOS = [
    ("superiority at its boundary 0", SUP0, 1, 0.0, (SUPPORTED, CONTRADICTED)),
    ("superiority at +delta", SUP0, 1, DELTA, (NEGLIGIBLE,)),
    ("superiority at -delta", SUP0, 1, -DELTA, (NEGLIGIBLE,)),
    ("non-inferiority at its boundary -m", NONINF, 1, -0.5, (SUPPORTED, CONTRADICTED)),
]
PINNED = {  # measured with seed 0: {scenario: {distribution: (rate of each wrong verdict)}}
    "superiority at its boundary 0": {"gaussian": (0.0069, 0.0070), "exponential": (0.0003, 0.0507),
                                      "-exponential": (0.0507, 0.0003), "lognormal": (0.0010, 0.0353),
                                      "-lognormal": (0.0353, 0.0010)},
    "superiority at +delta": {"gaussian": (0.0056,), "exponential": (0.0396,), "-exponential": (0.0001,),
                              "lognormal": (0.0302,), "-lognormal": (0.0005,)},
    "superiority at -delta": {"gaussian": (0.0056,), "exponential": (0.0001,), "-exponential": (0.0396,),
                              "lognormal": (0.0005,), "-lognormal": (0.0302,)},
    "non-inferiority at its boundary -m": {"gaussian": (0.0069, 0.0070), "exponential": (0.0003, 0.0515),
                                           "-exponential": (0.0515, 0.0003), "lognormal": (0.0010, 0.0358),
                                           "-lognormal": (0.0358, 0.0010)},
}


@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("name, specs, k, mu, wrong", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_each_wrong_verdict_at_most_its_level_under_optional_stopping(name, specs, k, mu, wrong, dist):
    tr = simulate(specs, k, dist, mu)
    rates = tuple(rate(tr, v) for v in wrong)
    assert all(calibrated(r) for r in rates), (name, dist, rates)
    assert rates == pytest.approx(PINNED[name][dist], abs=4 * MC), (name, dist, rates)


@pytest.mark.parametrize("dist", ["gaussian", "exponential", "-exponential"])
def test_holm_keeps_the_rate_per_paper_over_several_claims(dist):
    """Four claims, all at their boundary: the chance that ANY is wrongly SUPPORTED (or CONTRADICTED) stays at
    the level; four independent tests at 0.05 each would give about 0.19."""
    specs = [Spec(i, "superior", 0.0, DELTA) for i in range(4)]
    tr = simulate(specs, 4, dist, 0.0, seed=1)
    for v in (SUPPORTED, CONTRADICTED):
        assert calibrated(rate(tr, v, any_claim=True)), (dist, v, rate(tr, v, any_claim=True))
    tr = simulate(specs, 4, dist, DELTA, seed=2)
    assert calibrated(rate(tr, NEGLIGIBLE, any_claim=True))
    # NEGLIGIBLE's family holds only the claims that can be negligible (here 2 of 4)
    mixed = specs[:2] + [Spec(2, "noninferior", -0.5, 0.0), Spec(3, "noninferior", -0.5, 0.0)]
    tr = simulate(mixed, 4, dist, [DELTA, DELTA, 0.0, 0.0], seed=6)
    assert calibrated(rate(tr, NEGLIGIBLE, any_claim=True)), rate(tr, NEGLIGIBLE, any_claim=True)


def test_a_claim_of_five_comparisons_keeps_its_level():
    """"A beats each of 5 baselines" with every difference at 0: wrong SUPPORTED needs all five (an
    intersection, no correction), wrong CONTRADICTED any one (Bonferroni over the five)."""
    specs = [Spec(0, "superior", 0.0, DELTA) for _ in range(5)]
    tr = simulate(specs, 1, "gaussian", 0.0, seed=3)
    assert calibrated(rate(tr, SUPPORTED)) and calibrated(rate(tr, CONTRADICTED))
    tr = simulate(specs, 1, "gaussian", [DELTA, 3, 3, 3, 3], seed=4)  # one advantage exactly at +delta
    assert calibrated(rate(tr, NEGLIGIBLE)) and rate(tr, CONTRADICTED) == 0.0


class NaiveDesign(Design):
    """Planted defect: every look tested at the full level (no error spending)."""

    def nominal(self, history, level):
        return np.full(len(history), level)


def test_planted_naive_procedures_fail_the_calibration():
    # testing at every look at the full level, plain t: about 0.12 wrong SUPPORTED at the boundary
    naive = simulate(SUP0, 1, "gaussian", 0.0, design=NaiveDesign(LOOKS, skew=0.0))
    assert not calibrated(rate(naive, SUPPORTED)), rate(naive, SUPPORTED)
    # error spending without the skewness allowance: right-skewed differences are wrongly CONTRADICTED
    noskew = simulate(SUP0, 1, "exponential", 0.0, design=Design(LOOKS, skew=0.0))
    assert not calibrated(rate(noskew, CONTRADICTED)), rate(noskew, CONTRADICTED)
    # the allowance at the skewness itself (2) is not enough either: hence 3 (theory/stats/sequential.py)
    two = simulate(SUP0, 1, "exponential", 0.0, design=Design(LOOKS, skew=2.0))
    assert not calibrated(rate(two, CONTRADICTED)), rate(two, CONTRADICTED)


@pytest.mark.parametrize("mu, supported, seeds", [(2.0, 1.0, 12.0), (1.0, 1.0, 22.6), (0.5, 0.69, 37.1)])
def test_a_planted_difference_is_decided_with_the_expected_seeds(mu, supported, seeds):
    """A true advantage of mu standard deviations: SUPPORTED with the pinned probability, after the pinned mean
    number of seeds (large effects stop at 5 or 10 seeds, small ones get up to 40); never CONTRADICTED."""
    tr = simulate(SUP0, 1, "gaussian", mu, reps=5000, seed=5)
    assert rate(tr, SUPPORTED) == pytest.approx(supported, abs=0.03)
    assert float(tr.n_used[0].mean()) == pytest.approx(seeds, abs=0.8)
    assert rate(tr, CONTRADICTED) == 0.0
