"""FedSWA / FedMoSWA's Toy A (fedswa.md Sec. 5.5), the runs on it, and the step-size conditions of Theorem 5.2 and
of its appendix proof as hypotheses a run verifies.

Toy A: heterogeneous quadratics F_i(theta) = mean_j (x_ij . theta - y_ij)^2 whose Hessians H_i = diag(h_i) DIFFER
across clients (h_i a random permutation of linspace(mu, L, d)), so that FedAvg-type local training has a
client-drift fixed point away from theta* (with one shared Hessian, as in ``problems.quadratic``, local GD steps
commute with averaging and FedAvg has no drift at all, so that toy cannot show what Theorem 5.2 is about). Every F_i
is mu-strongly convex and L-smooth (beta = L: Assumptions G.1, G.2), client optima are w_i* = w0 + scale * u_i and
the scale is set so that the G.4 heterogeneity (1/m) sum_i ||grad F_i(theta*)||^2 equals sigma_g^2 exactly.

The step-size conditions (``step_caps``): Theorem 5.2 (main text, Sec. 5) states eta_l <= min(1/(beta K alpha),
s/(mu m K alpha)) and T >= max(beta/mu, m/s); its proof (App. G) needs more: Lemma G.12 eta_l <= 1/(81 beta K
alpha) with alpha >= 1, Lemma G.13 also eta_l <= s/(15 mu m K alpha), a constant local learning rate (rho = 1),
and Eq. (85) drops the momentum error D_{t-1} only when 9 mu eta~/(2 gamma) <= 1/3 (eta~ = K eta_l alpha).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from benchmark.runs.experiment import Experiment
from benchmark.datasets.federated_dataset import FederatedDataset
from theory.outcome import Hypothesis, hypothesis
from theory.problems import ConvexProblem, bias_free_linear
from theory.runs import trace

def hetero_quadratic(num_clients: int = 8, d: int = 10, mu: float = 0.1, L: float = 1.0, sigma_g: float = 1.0,
                     samples_per_client: int = 20, noise: float = 0.0, seed: int = 0) -> ConvexProblem:
    """Quadratics with client-specific Hessians diag(h_i), h_i a permutation of linspace(mu, L, d).

    The random draws do not depend on sigma_g (it only scales the client offsets), so runs that differ only
    in sigma_g are paired. ``meta`` of the dataset holds the per-client Hessian diagonals ``h`` (m, d).
    """
    if samples_per_client < d:
        raise ValueError("samples_per_client must be >= d")
    rng = np.random.default_rng(seed)
    h = np.stack([rng.permutation(np.linspace(mu, L, d)) for _ in range(num_clients)])
    w0 = rng.normal(size=d)
    off = rng.normal(size=(num_clients, d))
    direction = (h * off).sum(0) / h.sum(0)  # theta* - w0 per unit scale (noise-free)
    g_unit = h * (direction - off)  # grad F_i(theta*) per unit scale
    scale = sigma_g / math.sqrt(np.mean((g_unit ** 2).sum(1))) if sigma_g > 0 else 0.0
    w_i = w0 + scale * off
    n = samples_per_client
    clients, xs, ys = [], [], []
    for i in range(num_clients):
        q, _ = np.linalg.qr(rng.normal(size=(n, d)))
        X = math.sqrt(n) * q * np.sqrt(h[i] / 2.0)  # X^T X / n = diag(h_i) / 2: Hessian of the MSE = diag(h_i)
        y = X @ w_i[i] + noise * rng.normal(size=n)
        X32, y32 = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        clients.append((X32, y32))
        xs.append(X32.double().numpy())
        ys.append(y32.double().numpy())
    Xa, ya = np.concatenate(xs), np.concatenate(ys)
    w_star = np.linalg.solve(Xa.T @ Xa, Xa.T @ ya)
    f_star = float(np.mean((Xa @ w_star - ya) ** 2))
    grads = [2 * x.T @ (x @ w_star - y) / len(y) for x, y in zip(xs, ys)]
    sg = float(math.sqrt(np.mean([g @ g for g in grads])))
    data = FederatedDataset.from_tensors(clients, clients[0], task="regression",
                                         name=f"hetero_quadratic(m={num_clients},d={d},sg={sigma_g},s={seed})")
    data.meta["h"] = h
    Xt, yt = torch.tensor(Xa), torch.tensor(ya)

    def objective(w: torch.Tensor) -> float:
        return float(torch.mean((Xt @ w.double().cpu().reshape(-1) - yt) ** 2))

    return ConvexProblem("hetero_quadratic", data, bias_free_linear(d), torch.tensor(w_star), f_star, mu, L, sg, objective)


def _unit(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_000 + seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return v / v.norm()


def _run(prob: ConvexProblem, algorithm: str, args: dict, *, s: int, K: int, lr: float, T: int, seed: int,
         init: torch.Tensor | None, batch_size: int | None = None, weight_decay: float = 0.0) -> np.ndarray:
    """||theta_t - theta*||^2 for t = 0..T (the engine's run of the project's algorithm)."""
    exp = Experiment(algorithm=algorithm, dataset=prob.data, num_clients=None, model=prob.model,
                     clients_per_round=s, rounds=T, local_steps=K, batch_size=batch_size, lr=lr,
                     algorithm_args=args, weight_decay=weight_decay, seed=seed, device="cpu", eval_every=T,
                     eval_train_samples=None)
    tr = trace(exp, init=init)
    if tr.status != "ok":
        return np.full(T + 1, np.inf)
    return ((tr.params - prob.optimum) ** 2).sum(1).numpy()


_M, _D, _MU, _L, _K = 8, 10, 0.1, 1.0, 5
_ALPHA, _GAMMA = 1.5, 0.2  # paper defaults (Sec. 6.1)
_MOSWA = {"rho": 1.0, "alpha": _ALPHA, "gamma": _GAMMA, "option": 2}  # constant local LR: the proofs' setting
_FEDSWA = {"rho": 0.1, "alpha": _ALPHA}  # the paper's FedSWA


def _eta_tilde_ok(lr: float, K: int, alpha: float, beta: float, s: int, m: int, mu: float) -> dict:
    bound = min(1.0 / (beta * K * alpha), s / (mu * m * K * alpha))
    return {"eta_l": lr, "eta_max_thm52": bound, "eta_ok": bool(lr <= bound * (1 + 1e-12)),
            "T_min_thm52": max(beta / mu, m / s)}


def step_caps(lr: float, *, K: int, alpha: float, beta: float, s: int, m: int, mu: float, gamma: float, T: int,
              rho: float, option: int) -> list[Hypothesis]:
    """Theorem 5.2's conditions (main text) and its proof's (App. G) for a FedMoSWA run, each with whether the run
    meets it. All are settings the check chooses; the proof's caps are what a VIOLATED needs."""
    et = K * lr * alpha
    main = min(1.0 / (beta * K * alpha), s / (mu * m * K * alpha))
    g12, g13 = 1.0 / (81 * beta * K * alpha), s / (15 * mu * m * K * alpha)
    tol = 1 + 1e-12
    return [
        hypothesis("eta_l <= min(1/(beta K alpha), s/(mu m K alpha))", "Theorem 5.2 (main text)", lr <= main * tol,
                   f"eta_l = {lr:.4g}, cap {main:.4g}"),
        hypothesis("T >= max(beta/mu, m/s)", "Theorem 5.2 (main text)", T >= max(beta / mu, m / s),
                   f"T = {T}, needs {max(beta / mu, m / s):g}"),
        hypothesis("eta_l <= 1/(81 beta K alpha)", "Lemmas G.12, G.13 (App. G)", lr <= g12 * tol,
                   f"eta_l = {lr:.4g}, cap {g12:.4g} ({lr / g12:.3g}x)"),
        hypothesis("eta_l <= s/(15 mu m K alpha)", "Lemma G.13 (App. G)", lr <= g13 * tol,
                   f"eta_l = {lr:.4g}, cap {g13:.4g}"),
        hypothesis("alpha >= 1", "Lemmas G.12, G.13", alpha >= 1, f"alpha = {alpha:g}"),
        hypothesis("9 mu eta~/(2 gamma) <= 1/3 (Eq. 85 drops D_{t-1})", "proof of Lemma G.13, Eq. (85)",
                   9 * mu * et / (2 * gamma) <= 1 / 3 + 1e-12, f"{9 * mu * et / (2 * gamma):.3g}"),
        hypothesis("constant local learning rate eta_k^t = eta_l (rho = 1)", "App. G (the proofs' setting)", rho == 1.0,
                   f"rho = {rho:g}"),
        hypothesis("c_i update of the analysis (Option II under a constant LR)", "App. G, Eq. (6)", option == 2,
                   f"option {option}"),
    ]


def problem_hypotheses(prob: ConvexProblem, s: int, m: int) -> list[Hypothesis]:
    """Assumptions G.1-G.4 on a Toy A problem (client Hessians diag(h_i) with entries in [mu, beta]), full local
    gradients (sigma = 0) and uniform sampling of s of the m clients."""
    h = np.asarray(prob.data.meta["h"])
    return [
        hypothesis("each F_i mu-strongly convex and beta-smooth", "Assumptions G.1, G.2",
                   bool(h.min() >= prob.mu * (1 - 1e-9) and h.max() <= prob.L * (1 + 1e-9)),
                   f"client Hessian eigenvalues in [{h.min():.3g}, {h.max():.3g}], mu = {prob.mu:g}, beta = {prob.L:g}"),
        hypothesis("bounded heterogeneity (1/m) sum_i ||grad F_i(theta)||^2 at theta*", "Assumption G.4", True,
                   f"sigma_g = {prob.sigma_g:.4g} (exact)"),
        hypothesis("unbiased local gradients with variance sigma^2", "Assumption G.3", True,
                   "full local gradients: sigma = 0"),
        hypothesis("s of the m clients sampled uniformly per round", "Theorem 5.2, Lemma G.10", 1 <= s <= m,
                   f"s = {s} of m = {m}"),
    ]
