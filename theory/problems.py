"""Federated problems with a known optimum or known constants, as FederatedDatasets + models.

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
* ``hetero_quadratic``: least squares whose client Hessians differ (random rotations of the same spectrum in
  [mu, L]), so that local steps drift (LFL's recipe 9); ``linear_gamma`` its Gamma = F* - sum_m w_m F_m*.
* ``tanh_regression``: a smooth non-convex problem (single-index tanh regression, FedBAT's Theorem 3) with
  its smoothness constant; ``tanh_grads`` its objective and gradients in float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from benchmark.datasets.federated_dataset import FederatedDataset


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


def _client_lstsq(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    w = np.linalg.lstsq(X, y, rcond=None)[0]
    return w, float(np.mean((X @ w - y) ** 2))


def linear_gamma(problem: ConvexProblem) -> dict:
    """Gamma = F* - sum_m w_m F_m* (w_m = B_m / B) for a bias-free linear least-squares problem, with
    F* and every F_m* by least squares in float64 on the float32 training data the algorithms see."""
    data = problem.data
    X = data.x_train.double().cpu().numpy().reshape(len(data.x_train), -1)
    y = data.y_train.double().cpu().numpy().reshape(-1)
    _, f_star = _client_lstsq(X, y)
    sizes, fm = [], []
    for c in data.clients:
        i = c.cpu().numpy()
        sizes.append(len(i))
        fm.append(_client_lstsq(X[i], y[i])[1])
    w = np.asarray(sizes, float) / sum(sizes)
    return {"Gamma": max(0.0, f_star - float(w @ np.asarray(fm))), "F_star": f_star, "F_m_star": fm}


def hetero_quadratic(
    num_clients: int = 5,
    d: int = 10,
    mu: float = 0.5,
    L: float = 1.0,
    spread: float = 1.0,
    samples_per_client: int = 50,
    noise: float = 0.0,
    seed: int = 0,
    rotate: bool = True,
    orthogonal_noise: bool = False,
) -> ConvexProblem:
    """Least squares F_m(w) = mean_j (x_j . w - y_j)^2 whose client Hessians H_m = R_m diag(eig) R_m^T
    (eig evenly spaced in [mu, L], R_m a random rotation per client when ``rotate``) are all different, so
    that every F_m is exactly mu-strongly convex and L-smooth (A1, A2) and local steps drift (recipe 9:
    with the shared Hessian of ``problems.quadratic`` the average of the local iterates follows
    centralised SGD and no drift appears).

    Client optima w_m* = w0 + spread * (centred Gaussian offsets). ``noise`` adds target noise (stochastic
    gradients that do not vanish at the optimum); with ``orthogonal_noise`` the noise is projected out of
    the column space of X_m, so every client's least-squares solution is exactly w_m*: with ``spread=0``
    all clients share the minimiser and Gamma = 0 while minibatch gradients stay noisy at theta*.
    Everything (optimum, F*, Gamma) is computed in float64 from the float32 data the algorithms see.
    """
    if not 0 < mu <= L:
        raise ValueError(f"need 0 < mu <= L, got mu={mu}, L={L}")
    n = samples_per_client
    if n < d:
        raise ValueError("samples_per_client must be >= d")
    rng = np.random.default_rng([seed, 101])
    eig = np.linspace(mu, L, d)
    D = np.sqrt(eig / 2.0)  # X^T X / n = R D^2 R^T, Hessian 2 X^T X / n = R diag(eig) R^T
    w0 = rng.normal(size=d)
    off = rng.normal(size=(num_clients, d))
    off -= off.mean(0)
    clients = []
    for m in range(num_clients):
        Rm = np.linalg.qr(rng.normal(size=(d, d)))[0] if rotate else np.eye(d)
        Q = np.linalg.qr(rng.normal(size=(n, d)))[0]
        X = np.sqrt(n) * (Q * D) @ Rm.T
        e = noise * rng.normal(size=n)
        if orthogonal_noise:
            e = e - Q @ (Q.T @ e)
        y = X @ (w0 + spread * off[m]) + e
        clients.append((torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)))
    Xt = torch.tensor(np.sqrt(200) * np.linalg.qr(rng.normal(size=(200, d)))[0] * D, dtype=torch.float32)
    name = f"hetero_quadratic(M={num_clients},d={d},mu={mu},L={L},spread={spread},noise={noise})"
    data = FederatedDataset.from_tensors(clients, (Xt, torch.zeros(200)), task="regression", name=name)
    Xa = data.x_train.double()
    ya = data.y_train.double()
    w_star = torch.linalg.lstsq(Xa, ya[:, None], driver="gelsd").solution[:, 0]
    f_star = float(torch.mean((Xa @ w_star - ya) ** 2))
    g = [2 * Xa[c].T @ (Xa[c] @ w_star - ya[c]) / len(c) for c in data.clients]
    sg = float(torch.sqrt(torch.stack([(gi**2).sum() for gi in g]).mean()))

    def objective(w: torch.Tensor) -> float:
        return float(torch.mean((Xa @ w.double().cpu().reshape(-1) - ya) ** 2))

    return ConvexProblem("hetero_quadratic", data, bias_free_linear(d), w_star, f_star, mu, L, sg, objective)


def tanh_regression(
    num_clients: int = 4,
    d: int = 10,
    samples_per_client: int = 50,
    spread: float = 0.7,
    scale: float = 1.5,
    seed: int = 0,
) -> dict:
    """A smooth non-convex federated problem: F_k(w) = mean_j (tanh(x_j . w) - y_j)^2 with y = tanh(X_k w_k*)
    (so F_k* = 0), client optima w_k* = w0 + spread * offsets, x ~ N(0, I/d) * scale.

    Returns the dataset, a model factory (bias-free Linear + Tanh, MSE loss), float64 design/targets per
    client, and L: every F_k is L-smooth with L = sup_{a, y} |f''(a)| * max_k lambda_max(X_k^T X_k / n),
    f(a) = (tanh a - y)^2, f''(a) = 2 sech^4 a - 4 (tanh a - y) tanh a sech^2 a, the sup over a grid of a and
    the targets' range (f'' is linear in y, so its extreme is at an end of the range).
    """
    rng = np.random.default_rng([seed, 303])
    w0 = rng.normal(size=d)
    off = rng.normal(size=(num_clients, d))
    off -= off.mean(0)
    clients, X64, Y64 = [], [], []
    for k in range(num_clients):
        X = (scale / math.sqrt(d)) * rng.normal(size=(samples_per_client, d))
        y = np.tanh(X @ (w0 + spread * off[k]))
        Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        clients.append((Xt, yt))
        X64.append(Xt.double().numpy())
        Y64.append(yt.double().numpy())
    data = FederatedDataset.from_tensors(
        clients, clients[0], task="regression", name=f"tanh_regression(N={num_clients},d={d},spread={spread})"
    )
    a = np.linspace(-30, 30, 600_001)
    sech2 = 1.0 / np.cosh(a) ** 2
    ys = np.concatenate(Y64)
    f2 = max(
        float(np.abs(2 * sech2**2 - 4 * (np.tanh(a) - yv) * np.tanh(a) * sech2).max())
        for yv in (ys.min(), ys.max())
    )
    lam = max(float(np.linalg.eigvalsh(X.T @ X / len(X)).max()) for X in X64)

    def model(input_shape, num_classes):
        return torch.nn.Sequential(torch.nn.Linear(d, 1, bias=False), torch.nn.Tanh())

    model.__qualname__ = f"tanh_single_index_{d}"
    return {
        "data": data,
        "model": model,
        "X": X64,
        "y": Y64,
        "L": f2 * lam,
        "f2_sup": f2,
        "lambda_max": lam,
        "d": d,
    }


def tanh_grads(prob: dict, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For parameter rows W (n, d): F(W), ||grad F(W)||^2 and ||grad F_k(W)||^2 (n, N), in float64."""
    Fs, gs = [], []
    for X, y in zip(prob["X"], prob["y"]):
        a = W @ X.T  # (n, B)
        r = np.tanh(a) - y
        Fs.append((r**2).mean(1))
        gs.append((2 * r / np.cosh(a) ** 2) @ X / X.shape[0])  # (n, d)
    F = np.mean(Fs, axis=0)
    g = np.mean(gs, axis=0)
    return F, (g**2).sum(1), np.stack([(gk**2).sum(1) for gk in gs], 1)
