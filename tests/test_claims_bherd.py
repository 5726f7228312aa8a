"""BHerd claims (theory/claims/bherd/): quick runs, the exact random-subset reference, the printed bounds."""
import itertools
import math

import numpy as np
import pytest
import torch

from algorithms.core import herding
from theory import stats
from theory.claims import bherd as B


@pytest.mark.parametrize("tau,k", [(5, 2), (6, 3), (4, 1), (5, 5)])
def test_random_subset_reference_is_exact_by_enumeration(tau, k):
    Z = torch.randn(tau, 3, generator=torch.Generator().manual_seed(tau * 10 + k), dtype=torch.float64)
    mu = Z.mean(0)
    vals = [float(((Z[list(S)].mean(0) - mu) ** 2).sum()) for S in itertools.combinations(range(tau), k)]
    assert np.mean(vals) == pytest.approx(B.random_subset_mse(Z, k), rel=1e-12, abs=1e-15)
    sigma2 = float(((Z - mu) ** 2).sum(1).mean())
    if k == 1:
        assert B.random_subset_mse(Z, 1) == pytest.approx(sigma2) == pytest.approx(B.with_replacement_mse(Z, 1))
    if k == tau:
        assert B.random_subset_mse(Z, k) == 0.0
    with pytest.raises(ValueError):
        B.random_subset_mse(Z, tau + 1)


def test_project_random_subset_is_uniform_over_pairs():
    tau, k, draws = 4, 2, 6000
    Z = torch.zeros(tau, 1)
    valid = torch.ones(tau, dtype=torch.bool)
    U = torch.rand(draws, tau, generator=torch.Generator().manual_seed(0))
    masks = torch.vmap(lambda u: herding.random_subset(Z, valid, k, u))(U)
    assert bool((masks.sum(1) == k).all())
    pairs = {}
    for m in masks.tolist():
        key = tuple(i for i, b in enumerate(m) if b)
        pairs[key] = pairs.get(key, 0) + 1
    assert len(pairs) == 6
    for c in pairs.values():  # 1/6 each; 5 standard deviations of a binomial count
        assert abs(c - draws / 6) < 5 * math.sqrt(draws * (1 / 6) * (5 / 6))


def test_herding_on_a_hand_case_and_subset_mse():
    Z = torch.tensor([[1.0], [-1.0], [3.0], [-3.0]], dtype=torch.float64)
    sel, order = herding.greedy_herding(Z, torch.ones(4, dtype=torch.bool), 2)
    assert order.tolist()[:2] == [0, 1]  # the smallest centred vector, then the one cancelling it
    assert B.subset_mse(Z, sel) == 0.0
    assert B.random_subset_mse(Z, 2) == pytest.approx(5.0 / 2 * 2 / 3)


def test_printed_bounds_by_hand():
    F0, a, eta, tau, T, vs2, L, gamma = 2.0, 0.5, 0.01, 10, 20, 0.3, 4.0, 0.1
    assert B.theorem1_rhs(F0, a, eta, tau, T, vs2) == pytest.approx(
        4 * 2.0 / (0.5 * 0.01 * 10 * 20) + 0.3 / 20 + 0.3 / 800)
    assert B.theorem2_rhs(F0, a, eta, tau, T, vs2, L, gamma) == pytest.approx(
        0.3 / (4 * 20 * 0.5 * 0.01 * 4 * 10 * 0.1) + 2.0 / (20 * 0.5 * 0.01 * 4 * 10) + 0.3 / (4 * 20 * 4))
    c = B.theorem_conditions(eta=0.01, beta=0.5, L=4.0, tau=10, T=20, alpha=0.5)
    assert c["eta_max_lemma2"] == pytest.approx(math.sqrt(3) * 0.5 / 240)
    assert c["T_max_thm1"] == pytest.approx(0.25 / (24 * 1e-4 * 16 * 100))
    assert c["T_max_thm2"] == pytest.approx(0.25 / (24 * 0.5 * 1e-6 * 64 * 1000))
    assert not c["eta_ok"] and not c["thm1_T_ok"] and c["lemma1_ok"]
    assert B.theorem_conditions(eta=1e-4, beta=0.5, L=4.0, tau=10, T=20, alpha=0.5)["thm1_T_ok"]


def test_prop1_gap_formula():
    Z1 = torch.tensor([[1.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    Z2 = torch.tensor([[0.0, 2.0], [0.0, 2.0]], dtype=torch.float64)
    full = [{"Z": Z1, "sel": torch.tensor([True, True]), "k": 2}, {"Z": Z2, "sel": torch.tensor([True, True]), "k": 2}]
    gap, rel = B.prop1_gaps([full], 1.0)
    assert gap[0] == 0.0 and rel[0] == 0.0
    half = [{"Z": Z1, "sel": torch.tensor([True, False]), "k": 1}, {"Z": Z2, "sel": torch.tensor([False, True]), "k": 1}]
    gap, rel = B.prop1_gaps([half], 0.5)
    # BHerd: (1/2)(2*[1,0]) + (1/2)(2*[0,2]) = [1, 2]; FedAvg: (1/2)[4,0] + (1/2)[0,4] = [2, 2]
    assert gap[0] == pytest.approx(1.0)
    assert rel[0] == pytest.approx(1.0 / math.sqrt(5))


def test_alpha_check_has_power_against_a_reversed_trend():
    # the decision uses slope_at_most(1/alpha, gap, 0): a gap that grows by 30% per halving of alpha must be caught
    inv = [1.0, 1 / 0.7, 2.0, 1 / 0.3]
    rng = np.random.default_rng(1)
    worse = np.exp(np.log(1.3) / np.log(2) * np.log(inv)[None, :] + 0.02 * rng.normal(size=(3, 4)))
    better = 1 / worse
    assert not stats.slope_at_most(inv, worse, 0.0).passed
    res = stats.slope_at_most(inv, better, 0.0)
    assert res.passed and res.details["confirmed"]


def test_fig3a_is_an_empirical_figure_not_reproduced_at_the_toy_setting():
    from theory.claims import NOT_REPRODUCED, CheckContext, all_claims

    out = B.alpha_sweep(CheckContext(0, True))
    assert out.verdict == NOT_REPRODUCED, out.key_number
    assert "alpha = 0.1 converges" in out.reason and "not the figure's setting" in out.reason
    (c,) = [c for c in all_claims(claim_id="bherd.fig3a.alpha")]
    # the quote is the paper's sentence about Fig. 3(a), not its sentence about FedNova's global step size
    assert "increases the global step size" not in c.statement + c.quote and "0.5 is posited" in c.quote


def test_prop1_gap_near_the_papers_setting_per_alpha():
    from theory.claims import VIOLATED, CheckContext

    out = B.prop1(CheckContext(0, True))
    like = out.evidence["paper_like"]
    med = [v["median"] for v in like["per_alpha"].values()]  # alpha = 0.7, 0.5, 0.3, 0.1
    assert out.verdict == VIOLATED and like["all_above_tolerance"]
    assert med == sorted(med) and med[0] > 10 * out.evidence["tolerance"]  # the gap grows as alpha falls
    assert {v["tau_i"][0] for v in like["per_alpha"].values()} == {120}  # B = 100 on 12,000 images per client
    assert all(h["holds"] for h in (x.to_dict() for x in out.hypotheses))
