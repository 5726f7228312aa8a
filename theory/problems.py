"""Convex federated problems with a known optimum, as FederatedDatasets + models.

The same algorithm code that runs on CIFAR runs on these: each problem is a ``FederatedDataset`` with
natural clients, a model factory for ``Experiment(model=...)``, and the optimum in the flat parameter
layout of that model (float64), with the constants the theorems use.

* ``quadratic``: client i minimises F_i(w) = mean_j (x_ij . w - y_ij)^2 (MSE of a bias-free linear
  model). Every client's design is whitened to the same Gram matrix, so the Hessian of every F_i and of
  F = sum_i p_i F_i is H = 2 D^2 with eigenvalues spaced evenly in [mu, L]. Client i's targets come from
  its own optimum w_i* = w0 + sigma_g-scaled offsets, so the gradient dissimilarity at the optimum,
  sum_i p_i ||grad F_i(w*)||^2, equals sigma_g^2 exactly. Stochastic gradients come from minibatches.
* ``logistic``: l2-regularised multinomial logistic regression on FedProx's Synthetic(alpha, beta)
  (natural clients); the regulariser (lam/2)||theta||^2 is applied by the optimizer's weight decay
  (``Experiment(weight_decay=lam)``), and the optimum is found by Newton's method in float64 to a gradient
  norm below 1e-10.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from benchmark.federated_dataset import FederatedDataset


@dataclass
class ConvexProblem:
    name: str
    data: FederatedDataset
    model: Callable  # (input_shape, num_classes) -> nn.Module, for Experiment(model=...)
    optimum: torch.Tensor  # flat parameters (float64) in the model's layout
    f_star: float
    mu: float
    L: float
    sigma_g: float
    objective: Callable[[torch.Tensor], float]  # F(w) for a flat parameter vector
    experiment_args: dict = field(default_factory=dict)  # e.g. weight_decay for the regulariser

    def error(self, w: torch.Tensor) -> float:
        """||w - w*||^2."""
        return float(((w.double().cpu() - self.optimum) ** 2).sum())


def quad_hessian(data: FederatedDataset) -> torch.Tensor:
    """Hessian of F(w) = mean_j (x_j . w - y_j)^2 over the pooled training set (float64)."""
    X = data.x_train.double().reshape(len(data.x_train), -1)
    return 2.0 * X.T @ X / len(X)


def bias_free_linear(d: int):
    """A model factory (``Experiment.model``) for the linear map R^d -> R without bias."""

    def make(input_shape, num_classes):
        return torch.nn.Linear(d, 1, bias=False)

    make.__qualname__ = f"bias_free_linear_{d}"
    return make


def quadratic(num_clients: int = 10, d: int = 10, mu: float = 0.1, L: float = 1.0, sigma_g: float = 1.0,
              samples_per_client: int = 50, noise: float = 0.0, seed: int = 0) -> ConvexProblem:
    """Heterogeneous quadratics with closed-form optimum; sigma_g = 0 makes every client's optimum the same."""
    if not 0 < mu <= L:
        raise ValueError(f"need 0 < mu <= L, got mu={mu}, L={L}")
    if samples_per_client < d:
        raise ValueError(f"samples_per_client ({samples_per_client}) must be >= d ({d}) to whiten the design")
    if sigma_g < 0 or noise < 0:
        raise ValueError("sigma_g and noise must be >= 0")
    rng = np.random.default_rng(seed)
    eig = np.linspace(mu, L, d)  # Hessian eigenvalues of F: H = 2 D^2
    D = np.sqrt(eig / 2.0)
    n = samples_per_client
    w0 = rng.normal(size=d)
    # client offsets, centred (p_i equal) and scaled so that sum_i p_i ||H (w* - w_i*)||^2 = sigma_g^2
    off = rng.normal(size=(num_clients, d))
    off -= off.mean(0)
    hoff = off * eig  # H (w_i* - w*) with H diagonal = eig
    scale = sigma_g / np.sqrt(np.mean((hoff ** 2).sum(1))) if sigma_g > 0 else 0.0
    w_i = w0 + scale * off
    clients, xs, ys = [], [], []
    for i in range(num_clients):
        q, _ = np.linalg.qr(rng.normal(size=(n, d)))
        X = np.sqrt(n) * q * D  # X^T X / n = D^2 exactly
        y = X @ w_i[i] + noise * rng.normal(size=n)
        xs.append(X)
        ys.append(y)
        clients.append((torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)))
    Xall, yall = np.concatenate(xs), np.concatenate(ys)
    w_star = np.linalg.solve(Xall.T @ Xall, Xall.T @ yall)  # pooled least squares = sum_i p_i F_i (equal n)
    f_star = float(np.mean((Xall @ w_star - yall) ** 2))
    g_i = [2 * xs[i].T @ (xs[i] @ w_star - ys[i]) / n for i in range(num_clients)]
    sg = float(np.sqrt(np.mean([g @ g for g in g_i])))
    rt = np.random.default_rng(seed + 1)
    q, _ = np.linalg.qr(rt.normal(size=(200, d)))
    Xt = np.sqrt(200) * q * D
    yt = Xt @ w_star
    data = FederatedDataset.from_tensors(clients, (torch.tensor(Xt, dtype=torch.float32),
                                                   torch.tensor(yt, dtype=torch.float32)),
                                         task="regression", name=f"quadratic(d={d},mu={mu},L={L},sg={sigma_g})")
    Xa, ya = torch.tensor(Xall), torch.tensor(yall)

    def objective(w: torch.Tensor) -> float:
        return float(torch.mean((Xa @ w.double().cpu().reshape(-1) - ya) ** 2))

    return ConvexProblem("quadratic", data, bias_free_linear(d), torch.tensor(w_star), f_star, mu, L, sg,
                         objective)


def logistic(alpha: float = 1.0, beta: float = 1.0, num_clients: int = 10, lam: float = 1e-2, seed: int = 0,
             tol: float = 1e-10) -> ConvexProblem:
    """l2-regularised logistic regression on Synthetic(alpha, beta); optimum by Newton's method."""
    from benchmark import datasets

    if lam <= 0:
        raise ValueError(f"lam must be > 0 (strong convexity), got {lam}")
    data = datasets.load("synthetic", alpha=alpha, beta=beta, num_clients=num_clients, seed=seed)
    X = data.x_train.double().reshape(len(data.x_train), -1)
    y = data.y_train
    n, d = X.shape
    k = int(data.num_classes)
    Xb = torch.cat([X, torch.ones(n, 1, dtype=torch.float64)], 1)  # bias as a last column
    Y = torch.nn.functional.one_hot(y, k).double()

    def unpack(theta):  # flat layout of nn.Linear(d, k): weight (k, d) then bias (k,)
        W = theta[:k * d].reshape(k, d)
        b = theta[k * d:]
        return torch.cat([W, b[:, None]], 1)  # (k, d+1)

    def pack(Wb):
        return torch.cat([Wb[:, :d].reshape(-1), Wb[:, d]])

    def objective(theta: torch.Tensor) -> float:
        Wb = unpack(theta.double().cpu())
        logits = Xb @ Wb.T
        return float(torch.nn.functional.cross_entropy(logits, y) + 0.5 * lam * (theta.double() ** 2).sum())

    Wb = torch.zeros(k, d + 1, dtype=torch.float64)
    for _ in range(100):
        P = torch.softmax(Xb @ Wb.T, 1)
        G = (P - Y).T @ Xb / n + lam * Wb  # (k, d+1)
        g = pack(G)
        if float(g.norm()) < tol:
            break
        # Hessian of the mean cross-entropy: sum_n (diag(p_n) - p_n p_n^T) kron x_n x_n^T / n, plus lam I
        m = d + 1
        A = P[:, :, None] * Xb[:, None, :]  # (n, k, m)
        H = -torch.einsum("nai,nbj->aibj", A, A).reshape(k * m, k * m) / n
        H += torch.block_diag(*torch.einsum("nai,nj->aij", A, Xb) / n)
        H += lam * torch.eye(k * m, dtype=torch.float64)
        step = torch.linalg.solve(H, G.reshape(-1)).reshape(k, m)
        # damped Newton: backtrack until the Armijo condition holds (a full step can overshoot)
        f0, t, slope = objective(pack(Wb)), 1.0, float((G * step).sum())
        while objective(pack(Wb - t * step)) > f0 - 0.25 * t * slope and t > 1e-8:
            t *= 0.5
        Wb = Wb - t * step
    else:  # pragma: no cover - Newton converges in a handful of steps on these problems
        raise RuntimeError("Newton's method did not converge")
    theta = pack(Wb)
    P = torch.softmax(Xb @ Wb.T, 1)
    L = 0.5 * float(torch.linalg.eigvalsh(Xb.T @ Xb / n).max()) + lam  # upper bound on the Hessian's norm
    gi = []
    for idx in data.clients:
        Gi = (P[idx] - Y[idx]).T @ Xb[idx] / len(idx) + lam * Wb
        gi.append(float((Gi ** 2).sum()) * len(idx) / n)
    return ConvexProblem("logistic", data, lambda s, c: torch.nn.Linear(s[0], c), theta, objective(theta), lam, L,
                         float(np.sqrt(sum(gi))), objective, {"weight_decay": lam})
