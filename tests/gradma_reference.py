"""Hand computations of GradMA's rules for the tests, written apart from the code under test
(``algorithms/gradma.py``, ``algorithms/core/qp.py``): numpy float64, the projection by enumeration of the
primal's active sets, and a round written the public code's way (its managers' loops: per-tensor QPs when
asked, the memory rows G_j = Delta_j when stored, G_j += Delta_j after, all G_j *= beta2 after the QP).

Rules (gradma.md, Secs. 1.2-1.6 and 7):

    Worker_Update (Alg. 2):  g~ = argmin_{y : <y, M_j> >= 0} ||y - g||,  M = [g(x_{tau-1}), g(x_t), x_tau - x_t]
                             x_{tau+1} = x_tau - eta_l g~                  (wd: g(w) + wd w on non-bias entries)
    Server_Update (Alg. 3):  d = sum_i p_i d_i,  m = beta1 m~ + d,  m~ = argmin_{y : <y, G_j> >= 0} ||y - m||
                             x <- x - eta_g m~
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np


def project(p: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The Euclidean projection of p onto {y : M y >= 0} (rows of M), exactly, by enumeration.

    The projection y* satisfies y* = p + M_A^T z with M_A y* = 0 on its active set A (KKT), so it is the
    projection of p onto the null space of M_A; every subset A gives such a candidate, and the nearest
    feasible candidate is y* (it is one of them, and every feasible point is at least as far from p)."""
    p, M = np.asarray(p, dtype=np.float64), np.asarray(M, dtype=np.float64).reshape(-1, len(p))
    M = M[np.linalg.norm(M, axis=1) > 0]  # a zero row constrains nothing
    scale = np.linalg.norm(p) * (1 + np.linalg.norm(M, axis=1))
    best, best_dist = None, np.inf
    for k in range(len(M) + 1):
        for A in itertools.combinations(range(len(M)), k):
            y = p.copy()
            if A:
                MA = M[list(A)]
                y = p - MA.T @ np.linalg.lstsq(MA.T, p, rcond=None)[0]
            if (M @ y >= -1e-12 * scale).all() and np.linalg.norm(y - p) < best_dist - 1e-15 * np.linalg.norm(p):
                best, best_dist = y, np.linalg.norm(y - p)
    return best


def project_segments(p: np.ndarray, M: np.ndarray, segments: Sequence[tuple[int, int]] | None) -> np.ndarray:
    """``project`` on the whole vector (segments None: the paper) or on each slice alone (the public code)."""
    if segments is None:
        return project(p, M)
    return np.concatenate([project(p[a:b], M[:, a:b]) for a, b in segments])


def worker(grad: Callable[[np.ndarray, int], np.ndarray], x: np.ndarray, x_prev: np.ndarray, lr: float,
           steps: int, segments, wd: float = 0.0, decay: np.ndarray | None = None) -> np.ndarray:
    """Alg. 2 from x_0 = x with x_{-1} = x_prev; ``grad(w, tau)`` the gradient on step tau's minibatch;
    ``decay`` the entries wd applies to (the public code: non-bias tensors). Returns x_I."""
    def g_of(w, tau):
        g = grad(w, tau)
        return g + wd * w * decay if wd else g

    p, p_prev = x.copy(), x_prev.copy()
    for tau in range(steps):
        M = np.stack([g_of(p_prev, tau), g_of(x, tau), p - x])
        g_t = project_segments(g_of(p, tau), M, segments)
        p, p_prev = p - lr * g_t, p
    return p


class CodeServer:
    """Server_Update as the public code's manager runs it, memory m = N (every worker keeps its row)."""

    def __init__(self, x0: np.ndarray, eta_g: float, beta1: float, beta2: float, segments, memory: bool = True):
        self.x, self.m_tilde, self.G = x0.copy(), np.zeros_like(x0), {}
        self.eta_g, self.beta1, self.beta2, self.segments, self.memory = eta_g, beta1, beta2, segments, memory

    def round(self, updates: dict[int, np.ndarray], weights: dict[int, float]) -> np.ndarray:
        d = sum(weights[i] * updates[i] for i in updates)
        if not self.memory:  # GradMA-W (Alg. 7): x <- x - eta_g d
            self.x = self.x - self.eta_g * d
            return self.x
        for i, u in updates.items():
            self.G[i] = u if i not in self.G else self.G[i] + u
        m = self.beta1 * self.m_tilde + d
        self.m_tilde = project_segments(m, np.stack(list(self.G.values())), self.segments)
        self.x = self.x - self.eta_g * self.m_tilde
        self.G = {i: self.beta2 * g for i, g in self.G.items()}
        return self.x
