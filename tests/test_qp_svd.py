"""QP_l's two SVDs (algorithms/core/qp.py ``_svd``): LAPACK's on a CPU, the Jacobi sweeps on an accelerator. The
sweeps are checked here on the CPU against LAPACK, alone and inside the dual solve, so the path a GPU takes is
tested where the suite runs."""
from __future__ import annotations

import pytest
import torch

from algorithms.core import qp


def _matrices():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(50, 7, 3, generator=g, dtype=torch.float64)
    A[10:20, :, 2] = A[10:20, :, 0]  # duplicated columns: rank 2
    A[20:30, :, 1] = 0  # a zero column
    A[30:40, :, 2] = A[30:40, :, 0] + 1e-9 * A[30:40, :, 1]  # nearly dependent
    return A


def test_the_sweeps_agree_with_lapack():
    A = _matrices()
    U, s, Vh = qp._jacobi_svd(A)
    assert torch.allclose((U * s.unsqueeze(-2)) @ Vh, A, atol=1e-13)
    assert torch.allclose(s.sort(-1).values, torch.linalg.svdvals(A).sort(-1).values, atol=1e-13)


def test_the_cpu_takes_lapack(monkeypatch):
    calls = []
    monkeypatch.setattr(qp, "_jacobi_svd", lambda A: calls.append(A) or torch.linalg.svd(A, full_matrices=False))
    qp._svd(_matrices())
    assert not calls


@pytest.mark.parametrize("seed", range(4))
def test_the_dual_solves_agree(monkeypatch, seed):
    """The projection with either SVD: the same multipliers up to rounding, on constraints that include a duplicate
    and a near-duplicate (the cases that need the rank tolerance)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(500, generator=g)
    M = torch.randn(3, 500, generator=g)
    M[2] = M[0] if seed % 2 else -0.999 * p + 1e-3 * M[1]
    lapack = qp.project_small(p, M)
    monkeypatch.setattr(qp, "_svd", qp._jacobi_svd)
    sweeps = qp.project_small(p, M)
    assert torch.allclose(lapack[1], sweeps[1], rtol=1e-9, atol=1e-12)
    assert torch.allclose(lapack[0], sweeps[0], rtol=1e-6, atol=1e-7)
    assert int(lapack[2]) == int(sweeps[2]) == 0
