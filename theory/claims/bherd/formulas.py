"""BHerd (Luo et al., arXiv 2403.16557v1): reference formulas. The exact error of a uniformly random subset of the
stored local steps (with and without replacement), and Theorems 1-2's right-hand sides and conditions as printed.
"""
from __future__ import annotations

import math

import torch

__all__ = ["random_subset_mse", "subset_mse", "theorem1_rhs", "theorem2_rhs", "theorem_conditions",
           "with_replacement_mse"]


def random_subset_mse(Z: torch.Tensor, k: int) -> float:
    """E||mean of a uniform k-subset (without replacement) of the rows of Z - mean of all rows||^2
    = (sigma^2/k) (tau - k)/(tau - 1), sigma^2 = (1/tau) sum_l ||z_l - mu||^2 (finite-population correction)."""
    tau = Z.shape[0]
    if not 1 <= k <= tau:
        raise ValueError(f"need 1 <= k <= tau, got k={k}, tau={tau}")
    if tau == 1:
        return 0.0
    Zd = Z.double()
    sigma2 = float(((Zd - Zd.mean(0)) ** 2).sum(1).mean())
    return sigma2 / k * (tau - k) / (tau - 1)


def with_replacement_mse(Z: torch.Tensor, k: int) -> float:
    """The same with replacement: sigma^2 / k (no finite-population correction): the planted defect."""
    Zd = Z.double()
    return float(((Zd - Zd.mean(0)) ** 2).sum(1).mean()) / k


def subset_mse(Z: torch.Tensor, sel: torch.Tensor) -> float:
    """||mean of the selected rows - mean of all rows||^2 (float64)."""
    Zd = Z.double()
    return float(((Zd[sel].mean(0) - Zd.mean(0)) ** 2).sum())


def theorem1_rhs(F0: float, alpha: float, eta: float, tau: int, T: int, varsigma2: float) -> float:
    """Theorem 1 (Eq. 11) as stated: 4 (F(w_1) - F*)/(alpha eta tau_max T) + varsigma^2/T + varsigma^2/(2 T^2)."""
    return 4.0 * F0 / (alpha * eta * tau * T) + varsigma2 / T + varsigma2 / (2.0 * T * T)


def theorem2_rhs(F0: float, alpha: float, eta: float, tau: int, T: int, varsigma2: float, L: float,
                 gamma: float) -> float:
    """Theorem 2's explicit form (end of its proof): varsigma^2/(4 T alpha eta L tau gamma) + F/(T alpha eta L tau)
    + varsigma^2/(4 T L)."""
    return varsigma2 / (4 * T * alpha * eta * L * tau * gamma) + F0 / (T * alpha * eta * L * tau) + varsigma2 / (4 * T * L)


def theorem_conditions(eta: float, beta: float, L: float, tau: int, T: int, alpha: float) -> dict:
    """eta <= sqrt(3) beta/(6 L tau) (Lemma 2), T <= beta^2/(24 eta^2 L^2 tau^2) (Thm 1),
    T <= beta^2/(24 alpha eta^3 L^3 tau^3) (Thm 2), alpha eta L tau <= 1 (Lemma 1)."""
    eta_max = math.sqrt(3) * beta / (6 * L * tau)
    t1 = beta ** 2 / (24 * eta ** 2 * L ** 2 * tau ** 2)
    t2 = beta ** 2 / (24 * alpha * eta ** 3 * L ** 3 * tau ** 3)
    return {"eta": eta, "eta_max_lemma2": eta_max, "eta_ok": bool(eta <= eta_max), "T": T,
            "T_max_thm1": t1, "thm1_T_ok": bool(T <= t1), "T_max_thm2": t2, "thm2_T_ok": bool(T <= t2),
            "lemma1_ok": bool(alpha * eta * L * tau <= 1)}
