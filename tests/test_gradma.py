"""GradMA, GradMA-W, GradMA-S and the QP projection of algorithms.core.qp: exactness against scipy's NNLS,
KKT and Moreau identities, hand-computed worker and server updates, mem_red bookkeeping, the paper's
reductions (GradMA-S with memory off = FedAvgM, and = FedAvg with beta1 = 0), executor equivalence of
the options, failure reporting, validation."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import nnls
from torch.func import vmap

import algorithms
from algorithms.core import qp
from algorithms.core import Message, ParamLayout, RoundInfo, make_hyper
from algorithms.gradma import QPFailure
from benchmark import FederatedDataset
from tests.helpers import assert_same_history, run_tiny, tiny_bn_model
from tests.test_drift_baselines import QuadCtx


def nnls_projection(p, M):
    """Reference: p~ = p + M^T z with z = argmin_{z>=0} ||M^T z + p|| (scipy, float64)."""
    p, M = np.asarray(p, dtype=np.float64), np.asarray(M, dtype=np.float64)
    if len(M) == 0:
        return p
    z, _ = nnls(M.T, -p)
    return p + M.T @ z


def random_case(g, d, k, kind):
    p = torch.randn(d, generator=g, dtype=torch.float64)
    M = torch.randn(k, d, generator=g, dtype=torch.float64)
    if kind == 1:
        M[-1] = 0  # the tau = 0 column x_0 - x_t
    elif kind == 2 and k > 1:
        M[1] = 3 * M[0]  # duplicate direction (the public code's tau = 0 columns)
    elif kind == 3 and k > 1:
        M[1] = -M[0]  # opposite directions: the cone is a subspace
    elif kind == 4:
        M = M * torch.logspace(-6, 3, k, dtype=torch.float64)[:, None]  # badly scaled columns
    return p, M


# --------------------------------------------------------------------------------------------------
# The projection


@pytest.mark.parametrize("kind", range(5))
def test_small_projection_matches_nnls_and_kkt(kind):
    g = torch.Generator().manual_seed(kind)
    for _ in range(60):
        d, k = int(torch.randint(1, 30, (), generator=g)), int(torch.randint(1, 4, (), generator=g))
        p, M = random_case(g, d, k, kind)
        pt, z, failed = qp.project_small(p, M)
        assert int(failed) == 0
        ref = nnls_projection(p, M)
        scale = 1 + float(p.norm())
        assert np.abs(pt.numpy() - ref).max() <= 1e-9 * scale
        # KKT of the primal (2): feasibility, z >= 0, complementary slackness; Moreau identities
        cons = M @ pt
        assert (cons >= -1e-9 * scale * (1 + M.norm(dim=1))).all()
        assert (z >= 0).all()
        assert torch.allclose(pt, p + z[0] @ M, atol=1e-12 * scale)
        assert (z[0] * cons).abs().max() <= 1e-8 * scale * (1 + float(z.abs().max()) * float(M.norm()))
        assert abs(float(pt @ (p - pt))) <= 1e-9 * scale ** 2
        assert float(pt.norm()) <= float(p.norm()) + 1e-12


def test_small_projection_special_cases():
    g = torch.Generator().manual_seed(7)
    p = torch.randn(12, generator=g, dtype=torch.float64)
    # feasible p is returned unchanged
    M = torch.stack([p + 0.1 * torch.randn(12, generator=g, dtype=torch.float64), p])
    pt, z, _ = qp.project_small(p, M)
    assert torch.equal(z, torch.zeros_like(z)) and torch.allclose(pt, p, atol=0, rtol=0)
    # one constraint: the A-GEM closed form p - min(0, <p, m>)/||m||^2 m
    m = -p + 0.3 * torch.randn(12, generator=g, dtype=torch.float64)
    pt, _, _ = qp.project_small(p, m[None])
    assert torch.allclose(pt, p - min(0.0, float(p @ m)) / float(m @ m) * m, atol=1e-12)
    # all-zero constraints and p = 0
    pt, _, failed = qp.project_small(p, torch.zeros(3, 12, dtype=torch.float64))
    assert torch.equal(pt, p) and int(failed) == 0
    pt, _, _ = qp.project_small(torch.zeros(12, dtype=torch.float64), torch.randn(3, 12, generator=g,
                                                                                  dtype=torch.float64))
    assert torch.equal(pt, torch.zeros(12, dtype=torch.float64))


def test_small_projection_float32_under_vmap_equals_loop():
    g = torch.Generator().manual_seed(3)
    P, Ms = torch.randn(6, 500, generator=g), torch.randn(6, 3, 500, generator=g)
    Ms[0, 2] = 0
    out, _, failed = vmap(qp.project_small)(P, Ms)
    for i in range(6):
        o, _, f = qp.project_small(P[i], Ms[i])
        assert torch.allclose(out[i], o, atol=1e-6) and int(f) == int(failed[i]) == 0
        ref = nnls_projection(P[i].double(), Ms[i].double())
        assert np.abs(out[i].double().numpy() - ref).max() < 1e-5


def test_chunked_float64_gram_gives_the_same_projection(monkeypatch):
    g = torch.Generator().manual_seed(8)
    P, Ms = torch.randn(3, 50, generator=g), torch.randn(3, 3, 50, generator=g)
    whole = vmap(qp.project_small)(P, Ms)[0]
    monkeypatch.setattr(qp, "_CHUNK", 7)
    chunked = vmap(qp.project_small)(P, Ms)[0]
    assert torch.allclose(whole, chunked, atol=1e-6)
    assert torch.allclose(qp.project_large(P[0], Ms[0])[0], whole[0], atol=1e-6)


def test_qr_in_chunks_gives_the_same_projection(monkeypatch):
    """QP_l's QR in chunks of ``_QR_CHUNK`` entries (TSQR, 0.5.0) and p~ = p + M^T z from the kept chunks: the
    projection of the QR of the whole vector, to rounding, with the chunks' edges anywhere (7 does not divide 50)."""
    g = torch.Generator().manual_seed(9)
    P, Ms = torch.randn(3, 50, generator=g), torch.randn(3, 3, 50, generator=g)
    whole = vmap(qp.project_small)(P, Ms)[0]
    monkeypatch.setattr(qp, "_QR_CHUNK", 7)
    R, lifted = qp._factor(P[0].double(), Ms[0].double(), None)
    assert len(lifted) == 8
    M1 = torch.cat([Ms[0].double().T, P[0].double()[:, None]], 1)
    assert torch.allclose(R[0].T @ R[0], M1.T @ M1, atol=1e-10)  # R^T R is still the Gram matrix of [M^T | p]
    chunked = vmap(qp.project_small)(P, Ms)[0]
    assert torch.allclose(whole, chunked, atol=1e-6)


def test_per_segment_projection_is_one_qp_per_slice():
    g = torch.Generator().manual_seed(4)
    p, M = torch.randn(20, generator=g, dtype=torch.float64), torch.randn(3, 20, generator=g, dtype=torch.float64)
    segs = [(0, 5), (5, 6), (6, 20)]
    pt_small, z, _ = qp.project_small(p, M, segs)
    pt_large, info = qp.project_large(p, M, segs)
    ref = np.concatenate([nnls_projection(p[a:b], M[:, a:b]) for a, b in segs])
    assert z.shape == (3, 3)
    assert np.abs(pt_small.numpy() - ref).max() < 1e-10 and np.abs(pt_large.numpy() - ref).max() < 1e-10
    assert info["failed"] == 0
    assert not np.allclose(ref, nnls_projection(p, M))  # per-layer differs from the paper's global QP


@pytest.mark.parametrize("kind", range(5))
def test_large_projection_matches_nnls(kind):
    g = torch.Generator().manual_seed(10 + kind)
    for _ in range(25):
        d, k = int(torch.randint(1, 80, (), generator=g)), int(torch.randint(1, 60, (), generator=g))
        p, M = random_case(g, d, k, kind)
        pt, info = qp.project_large(p, M)
        assert info["failed"] == 0
        ref = nnls_projection(p, M)
        assert np.abs(pt.numpy() - ref).max() <= 1e-9 * (1 + float(p.norm())), (d, k)
        if k <= 3:
            assert torch.allclose(pt, qp.project_small(p, M)[0], atol=1e-9 * (1 + float(p.norm())))


def test_margin_constraints_hold_and_solvers_agree():
    g = torch.Generator().manual_seed(5)
    for _ in range(30):
        p, M = torch.randn(15, generator=g, dtype=torch.float64), torch.randn(3, 15, generator=g, dtype=torch.float64)
        rho = 0.2
        a, _, failed = qp.project_small(p, M, rho=rho)
        b, info = qp.project_large(p, M, rho=rho)
        assert int(failed) == 0 and info["failed"] == 0
        assert torch.allclose(a, b, atol=1e-9)
        assert ((M @ a) >= rho * p.norm() * M.norm(dim=1) - 1e-9).all()
        # optimality: p - p~ lies in the cone spanned by the active constraint normals (-M_j, z_j >= 0)
        z = info["z"][0]
        assert (z >= 0).all() and torch.allclose(a, p + z @ M, atol=1e-9)


def test_failures_are_reported_not_hidden():
    g = torch.Generator().manual_seed(6)
    p, M = torch.randn(40, generator=g, dtype=torch.float64), -torch.randn(3, 40, generator=g, dtype=torch.float64)
    M[0] = -p + 0.1 * M[0]
    _, _, failed = qp.project_small(p, M, tol=1e-300)  # a tolerance no rounding can meet
    assert int(failed) == 1
    _, info = qp.project_large(p, M, tol=1e-300)
    assert info["failed"] == 1
    # non-finite input: NaN out (the engine reports divergence), not a silent unprojected p
    M[1, 3] = float("nan")
    out, _, failed = qp.project_small(p, M)
    assert torch.isnan(out).all() and int(failed) == 0
    out, info = qp.project_large(p, M)
    assert torch.isnan(out).all()


# --------------------------------------------------------------------------------------------------
# Worker side (Alg. 2), hand-computed on f(x) = 1/2 ||x - b||^2 with b = (1, 0), x_t = 0, eta_l = 0.1


def test_worker_update_hand_computed_with_stale_local_model():
    a = algorithms.make("gradma_w", ParamLayout.single(2), 2)
    ctx = QuadCtx([[1.0, 0.0]], [[0], [0]], lr=0.1)
    state = {"x_prev": torch.tensor([2.0, 1.0])}  # x_{-1}: the worker's last local model
    up, state = a.local_update(ctx, a.broadcast(a.init(torch.zeros(2))), state)
    # tau = 0: g = (-1, 0), G = [(1, 1), (-1, 0), 0]; <g, (1, 1)> < 0 so g~ = g + 0.5 (1, 1) = (-0.5, 0.5)
    # tau = 1: x_1 = (0.05, -0.05), g = (-0.95, -0.05), G = [(-1, 0), (-1, 0), (0.05, -0.05)];
    #          <g, x_1 - x_t> < 0 so g~ = g + 9 (0.05, -0.05) = (-0.5, -0.5); x_2 = (0.1, 0)
    points = torch.stack(ctx.points)  # per step: x_{tau-1}, x_t, then x_tau
    assert torch.allclose(points, torch.tensor([[2.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
                                                [0.05, -0.05]]), atol=1e-7)
    assert torch.allclose(state["x_prev"], torch.tensor([0.1, 0.0]), atol=1e-7)
    assert torch.allclose(up["d"], torch.tensor([-0.1, 0.0]), atol=1e-7)
    assert int(up["qp_fail"]) == 0 and up["qp_fail"].dtype == torch.uint8


def test_worker_update_global_previous_model_freezes_isotropic_quadratic():
    # the public code's variant (x_{-1} = x_t): tau = 0 is a plain step; at tau = 1 the third constraint
    # removes the whole gradient on an isotropic quadratic (gradma.md, Sec. 1.4 heuristic)
    a = algorithms.make("gradma_w", ParamLayout.single(2), 2, {"prev_model": "global"})
    assert a.client_init(torch.zeros(2)) == {}
    ctx = QuadCtx([[1.0, 0.0]], [[0], [0], [0]], lr=0.1)
    up, _ = a.local_update(ctx, a.broadcast(a.init(torch.zeros(2))), {})
    assert torch.allclose(up["d"], torch.tensor([-0.1, 0.0]), atol=1e-7)


class BufferCtx(QuadCtx):
    """Counts BatchNorm-style buffer updates: every gradient evaluation bumps ``buffers``."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.buffers = {"updates": torch.zeros(())}

    def loss_and_grad(self, p, batch, update_stats=True):
        if update_stats:
            self.buffers = {"updates": self.buffers["updates"] + 1}
        return super().loss_and_grad(p, batch)


def test_auxiliary_gradients_leave_normalisation_statistics_alone():
    a = algorithms.make("gradma_w", ParamLayout.single(2), 2)
    ctx = BufferCtx([[1.0, 0.0]], [[0], [0], [0]], lr=0.1)
    a.local_update(ctx, a.broadcast(a.init(torch.zeros(2))), a.client_init(torch.zeros(2)))
    assert len(ctx.points) == 9 and int(ctx.buffers["updates"]) == 3  # only the gradient at x_tau counts


@pytest.mark.parametrize("name", ["gradma", "gradma_w"])
def test_batchnorm_sequential_equals_vectorized(name):
    a = run_tiny(name, "sequential", model=tiny_bn_model, rounds=3)
    b = run_tiny(name, "vectorized", model=tiny_bn_model, rounds=3)
    assert_same_history(a, b)


# --------------------------------------------------------------------------------------------------
# Server side (Alg. 3, Alg. 4)


def rinfo(ids, n, r=0):
    ids = torch.as_tensor(ids)
    return RoundInfo(r, ids, n, torch.ones(len(ids)), torch.ones(len(ids), dtype=torch.int64), 0.1)


def server_round(a, st, ids, d, weights=None):
    d = torch.as_tensor(d, dtype=torch.float32)
    w = torch.full((len(ids),), 1.0 / len(ids)) if weights is None else torch.as_tensor(weights)
    return a.aggregate(st, Message({"d": d}), w, rinfo(ids, a.num_clients))


def test_server_update_hand_computed():
    a = algorithms.make("gradma_s", ParamLayout.single(2), 2, {"beta1": 0.0, "beta2": 0.5, "gram": "recompute"})
    st = a.init(torch.zeros(2))
    st = server_round(a, st, [0, 1], [[2.0, 0.0], [-1.0, -0.2]])
    # m = (0.5, -0.1); <m, D[1]> = -0.48 < 0, <m, D[0]> > 0 after projecting on D[1]'s half-space
    m = torch.tensor([0.5, -0.1])
    expect = m + 0.48 / 1.04 * torch.tensor([-1.0, -0.2])
    assert torch.allclose(st["momentum"], expect, atol=1e-6)
    assert torch.allclose(st["params"], -expect, atol=1e-6)
    assert int(st["qp_g_active"]) == 1 and int(st["qp_g_failures"]) == 0
    # round 2, only worker 0: D[0] = 0.5 D[0] + d, D[1] = 0.5 D[1]; m = 0 * m~ + d
    st2 = server_round(a, st, [0], [[0.0, 1.0]])
    assert torch.allclose(st2["D"], torch.tensor([[1.0, 1.0], [-0.5, -0.1]]))
    ref = nnls_projection([0.0, 1.0], st2["D"])
    assert np.allclose(st2["momentum"].numpy(), ref, atol=1e-6)


def test_server_qp_matches_nnls_on_random_rounds():
    a = algorithms.make("gradma_s", ParamLayout.single(30), 8, {"beta1": 0.7, "beta2": 0.9, "m": 5, "gram": "recompute"})
    st = a.init(torch.zeros(30))
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        ids = sorted(torch.randperm(8, generator=g)[:3].tolist())
        m_prev = st["momentum"].clone()
        d = torch.randn(3, 30, generator=g)
        st = server_round(a, st, ids, d)
        m_vec = 0.7 * m_prev + d.mean(0)
        D = st["D"][st["slot_id"] >= 0]
        assert len(D) <= 5 and set(ids) <= set(st["slot_id"].tolist())
        assert np.abs(st["momentum"].double().numpy() - nnls_projection(m_vec.double(), D.double())).max() < 1e-5
        assert (D @ st["momentum"] >= -1e-5 * D.norm(dim=1) * st["momentum"].norm()).all()


def test_mem_red_bookkeeping():
    # N = 5 workers, m = 2 slots; d^(i) = (i + 1) * (round + 1) in one coordinate, beta2 = 0.5
    a = algorithms.make("gradma_s", ParamLayout.single(1), 5, {"m": 2, "beta2": 0.5, "gram": "recompute"})
    st = a.init(torch.zeros(1))

    def go(st, ids, r):
        return server_round(a, st, ids, [[float((i + 1) * (r + 1))] for i in ids])

    def stored(st):
        return {int(c): float(st["D"][s, 0]) for s, c in enumerate(st["slot_id"].tolist()) if c >= 0}

    st = go(st, [0, 1], 0)  # both stored, D = d
    assert stored(st) == {0: 1.0, 1: 2.0} and st["counter"].tolist() == [1, 1, 0, 0, 0]
    st = go(st, [0], 1)  # 0: beta2 D + d; 1 not sampled: beta2 D
    assert stored(st) == {0: 0.5 + 2.0, 1: 1.0} and st["counter"].tolist() == [2, 1, 0, 0, 0]
    st = go(st, [2], 2)  # full: evict the non-sampled worker with the smallest counter (1), reset it
    assert stored(st) == {0: 1.25, 2: 9.0} and st["counter"].tolist() == [2, 0, 1, 0, 0]
    st = go(st, [1, 3], 3)  # 1 evicts 2 (counter 1 < 2); 3 must evict 0, the only non-sampled one
    assert stored(st) == {1: 8.0, 3: 16.0} and st["counter"].tolist() == [0, 1, 0, 1, 0]
    st = go(st, [4], 4)  # tie between 1 and 3 (counter 1): the earliest stored (1) goes
    assert stored(st) == {3: 8.0, 4: 25.0} and st["counter"].tolist() == [0, 0, 0, 1, 1]
    st = go(st, [1], 5)  # an evicted worker comes back with D = d, not beta2 D + d
    assert stored(st)[1] == 12.0
    assert (st["slot_id"] >= 0).sum() <= 2


def test_memory_smaller_than_sample_raises():
    a = algorithms.make("gradma_s", ParamLayout.single(1), 5, {"m": 1})
    with pytest.raises(ValueError, match="S"):
        server_round(a, a.init(torch.zeros(1)), [0, 1], [[1.0], [2.0]])
    with pytest.raises(ValueError, match="exceeds"):
        algorithms.make("gradma", ParamLayout.single(1), 5, {"m": 6})


def test_worker_failures_raise_or_are_counted():
    up = Message({"d": torch.zeros(2, 1), "qp_fail": torch.tensor([0, 2], dtype=torch.uint8)})
    w = torch.tensor([0.5, 0.5])
    a = algorithms.make("gradma", ParamLayout.single(1), 3)
    with pytest.raises(QPFailure, match="2 local steps"):
        a.aggregate(a.init(torch.zeros(1)), up, w, rinfo([0, 1], 3))
    a = algorithms.make("gradma_w", ParamLayout.single(1), 3, {"on_qp_failure": "count"})
    st = a.aggregate(a.init(torch.zeros(1)), up, w, rinfo([0, 1], 3))
    assert int(st["qp_l_failures"]) == 2


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_a_failed_worker_solve_stops_a_real_run(monkeypatch, executor):
    # plant a failure (residual above any tolerance) in the dual solver: it must reach the server
    solve = qp.solve_dual_enum_qr
    monkeypatch.setattr(qp, "solve_dual_enum_qr", lambda R, c, h: (solve(R, c, h)[0],
                                                                   torch.ones(R.shape[:-2], dtype=R.dtype)))
    with pytest.raises(QPFailure, match="round 1"):
        run_tiny("gradma_w", executor, rounds=2)


# --------------------------------------------------------------------------------------------------
# Reductions (exact, through the engine) and executor equivalence of the options


def test_gradma_s_memory_off_beta1_0_is_fedavg():
    a = run_tiny("gradma_s", rounds=3, algorithm_args={"m": 0, "beta1": 0.0, "weighting": "samples"})
    assert_same_history(a, run_tiny("fedavg", rounds=3))


def test_gradma_s_memory_off_is_fedavgm():
    args = {"beta1": 0.5, "weighting": "uniform"}
    a = run_tiny("gradma_s", rounds=3, algorithm_args={"m": 0, "eta_g": 0.8, **args})
    b = run_tiny("fedavgm", rounds=3, algorithm_args={"eta_g": 0.8, **args})
    assert_same_history(a, b, rtol=1e-6, atol=1e-7)


def conflicting_dataset(d=6):
    """Regression clients with opposite targets: their updates conflict, so QP_g is active."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(d, generator=g)
    clients = []
    for i in range(4):
        x = torch.randn(20 + 7 * i, d, generator=g)
        clients.append((x, (1.0 if i % 2 else -1.0) * (x @ w) + 1.0))
    xt = torch.randn(40, d, generator=g)
    return FederatedDataset.from_tensors(clients, (xt, xt @ w), task="regression", name="conflict")


def test_gradma_memory_changes_the_run_and_costs_fedavg_bits_plus_status():
    a = run_tiny("gradma_s", rounds=3, data=conflicting_dataset())
    b = run_tiny("gradma_s", rounds=3, data=conflicting_dataset(), algorithm_args={"m": 0})
    assert a.history[0]["bits_up"] == b.history[0]["bits_up"]
    assert any(abs(x["test_loss"] - y["test_loss"]) > 1e-6 for x, y in zip(a.history, b.history))
    c = run_tiny("gradma", rounds=1, data=conflicting_dataset())
    assert c.history[0]["bits_up"] == a.history[0]["bits_up"] + 3 * 8  # one uint8 QP status per client


@pytest.mark.parametrize("name,args", [
    ("gradma", {"per_layer": True, "m": 3, "beta2": 0.9}),  # N = 4, S = 3: memory reduction evicts
    ("gradma", {"prev_model": "global", "weighting": "samples", "rho_l": 0.1, "rho_g": 0.1}),
    ("gradma_w", {"per_layer": True}),
])
def test_options_sequential_equals_vectorized(name, args):
    data = conflicting_dataset()  # QP_g is active on it; QP_l is active at most local steps anyway
    a = run_tiny(name, "sequential", rounds=3, algorithm_args=args, data=data)
    b = run_tiny(name, "vectorized", rounds=3, algorithm_args=args, data=data)
    assert a.status == b.status == "ok" and b.config["executor_used"] == "vectorized"
    assert_same_history(a, b)


# --------------------------------------------------------------------------------------------------
# Hyperparameters


@pytest.mark.parametrize("name,args", [
    ("gradma", {"beta1": 1.0}), ("gradma", {"beta2": -0.1}), ("gradma", {"m": -1}), ("gradma", {"m": 2.5}),
    ("gradma", {"eta_g": 0.0}), ("gradma", {"weighting": "x"}), ("gradma", {"prev_model": "x"}),
    ("gradma", {"qp_tol": 0.0}), ("gradma", {"on_qp_failure": "ignore"}), ("gradma", {"rho_l": -0.1}),
    ("gradma", {"rho_g": -0.1}), ("gradma_w", {"beta1": 0.5}), ("gradma_w", {"m": 3}),
    ("gradma_s", {"prev_model": "local"}), ("gradma_s", {"beta2": 1.0}), ("gradma_s", {"qp_tol": -1.0}),
    ("gradma_s", {"per_layer": 1}), ("gradma_w", {"prev_model": "stale"}),
])
def test_invalid_hyperparameters_raise(name, args):
    with pytest.raises((ValueError, TypeError)):
        make_hyper(algorithms.get_class(name), args)


def test_defaults_and_cli_strings():
    hp = make_hyper(algorithms.get_class("gradma"), {})
    assert (hp.eta_g, hp.beta1, hp.beta2, hp.m, hp.weighting, hp.prev_model, hp.per_layer) == (
        1.0, 0.5, 0.5, None, "uniform", "local", False)
    assert make_hyper(algorithms.get_class("gradma_s"), {"m": "10"}).m == 10
    assert make_hyper(algorithms.get_class("gradma_s"), {"m": "none"}).m is None
    assert make_hyper(algorithms.get_class("gradma"), {"per_layer": "true"}).per_layer is True
