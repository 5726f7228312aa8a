"""FedBAT theorem claims (theory/claims/fedbat/): the printed constants on hand-checkable cases, Remark 1's
reductions, the per-local-step schedule through the engine, and every claim in quick mode."""

import math

import numpy as np
import pytest
import torch

from algorithms.core import ParamLayout
from theory import problems, runs
from theory.claims import all_claims
from theory.claims import fedbat as F

# ------------------------------------------------------------------------------------------ formulas


def test_gamma_and_first_step_size():
    assert F.gamma_of(2.0, 5) == 15.0 and F.gamma_of(0.5, 10) == 9.0
    # eta_1 = 2/(mu (gamma + 1)) = 1/(4L) when gamma = 8 kappa - 1 (kappa = 2, L = 1)
    assert F.schedule_eta(0.5, 15.0, 5, 0, 0) == pytest.approx(0.25)
    assert F.schedule_eta(0.5, 15.0, 5, 2, 3) == pytest.approx(2 / (0.5 * (15 + 2 * 5 + 3 + 1)))
    # the optimizer that applies it within the round
    from theory.runs import InverseTimeSGD

    lr, c = F.schedule(0.5, 15.0, 5)
    opt = InverseTimeSGD(c)
    p, st = torch.zeros(1), opt.init(torch.zeros(1))
    for s in range(4):
        p2, st = opt.step(p, torch.ones(1), st, lr(2))
        assert float(p - p2) == pytest.approx(F.schedule_eta(0.5, 15.0, 5, 2, s), rel=1e-6)
        p = p2


def test_B_reductions_of_remark1():
    k = {"sigma2": 2.0, "L": 1.5, "Gamma": 0.3, "tau": 4, "G2": 5.0}
    N = 6
    # K = N turns Theorem 2 into Theorem 1 (p_k = 1/N)
    assert F.B_theorem2(N, N, q2=3.0, **k) == pytest.approx(F.B_theorem1(np.full(N, 1 / N), q2=3.0, **k))
    # q = 0 and tau = 1: B = sum p_k^2 sigma^2 + 6 L Gamma (FedAvg / SGD)
    assert F.B_theorem1(np.full(N, 1 / N), 2.0, 1.5, 0.3, 0.0, 1, 5.0) == pytest.approx(
        2.0 / 6 + 6 * 1.5 * 0.3
    )
    # by hand: p = (0.5, 0.5), q^2 = 2, tau = 3: 0.5*1 + 6*1*0.1 + 8*3*4*2 + 4*0.5*2*9*2
    assert F.B_theorem1([0.5, 0.5], 1.0, 1.0, 0.1, 2.0, 3, 2.0) == pytest.approx(0.5 + 0.6 + 192 + 72)
    # sampling term (N - K)/(K (N - 1)) without binarization: N=4, K=2, q=0, tau=1, G2=3: 4*(2/6)*3 = 4
    assert F.B_theorem2(4, 2, 0.0, 1.0, 0.0, 0.0, 1, 3.0) == pytest.approx(4.0)


def test_theorem12_bound_and_delta_bound_by_hand():
    # kappa = 2, gamma = 15, B = 4, mu = 0.5, Delta_1 = 10: (2/(15 + t)) (16 + 0.5*16/2*10) = (2/(15+t)) 56
    assert F.theorem12_bound(1, 2.0, 15.0, 4.0, 0.5, 10.0) == pytest.approx(2 / 16 * 56)
    assert F.theorem12_bound(np.array([1, 85]), 2.0, 15.0, 4.0, 0.5, 10.0)[1] == pytest.approx(2 / 100 * 56)
    # v = max(beta^2 B / (beta mu - 1), (gamma + 1) Delta_1) with beta = 2/mu: max(64, 160) = 160
    assert F.delta_bound(5, 4.0, 0.5, 15.0, 10.0) == pytest.approx(160 / 20)
    # the gap bound is (L/2) times the Delta bound's 4B/mu^2 + (gamma+1) Delta_1 version (beta = 2/mu)
    v = 4 * 4.0 / 0.25 + 16 * 10.0
    assert F.theorem12_bound(5, 2.0, 15.0, 4.0, 0.5, 10.0) == pytest.approx(1.0 / 2 * v / 20)


def test_theorem3_constants_by_hand():
    assert F.Q_theorem3(3.0, 1, 7.0) == 0.0 and F.Q_theorem3(3.0, 3, 1.0) == pytest.approx(4 * 4 * 4)
    # K = N: P = sigma^2/N + 4 q^2 tau^2 G^2 / N
    assert F.P_theorem3(4, 4, 2.0, 3.0, 2, 1.5) == pytest.approx(0.5 + 4 * 3 * 4 * 1.5 / 4)
    # 2 L gap0 / sqrt(T) + P / sqrt(T) + Q / T at T = 100
    assert F.theorem3_rhs(100, 2.0, 0.5, 3.0, 50.0) == pytest.approx(0.2 + 0.3 + 0.5)
    assert F.q2_inf([10, 3]) == 9.0


def test_learned_alpha_stats_by_hand():
    layout = ParamLayout.single(3)
    m = torch.tensor([1.0, 0.5, -2.0])
    st = F.learned_alpha_stats(m, torch.tensor([1.0]), layout.slices)
    n2 = 1 + 0.25 + 4
    assert st["rel_bias"] == pytest.approx(1 / math.sqrt(n2))  # clip: -2 -> -1
    assert st["q2_learned"] == pytest.approx((0 + 0.75 + 1.0) / n2)
    assert st["q2_inf"] == pytest.approx((3 * 4 - n2) / n2) and st["clipped_share"] == pytest.approx(1 / 3)
    inf = F.learned_alpha_stats(m, torch.tensor([2.0]), layout.slices)  # alpha = ||m||_inf: unbiased
    assert inf["rel_bias"] == 0.0 and inf["q2_learned"] == pytest.approx(inf["q2_inf"])


def test_tanh_regression_smoothness_constant_bounds_the_hessians():
    prob = problems.tanh_regression(num_clients=2, d=4, samples_per_client=20, seed=3)
    g = torch.Generator().manual_seed(0)
    for X, y in zip(prob["X"], prob["y"]):
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)

        def Fk(w, Xt=Xt, yt=yt):
            return ((torch.tanh(Xt @ w) - yt) ** 2).mean()

        for _ in range(5):
            w = 2 * torch.randn(4, generator=g, dtype=torch.float64)
            H = torch.autograd.functional.hessian(Fk, w)
            assert torch.linalg.eigvalsh(H).abs().max() <= prob["L"] * (1 + 1e-9)
    # F_k* = 0: targets are realisable; the problem is non-convex (a negative Hessian eigenvalue somewhere)
    F0, gF2, gk2 = problems.tanh_grads(prob, np.zeros((1, 4)))
    assert F0[0] > 0 and gF2[0] > 0 and gk2.shape == (1, 2)


def test_tanh_gradients_match_autograd():
    prob = problems.tanh_regression(num_clients=2, d=3, samples_per_client=10, seed=1)
    w = np.array([[0.3, -0.7, 1.1]])
    _, gF2, gk2 = problems.tanh_grads(prob, w)
    gs = []
    for X, y in zip(prob["X"], prob["y"]):
        wt = torch.tensor(w[0], requires_grad=True)
        ((torch.tanh(torch.from_numpy(X) @ wt) - torch.from_numpy(y)) ** 2).mean().backward()
        gs.append(wt.grad)
    assert gk2[0] == pytest.approx([float(g @ g) for g in gs])
    assert gF2[0] == pytest.approx(float(((gs[0] + gs[1]) / 2) @ ((gs[0] + gs[1]) / 2)))


# ------------------------------------------------------------------------------------------ the engine driver


def test_per_local_step_schedule_through_the_engine():
    # one client, full batch, lossless, tau = 3: eta_t = 2/(mu (gamma + t)) with t counting local steps
    p = problems.quadratic(num_clients=1, d=3, sigma_g=0.0, samples_per_client=6, seed=4)
    theta0 = runs.start_point(p, 0, 1.0)
    lr, decay = F.schedule(0.5, 15.0, 3)
    sim = runs.run_lfl(
        p, "lossless", {}, rounds=2, local_steps=3, batch_size=None, lr=lr, step_decay=decay, seed=0, theta0=theta0
    )
    X, y = p.data.x_train.double(), p.data.y_train.double()
    w, t = theta0.clone(), 1
    for _ in range(2):
        for _ in range(3):
            w = w - 2 / (0.5 * (15 + t)) * (2 * X.T @ (X @ w - y) / len(y))
            t += 1
    assert sim.params[-1] == pytest.approx(w.numpy(), rel=1e-5, abs=1e-6)


def test_theory_variant_without_binarization_noise_is_plain_local_sgd():
    # with one client and d = 1 the binarization with alpha = ||m||_inf is exact (S(m) = m): FedBAT's theory
    # variant then equals lossless local SGD step for step (the STE slope is 1 inside the range)
    p = problems.quadratic(num_clients=1, d=1, mu=1.0, L=1.0, sigma_g=0.0, samples_per_client=4, seed=0)
    theta0 = runs.start_point(p, 0, 1.0)
    kw = {
        "rounds": 3,
        "local_steps": 4,
        "batch_size": None,
        "lr": F.schedule(1.0, 7.0, 4)[0],
        "step_decay": F.schedule(1.0, 7.0, 4)[1],
        "seed": 0,
        "theta0": theta0,
    }
    a = runs.run_lfl(p, "fedbat", F.THEORY_VARIANT, **kw)
    b = runs.run_lfl(p, "lossless", {}, **kw)
    assert a.params == pytest.approx(b.params, rel=1e-5, abs=1e-7)


# ------------------------------------------------------------------------------------------ claims, quick mod

MINE = [c for c in all_claims("fedbat")  # the theorem claims (the operator's are in operator.py)
        if c.check.__module__.startswith("theory.claims.fedbat.") and c.check.__module__ != "theory.claims.fedbat.operator"]


def test_the_theorem_claims_are_registered():
    assert {c.id for c in MINE} == {
        "fedbat.theorem1.rate",
        "fedbat.theorem1.bound",
        "fedbat.theorem2.rate",
        "fedbat.theorem2.bound",
        "fedbat.theorem3.rate",
        "fedbat.theorem3.bound",
        "fedbat.remark3.learned_alpha_bias",
        "fedbat.remark3.smaller_q",
    }


