"""GradMA claims (theory/claims/gradma.py): quick runs, the printed thresholds, the recorders, the decision rule."""
import math

import numpy as np
import pytest
import torch

from algorithms.core import qp
from theory import problems
from theory.claims import HOLDS, INCONCLUSIVE, PREMISE_FAILS, VIOLATED
from theory.claims import gradma as G


def test_corollary1_thresholds_match_the_hand_table():
    # gradma.md 5.3, I = 5: printed and re-derived T_min
    cases = {(100, 10, 0.5): (4952, 4952), (100, 5, 0.5): (10286, 10286), (100, 50, 0.5): (775, 3182),
             (100, 100, 0.5): (1296, 6480), (100, 10, 0.1): (944, 944)}
    for (N, S, b1), (printed, rederived) in cases.items():
        t = G.corollary1_tmin(N, S, 5, b1)
        assert t["printed"] == pytest.approx(printed, abs=1.0)
        assert t["rederived"] == pytest.approx(rederived, abs=1.0)
    # S = N: b = 0, so the third threshold is 1280/4 = 320
    assert G.corollary1_tmin(8, 8, 5, 0.5)["t3"] == pytest.approx(320.0)


def test_theorem1_conditions_at_their_boundaries():
    L, I = 2.0, 5
    eta = 1 / (math.sqrt(160) * L * I)
    c = G.theorem1_conditions(eta, 1.0, L, I, 8, 8, 0.5)
    assert c["eta_l_L_I_sqrt160"] == pytest.approx(1.0) and c["cond1"]
    assert not G.theorem1_conditions(eta * 1.01, 1.0, L, I, 8, 8, 0.5)["cond1"]
    # full participation: condition 3 is 320 I^2 eta_l^2 L^2 = 320/T with the Corollary's eta_l
    for T, ok in [(320, True), (319, False)]:
        el, eg = G.corollary1_steps(T, 8, I, L)
        c = G.theorem1_conditions(el, eg, L, I, 8, 8, 0.5)
        assert c["cond3_lhs"] == pytest.approx(320 / T)
        assert c["cond3"] is ok
    # condition 2 by hand: (1-b1)^2 S (N-1) / (I L (b1 S (N-1) + 4 N (S-1)))
    c = G.theorem1_conditions(0.01, 1.0, 1.0, 5, 10, 2, 0.5)
    assert c["cond2_rhs"] == pytest.approx(0.25 * 2 * 9 / (5 * (0.5 * 2 * 9 + 4 * 10 * 1)))
    assert G.corollary1_steps(100, 4, 5, 1.0) == pytest.approx((1 / 50, math.sqrt(4 / 5)))
    assert G.corollary1_eps_g(16, 1, 1, 1.0) == pytest.approx(16 ** -0.75)


def test_qp_l_diagnostic_on_a_hand_case():
    from algorithms.gradma import qp_l_diagnostic

    g = torch.tensor([1.0, 0.0, 0.0])
    M = torch.tensor([[-1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out, z, _ = qp.project_small(g, M)
    # projection of (1,0,0) onto {y: -y0 + y1 >= 0, y1 >= 0} is (1/2, 1/2, 0): correction norm sqrt(1/2)
    assert torch.allclose(out, torch.tensor([0.5, 0.5, 0.0]), atol=1e-6)
    gn, corr, z1, _, z3 = qp_l_diagnostic(g, out, z).tolist()
    assert gn == pytest.approx(1.0) and corr == pytest.approx(math.sqrt(0.5), rel=1e-6)
    assert z1 == 1.0 and z3 == 0.0


def test_the_qp_l_diagnostic_is_the_solver_s_correction_along_a_run():
    # every local step of a GradMA run sends (||g||, ||g~ - g||, ...); recompute one step by hand
    p = problems.quadratic(num_clients=3, d=4, samples_per_client=8, seed=1)
    H = G.quad_hessian(p.data)
    gn, tr, diag = G._corollary_run(p, H, S=2, I=3, T=2, seed=0, record_qp=True)
    st = G.projection_stats(diag)
    assert st["corr"].shape == (2, 2, 3) and np.isfinite(st["corr"]).all()
    assert (st["corr"][:, :, 0] < 1e-6).all()  # tau = 0: x_0 - x_t = 0 and the two gradients coincide
    # step 0 of the first client: g = grad f_i(x_0) at x_0 = 0 (full local batch)
    cid = diag.rounds[0][0][0]
    idx = p.data.clients[cid]
    X, y = p.data.x_train[idx].double(), p.data.y_train[idx].double()
    g0 = 2 * X.T @ (X @ torch.zeros(4, dtype=torch.float64) - y) / len(idx)
    assert st["g"][0, 0, 0] == pytest.approx(float(g0.norm()), rel=1e-5)
    assert gn.shape == (3,) and tr.params.shape == (3, 4)


def test_projection_stats_shapes_and_activity():
    from theory.runs import Diagnostics

    d = Diagnostics()
    row = torch.tensor([[2.0, 0.0, 0, 0, 0], [2.0, 1.0, 0, 0, 1]], dtype=torch.float64)
    d.rounds = [[(0, {"qp_l": row})] for _ in range(3)]
    st = G.projection_stats(d)
    assert st["rel"].shape == (3, 1, 2)
    assert st["active"][..., 0].sum() == 0 and st["active"][..., 1].all()
    assert st["rel"][0, 0, 1] == pytest.approx(0.5)
    assert st["z"][0, 0, 1].tolist() == [False, False, True]


def _synthetic(slope_true, seeds=6, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    xs = np.array([2.0, 4.0, 8.0])
    return xs, np.exp(np.log(3.0) + slope_true * np.log(xs)[None, :] + noise * rng.normal(size=(seeds, 3)))


def _premises(met: bool) -> dict:
    return {"all_met": met, "per_setting": {"S=4,I=5": {"T": 800, "T_ok": met, "T_min_printed": 775.0,
                                                        "T_min_rederived": 775.0, "cond1": True, "cond2": True,
                                                        "cond3": True, "cond3_lhs": 0.5, "met": met}}}


def _a45(a4: bool) -> dict:
    return {"all_met": a4, "A4_met": a4, "A5_met": True, "A4_eps_l_sq_realized": 0.0 if a4 else 5.0,
            "A4_eps_l_sq_required": 0.01, "A5_eps_g_sq": {"S=4": {"realized": 0.0, "required": 1e-3}}}


def test_rate_decision_has_power_against_a_slower_rate():
    ok, hyp_ok = _premises(True), _a45(True)
    xs, m = _synthetic(-0.7)
    assert G.rate_outcome("S", xs, m, -0.5, ok, hyp_ok, {}, "", {}, 1e-3).verdict == HOLDS
    xs, m = _synthetic(-0.3)  # planted defect: a slower rate than the bound's S^-1/2
    assert G.rate_outcome("S", xs, m, -0.5, ok, hyp_ok, {}, "", {}, 1e-3).verdict == VIOLATED
    # premises not met: never HOLDS or VIOLATED
    out = G.rate_outcome("S", xs, m, -0.5, _premises(False), hyp_ok, {}, "", {}, 1e-3)
    assert out.verdict == INCONCLUSIVE and "why_inconclusive" in out.evidence
    # the Corollary's hypothesis A4 fails along the runs: a failed rate does not contradict the Corollary, whose
    # premise is false for the algorithm
    out = G.rate_outcome("S", xs, m, -0.5, ok, _a45(False), {}, "", {}, 1e-3)
    assert out.verdict == PREMISE_FAILS and "A4" in out.reason


def test_rho_sq_is_the_heterogeneity_at_the_optimum():
    p = problems.quadratic(num_clients=4, d=5, sigma_g=0.7, samples_per_client=10, seed=2)
    # the mean over clients of ||grad f_i(x*)||^2 is sigma_g^2; rho^2 is the maximum, hence at least that
    assert G.rho_sq(p) >= p.sigma_g ** 2 - 1e-9
    assert G.rho_sq(problems.quadratic(num_clients=4, d=5, sigma_g=0.0, samples_per_client=10)) < 1e-10
