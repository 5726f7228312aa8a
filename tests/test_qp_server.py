"""QP_g on the server (algorithms.core.qp): the memory as scaled rows with a Gram matrix kept where it changed
(``update_gram``, ``project_rows``: GradMA's ``gram="incremental"``), the square-root fallback for duals the
Gram form cannot resolve, and the active-set loop's cycle stop. References: scipy's NNLS (float64) and
``project_large`` on the same rows."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import algorithms
from algorithms.core import Message, ParamLayout, RoundInfo, qp
from tests.helpers import assert_same_history, run_tiny
from tests.test_gradma import conflicting_dataset, nnls_projection


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
# The incremental Gram and the scaled rows


@pytest.mark.parametrize("segments", [None, [(0, 7), (7, 8), (8, 30)]])
def test_update_gram_keeps_the_gram_of_the_rows(segments):
    g = torch.Generator().manual_seed(1)
    U = torch.randn(6, 30, generator=g, dtype=torch.float64)
    segs = segments or [(0, 30)]
    H = torch.zeros(len(segs), 6, 6, dtype=torch.float64)
    for rows in (list(range(6)), [2], [0, 5], [1, 3, 4]):
        U[rows] = torch.randn(len(rows), 30, generator=g, dtype=torch.float64)
        qp.update_gram(H, U, torch.tensor(rows), segments)
        want = torch.stack([U[:, a:b] @ U[:, a:b].T for a, b in segs])
        assert torch.allclose(H, want, atol=1e-12) and torch.equal(H, H.transpose(-1, -2))


@pytest.mark.parametrize("segments,rho", [(None, 0.0), ([(0, 5), (5, 6), (6, 40)], 0.0), (None, 0.2)])
def test_project_rows_equals_project_large_on_the_same_rows(segments, rho):
    g = torch.Generator().manual_seed(2)
    for _ in range(20):
        U = torch.randn(8, 40, generator=g, dtype=torch.float64)
        scale = torch.rand(8, generator=g, dtype=torch.float64) * 2
        scale[3] = 0.0  # an empty slot: no constraint
        p = torch.randn(40, generator=g)
        segs = segments or [(0, 40)]
        H = torch.stack([U[:, a:b] @ U[:, a:b].T for a, b in segs])
        got, info = qp.project_rows(p, U, scale, H, segments, rho)
        keep = scale > 0
        want, ref = qp.project_large(p, (U * scale[:, None])[keep], segments, rho)
        assert info["failed"] == ref["failed"] == 0 and info["z"][:, 3].abs().max() == 0
        assert torch.allclose(got, want, atol=1e-6) and got.dtype == p.dtype
        if segments is None and rho == 0.0:
            assert np.abs(got.double().numpy() - nnls_projection(p.double(), (U * scale[:, None])[keep])).max() < 1e-5


def _round(a, st, ids, d):
    ids = torch.as_tensor(ids)
    info = RoundInfo(0, ids, a.num_clients, torch.ones(len(ids)), torch.ones(len(ids), dtype=torch.int64), 0.1)
    return a.aggregate(st, Message({"d": torch.as_tensor(d)}), torch.full((len(ids),), 1 / len(ids)), info)


@pytest.mark.parametrize("per_layer", [False, True])
def test_incremental_memory_is_the_memory_of_alg3(per_layer):
    # N = 8 workers, m = 5 slots (evictions), beta2 = 0.9: D_j = scale_j U_j is the dense path's D to rounding,
    # H its Gram, and the momenta agree round after round
    layout = ParamLayout.from_module(torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 2)))
    args = {"beta1": 0.7, "beta2": 0.9, "m": 5, "per_layer": per_layer}
    a = algorithms.make("gradma_s", layout, 8, {**args, "gram": "recompute"})
    b = algorithms.make("gradma_s", layout, 8, args)  # the default since 0.5.0
    sa, sb = a.init(torch.zeros(layout.size)), b.init(torch.zeros(layout.size))
    assert "D" not in sb and sb["U"].dtype == torch.float64
    g, active = torch.Generator().manual_seed(0), 0
    v = torch.randn(layout.size, generator=g)
    for _ in range(15):
        ids = sorted(torch.randperm(8, generator=g)[:3].tolist())
        sign = torch.where(torch.rand(3, 1, generator=g) < 0.5, -1.0, 1.0)  # workers that pull apart
        d = sign * v + 0.5 * torch.randn(3, layout.size, generator=g)
        sa, sb = _round(a, sa, ids, d), _round(b, sb, ids, d)
        assert torch.equal(sa["slot_id"], sb["slot_id"]) and torch.equal(sa["counter"], sb["counter"])
        D = sb["U"] * sb["scale"][:, None]
        assert torch.allclose(D.float(), sa["D"], atol=1e-6)
        segs = b.segments or [(0, layout.size)]
        assert torch.allclose(sb["H"], torch.stack([sb["U"][:, x:y] @ sb["U"][:, x:y].T for x, y in segs]),
                              atol=1e-10)
        assert torch.allclose(sa["momentum"], sb["momentum"], atol=1e-5)
        active += int(sa["qp_g_active"])
    assert active > 10  # the QP is active: the agreement is not that of two no-ops


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_incremental_run_follows_the_recomputed_one(executor):
    data = conflicting_dataset()  # QP_g active; N = 4, S = 3, m = 3: evictions
    args = {"per_layer": True, "m": 3, "beta2": 0.9}
    a = run_tiny("gradma", executor, rounds=4, algorithm_args={**args, "gram": "recompute"}, data=data)
    b = run_tiny("gradma", executor, rounds=4, algorithm_args=args, data=data)  # incremental: the default
    assert a.status == b.status == "ok"
    assert_same_history(a, b, rtol=1e-5, atol=1e-6)


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


def test_an_incremental_run_resumes_from_its_checkpoint_bit_for_bit(monkeypatch):
    # U and H are updated in place: what a run carries must still be all in its server state
    from benchmark.contract import checks as contract

    tiny = contract.tiny_experiment
    monkeypatch.setattr(contract, "tiny_experiment", lambda name, rounds: tiny(
        name, rounds=rounds, data=conflicting_dataset(), algorithm_args={"gram": "incremental", "m": 3}))
    contract.resumes("gradma")
