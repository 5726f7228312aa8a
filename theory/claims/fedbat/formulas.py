"""FedBAT (Li et al., ICML 2024), the printed formulas of Theorems 1-3 (gamma, the step-size schedule, B, P, Q,
Eqs. 15-16), the A5 constant q^2 of S with alpha = ||x||_inf, the statistics of a learned alpha (Remark 3), and the
theory variant's arguments (Sec. 4, App. C.1: phi = 0, alpha = ||m||_inf).
"""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["THEORY_VARIANT", "B_theorem1", "B_theorem2", "P_theorem3", "Q_theorem3", "delta_bound", "gamma_of",
           "learned_alpha_stats", "q2_inf", "schedule", "schedule_eta", "theorem3_rhs", "theorem12_bound"]

THEORY_VARIANT = {"phi": 0.0, "alpha_mode": "inf"}


def gamma_of(kappa: float, tau: int) -> float:
    """gamma = max{8 kappa, tau} - 1 (Theorems 1-2)."""
    return max(8.0 * kappa, float(tau)) - 1.0


def schedule(mu: float, gamma: float, tau: int) -> tuple:
    """eta_t = 2/(mu (gamma + t)), t = r tau + s + 1 the cumulative local step (1-based) of local step s of
    round r, as (lr(round), step_decay) for ``run_lfl``: lr(r) = eta at s = 0 = 2/(mu (gamma + r tau + 1)) and
    ``InverseTimeSGD``'s eta_s = 1/(1/lr + c s) with c = mu/2."""
    return (lambda r: 2.0 / (mu * (gamma + r * tau + 1.0))), mu / 2.0


def schedule_eta(mu: float, gamma: float, tau: int, r: int, s: int) -> float:
    """eta_t of :func:`schedule` at local step s of round r (for tests and reports)."""
    lr, c = schedule(mu, gamma, tau)
    return 1.0 / (1.0 / lr(r) + c * s)


def B_theorem1(p, sigma2: float, L: float, Gamma: float, q2: float, tau: int, G2: float) -> float:
    """Theorem 1's
    B = sum_k p_k^2 sigma^2 + 6 L Gamma + 8 (1 + q^2)(tau - 1)^2 G^2 + 4 sum_k p_k^2 q^2 tau^2 G^2."""
    s = float(np.sum(np.asarray(p, dtype=np.float64) ** 2))
    return s * sigma2 + 6 * L * Gamma + 8 * (1 + q2) * (tau - 1) ** 2 * G2 + 4 * s * q2 * tau**2 * G2


def B_theorem2(
    N: int, K: int, sigma2: float, L: float, Gamma: float, q2: float, tau: int, G2: float
) -> float:
    """Theorem 2's
    B = sigma^2/N + 6 L Gamma + 8 (1 + q^2)(tau - 1)^2 G^2 + 4 (q^2 (N-1) + N - K)/(K (N-1)) tau^2 G^2."""
    return (
        sigma2 / N
        + 6 * L * Gamma
        + 8 * (1 + q2) * (tau - 1) ** 2 * G2
        + 4 * (q2 * (N - 1) + N - K) / (K * (N - 1)) * tau**2 * G2
    )


def theorem12_bound(t, kappa: float, gamma: float, B: float, mu: float, delta1: float):
    """Eq. (15): kappa/(gamma + t) (2B/mu + mu (gamma + 1)/2 Delta_1), t the 1-based iterate index."""
    return kappa / (gamma + np.asarray(t, dtype=np.float64)) * (2 * B / mu + mu * (gamma + 1) / 2 * delta1)


def delta_bound(t, B: float, mu: float, gamma: float, delta1: float):
    """The induction's Delta_t <= v/(t + gamma), v = max{beta^2 B/(beta mu - 1), (gamma + 1) Delta_1},
    beta = 2/mu."""
    beta = 2.0 / mu
    v = max(beta**2 * B / (beta * mu - 1), (gamma + 1) * delta1)
    return v / (np.asarray(t, dtype=np.float64) + gamma)


def P_theorem3(N: int, K: int, sigma2: float, q2: float, tau: int, G2: float) -> float:
    """P = sigma^2/N + 4 (q^2 (N - 1) + N - K)/(K (N - 1)) tau^2 G^2 (Thm 3)."""
    return sigma2 / N + 4 * (q2 * (N - 1) + N - K) / (K * (N - 1)) * tau**2 * G2


def Q_theorem3(q2: float, tau: int, G2: float) -> float:
    """Q = 4 (1 + q^2)(tau - 1)^2 G^2 (Thm 3)."""
    return 4 * (1 + q2) * (tau - 1) ** 2 * G2


def theorem3_rhs(T, L: float, gap0: float, P: float, Q: float):
    """Eq. (16): 2 L (F(w_0) - F* + Gamma)/sqrt(T) + P/sqrt(T) + Q/T, with gap0 = F(w_0) - F* + Gamma."""
    T = np.asarray(T, dtype=np.float64)
    return 2 * L * gap0 / np.sqrt(T) + P / np.sqrt(T) + Q / T


def q2_inf(layer_sizes) -> float:
    """The A5 constant of S with alpha_l = ||x_l||_inf: max_l d_l - 1."""
    return float(max(layer_sizes) - 1)


def learned_alpha_stats(m: torch.Tensor, alpha: torch.Tensor, slices) -> dict:
    """For an uploaded update m and its per-layer step sizes alpha (binarized slices only):

    * relative bias ||E S(m, alpha) - m|| / ||m|| with E S(m, alpha) = clip(m, -alpha, alpha) (Eqs. 6-7);
    * q^2 of the learned alpha: E||S(m, alpha) - m||^2 / ||m||^2, with the exact per-entry error
      alpha^2 - m_i^2 inside the range (two-point variable) and (|m_i| - alpha)^2 outside (the clip);
    * q^2 of alpha = ||m_l||_inf on the same m: (sum_l d_l ||m_l||_inf^2 - ||m||^2)/||m||^2;
    * the share of clipped entries.
    """
    m = m.double()
    a = torch.cat([alpha.double()[i].expand(s.numel) for i, s in enumerate(slices)])
    x = torch.cat([m[s.start : s.stop] for s in slices])
    n2 = float((x**2).sum())
    inside = x.abs() <= a
    clip = torch.maximum(torch.minimum(x, a), -a)
    err = torch.where(inside, a**2 - x**2, (x.abs() - a) ** 2)
    inf2 = sum(s.numel * float(m[s.start : s.stop].abs().max()) ** 2 for s in slices)
    return {
        "rel_bias": math.sqrt(float(((clip - x) ** 2).sum()) / n2),
        "q2_learned": float(err.sum()) / n2,
        "q2_inf": (inf2 - n2) / n2,
        "clipped_share": float((~inside).double().mean()),
    }
