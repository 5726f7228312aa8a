"""Selection of a subset of stored local gradients (BHerd, Luo et al., arXiv 2403.16557v1).

``greedy_herding`` is BHerd's Algorithm 2 ("Herding with Greedy Ordering"):

    1: center:  z_l <- z_l - (1/tau) sum_mu z_mu                 (over the tau valid vectors)
    2: s <- 0, candidates <- {1..tau}
    3: for l = 1 .. k:
    4:     pick mu = argmin_{mu in candidates} || s + z_mu ||
    5:     remove mu;  s <- s + z_mu;  order[l] <- mu

so that the running sum of the selected *centered* vectors stays as close to zero as possible, i.e.
the mean of the selected vectors stays close to the mean of all (the paper's Eq. 1 / 12). Ties go to
the lowest index (``torch.argmin``). ``random_subset`` and ``closest_subset`` are the controls of
``bherd.md`` Sec. 2: a uniformly random subset of the same size, and the k vectors individually
closest to the mean (the Fig. 1(d) reading).

All functions are pure and vmap-safe: ``Z`` is a (T, d) buffer whose rows with ``valid == False`` are
ignored (clients with fewer steps in a vectorized round), ``k`` may be a 0-d tensor (per client), and
the loop always runs T iterations, masked once k vectors are chosen. They return a boolean selection
mask of shape (T,) and, for herding, the order of the picks ((T,) int64, -1 after the k-th).
"""
from __future__ import annotations

import torch


def centered(Z: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Rows minus the mean of the valid rows; invalid rows set to 0."""
    v = valid.to(Z.dtype)
    mean = (v[:, None] * Z).sum(0) / v.sum().clamp(min=1.0)
    return (Z - mean) * v[:, None]


def greedy_herding(Z: torch.Tensor, valid: torch.Tensor, k) -> tuple[torch.Tensor, torch.Tensor]:
    """BHerd's Algorithm 2 on the valid rows of ``Z``: returns (selected mask, pick order).

    With s = sum of the picked centered rows, ||s + c_mu||^2 = ||s||^2 + 2 <c_mu, s> + ||c_mu||^2 and
    ||s||^2 is the same for every candidate, so each pick needs only the Gram matrix G = C C^T:
    <c_mu, s> = (G @ picked)_mu. One (T, d) x (d, T) product, then O(T^2) per pick.
    """
    T = Z.shape[0]
    C = centered(Z, valid)
    G = C @ C.transpose(0, 1)
    sq = torch.diagonal(G)
    idx = torch.arange(T, device=Z.device)
    selected = torch.zeros(T, dtype=torch.bool, device=Z.device)
    picked = torch.zeros(T, dtype=Z.dtype, device=Z.device)  # float indicator of ``selected``
    order = torch.full((T,), -1, dtype=torch.int64, device=Z.device)
    inf = torch.tensor(float("inf"), dtype=Z.dtype, device=Z.device)
    for it in range(T):
        score = 2.0 * (G @ picked) + sq
        score = torch.where(valid & ~selected, score, inf)
        j = torch.argmin(score)  # ties: the lowest index
        take = (it < k) if isinstance(k, torch.Tensor) else torch.tensor(it < k, device=Z.device)
        onehot = (idx == j) & take
        selected = selected | onehot
        picked = picked + onehot.to(Z.dtype)
        order = torch.where(idx == it, torch.where(take, j, -1), order)
    return selected, order


def _k_smallest(score: torch.Tensor, valid: torch.Tensor, k) -> torch.Tensor:
    """Mask of the k smallest valid scores (ties to the lowest index)."""
    inf = torch.tensor(float("inf"), dtype=score.dtype, device=score.device)
    score = torch.where(valid, score, inf)
    rank = torch.argsort(torch.argsort(score, stable=True), stable=True)
    return (rank < k) & valid


def random_subset(Z: torch.Tensor, valid: torch.Tensor, k, u: torch.Tensor) -> torch.Tensor:
    """k valid rows chosen uniformly at random without replacement; ``u`` are T uniform numbers."""
    return _k_smallest(u.to(Z.dtype), valid, k)


def closest_subset(Z: torch.Tensor, valid: torch.Tensor, k) -> torch.Tensor:
    """The k valid rows individually closest to the mean of the valid rows."""
    C = centered(Z, valid)
    return _k_smallest((C * C).sum(1), valid, k)
