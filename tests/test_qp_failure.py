"""Regression tests for GradMA's worker QP_l (``algorithms.core.qp.project_small``) on nearly dependent
constraints, the cause of the spurious ``QPFailure`` of GradMA-W on digits (gradma_reduced, seed 0,
S = 5 and 10): three constraint vectors nearly coplanar (normalised Gram condition number 2.4e10 to
3.7e10), two of them nearly antiparallel (cosine -0.9998) with norms 10-20x apart. The previous solver
cut the pseudo-inverse of each active set's Gram matrix at 1e-10 of its largest eigenvalue, which
truncated the one genuinely small eigenvalue of the full active set; the best remaining candidate then
violated a constraint by 1.4e-6 to 5.4e-6 > qp_tol = 1e-6. And a genuinely infeasible QP must still fail."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import nnls
from torch.func import vmap

import algorithms
from algorithms.core import qp
from algorithms.core import Message, ParamLayout, RoundInfo
from algorithms.gradma import QPFailure


def nnls_projection(p, M):
    """Reference p~ = p + M^T z, z = argmin_{z>=0} ||M^T z + p|| (scipy's NNLS on the vectors, float64)."""
    p, M = np.asarray(p, dtype=np.float64), np.asarray(M, dtype=np.float64)
    z, _ = nnls(M.T, -p)
    return p + M.T @ z


def previous_solver(p, M, rtol=1e-10):
    """The solver before the fix, for the record: Gram-form enumeration of the 2^k active sets, an
    eigendecomposition pseudo-inverse cut at rtol * max eigenvalue, the candidate of least KKT violation,
    p~ summed in p's dtype. Returns (p~, violation)."""
    G, q, pp = qp._gram(p, M, None)
    Gh, qh, scale = qp._normalise(G, q, pp, 0.0)
    A = qp._masks(M.shape[0])
    GA, qA = Gh.unsqueeze(-3) * (A[:, :, None] * A[:, None, :]), qh.unsqueeze(-2) * A
    w, V = torch.linalg.eigh(GA)
    keep = w > rtol * w.abs().amax(dim=-1, keepdim=True)
    inv_w = torch.where(keep, 1.0 / torch.where(keep, w, torch.ones_like(w)), torch.zeros_like(w))
    z = -(V @ ((V.transpose(-1, -2) @ qA.unsqueeze(-1)).squeeze(-1) * inv_w).unsqueeze(-1)).squeeze(-1) * A
    r = (Gh.unsqueeze(-3) @ z.unsqueeze(-1)).squeeze(-1) + qh.unsqueeze(-2)
    zs = 1.0 + z.abs().amax(dim=-1, keepdim=True)
    viol = torch.maximum(A * torch.maximum((-z / zs).clamp(min=0), r.abs()), (1 - A) * (-r).clamp(min=0)).amax(-1)
    best = int(viol[0].argmin())
    zb = z[0, best].clamp(min=0) * scale[0]
    return p + zb.to(p.dtype) @ M, float(viol[0, best])


def near_degenerate(seed=0, d=40, dtype=torch.float64):
    """Hand-built QP_l like the failing digits steps: M_2 (norm 1e3) and M_3 (norm 1e2) nearly
    antiparallel (angle pi - 0.02), M_1 nearly in their plane (out-of-plane part 1e-4), p (norm ~1e-2)
    close to M_1 but on the wrong side of that plane: all three constraints are active and the
    projection is ~1e-3 ||p|| long, built from multipliers that cancel. A random rotation of R^d."""
    g = torch.Generator().manual_seed(seed)
    e, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    e = e.T  # orthonormal rows
    theta, phi, eps, kappa = 0.02, -0.3, 1e-4, 0.03
    a = e[0]
    b = -np.cos(theta) * e[0] + np.sin(theta) * e[1]
    c = np.cos(phi) * e[0] + np.sin(phi) * e[1] + eps * e[2]
    M = torch.stack([c, 1e3 * a, 1e2 * b])
    p = 1e-2 * (c - kappa * e[2] + 1e-3 * e[3])
    return p.to(dtype), M.to(dtype)


def check_projection(p, M, out, z, atol):
    """p~ equals scipy's projection, and the primal KKT conditions hold (normalised by ||p|| ||M_j||)."""
    pd, Md, od, zd = p.double(), M.double(), out.double(), z[0].double()
    scale = float(pd.norm())
    assert np.abs(od.numpy() - nnls_projection(pd, Md)).max() <= atol * scale
    cons = (Md @ od) / (scale * Md.norm(dim=1))
    assert (cons >= -atol).all()  # feasibility
    assert (zd >= 0).all()
    assert (zd * Md.norm(dim=1) / scale * cons).abs().max() <= atol * (1 + float((zd * Md.norm(dim=1)).max() / scale))
    assert torch.allclose(od, pd + zd @ Md, atol=atol * scale)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, 1e-8)])
def test_nearly_coplanar_constraints_failed_before_and_are_solved_exactly_now(dtype, atol):
    for seed in range(3):
        p, M = near_degenerate(seed, dtype=dtype)
        G, q, pp = qp._gram(p, M, None)
        Gh = qp._normalise(G, q, pp, 0.0)[0][0]
        w = torch.linalg.eigvalsh(Gh)
        assert w[-1] / w[0] > 1e10  # nearly dependent: Gram condition number ~1.2e11
        assert float(Gh[1, 2]) < -0.999 and float(M[1].norm() / M[2].norm()) == pytest.approx(10, rel=1e-6)
        # before: a spurious failure (violation ~3e-6 > qp_tol), and a p~ a few % of ||p|| off
        old, viol = previous_solver(p, M)
        assert viol > 1e-6
        assert np.abs(old.double().numpy() - nnls_projection(p.double(), M.double())).max() > 1e-3 * float(p.norm())
        # now: solved, exact
        out, z, failed = qp.project_small(p, M)
        assert int(failed) == 0 and out.dtype == dtype
        check_projection(p, M, out, z, atol)


def test_nearly_coplanar_constraints_under_vmap_float32():
    cases = [near_degenerate(seed, d=60, dtype=torch.float32) for seed in range(4)]
    P, Ms = torch.stack([c[0] for c in cases]), torch.stack([c[1] for c in cases])
    out, z, failed = vmap(qp.project_small)(P, Ms)
    assert failed.tolist() == [0] * 4
    for i in range(4):
        check_projection(P[i], Ms[i], out[i], z[i], 1e-8)


def test_duplicated_and_nearly_antiparallel_constraints_are_exact():
    """GradMA's step tau = 1 on a worker whose batch is its whole dataset: grad f(x_{tau-1}) = grad f(x_t)
    exactly, and x_tau - x_t = -eta_l grad f(x_t) up to float32 summation noise (relative 1e-7), so the
    cone is a wedge of angle ~1e-7. The previous solver returned a p~ up to 2e-3 ||p|| off (seed 0) with
    a KKT violation of 5e-10, i.e. silently."""
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        grad = 0.2 * torch.randn(500, generator=g)
        step = -0.1 * grad * (1 + 1e-7 * torch.randn(500, generator=g))
        p = 0.3 * grad + 0.05 * torch.randn(500, generator=g)
        M = torch.stack([grad, grad, step])
        if seed == 0:
            old, viol = previous_solver(p, M)
            assert viol < 1e-6 and np.abs(old.double().numpy() - nnls_projection(p, M)).max() > 1e-3 * float(p.norm())
        out, z, failed = qp.project_small(p, M)
        assert int(failed) == 0
        check_projection(p, M, out, z, 1e-8)


def test_random_cases_still_match_nnls():
    g = torch.Generator().manual_seed(11)
    for _ in range(200):
        d, k = int(torch.randint(1, 40, (), generator=g)), int(torch.randint(1, 4, (), generator=g))
        p = torch.randn(d, generator=g, dtype=torch.float64)
        M = torch.randn(k, d, generator=g, dtype=torch.float64) * torch.logspace(-3, 3, k, dtype=torch.float64)[:, None]
        out, z, failed = qp.project_small(p, M)
        assert int(failed) == 0
        check_projection(p, M, out, z, 1e-10)


def rinfo(ids, n):
    return RoundInfo(0, torch.tensor(ids), n, torch.ones(len(ids)), torch.ones(len(ids), dtype=torch.int64), 0.1)


def test_an_infeasible_qp_still_fails_and_stops_the_run():
    """With the code's margin rho, opposite constraints <y, u> >= rho ||p|| ||u|| and <y, -u> >= rho ||p|| ||u||
    have no solution: the dual is unbounded, no candidate satisfies the KKT conditions, and the failure is
    reported (violation 2 rho), counted in the uplink and raised by the server."""
    g = torch.Generator().manual_seed(3)
    u, w, p = (torch.randn(30, generator=g) for _ in range(3))
    M = torch.stack([u, -2 * u, w])
    out, _, failed = qp.project_small(p, M, rho=0.1)
    assert int(failed) == 1
    _, info = qp.project_large(p, M, rho=0.1)
    assert info["failed"] == 1 and info["residual"] == pytest.approx(0.2, rel=1e-5)
    _, _, ok = qp.project_small(p, M, rho=0.0)  # without the margin the same constraints are feasible
    assert int(ok) == 0
    alg = algorithms.make("gradma_w", ParamLayout.single(30), 4)
    up = Message({"d": torch.zeros(2, 30), "qp_fail": torch.stack([failed, failed]).to(torch.uint8)})
    with pytest.raises(QPFailure, match="2 local steps"):
        alg.aggregate(alg.init(torch.zeros(30)), up, torch.full((2,), 0.5), rinfo([0, 1], 4))
