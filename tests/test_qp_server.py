"""QP_g on the server (algorithms.core.qp): the square-root fallback for duals the Gram form cannot resolve,
and the active-set loop's cycle stop. Reference: scipy's NNLS (float64)."""
from __future__ import annotations

import pytest
import torch

from algorithms.core import qp
from tests.helpers import run_tiny
from tests.test_gradma import nnls_projection


def noise_rows(seed: int = 0, k: int = 100, n: int = 200):
    """Rows like the memory's on a bias that feeds BatchNorm (gradma_mlp's "1.bias" at Table 1's c3): float
    noise, norms from 1e-20 to 1e-5, the normalised rows nearly dependent (singular values down to 1e-15):
    the Gram form's condition number is ~1e30, and its active-set loop cycles."""
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))
    M = (U * torch.logspace(0, -15, k, dtype=torch.float64)) @ V.T
    M = M * torch.logspace(-20, -5, k, dtype=torch.float64)[torch.randperm(k, generator=g)][:, None]
    return (torch.randn(n, generator=g, dtype=torch.float64) * 1e-6).float(), M.float()


# --------------------------------------------------------------------------------------------------
# Duals the Gram form cannot resolve


def test_the_active_set_loop_stops_when_it_cycles():
    p, M = noise_rows()
    Gh, qh, _ = qp._normalise(*qp._gram(p, M, None), 0.0)
    calls = []

    def solve(idx):
        calls.append(len(idx))
        return torch.linalg.lstsq(Gh[0][idx][:, idx], -qh[0][idx].unsqueeze(-1)).solution.squeeze(-1)

    z, ok = qp._lawson_hanson(100, torch.float64, lambda z: Gh[0] @ z + qh[0], solve, 1e-12, None)
    assert not ok and len(calls) < 300  # it used to run to max_iter = 310 outer iterations (572 solves)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_dual_the_gram_form_cannot_resolve_is_solved_in_square_root_form(seed, monkeypatch):
    p, M = noise_rows(seed)
    Gh, qh, _ = qp._normalise(*qp._gram(p, M, None), 0.0)
    assert not qp.solve_dual_active_set(Gh[0], qh[0])[1]  # the Gram form fails here
    out, info = qp.project_large(p, M)
    assert info["failed"] == 0 and info["residual"] <= 1e-6
    # the projection's certificates, each row normalised: M p~ >= 0 and <p~, p - p~> = 0 to rounding, z >= 0
    z, pd, pt = info["z"][0], p.double(), out.double()
    Mn = M.double() / M.double().norm(dim=1, keepdim=True)
    assert (z >= 0).all() and (Mn @ pt >= -1e-7 * pt.norm()).all()
    assert abs(float(pt @ (pd - pt))) <= 1e-7 * float(pd @ pd)
    # as near p as scipy's NNLS (which works on M itself, in square-root form too); the point itself is
    # ill-determined here (nearly dependent constraints: seed 0's two solutions lie 1.2% of ||p|| apart,
    # at distances from p equal to 4e-4, ours the nearer)
    ref = torch.from_numpy(nnls_projection(pd, Mn))
    assert float((pd - pt).norm()) <= float((pd - ref).norm()) * (1 + 1e-6)
    # the planted defect: without the square-root fallback the failure is reported, not hidden
    monkeypatch.setattr(qp, "solve_dual_nnls", lambda R, c, h: (torch.zeros(R.shape[1], dtype=R.dtype), False))
    assert qp.project_large(p, M)[1]["failed"] == 1


def test_a_per_layer_run_with_a_bias_before_batchnorm_is_not_stopped():
    # gradma_mlp-like: Linear -> BatchNorm, so the first bias's gradient is float noise (as at c3 it stopped
    # GradMA with per_layer=True in round 4 with QPFailure before the square-root fallback)
    def model(input_shape, num_classes):
        return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                   torch.nn.Linear(8, num_classes))
    r = run_tiny("gradma", rounds=4, model=model, algorithm_args={"per_layer": True, "weighting": "samples"})
    assert r.status == "ok"
