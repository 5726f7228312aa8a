"""Selection of a subset of stored local gradients (BHerd, Luo et al., arXiv 2403.16557v1).

``greedy_herding`` is BHerd's Algorithm 2 ("Herding with Greedy Ordering"):

    1: center:  z_l <- z_l - (1/tau) sum_mu z_mu                 (over the tau valid vectors)
    2: s <- 0, candidates <- {1..tau}
    3: for l = 1 .. k:
    4:     pick mu = argmin_{mu in candidates} || s + z_mu ||
    5:     remove mu;  s <- s + z_mu;  order[l] <- mu

so that the running sum of the selected *centered* vectors stays as close to zero as possible, i.e.
the mean of the selected vectors stays close to the mean of all (the paper's Eq. 1 / 12). Ties go to
the lowest index (the paper leaves tie-breaking open). Ties are exact in the mathematics more often than
one would think: with tau = 2 steps the centered steps are c and -c, so the first pick (k = 1 at alpha =
0.5) is always a tie. ``greedy_herding`` therefore computes its scores in float64 from the float64-centered
steps (for float32 steps, tau = 2 then gives exactly c and -c) and treats as tied every candidate whose
score is within the proven float64 rounding bound of the best one; otherwise rounding noise picks, and that
noise depends on the buffer's padded length T (the most steps of any client in a vectorized round, over
every run of a batched group), so a run's selection depended on which runs it was batched with.
``random_subset`` and ``closest_subset`` are the controls of
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
    ||s||^2 is the same for every candidate, so each pick (Algorithm 2, line 4) needs only the Gram matrix
    G = C C^T: <c_mu, s> = (G @ picked)_mu. One (T, d) x (d, T) product, then O(T^2) per pick.

    Ties (module docstring): C and G are float64; the score 2 (G @ picked)_mu + G_mu,mu of candidate mu is
    within e_mu = gamma ||c_mu|| (||c_mu|| + 2 sum_{j picked} ||c_j||) of its exact value given C, with
    gamma = 2 n u / (1 - n u), n = d + T + 2, u = 2^-53 (Higham's dot-product bound, Cauchy-Schwarz,
    times 2). The pick is the lowest index among the candidates whose interval [score - e, score + e]
    reaches the smallest upper end: the same pick whatever the padding, unless two exact scores differ by
    less than about 4 e (a relative 1e-12 at d = 15,000).
    """
    T = Z.shape[0]
    C = centered(Z.to(torch.float64), valid)
    G = C @ C.transpose(0, 1)
    sq = torch.diagonal(G)
    norm = sq.clamp(min=0.0).sqrt()
    n = Z.shape[1] + T + 2
    gamma = 2.0 * n * 2.0 ** -53 / (1.0 - n * 2.0 ** -53)
    idx = torch.arange(T, device=Z.device)
    selected = torch.zeros(T, dtype=torch.bool, device=Z.device)
    picked = torch.zeros(T, dtype=C.dtype, device=Z.device)  # float indicator of ``selected``
    order = torch.full((T,), -1, dtype=torch.int64, device=Z.device)
    inf = torch.tensor(float("inf"), dtype=C.dtype, device=Z.device)
    for it in range(T):
        score = 2.0 * (G @ picked) + sq
        err = gamma * norm * (norm + 2.0 * (norm * picked).sum())
        free = valid & ~selected
        best = torch.where(free, score + err, inf).min()  # the smallest upper end
        tied = free & ~(score - err > best)  # NaN scores (a diverged client): all tied, the NaN is kept
        j = torch.where(tied, idx, T).min()  # ties: the lowest index
        take = (it < k) if isinstance(k, torch.Tensor) else torch.tensor(it < k, device=Z.device)
        onehot = (idx == j) & take
        selected = selected | onehot
        picked = picked + onehot.to(C.dtype)
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
