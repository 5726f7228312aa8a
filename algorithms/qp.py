"""The GradMA projection (GEM/OGD-style QP), solved exactly through its dual (GradMA paper, Eqs. 2-4).

Given p in R^d and constraint vectors M_1..M_k in R^d (the rows of ``M``, shape (k, d)), the primal

    (2)  min_{p~} 1/2 ||p - p~||^2    s.t.  <p~, M_j> >= h_j   for every j

with h = 0 in the paper (the public code's margin ``rho`` gives h_j = rho ||p|| ||M_j||), has the dual

    (4)  min_{z >= 0}  1/2 z^T G z + (q - h)^T z,     G = M M^T,  q = M p,     p~ = p + M^T z*.

With h = 0 this is the NNLS problem min_{z>=0} ||M^T z + p||, so p~ is the Euclidean projection of p onto
the cone K = {y : M y >= 0} (Moreau). Two exact solvers of (4) live here:

* ``project_small``: every active set of the k <= ~4 dual variables is tried at once (2^k candidates),
  each candidate solved by an eigendecomposition pseudo-inverse of its masked Gram matrix, and the
  candidate with the smallest KKT residual kept. Some optimal z has linearly independent support
  (Caratheodory), so the exact solution is always among the candidates. It is pure batched tensor
  code with no data-dependent branching, hence safe under ``torch.func.vmap`` (GradMA's worker QP_l,
  k = 3). The KKT residual of the chosen candidate is returned, so a failed solve is never silent.
* ``project_large``: the Lawson-Hanson active-set method written on the Gram form (G, q), in float64,
  with a Python loop (finite termination, exact up to rounding); for the server's QP_g over the memory
  buffer (k <= m, up to N). Not vmap-safe; it runs in ``aggregate``. Its KKT residual is checked too.

Both work in float64 on a normalised dual: the columns are scaled to unit norm and p to unit norm
(the feasible cone is invariant to positive column scaling, so p~ is unchanged; only z is rescaled
back), and zero columns are constraints that hold trivially (z_j = 0). ``segments`` solves one
independent QP per parameter slice (the public code's per-tensor variant).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

Segments = Sequence[tuple[int, int]] | None

_CHUNK = 1 << 22  # entries of a d-vector per float64 Gram chunk (bounds temporary memory)


def _gram(p: torch.Tensor, M: torch.Tensor, segments: Segments):
    """Per segment: G = M M^T (L, k, k), q = M p (L, k), ||p||^2 (L,), all in float64.

    The float64 copies are made chunk by chunk (static chunk bounds: vmap-safe), so the temporary memory
    is O(k * _CHUNK) whatever the model size.
    """
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    Gs, qs, ps = [], [], []
    for a, b in segs:
        G = q = pp = None
        for s in range(a, b, _CHUNK):
            e = min(b, s + _CHUNK)
            Mc = M[:, s:e].to(torch.float64)
            pc = p[s:e].to(torch.float64)
            g_, q_, p_ = Mc @ Mc.T, Mc @ pc, pc @ pc
            G, q, pp = (g_, q_, p_) if G is None else (G + g_, q + q_, pp + p_)
        Gs.append(G)
        qs.append(q)
        ps.append(pp)
    return torch.stack(Gs), torch.stack(qs), torch.stack(ps)


def _normalise(G: torch.Tensor, q: torch.Tensor, pp: torch.Tensor, rho: float):
    """Unit-norm columns and unit-norm p: (G^, q^ - h^, scale) with z = z^ * scale."""
    norms = torch.sqrt(torch.diagonal(G, dim1=-2, dim2=-1).clamp(min=0))
    pn = torch.sqrt(pp.clamp(min=0))
    nz = norms > 0
    inv = torch.where(nz, 1.0 / torch.where(nz, norms, torch.ones_like(norms)), torch.zeros_like(norms))
    pz = pn > 0
    inv_p = torch.where(pz, 1.0 / torch.where(pz, pn, torch.ones_like(pn)), torch.zeros_like(pn))
    Gh = G * inv[..., :, None] * inv[..., None, :]
    qh = q * inv * inv_p[..., None] - rho * nz.to(q.dtype)
    scale = inv * pn[..., None]  # z_j = z^_j * ||p|| / ||M_j||
    return Gh, qh, scale


def _recover(p: torch.Tensor, M: torch.Tensor, z: torch.Tensor, segments: Segments) -> torch.Tensor:
    """p + M^T z, with z (L, k) one row per segment."""
    z = z.to(p.dtype)
    if segments is None:
        return p + z[0] @ M
    parts = [z[i][:, None].expand(-1, b - a) for i, (a, b) in enumerate(segments)]
    return p + (torch.cat(parts, dim=1) * M).sum(0)


# --------------------------------------------------------------------------------------------------
# Small duals by enumeration of active sets (vmap-safe)

_MASKS: dict[int, torch.Tensor] = {}


def _masks(k: int) -> torch.Tensor:
    if k not in _MASKS:
        _MASKS[k] = torch.tensor(list(itertools.product((0.0, 1.0), repeat=k)), dtype=torch.float64)
    return _MASKS[k]


def kkt_residual(G: torch.Tensor, q: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """KKT residual of min 1/2 z^T G z + q^T z s.t. z >= 0 (last axis = variables).

    max over j of: negativity of z_j, negativity of r_j = (G z + q)_j, and |z_j r_j|, with z measured
    relative to 1 + max|z| (the normalised dual has unit-scale G and q).
    """
    r = (G @ z.unsqueeze(-1)).squeeze(-1) + q
    zs = 1.0 + z.abs().amax(dim=-1, keepdim=True)
    parts = torch.stack([(-z / zs).clamp(min=0), (-r).clamp(min=0), (z.clamp(min=0) / zs) * r.abs()])
    return parts.amax(dim=(0, -1))


def solve_dual_enum(G: torch.Tensor, q: torch.Tensor, rtol: float = 1e-10):
    """Exact solution of min_{z>=0} 1/2 z^T G z + q^T z for batched small PSD G (..., k, k).

    Returns (z, residual). Every support set A is a candidate: z_A = -pinv(G_AA) q_A, z elsewhere 0;
    the candidate with the smallest KKT residual wins. Pure tensor code, vmap-safe.
    """
    k = G.shape[-1]
    A = _masks(k).to(G.device)  # (S, k)
    outer = A[:, :, None] * A[:, None, :]  # (S, k, k)
    GA = G.unsqueeze(-3) * outer  # (..., S, k, k)
    qA = q.unsqueeze(-2) * A  # (..., S, k)
    w, V = torch.linalg.eigh(GA)
    cut = rtol * w.abs().amax(dim=-1, keepdim=True)
    keep = w > cut
    inv_w = torch.where(keep, 1.0 / torch.where(keep, w, torch.ones_like(w)), torch.zeros_like(w))
    coef = (V.transpose(-1, -2) @ qA.unsqueeze(-1)).squeeze(-1) * inv_w
    z = -(V @ coef.unsqueeze(-1)).squeeze(-1) * A
    r = (G.unsqueeze(-3) @ z.unsqueeze(-1)).squeeze(-1) + q.unsqueeze(-2)
    zs = 1.0 + z.abs().amax(dim=-1, keepdim=True)
    # inside the support: z_j >= 0 and r_j = 0; outside: r_j >= 0
    viol = torch.maximum(A * torch.maximum((-z / zs).clamp(min=0), r.abs()), (1 - A) * (-r).clamp(min=0))
    viol = viol.amax(dim=-1)  # (..., S)
    best = viol.argmin(dim=-1, keepdim=True)  # (..., 1)
    z_best = torch.take_along_dim(z, best.unsqueeze(-1), dim=-2).squeeze(-2)
    return z_best.clamp(min=0), torch.take_along_dim(viol, best, dim=-1).squeeze(-1)


def project_small(p: torch.Tensor, M: torch.Tensor, segments: Segments = None, rho: float = 0.0,
                  tol: float = 1e-6):
    """QP_l: project p (d,) onto {y : M y >= h} for a few rows M (k, d); vmap-safe.

    Returns (p_tilde, z, failed): z (L, k) in the original scale (L = number of segments), failed a
    0-d int32 tensor, 1 when some segment's KKT residual exceeds ``tol`` with finite inputs. With
    non-finite inputs p_tilde is NaN (the engine then reports divergence), never a silent p.
    """
    G, q, pp = _gram(p, M, segments)
    Gh, qh, scale = _normalise(G, q, pp, rho)
    finite = torch.isfinite(Gh).flatten(-2).all(-1) & torch.isfinite(qh).all(-1)
    Gh = torch.where(finite[:, None, None], Gh, torch.zeros_like(Gh))
    qh = torch.where(finite[:, None], qh, torch.zeros_like(qh))
    zh, viol = solve_dual_enum(Gh, qh)
    z = zh * scale
    z = torch.where(finite[:, None], z, torch.zeros_like(z))
    out = _recover(p, M, z, segments)
    out = torch.where(finite.all(), out, torch.full_like(out, float("nan")))
    failed = (finite & (viol > tol)).any().to(torch.int32)
    return out, z, failed


# --------------------------------------------------------------------------------------------------
# Larger duals: Lawson-Hanson active set on the Gram form (server side, not vmap-safe)


def solve_dual_active_set(G: torch.Tensor, q: torch.Tensor, tol: float = 1e-12, max_iter: int | None = None):
    """min_{z>=0} 1/2 z^T G z + q^T z for one PSD G (k, k) in float64 (Lawson & Hanson, 1974, NNLS).

    Returns (z, converged). Variables enter while the negative gradient w = -(G z + q) has a positive
    entry outside the passive set; each passive subproblem is an unconstrained least-squares solve,
    with a step back to feasibility when some passive variable would turn negative.
    """
    k = G.shape[0]
    z = torch.zeros(k, dtype=G.dtype)
    if k == 0:
        return z, True
    passive = torch.zeros(k, dtype=torch.bool)
    max_iter = 3 * k + 10 if max_iter is None else max_iter
    w = -(G @ z + q)
    for _ in range(max_iter):
        cand = torch.where(passive, torch.full_like(w, -torch.inf), w)
        j = int(torch.argmax(cand))
        if not bool(cand[j] > tol):
            return z, True
        passive[j] = True
        for _inner in range(k + 1):
            idx = passive.nonzero().flatten()
            s = torch.zeros_like(z)
            s[idx] = torch.linalg.lstsq(G[idx][:, idx], -q[idx].unsqueeze(-1)).solution.squeeze(-1)
            if bool((s[idx] > 0).all()):
                break
            bad = idx[s[idx] <= 0]
            den = z[bad] - s[bad]
            alpha = torch.min(torch.where(den > 0, z[bad] / torch.where(den > 0, den, 1.0), 0.0))
            z = z + alpha * (s - z)
            passive &= z > tol
            z = torch.where(passive, z, torch.zeros_like(z))
            if not bool(passive.any()):
                s = torch.zeros_like(z)
                break
        else:  # the inner loop did not reach a feasible passive solution: report, do not guess
            return z, False
        z = s
        w = -(G @ z + q)
    return z, False


def project_large(p: torch.Tensor, M: torch.Tensor, segments: Segments = None, rho: float = 0.0,
                  tol: float = 1e-6):
    """QP_g: project p (d,) onto {y : M y >= h} for k rows M (k, d), k up to a few hundred.

    Returns (p_tilde, info) with info = {"z": (L, k) float64, "residual": float, "failed": int
    (segments whose KKT residual exceeds ``tol`` or whose active set did not converge), "active": int
    (number of positive dual variables)}. Non-finite inputs give a NaN p_tilde (failed = 0).
    """
    k = M.shape[0]
    L = 1 if segments is None else len(segments)
    if k == 0:
        return p.clone(), {"z": torch.zeros(L, 0, dtype=torch.float64), "residual": 0.0, "failed": 0,
                           "active": 0}
    G, q, pp = _gram(p, M, segments)
    Gh, qh, scale = _normalise(G.cpu(), q.cpu(), pp.cpu(), rho)
    if not (torch.isfinite(Gh).all() and torch.isfinite(qh).all()):
        return torch.full_like(p, float("nan")), {"z": torch.zeros(L, k, dtype=torch.float64),
                                                   "residual": float("nan"), "failed": 0, "active": 0}
    zs, failed, worst = [], 0, 0.0
    for i in range(L):
        zl, ok = solve_dual_active_set(Gh[i], qh[i])
        res = float(kkt_residual(Gh[i], qh[i], zl))
        worst = max(worst, res)
        failed += int((not ok) or res > tol)
        zs.append(zl)
    zh = torch.stack(zs)
    z = zh * scale
    out = _recover(p, M, z.to(M.device), segments)
    return out, {"z": z, "residual": worst, "failed": failed, "active": int((zh > 0).sum())}
