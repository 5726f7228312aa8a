"""LFL theorem claims (theory/claims/lfl/): the printed formulas on hand-checkable constants, the engine
driver (schedules, recorded parameters), and every claim in quick mode."""


import numpy as np
import pytest
import torch

from benchmark import Experiment, run
from theory import problems, runs, verdicts
from theory.claims import HOLDS, VIOLATED, all_claims
from theory.claims import lfl as L

# ------------------------------------------------------------------------------------------ formulas


def test_schedule_is_alpha_over_t_plus_beta_per_round():
    eta = L.lr_schedule(4.0, 8.0)
    assert [eta(t) for t in (0, 2, 12)] == [0.5, 0.4, 0.2]


def test_theorem1_terms_tau1_constant_eta_by_hand():
    # tau = 1: A = 1 - mu eta, Gamma term vanishes, B(0) has no broadcast term (eta(-1) = 0)
    mu, eta, G2, eps, d, q1 = 0.5, 0.1, 4.0, 0.5, 10, 2
    A, B = L.theorem1_terms([eta] * 3, 1, mu, G2, Gamma=7.0, eps=eps, d=d, q1=q1)
    assert A == pytest.approx([0.95] * 3)
    assert B[0] == pytest.approx(eta**2 * G2)  # 0.04
    assert B[1] == pytest.approx(0.95 * (0.1 * 2 / 4) ** 2 * 0.5 * 10 + 0.04)  # 0.95 * 0.0025 * 5 + 0.04


def test_theorem1_terms_tau2_by_hand():
    # tau = 2, eta = (0.5, 0.4): A(i) = 1 - mu eta (2 - eta); B(1) with eta(0) = 0.5 in the broadcast term
    mu, G2, Gamma, eps, d, q1 = 0.5, 1.0, 3.0, 0.2, 10, 2
    A, B = L.theorem1_terms([0.5, 0.4], 2, mu, G2, Gamma, eps, d, q1)
    assert A == pytest.approx([1 - 0.25 * 1.5, 1 - 0.2 * 1.6])
    b0 = 0.25 * 5 * 1 + (1 + 0.25) * 0.25 * 1 * 1 + 2 * 0.5 * 3.0  # broadcast term 0; drift 2*1*3/6 = 1
    b1 = A[1] * (0.5 * 2 * 1 / 4) ** 2 * 0.2 * 10 + 0.16 * 5 + (1 + 0.3) * 0.16 + 2 * 0.4 * 3.0
    assert B == pytest.approx([b0, b1])


def test_theorem1_bound_is_the_products_of_eq_11a():
    rng = np.random.default_rng(0)
    A, B = rng.uniform(0.5, 0.99, 6), rng.uniform(0, 1, 6)
    P, C = L.theorem1_bound(A, B)
    for t in range(7):
        direct = np.prod(A[:t]) * 2.0 + sum(B[j] * np.prod(A[j + 1 : t]) for j in range(t))
        assert P[t] * 2.0 + C[t] == pytest.approx(direct)


def test_bound_far_agrees_with_the_recursion_and_has_the_derived_limit():
    k = {"tau": 2, "mu": 0.5, "G2": 3.0, "Gamma": 1.5, "eps": 0.4, "d": 10, "q1": 2}

    def eta(t):
        return 4.0 / (t + 8.0)

    A, B = L.theorem1_terms(
        eta(np.arange(300.0)), k["tau"], k["mu"], k["G2"], k["Gamma"], k["eps"], k["d"], k["q1"]
    )
    P, C = L.theorem1_bound(A, B)
    assert L.bound_far(300, eta, x0=5.0, **k) == pytest.approx(P[-1] * 5.0 + C[-1], rel=1e-10)
    # tau > 1, Gamma > 0: RHS(11a) -> 2 (tau - 1) Gamma / (mu tau) = 3, RHS(12) -> L (tau-1) Gamma / (mu tau)
    far = L.bound_far(10**6, eta, x0=5.0, **k)
    assert far == pytest.approx(2 * 1 * 1.5 / (0.5 * 2), rel=2e-3)
    assert L.noniid_limit(1.0, 2, 1.5, 0.5) == pytest.approx(far / 2, rel=2e-3)
    # Gamma = 0 (or tau = 1): the bound does vanish, like 1/T
    assert L.bound_far(10**6, eta, x0=5.0, **{**k, "Gamma": 0.0}) < 1e-3


def test_corollary1_closed_form_and_floor_by_hand():
    k = {"eta": 0.1, "mu": 0.5, "L": 1.0, "G2": 4.0, "eps": 0.5, "d": 10, "q1": 2}
    floor = L.corollary1_floor(**k)
    assert floor == pytest.approx(0.5 * (1 + 0.95 * 0.5 * 10 / 16) * 0.1 * 4.0 / 0.5)  # 0.51875
    assert floor == pytest.approx(0.51875)
    assert L.corollary1_rhs(0, x0=3.0, **k) == pytest.approx(1.5)  # (L/2) x0
    assert L.corollary1_rhs(10**4, x0=3.0, **k) == pytest.approx(floor)
    # (13) dominates the exact recursion (it charges the broadcast term at i = 0 too), and both are (L/2) x
    A, B = L.theorem1_terms([0.1] * 50, 1, 0.5, 4.0, 0.0, 0.5, 10, 2)
    P, C = L.theorem1_bound(A, B)
    rec = 0.5 * (P * 3.0 + C)
    rhs = L.corollary1_rhs(np.arange(51), x0=3.0, **k)
    assert np.all(rhs >= rec - 1e-12) and rhs[1] - rec[1] == pytest.approx(
        0.5 * 0.95 * (0.1 * 2 / 4) ** 2 * 0.5 * 10
    )


def test_eps_of_is_a_ratio_of_expectations():
    a = np.array([[1.0, 2.0], [0.0, 4.0]])  # run 1: t=1 (range^2 1, norm^2 2), t=2 (0, 4)
    b = np.array([[3.0, 2.0], [2.0, 4.0]])
    eps, eps_t = L.eps_of([a, b])
    assert eps_t == pytest.approx([2.0 / 2.0, 1.0 / 4.0]) and eps == pytest.approx(1.0)


def test_u_stats_hook():
    new = {"params": torch.tensor([1.0, -3.0, 2.0]), "theta_hat": torch.tensor([0.0, 0.0, 1.0])}
    r2, n2 = L.u_stats(None, new, None)
    assert r2 == pytest.approx((3 - 1) ** 2) and n2 == pytest.approx(1 + 9 + 1)


def test_rate_window_and_verdict_power():
    T = verdicts.rate_window(200)
    assert T[0] == 20 and T[-1] == 200 and len(set(T)) == len(T)
    rng = np.random.default_rng(1)
    x = T.astype(float)
    slow = np.exp(-0.6 * np.log(x))[None, :] * np.exp(rng.normal(0, 0.02, (8, len(T))))  # planted O(T^-0.6)
    fast = np.exp(-1.0 * np.log(x))[None, :] * np.exp(rng.normal(0, 0.02, (8, len(T))))
    from theory import stats

    assert verdicts.rate_verdict([stats.slope_at_most(x, slow, -0.85)]) == VIOLATED
    assert verdicts.rate_verdict([stats.slope_at_most(x, fast, -0.85)]) == HOLDS


def test_bound_verdict_catches_a_planted_excess():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 0.01, (8, 30))
    assert verdicts.bound_verdict(z - 0.5, 1e-3)[0] == HOLDS
    planted = z - 0.5
    planted[:, 17] += 0.6  # one round 10% above its bound
    v, summ = verdicts.bound_verdict(planted, 1e-3)
    assert v == VIOLATED and summ["rejected_points"] == [17]


# ------------------------------------------------------------------------------------------ problems


def test_hetero_quadratic_constants():
    p = problems.hetero_quadratic(num_clients=4, d=6, mu=0.3, L=1.5, spread=1.0, samples_per_client=20, noise=0.1)
    for c in p.data.clients:
        X = p.data.x_train[c].double()
        ev = torch.linalg.eigvalsh(2 * X.T @ X / len(c))
        assert ev.min() >= 0.3 - 1e-5 and ev.max() <= 1.5 + 1e-5
    hs = [2 * p.data.x_train[c].double().T @ p.data.x_train[c].double() / len(c) for c in p.data.clients]
    assert (hs[0] - hs[1]).abs().max() > 0.1  # client Hessians differ (drift is possible)
    X, y = p.data.x_train.double(), p.data.y_train.double()
    assert (X.T @ (X @ p.optimum - y)).abs().max() < 1e-8  # theta* is stationary
    assert problems.linear_gamma(p)["Gamma"] > 0.1


def test_orthogonal_noise_gives_gamma_zero_with_noisy_gradients():
    p = problems.hetero_quadratic(
        num_clients=3, d=5, spread=0.0, samples_per_client=12, noise=0.5, orthogonal_noise=True
    )
    g = problems.linear_gamma(p)
    assert g["Gamma"] < 1e-6 and min(g["F_m_star"]) > 1e-2  # common minimiser, residuals at theta*
    X, y = p.data.x_train.double(), p.data.y_train.double()
    per_sample = 2 * X * (X @ p.optimum - y)[:, None]
    assert per_sample.norm(dim=1).max() > 0.1  # minibatch gradients are noisy at theta*


# ------------------------------------------------------------------------------------------ driver


def test_run_lfl_matches_the_benchmark_run_with_a_constant_step():
    p = problems.quadratic(num_clients=3, d=4, samples_per_client=10, noise=0.3, seed=1)
    torch.manual_seed(5)
    theta0 = (
        torch.nn.utils.parameters_to_vector(p.model(p.data.input_shape, 1).parameters()).detach().double()
    )
    sim = runs.run_lfl(p, "lossless", {}, rounds=4, local_steps=2, batch_size=5, lr=0.1, seed=5, theta0=theta0)
    res = run(
        Experiment(
            algorithm="lossless",
            dataset=p.data,
            num_clients=None,
            model=p.model,
            rounds=4,
            local_steps=2,
            batch_size=5,
            lr=0.1,
            seed=5,
            eval_every=4,
        )
    )
    w = torch.nn.utils.parameters_to_vector(res.model.parameters()).detach().double().numpy()
    assert sim.params.shape == (5, 4) and sim.params[0] == pytest.approx(theta0.numpy())
    assert sim.params[-1] == pytest.approx(w, abs=1e-6)


def test_run_lfl_applies_the_per_round_schedule_and_records_gradients():
    # one client, full batch, tau = 2: theta <- theta - eta(t) grad F, twice per round, eta(t) = 1/(t + 2)
    p = problems.quadratic(num_clients=1, d=3, sigma_g=0.0, samples_per_client=6, seed=2)
    theta0 = runs.start_point(p, 0, 1.0)
    sim = runs.run_lfl(
        p,
        "lossless",
        {},
        rounds=3,
        local_steps=2,
        batch_size=None,
        lr=L.lr_schedule(1.0, 2.0),
        seed=0,
        theta0=theta0,
        record_grads=True,
    )
    X, y = p.data.x_train.double(), p.data.y_train.double()
    w, sq = theta0.clone(), []
    for t in range(3):
        for _ in range(2):
            g = 2 * X.T @ (X @ w - y) / len(y)
            sq.append(float(g @ g))
            w = w - g / (t + 2.0)
    assert sim.params[-1] == pytest.approx(w.numpy(), rel=1e-5, abs=1e-6)
    assert sim.grad_sq.shape == (3, 1, 2) and sim.grad_sq.reshape(-1) == pytest.approx(sq, rel=1e-4)


def test_start_point_radius_and_distinct_seeds():
    p = problems.quadratic(num_clients=2, d=5, samples_per_client=10)
    a, b = runs.start_point(p, 0, 2.0), runs.start_point(p, 1, 2.0)
    assert p.error(a) == pytest.approx(4.0, rel=1e-5) and not torch.equal(a, b)


def test_grad_sq_sup_with_partial_participation():
    r1 = runs.Run(
        np.zeros((3, 2)),
        np.array([[0, 1], [1, 2], [0, 2]]),
        np.array([[[1.0], [2.0]], [[3.0], [4.0]], [[5.0], [6.0]]]),
    )
    r2 = runs.Run(
        np.zeros((3, 2)),
        np.array([[0, 2], [1, 2], [0, 1]]),
        np.array([[[3.0], [8.0]], [[1.0], [2.0]], [[1.0], [1.0]]]),
    )
    # round 0: client 0 mean (1 + 3)/2, client 1: 2, client 2: 8 -> the max is 8
    assert runs.grad_sq_sup([r1, r2], 3) == pytest.approx(8.0)


# ------------------------------------------------------------------------------------------ claims, quick mod

MINE = [c for c in all_claims("lfl")  # the theorem claims (the operator's are in lemma1.py)
        if c.check.__module__.startswith("theory.claims.lfl.") and c.check.__module__ != "theory.claims.lfl.lemma1"]


def test_the_theorem_claims_are_registered():
    assert {c.id for c in MINE} == {
        "lfl.theorem1.bound",
        "lfl.corollary1.floor",
        "lfl.corollary1.bound_vanishes",
        "lfl.corollary1.gap_vanishes_noniid",
        "lfl.rate.tau1",
        "lfl.rate.gamma0",
    }


