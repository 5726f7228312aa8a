"""Calibration of the sequential verdicts WITH the stopping rule in place (theory/empirical/tracker.py on
theory/stats/sequential.py, built as the verdicts build it: ``judge.tracker_for``): simulated papers whose per-seed
differences are Gaussian or skewed (centred exponential and lognormal, skewness +-2), at a claim's boundary, at 0
and at +-the negligible margin, looked at after each look of a design and stopped as soon as decided.

* Every look design a claim declares is simulated (read from the declarations: each paper's scales and stages,
  ``family.family_of``, each claim's looks up to its max_seeds, ``judge.claim_looks``; and the full scale's single
  look of its suite's seeds), for one comparison at the paper's whole alpha (0.05, the largest level any comparison
  is tested at) with 100,000 simulated papers per scenario: each wrong verdict's rate must be at most 0.05 + 3
  Monte Carlo standard errors (sqrt(0.05 * 0.95 / 1e5) = 0.0007, so 0.0521).
* Each paper's whole family (every scale and stage at its share of alpha, Holm within each, every claim at its
  boundary) must keep each kind of wrong verdict at 0.05 per paper (20,000 simulated papers: 0.05 + 3 * 0.0015).
* Planted defects that must fail: a lenient boundary (critical values 15% lower) for every declared design; the
  allowance of 0.3.0 (g = 3) on the designs of one look of 5 seeds and of looks 5, 10 (0.055); testing every look
  at the full level; no skewness allowance; one family per scale and stage at 0.05 each (0.3.0's family).
* The 4-look design's rates are pinned (to within 4 standard errors) so that a change of the procedure shows, and
  the seeds a planted difference needs are pinned (power).

The per-seed differences have standard deviation 1 (margins in units of the spread): negligible margin
delta = 0.5, non-inferiority margin m = 0.5. CPU: about 40 s in all.
"""
import math

import numpy as np
import pytest

from theory import empirical
from theory.empirical import paths
from theory.empirical.family import family_of
from theory.empirical.judge import claim_looks, tracker_for
from theory.empirical.run import claims_at
from theory.empirical.scale import paper_scales
from theory.empirical.tracker import CONTRADICTED, NEGLIGIBLE, SUPPORTED, Spec, Tracker
from theory.stats.sequential import Design

ALPHA = 0.05
LOOKS = (5, 10, 20, 40)
R = 20_000
R_DESIGN = 100_000
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


def run_looks(tr: Tracker, x: np.ndarray, looks: tuple) -> Tracker:
    """Feed per-seed values x (comparisons, reps, seeds) to ``tr`` look by look, stopping when all is decided."""
    for k, n in enumerate(looks):
        xs = x[:, :, :n]
        tr.look(k, xs.mean(-1), xs.std(-1, ddof=1), [n] * x.shape[0])
        if tr.done:
            break
    return tr


def simulate(specs: list[Spec], k_claims: int, dist: str, mu, design: Design | None = None, reps: int = R,
             seed: int = 0, looks: tuple = LOOKS, alpha: float = ALPHA) -> Tracker:
    """``reps`` simulated papers: comparison j's per-seed values are mu[j] + noise (sd 1), looked at after each of
    ``looks`` seeds, through the library's Tracker (stopping as it decides)."""
    rng = np.random.default_rng(seed)
    mu = np.broadcast_to(np.asarray(mu, float), (len(specs),))
    x = DISTS[dist](rng, (len(specs), reps, looks[-1])) + mu[:, None, None]
    return run_looks(Tracker(specs, [design or Design(looks)] * k_claims, alpha, reps), x, looks)


def rate(tr: Tracker, verdict: int, any_claim: bool = False) -> float:
    hit = tr.verdict == verdict
    return float((hit.any(axis=0) if any_claim else hit[0]).mean())


def calibrated(r: float, level: float = ALPHA, reps: int = R) -> bool:
    return r <= level + 3 * math.sqrt(level * (1 - level) / reps)


SUP0 = [Spec(0, "superior", 0.0, DELTA)]
NONINF = [Spec(0, "noninferior", -0.5, 0.0)]

# (name, specs, claims, true mean, the wrong verdicts there) -> pinned rates per distribution
SCENARIOS = [
    ("superiority at its boundary 0", SUP0, 1, 0.0, (SUPPORTED, CONTRADICTED)),
    ("superiority at +delta", SUP0, 1, DELTA, (NEGLIGIBLE,)),
    ("superiority at -delta", SUP0, 1, -DELTA, (NEGLIGIBLE,)),
    ("non-inferiority at its boundary -m", NONINF, 1, -0.5, (SUPPORTED, CONTRADICTED)),
]
PINNED = {  # the 4-look design, measured with seed 0: {scenario: {distribution: (rate of each wrong verdict)}}
    "superiority at its boundary 0": {"gaussian": (0.0054, 0.0054), "exponential": (0.0002, 0.0432),
                                      "-exponential": (0.0432, 0.0002), "lognormal": (0.0006, 0.0300),
                                      "-lognormal": (0.0300, 0.0006)},
    "superiority at +delta": {"gaussian": (0.0041,), "exponential": (0.0338,), "-exponential": (0.0001,),
                              "lognormal": (0.0257,), "-lognormal": (0.0003,)},
    "superiority at -delta": {"gaussian": (0.0043,), "exponential": (0.0001,), "-exponential": (0.0338,),
                              "lognormal": (0.0003,), "-lognormal": (0.0257,)},
    "non-inferiority at its boundary -m": {"gaussian": (0.0054, 0.0054), "exponential": (0.0002, 0.0437),
                                           "-exponential": (0.0437, 0.0002), "lognormal": (0.0007, 0.0302),
                                           "-lognormal": (0.0302, 0.0007)},
}


@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("name, specs, k, mu, wrong", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_each_wrong_verdict_at_most_its_level_under_optional_stopping(name, specs, k, mu, wrong, dist):
    tr = simulate(specs, k, dist, mu)
    rates = tuple(rate(tr, v) for v in wrong)
    assert all(calibrated(r) for r in rates), (name, dist, rates)
    assert rates == pytest.approx(PINNED[name][dist], abs=4 * MC), (name, dist, rates)


# ------------------------------------------------------------------------------------- the declared designs


def declared_units(version: str | None = None) -> list[tuple]:
    """(paper module, family, unit, the claims judged there) for every CPU scale and stage the papers declare under
    the protocol of claims ``version`` (default: this code's; an earlier protocol's declarations are kept in a
    module's ``EARLIER``). A full scale given a share by ``ALPHA_SPLIT`` is simulated by the full scales' test."""
    out = []
    with paths.judging(version or paths.version()):
        for name in empirical.PAPERS:
            mod = empirical.paper(name)
            fam = family_of(mod)
            scales = {sc.name: sc for sc in paper_scales(mod, "cpu") + paper_scales(mod, "replication")}
            out += [(mod, fam, u, claims_at(scales[u.scale], mod.CLAIMS)) for u in fam.units if u.scale in scales]
    return out


def declared_designs() -> dict:
    """{looks: [where declared]}: the design of every claim at every declared scale and stage, under every protocol
    this code judges (``PROTOCOL_VERSIONS``), as the judge builds it (``claim_looks``: the unit's looks up to the
    claim's max_seeds)."""
    out = {}
    for version in empirical.PROTOCOL_VERSIONS:
        for _, _, u, claims in declared_units(version):
            for c in claims:
                out.setdefault(claim_looks(c, u.looks), []).append(f"{c.id} at {u.scale} ({version})")
    return out


DESIGNS = declared_designs()


def full_scale_designs() -> dict:
    """{looks: [paper]}: the full scale's single look of its suite's seeds (``run.run_full``)."""
    from benchmark.campaign import suite

    out = {}
    for name in empirical.PAPERS:
        full = empirical.paper(name).FULL
        seeds = {c.experiment.seed for c in suite.load_suite(full.suite).cells}
        seeds = seeds & set(full.seeds) if full.seeds is not None else seeds
        out.setdefault((max(2, len(seeds)),), []).append(f"{name} at full")
    return out


def worst_rates(looks: tuple, design: Design | None = None, dists=tuple(DISTS), reps: int = R_DESIGN) -> dict:
    """{(scenario, distribution, verdict): rate} of one comparison at level 0.05 under ``looks``."""
    out = {}
    for i, (name, specs, k, mu, wrong) in enumerate(SCENARIOS):
        for dist in dists:
            tr = simulate(specs, k, dist, mu, design=design or Design(looks), reps=reps, seed=100 + i, looks=looks)
            out.update({(name, dist, v): rate(tr, v) for v in wrong})
    return out


def _over(rates: dict, reps: int = R_DESIGN) -> dict:
    return {k: r for k, r in rates.items() if not calibrated(r, reps=reps)}


def test_the_declared_designs_are_read_from_the_declarations():
    """Today's: looks 5, 10 (the first stages), 5, 10, 20 (FedBAT's and 0.4.0's GradMA), a single look of 5 (the 4x
    scales), 5, 10, 20, 40 (0.5.0's GradMA study); whatever is declared when the tests run, under every protocol this
    code judges, is what the next tests simulate."""
    assert (5, 10, 20, 40) in DESIGNS and (5, 10, 20) in DESIGNS
    assert DESIGNS and all(isinstance(n, int) for looks in DESIGNS for n in looks)
    every = {claim_looks(c, u.looks) for v in empirical.PROTOCOL_VERSIONS for _, _, u, claims in declared_units(v)
             for c in claims}
    assert set(DESIGNS) == every


@pytest.mark.slow
@pytest.mark.parametrize("looks", sorted(DESIGNS), ids=lambda lk: "looks-" + "-".join(map(str, lk)))
def test_every_declared_design_holds_its_level(looks):
    over = _over(worst_rates(looks))
    assert not over, (looks, DESIGNS[looks], over)


@pytest.mark.slow
def test_the_full_scales_single_looks_hold_their_level():
    for looks, where in full_scale_designs().items():
        over = _over(worst_rates(looks))
        assert not over, (looks, where, over)


class Lenient(Design):
    """Planted defect: critical values 15% lower than the rule's (a lenient boundary)."""

    def crits(self, history, level):
        return 0.85 * super().crits(history, level)


@pytest.mark.slow
@pytest.mark.parametrize("looks", sorted(DESIGNS), ids=lambda lk: "looks-" + "-".join(map(str, lk)))
def test_a_lenient_boundary_is_caught_for_every_declared_design(looks):
    assert _over(worst_rates(looks, Lenient(looks), dists=("exponential", "-exponential"))), looks


def test_the_allowance_before_0_4_0_fails_the_small_designs():
    """g = 3 (the allowance until 0.4.0) gave about 0.055 wrong CONTRADICTED verdicts for one comparison under
    skewness 2 with one look of 5 seeds and with looks 5, 10; g = 3.4 holds (theory/stats/sequential.py)."""
    for looks in ((5,), (5, 10)):
        old = simulate(NONINF, 1, "exponential", -0.5, design=Design(looks, skew=3.0), reps=R_DESIGN, looks=looks)
        assert not calibrated(rate(old, CONTRADICTED), reps=R_DESIGN), (looks, rate(old, CONTRADICTED))
        assert rate(old, CONTRADICTED) == pytest.approx(0.055, abs=0.002)
        new = simulate(NONINF, 1, "exponential", -0.5, design=Design(looks), reps=R_DESIGN, looks=looks)
        assert calibrated(rate(new, CONTRADICTED), reps=R_DESIGN), (looks, rate(new, CONTRADICTED))


# ------------------------------------------------------------------------------------- one family per paper


def simulate_paper(units: list, dist: str, kind: int, seed: int = 0, reps: int = R, level=None) -> float:
    """The rate of papers with some wrong ``kind`` verdict over all their ``units`` (family, unit, claims), every
    comparison at its boundary (for NEGLIGIBLE, the comparisons with a margin at +delta with sd delta / 2, which
    puts TOST's upper test at its boundary), each unit judged at ``level(fam, unit)`` (default: its share)."""
    rng = np.random.default_rng(seed)
    wrong = np.zeros(reps, dtype=bool)
    for fam, u, claims in units:
        tr = tracker_for(claims, u.looks, level(fam, u) if level else fam.alpha_at(u.scale), reps)
        neg = [kind == NEGLIGIBLE and s.negligible > 0 for s in tr.specs]
        mu = np.array([s.negligible if n else s.boundary for s, n in zip(tr.specs, neg)])
        sd = np.array([s.negligible / 2 if n else 1.0 for s, n in zip(tr.specs, neg)])
        x = DISTS[dist](rng, (len(tr.specs), reps, u.looks[-1])) * sd[:, None, None] + mu[:, None, None]
        wrong |= (run_looks(tr, x, u.looks).verdict == kind).any(axis=0)
    return float(wrong.mean())


def _paper_units(name: str, version: str | None = None) -> list:
    return [(fam, u, claims) for mod, fam, u, claims in declared_units(version) if mod.PAPER == name]


#: (claims version, paper): this code's declarations of every paper, and an earlier protocol's where a paper keeps
#: its own (``EARLIER``)
PAPER_PROTOCOLS = [(paths.version(), n) for n in empirical.PAPERS] + [
    (v, n) for v in empirical.PROTOCOL_VERSIONS for n in empirical.PAPERS
    if empirical.PROTOCOLS[v] in getattr(empirical.paper(n), "EARLIER", {})]


@pytest.mark.slow
@pytest.mark.parametrize("version,name", PAPER_PROTOCOLS)
def test_each_kind_of_wrong_verdict_at_most_alpha_per_paper_over_all_its_scales_and_stages(version, name):
    units = _paper_units(name, version)
    for kind in (SUPPORTED, CONTRADICTED, NEGLIGIBLE):
        for dist in ("gaussian", "exponential", "-exponential"):
            r = simulate_paper(units, dist, kind, seed=kind)
            assert calibrated(r), (name, kind, dist, r)


@pytest.mark.slow
def test_one_family_per_scale_and_stage_is_caught():
    """Planted defect: 0.3.0's family, each scale and stage a Holm family at the whole 0.05, breaks the paper's
    rate wherever a paper is judged at more than one scale or stage (wrong CONTRADICTED under skewness 2, where
    each unit comes near its level)."""
    several = [n for n in empirical.PAPERS if len(_paper_units(n)) > 1]
    assert several  # the declarations have papers at several scales and stages
    for name in several:
        rates = [simulate_paper(_paper_units(name), d, CONTRADICTED, level=lambda fam, u: fam.alpha)
                 for d in ("exponential", "-exponential")]
        assert not calibrated(max(rates)), (name, rates)


# ------------------------------------------------------------------------------------- Holm, planted, power


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
    # the allowance at the skewness itself (2) is not enough either (theory/stats/sequential.py, step 3)
    two = simulate(SUP0, 1, "exponential", 0.0, design=Design(LOOKS, skew=2.0))
    assert not calibrated(rate(two, CONTRADICTED)), rate(two, CONTRADICTED)


@pytest.mark.parametrize("mu, supported, seeds", [(2.0, 1.0, 12.8), (1.0, 1.0, 23.8), (0.5, 0.66, 37.7)])
def test_a_planted_difference_is_decided_with_the_expected_seeds(mu, supported, seeds):
    """A true advantage of mu standard deviations: SUPPORTED with the pinned probability, after the pinned mean
    number of seeds (large effects stop at 5 or 10 seeds, small ones get up to 40); never CONTRADICTED."""
    tr = simulate(SUP0, 1, "gaussian", mu, reps=5000, seed=5)
    assert rate(tr, SUPPORTED) == pytest.approx(supported, abs=0.03)
    assert float(tr.n_used[0].mean()) == pytest.approx(seeds, abs=0.8)
    assert rate(tr, CONTRADICTED) == 0.0
