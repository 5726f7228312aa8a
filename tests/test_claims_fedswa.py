"""FedSWA / FedMoSWA claims (theory/claims/fedswa.py): quick runs, the toy, the printed formulas."""
import math

import numpy as np
import pytest
import torch

from theory import stats
from theory.claims import fedswa as F


def _client_grads(p, w):
    out = []
    for idx in p.data.clients:
        X, y = p.data.x_train[idx].double(), p.data.y_train[idx].double()
        out.append(2 * X.T @ (X @ w - y) / len(idx))
    return torch.stack(out)


def test_hetero_quadratic_constants():
    p = F.hetero_quadratic(num_clients=5, d=4, mu=0.2, L=1.5, sigma_g=0.8, samples_per_client=12, seed=1)
    g = _client_grads(p, p.optimum)
    assert torch.allclose(g.mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-6)  # optimum of F
    assert float((g ** 2).sum(1).mean().sqrt()) == pytest.approx(0.8, rel=1e-4)  # G.4 heterogeneity = sigma_g
    assert p.sigma_g == pytest.approx(0.8, rel=1e-4)
    # client Hessians: diag(h_i), permutations of linspace(mu, L, d), and they differ across clients
    h = p.data.meta["h"]
    for i, idx in enumerate(p.data.clients):
        X = p.data.x_train[idx].double()
        assert torch.allclose(2 * X.T @ X / len(idx), torch.diag(torch.tensor(h[i])), atol=1e-5)
        assert np.allclose(np.sort(h[i]), np.linspace(0.2, 1.5, 4))
    assert not np.allclose(h[0], h[1])
    # sigma_g only scales the offsets: the designs are the same draws
    q = F.hetero_quadratic(num_clients=5, d=4, mu=0.2, L=1.5, sigma_g=3.0, samples_per_client=12, seed=1)
    assert torch.equal(p.data.x_train, q.data.x_train)
    z = F.hetero_quadratic(num_clients=5, d=4, sigma_g=0.0, samples_per_client=12, seed=1)
    assert z.sigma_g < 1e-6


def test_b_tilde_values_of_the_paper_summary():
    # fedswa.md 5.4 item 1: mu/beta = 0.1, T = 1000
    assert F.b_tilde(0.1, 1.0, 1, 1000) == pytest.approx(1.001)
    assert F.b_tilde(0.1, 1.0, 2, 1000) - 1 == pytest.approx(4.545e-5, rel=1e-3)
    assert F.b_tilde(0.1, 1.0, 5, 1000) - 1 == pytest.approx(1.09e-10, rel=1e-2)


def test_stability_bound_by_hand():
    m, n, beta, mu, T, K, L, sg, sig = 4, 10, 2.0, 0.1, 20, 5, 3.0, 0.5, 0.25
    b = 1 + (mu / ((beta + mu) * K)) ** (K - 1) / T
    pre = 2 / (m * n * beta) * math.exp(1 - mu / ((beta + mu) * T))
    assert F.stability_bound(m, n, beta, mu, T, K, L, sg, sig, momentum=False) == pytest.approx(
        pre * (b * L + b * sg + b * sig))
    assert F.stability_bound(m, n, beta, mu, T, K, L, sg, sig, momentum=True) == pytest.approx(
        pre * (b * L + sg + b * sig))
    # O(1/(mn)): doubling n halves it
    assert F.stability_bound(m, 2 * n, beta, mu, T, K, L, sg, sig, True) == pytest.approx(
        F.stability_bound(m, n, beta, mu, T, K, L, sg, sig, True) / 2)


def test_predicted_floor_ratio():
    assert F.predicted_floor_ratio(K=4, s=8, alpha=2.0) == pytest.approx((1 + 8 / 4) / 32)
    assert F.predicted_floor_ratio(K=2, s=8, alpha=1.5) == pytest.approx(2 * F.predicted_floor_ratio(4, 8, 1.5))


def test_neighbouring_datasets_differ_in_one_sample_and_are_nested():
    X, y, _, _ = F.nested_clients(3, 4, 20, 1.0, 0.5, seed=0)
    a = F._dataset(X, y, 10)
    b = F._dataset(X, y, 20)
    assert torch.equal(a.x_train[a.clients[1]], b.x_train[b.clients[1]][:10])  # nested in n
    xr = np.ones(4)
    c = F._dataset(X, y, 10, (1, 3, xr, 2.0))
    diff = (a.x_train != c.x_train).any(1) | (a.y_train != c.y_train)
    assert int(diff.sum()) == 1 and int(diff.nonzero()) == int(a.clients[1][3])


def test_eta_condition_of_theorem_52():
    ok = F._eta_tilde_ok(1 / 15, K=5, alpha=1.5, beta=1.0, s=8, m=8, mu=0.1)
    assert ok["eta_ok"] and ok["eta_max_thm52"] == pytest.approx(1 / 7.5) and ok["T_min_thm52"] == 10
    assert not F._eta_tilde_ok(0.2, K=5, alpha=1.5, beta=1.0, s=8, m=8, mu=0.1)["eta_ok"]
    # with few participants the s/(mu m K alpha) term can bind
    assert F._eta_tilde_ok(0.01, K=5, alpha=1.5, beta=1.0, s=1, m=100, mu=1.0)["eta_max_thm52"] == pytest.approx(
        1 / (100 * 5 * 1.5))


def test_sigma_g_growth_check_has_power():
    # the check behind the sigma_g-free claims (slope <= 0.1 over seeds) must catch a floor growing like
    # sigma_g^0.5 under 5% seed-to-seed noise (3 seeds), and must not reject a flat one
    rng = np.random.default_rng(0)
    xs = np.array([1.0, 4.0])
    grow = np.exp(0.5 * np.log(xs)[None, :] + 0.05 * rng.normal(size=(3, 2)))
    flat = np.exp(0.05 * rng.normal(size=(3, 2)))
    assert not stats.slope_at_most(xs, grow, 0.1).passed
    assert stats.slope_at_most(xs, flat, 0.1).passed


def test_fedmoswa_converges_to_the_optimum_where_fedavg_drifts():
    p = F.hetero_quadratic(num_clients=4, d=4, sigma_g=2.0, samples_per_client=8, seed=0)
    init = p.optimum + F._unit(4, 0)
    e_mo = F._run(p, "fedmoswa", F._MOSWA, s=4, K=4, lr=0.08, T=60, seed=0, init=init)
    e_avg = F._run(p, "fedavg", {}, s=4, K=4, lr=0.08, T=60, seed=0, init=init)
    assert e_mo[-1] < 1e-4 * e_mo[0]
    assert e_avg[-1] > 100 * e_mo[-1]  # the client-drift floor of FedAvg on heterogeneous Hessians


def test_lemma_g13_bound_by_hand():
    # B_t = (1 - mu eta~/2)^t (||theta0 - theta*||^2 + 9 m eta~^2 C_0 / s)
    b = F.lemma_g13_bound(3, mu=0.5, eta_tilde=0.1, r2=0.09, m=8, s=2, C0=16.0)
    start = 0.09 + 9 * 8 * 0.01 * 16 / 2
    assert b[0] == pytest.approx(start) and b[3] == pytest.approx(start * 0.975 ** 3)
    # the proof's cap min(1/(81 beta K alpha), s/(15 mu m K alpha)): Lemma G.12's binds at Toy A's sizes
    assert F.cap_lr(K=2, s=2, mu=0.5) == pytest.approx(1 / (81 * 2 * 1.5))
    assert F.cap_lr(K=2, s=1, mu=1.0, m=100) == pytest.approx(1 / (15 * 100 * 2 * 1.5))


def test_step_caps_record_the_main_text_and_the_proofs_conditions():
    main = 1 / (2 * 5 * 1.5)  # the main-text checks' eta_l: inside the main text's condition, 40x the proof's cap
    hyps = {h.name: h for h in F.step_caps(main, K=5, alpha=1.5, beta=1.0, s=2, m=8, mu=0.1, gamma=0.2, T=150,
                                           rho=1.0, option=2)}
    assert hyps["eta_l <= min(1/(beta K alpha), s/(mu m K alpha))"].holds
    assert not hyps["eta_l <= 1/(81 beta K alpha)"].holds and "40.5x" in hyps["eta_l <= 1/(81 beta K alpha)"].value
    cap = F.cap_lr(K=2, s=2, mu=0.5)
    assert all(h.holds for h in F.step_caps(cap, K=2, alpha=1.5, beta=1.0, s=2, m=8, mu=0.5, gamma=0.2, T=2500,
                                             rho=1.0, option=2))
    assert not {h.name: h for h in F.step_caps(cap, K=2, alpha=1.5, beta=1.0, s=2, m=8, mu=0.5, gamma=0.2,
                                               T=2500, rho=0.1, option=2)}[
        "constant local learning rate eta_k^t = eta_l (rho = 1)"].holds


def test_batched_seeds_equal_the_runs_alone():
    # the proof-cap check runs its sampling seeds as one batched job; each equals the same run alone
    from benchmark.runs.experiment import Experiment
    from theory.runs import trace, trace_group

    p = F.hetero_quadratic(num_clients=4, d=3, mu=0.5, sigma_g=2.0, samples_per_client=6, seed=0)
    exps = [Experiment(algorithm="fedmoswa", dataset=p.data, num_clients=None, model=p.model, clients_per_round=2,
                       rounds=5, local_steps=2, batch_size=None, lr=0.05, algorithm_args=F._MOSWA, seed=s,
                       device="cpu", eval_every=5, eval_train_samples=None) for s in (0, 1)]
    init = p.optimum + F._unit(3, 0)
    group = trace_group(exps, init=init)
    for e, g in zip(exps, group):
        alone = trace(e, init=init)
        assert torch.allclose(g.params, alone.params, atol=1e-6) and np.array_equal(g.client_ids, alone.client_ids)
    assert not torch.allclose(group[0].params, group[1].params)  # the seeds sample different clients
