"""LFL (Amiri et al., arXiv 2006.10672v2), Theorem 1 and Corollary 1 as printed: the step size eta(t), the terms
A(i), B(i) of Eq. (11b)-(11c) and the recursion (11a), the closed form (13) and its floor, the limit of (12)
derived in lfl.md 5.7, and eps(t) of Eq. (43) measured along a run (:func:`u_stats`, a ``run_lfl`` hook).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["bound_far", "corollary1_floor", "corollary1_rhs", "eps_of", "lr_schedule", "noniid_limit",
           "theorem1_bound", "theorem1_terms", "u_stats"]


def lr_schedule(alpha: float, beta: float) -> Callable[[int], float]:
    """eta(t) = alpha / (t + beta) for round t (constant within a round: eta_m^i(t) = eta(t), Eq. 5)."""
    return lambda r: alpha / (r + beta)


def theorem1_terms(etas, tau: int, mu: float, G2: float, Gamma: float, eps: float, d: int, q1: float):
    """A(i), B(i) of Eq. (11b)-(11c) for i = 0..T-1 from eta(0..T-1);
    eta(-1) := 0 (theta_hat(0) = theta(0))."""
    eta = np.asarray(etas, dtype=np.float64)
    prev = np.concatenate([[0.0], eta[:-1]])
    A = 1.0 - mu * eta * (tau - eta * (tau - 1))
    B = (
        A * (prev * tau * math.sqrt(G2) / (2.0 * q1)) ** 2 * eps * d
        + eta**2 * (tau**2 + tau - 1) * G2
        + (1.0 + mu * (1.0 - eta)) * eta**2 * G2 * tau * (tau - 1) * (2 * tau - 1) / 6.0
        + 2.0 * eta * (tau - 1) * Gamma
    )
    return A, B


def theorem1_bound(A, B) -> tuple[np.ndarray, np.ndarray]:
    """(P, C) with RHS(11a)_t = P_t ||theta(0) - theta*||^2 + C_t for t = 0..T (P_t = prod_{i<t} A(i),
    C_t = sum_{j<t} B(j) prod_{i=j+1}^{t-1} A(i)), by the recursion x_{t+1} = A(t) x_t + B(t)."""
    T = len(A)
    P, C = np.ones(T + 1), np.zeros(T + 1)
    for t in range(T):
        P[t + 1] = A[t] * P[t]
        C[t + 1] = A[t] * C[t] + B[t]
    return P, C


def bound_far(
    T: int,
    eta: Callable[[np.ndarray], np.ndarray],
    tau: int,
    mu: float,
    G2: float,
    Gamma: float,
    eps: float,
    d: int,
    q1: float,
    x0: float,
) -> float:
    """RHS(11a) at a large T (up to ~1e7) in log space: prod A x0 + sum_j B(j) exp(sum_{i>j} log A(i))."""
    t = np.arange(T, dtype=np.float64)
    A, B = theorem1_terms(eta(t), tau, mu, G2, Gamma, eps, d, q1)
    if np.any(A <= 0):
        raise ValueError("A(i) <= 0: the step-size condition eta(t) <= min{1, 1/(mu tau)} fails")
    S = np.cumsum(np.log(A))  # S[j] = sum_{i<=j} log A(i)
    tail = S[-1] - S  # sum_{i=j+1}^{T-1} log A(i)
    return float(math.exp(S[-1]) * x0 + np.sum(B * np.exp(tail)))


def corollary1_rhs(T, eta: float, mu: float, L: float, G2: float, eps: float, d: int, q1: float, x0: float):
    """RHS of Eq. (13) (tau = 1, constant eta) for T global iterations (array or scalar)."""
    r = (1.0 - mu * eta) ** np.asarray(T, dtype=np.float64)
    return (L / 2) * r * x0 + (L / 2) * ((1 - mu * eta) * eps * d / (4 * q1**2) + 1) * (1 - r) * eta * G2 / mu


def corollary1_floor(eta: float, mu: float, L: float, G2: float, eps: float, d: int, q1: float) -> float:
    """T -> infinity limit of (13): (L/2)(1 + (1 - mu eta) eps d / (4 q1^2)) eta G^2 / mu."""
    return (L / 2) * (1 + (1 - mu * eta) * eps * d / (4 * q1**2)) * eta * G2 / mu


def noniid_limit(L: float, tau: int, Gamma: float, mu: float) -> float:
    """The limit of RHS(12) under eta(t) -> 0 derived in lfl.md 5.7: L (tau - 1) Gamma / (mu tau)
    (the limit of RHS(11a) is 2 (tau - 1) Gamma / (mu tau))."""
    return L * (tau - 1) * Gamma / (mu * tau)


def eps_of(stats_per_run: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """eps = max_t eps(t), eps(t) = E[(max|u| - min|u|)^2] / E||u||^2 (Eq. 43), u = theta(t) - theta_hat(t-1);
    ``stats_per_run``: per run an (R, 2) array of ((max|u| - min|u|)^2, ||u||^2) for t = 1..R."""
    S = np.stack(stats_per_run)  # (runs, R, 2)
    num, den = S[..., 0].mean(0), S[..., 1].mean(0)
    e = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return float(e.max()), e


def u_stats(old, new, info):
    """LFL hook: ((max|u| - min|u|)^2, ||u||^2) of u = theta(t+1) - theta_hat(t),
    the input of the next broadcast."""
    u = (new["params"] - new["theta_hat"]).detach().double().abs()
    return np.array([float((u.max() - u.min()) ** 2), float((u**2).sum())])
