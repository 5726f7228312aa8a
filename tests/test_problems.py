"""Convex problems with known optimum."""
import pytest
import torch

from benchmark import Experiment, run
from theory import problems


def test_quadratic_optimum_and_constants():
    p = problems.quadratic(num_clients=6, d=8, mu=0.2, L=2.0, sigma_g=0.7, samples_per_client=30, seed=1)
    assert p.sigma_g == pytest.approx(0.7, rel=1e-9)
    # the optimum is a stationary point: F(w* + e) >= F(w*) for small perturbations, with curvature in [mu, L]
    f0 = p.objective(p.optimum)
    assert f0 == pytest.approx(p.f_star)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        e = torch.randn(8, generator=g, dtype=torch.float64) * 1e-2
        df = p.objective(p.optimum + e) - f0
        curv = 2 * df / float(e @ e)  # exact for a quadratic at a stationary point
        assert 0.2 - 1e-6 <= curv <= 2.0 + 1e-6


def test_gradient_descent_reaches_the_quadratic_optimum():
    p = problems.quadratic(num_clients=4, d=5, sigma_g=1.0, samples_per_client=20)
    r = run(Experiment(dataset=p.data, num_clients=None, model=p.model, rounds=150, local_steps=1, batch_size=None,
                       lr=0.5, eval_every=150))
    w = torch.nn.utils.parameters_to_vector(r.model.parameters()).detach()
    assert p.error(w) < 1e-8


def test_sigma_g_zero_means_one_common_optimum():
    p = problems.quadratic(num_clients=4, d=5, sigma_g=0.0, samples_per_client=20)
    assert p.sigma_g < 1e-10


def test_logistic_optimum_by_newton():
    q = problems.logistic(num_clients=4, lam=0.05, seed=2)
    w = q.optimum.clone().requires_grad_(True)
    X = q.data.x_train.double()
    Xb = torch.cat([X, torch.ones(len(X), 1, dtype=torch.float64)], 1)
    k, d = q.data.num_classes, X.shape[1]
    Wb = torch.cat([w[:k * d].reshape(k, d), w[k * d:][:, None]], 1)
    f = torch.nn.functional.cross_entropy(Xb @ Wb.T, q.data.y_train) + 0.025 * (w ** 2).sum()
    (g,) = torch.autograd.grad(f, w)
    assert float(g.norm()) < 1e-9
    assert q.objective(q.optimum) == pytest.approx(float(f.detach()))
    assert q.experiment_args == {"weight_decay": 0.05}


def test_invalid_problem_parameters():
    with pytest.raises(ValueError):
        problems.quadratic(mu=2.0, L=1.0)
    with pytest.raises(ValueError):
        problems.quadratic(d=10, samples_per_client=5)
    with pytest.raises(ValueError):
        problems.logistic(lam=0.0)
