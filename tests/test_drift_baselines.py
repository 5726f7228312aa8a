"""GradMA's baselines (FedAvgM, FedProx/FedProxM, SCAFFOLD, FedDyn, FedNova, MIFA/MIFAM, MimeLite):
exact equivalences with FedAvg, hand-computed updates on quadratics, honest bit counts, validation."""
from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms.core import optim
from algorithms.core import Message, ParamLayout, RoundInfo, make_hyper, stack_trees
from benchmark.sim.functional import Batch
from tests.helpers import assert_same_history, run_tiny, tiny_bn_model, tiny_dataset


class QuadCtx:
    """A LocalContext for f(x) = mean_j 1/2 ||x - b_j||^2 (or a custom gradient), deterministic.

    ``batches`` are lists of row indices into ``b``; step s uses batch s. Gradients are exact.
    """

    def __init__(self, b, batches, lr, optimizer=None, grad=None):
        self.b = torch.as_tensor(b, dtype=torch.float32)
        self.batches = [torch.as_tensor(i, dtype=torch.int64) for i in batches]
        self.lr = lr
        self.optimizer = optimizer or optim.SGD()
        self.num_steps = len(self.batches)
        self.steps = torch.tensor(self.num_steps)
        self.layout = ParamLayout.single(self.b.shape[1])
        self.grad = grad
        self.points = []  # where gradients were taken

    def loss_and_grad(self, p, batch, update_stats=True):
        self.points.append(p.clone())
        if self.grad is not None:
            return torch.zeros(()), self.grad(p)
        diff = p - self.b[batch.x]
        w = batch.w
        loss = 0.5 * (w * (diff ** 2).sum(1)).sum() / w.sum()
        return loss, (w[:, None] * diff).sum(0) / w.sum()

    def loop(self, step, carry):
        for s, idx in enumerate(self.batches):
            carry = step(carry, Batch(idx, idx, torch.ones(len(idx))), s)
        return carry


def info(ids, n, d=None):
    ids = torch.as_tensor(ids)
    return RoundInfo(0, ids, n, torch.ones(len(ids)), torch.ones(len(ids), dtype=torch.int64), 0.1)


def alg(name, d, n, **args):
    return algorithms.make(name, ParamLayout.single(d), n, args)


def same_losses(a, b, rtol=1e-4, atol=1e-5):
    """Like assert_same_history but without the bit counts (two-vector messages)."""
    assert len(a.history) == len(b.history)
    for ha, hb in zip(a.history, b.history):
        for k in ("test_loss", "train_loss"):
            assert abs(ha[k] - hb[k]) <= atol + rtol * abs(hb[k]), (k, ha["round"], ha[k], hb[k])


@pytest.fixture(scope="module")
def fedavg_run():
    return run_tiny("fedavg", rounds=3)


# --------------------------------------------------------------------------------------------------
# Exact equivalences with FedAvg (DESIGN.md)


def test_fedavgm_beta0_is_fedavg(fedavg_run):
    assert_same_history(run_tiny("fedavgm", rounds=3, algorithm_args={"beta1": 0.0}), fedavg_run)


def test_fedprox_mu0_is_fedavg(fedavg_run):
    assert_same_history(run_tiny("fedprox", rounds=3, algorithm_args={"mu": 0.0}), fedavg_run)


def test_fedproxm_mu0_is_fedavgm():
    a = run_tiny("fedproxm", rounds=3, algorithm_args={"mu": 0.0, "beta1": 0.5})
    b = run_tiny("fedavgm", rounds=3, algorithm_args={"beta1": 0.5})
    assert_same_history(a, b, rtol=1e-6, atol=1e-7)


def test_fedprox_mu_changes_the_run(fedavg_run):
    a = run_tiny("fedprox", rounds=3, algorithm_args={"mu": 1.0})
    assert abs(a.history[-1]["test_loss"] - fedavg_run.history[-1]["test_loss"]) > 1e-4


def test_mifa_full_participation_is_fedavg():
    data = tiny_dataset(uneven=False)  # equal n_i: FedAvg's sample weights are MIFA's 1/N
    a = run_tiny("mifa", rounds=3, data=data, clients_per_round=None)
    b = run_tiny("fedavg", rounds=3, data=data, clients_per_round=None)
    assert_same_history(a, b)


def test_mifam_beta0_is_mifa_under_partial_participation():
    assert_same_history(run_tiny("mifam", rounds=3, algorithm_args={"beta1": 0.0}), run_tiny("mifa", rounds=3),
                        rtol=1e-6, atol=1e-7)


def test_scaffold_first_round_is_fedavg_and_sends_two_vectors():
    data = tiny_dataset(uneven=False)
    a = run_tiny("scaffold", rounds=1, data=data)
    b = run_tiny("fedavg", rounds=1, data=data)
    same_losses(a, b)
    assert a.history[0]["bits_up"] == 2 * b.history[0]["bits_up"]
    assert a.history[0]["bits_down"] == 2 * b.history[0]["bits_down"]
    a2 = run_tiny("scaffold", rounds=2, data=data)
    b2 = run_tiny("fedavg", rounds=2, data=data)
    assert abs(a2.history[1]["test_loss"] - b2.history[1]["test_loss"]) > 1e-6  # c != 0 from round 2 on


def test_scaffold_samples_weighting_first_round_is_fedavg():
    same_losses(run_tiny("scaffold", rounds=1, algorithm_args={"weighting": "samples"}), run_tiny("fedavg", rounds=1))


def test_mimelite_beta0_is_fedavg_and_sends_two_vectors(fedavg_run):
    a = run_tiny("mimelite", rounds=3, algorithm_args={"beta": 0.0, "weighting": "samples"})
    same_losses(a, fedavg_run)
    assert a.history[0]["bits_up"] == 2 * fedavg_run.history[0]["bits_up"]
    assert a.history[0]["bits_down"] == 2 * fedavg_run.history[0]["bits_down"]


def test_fednova_equal_steps_is_fedavg():
    a = run_tiny("fednova", rounds=3, local_steps=3)
    b = run_tiny("fedavg", rounds=3, local_steps=3)
    same_losses(a, b)


def test_fednova_unequal_steps_differs_from_fedavg(fedavg_run):
    a = run_tiny("fednova", rounds=3)  # clients of 20..41 samples, batch 8: 3..6 local steps
    assert abs(a.history[-1]["test_loss"] - fedavg_run.history[-1]["test_loss"]) > 1e-5


# --------------------------------------------------------------------------------------------------
# Hand-computed updates on quadratics f_i(x) = 1/2 (x - b_i)^2


def test_fedavgm_momentum_hand_computed():
    a = alg("fedavgm", 1, 2, beta1=0.5, eta_g=2.0, weighting="uniform")
    st = a.init(torch.zeros(1))
    up = Message({"d": torch.tensor([[1.0], [3.0]])})
    st = a.aggregate(st, up, torch.tensor([0.9, 0.1]), info([0, 1], 2))
    assert torch.allclose(st["momentum"], torch.tensor([2.0])) and torch.allclose(st["params"], torch.tensor([-4.0]))
    st = a.aggregate(st, Message({"d": torch.tensor([[0.0], [2.0]])}), torch.tensor([0.5, 0.5]), info([0, 1], 2))
    # m = 0.5 * 2 + 1 = 2, x = -4 - 2 * 2 = -8
    assert torch.allclose(st["momentum"], torch.tensor([2.0])) and torch.allclose(st["params"], torch.tensor([-8.0]))


def test_fedavg_weighting_hand_computed():
    """FedAvg declares ``weighting`` itself (FedAvgM, its configuration, inherits it): the engine's sample
    weights p_k = n_k / sum n_j, or 1/S."""
    up = Message({"d": torch.tensor([[1.0], [3.0]])})
    for weighting, x1 in (("samples", -1.2), ("uniform", -2.0)):  # x1 = 0 - (0.9 * 1 + 0.1 * 3), 0 - (1 + 3) / 2
        a = alg("fedavg", 1, 2, weighting=weighting)
        st = a.aggregate(a.init(torch.zeros(1)), up, torch.tensor([0.9, 0.1]), info([0, 1], 2))
        assert torch.allclose(st["params"], torch.tensor([x1]))


def test_fedprox_local_step_hand_computed():
    a = alg("fedprox", 1, 1, mu=1.0)
    ctx = QuadCtx([[2.0]], [[0], [0]], lr=0.5)
    x0 = torch.tensor([0.0])
    up, _ = a.local_update(ctx, a.broadcast(a.init(x0)), {})
    # y1 = 0 - 0.5 ((0 - 2) + 1 (0 - 0)) = 1 ; y2 = 1 - 0.5 ((1 - 2) + 1 (1 - 0)) = 1
    assert torch.allclose(up["d"], torch.tensor([-1.0]))


def test_scaffold_control_variates_hand_computed():
    a = alg("scaffold", 1, 2)
    st = a.init(torch.zeros(1))
    cs = [a.client_init(torch.zeros(1)) for _ in range(2)]
    b = [1.0, -3.0]

    def round_(st, cs):
        ups, new = [], []
        for i in range(2):
            up, c = a.local_update(QuadCtx([[b[i]]], [[0], [0]], lr=0.5), a.broadcast(st), cs[i])
            ups.append(up)
            new.append(c)
        return a.aggregate(st, stack_trees(ups), torch.tensor([0.5, 0.5]), info([0, 1], 2)), new, ups

    st, cs, ups = round_(st, cs)
    # client 1: y = 0 -> 0.5 -> 0.75, c_1 = (0 - 0.75)/(2 * 0.5) = -0.75; client 2: y -> -1.5 -> -2.25, c_2 = 2.25
    assert torch.allclose(ups[0]["dy"], torch.tensor([0.75])) and torch.allclose(ups[1]["dy"], torch.tensor([-2.25]))
    assert torch.allclose(cs[0]["c_i"], torch.tensor([-0.75])) and torch.allclose(cs[1]["c_i"], torch.tensor([2.25]))
    # c_i has the sign of grad f_i(0) = 0 - b_i; x = mean dy = -0.75; c = mean c_i = 0.75
    assert torch.allclose(st["params"], torch.tensor([-0.75])) and torch.allclose(st["c"], torch.tensor([0.75]))
    # round 2: corrected steps y <- y - 0.5 (y - b_i - c_i + c); option II makes c_i+ the mean raw gradient
    x, c = -0.75, 0.75
    expect = []
    for i in range(2):
        y, grads = x, []
        for _ in range(2):
            grads.append(y - b[i])
            y = y - 0.5 * (y - b[i] - float(cs[i]["c_i"]) + c)
        expect.append((y, sum(grads) / 2))
    st, cs, ups = round_(st, cs)
    for i in range(2):
        assert torch.allclose(ups[i]["dy"], torch.tensor([expect[i][0] - x]))
        assert torch.allclose(cs[i]["c_i"], torch.tensor([expect[i][1]]))
    assert torch.allclose(cs[0]["c_i"], torch.tensor([-1.6875]))


def test_scaffold_c_update_divides_by_all_clients():
    a = alg("scaffold", 1, 4)
    st = a.init(torch.zeros(1))
    up = Message({"dy": torch.tensor([[1.0], [3.0]]), "dc": torch.tensor([[4.0], [8.0]])})
    st = a.aggregate(st, up, torch.tensor([0.5, 0.5]), info([0, 2], 4))
    assert torch.allclose(st["c"], torch.tensor([3.0]))  # (4 + 8) / N with N = 4
    assert torch.allclose(st["params"], torch.tensor([2.0]))  # uniform 1/|S|


def test_feddyn_hand_computed():
    a = alg("feddyn", 1, 2, alpha=0.5)
    st = a.init(torch.zeros(1))
    cstate = a.client_init(torch.zeros(1))
    up, cstate = a.local_update(QuadCtx([[1.0]], [[0], [0]], lr=0.5), a.broadcast(st), cstate)
    # local gradient (y - 1) - 0 + 0.5 y: y = 0 -> 0.5 -> 0.625
    assert torch.allclose(up["delta"], torch.tensor([0.625]))
    assert torch.allclose(cstate["grad_mem"], torch.tensor([-0.3125]))  # 0 - alpha * delta
    st = a.aggregate(st, stack_trees([up]), torch.tensor([1.0]), info([0], 2))
    assert torch.allclose(st["h"], torch.tensor([-0.15625]))  # -alpha * delta / N
    assert torch.allclose(st["params"], torch.tensor([0.9375]))  # 0.625 - h / alpha
    # next round the stored gradient enters with a minus sign: grad = (y - 1) + 0.3125 + 0.5 (y - 0.9375)
    up2, _ = a.local_update(QuadCtx([[1.0]], [[0]], lr=0.5), a.broadcast(st), cstate)
    assert torch.allclose(up2["delta"], torch.tensor([-0.5 * (0.9375 - 1 + 0.3125)]))


def test_fednova_a_norm_matches_the_trajectory():
    g = torch.tensor([1.0, -2.0])
    for opt, mu in ((optim.SGD(), 0.0), (optim.SGD(momentum=0.7), 0.0), (optim.SGD(), 0.3)):
        a = alg("fednova", 2, 3, mu=mu)
        ctx = QuadCtx(torch.zeros(1, 2), [[0]] * 5, lr=0.2, optimizer=opt, grad=lambda p: g)
        up, _ = a.local_update(ctx, a.broadcast(a.init(torch.zeros(2))), {})
        # constant gradient: x - y = eta_l ||a||_1 g, so the sent d is eta_l g whatever the solver
        assert torch.allclose(up["d"], 0.2 * g, atol=1e-6), (opt, mu, up["d"])
    assert float(alg("fednova", 2, 3).a_norm(optim.SGD(momentum=0.5), torch.tensor(3), 0.1)) == pytest.approx(
        1 + 1.5 + 1.75)
    assert float(alg("fednova", 2, 3, mu=1.0).a_norm(optim.SGD(), torch.tensor(2), 0.5)) == pytest.approx(1.5)


def test_fednova_aggregate_hand_computed():
    a = alg("fednova", 1, 2)
    st = a.init(torch.zeros(1))
    # client 0: tau 1, moved by 1 -> d = 1; client 1: tau 3, moved by 6 -> d = 2; weights 0.5/0.5
    up = Message({"d": torch.tensor([[1.0], [2.0]]), "a": torch.tensor([1.0, 3.0])})
    st = a.aggregate(st, up, torch.tensor([0.5, 0.5]), info([0, 1], 2))
    assert torch.allclose(st["params"], torch.tensor([-2.0 * 1.5]))  # tau_eff = 2, mean d = 1.5


def test_fednova_refuses_adam_and_momentum_with_mu():
    ctx = QuadCtx([[1.0]], [[0]], lr=0.1, optimizer=optim.Adam())
    a = alg("fednova", 1, 1)
    with pytest.raises(TypeError, match="sgd"):
        a.local_update(ctx, a.broadcast(a.init(torch.zeros(1))), {})
    a = alg("fednova", 1, 1, mu=0.1)
    ctx = QuadCtx([[1.0]], [[0]], lr=0.1, optimizer=optim.SGD(momentum=0.9))
    with pytest.raises(ValueError, match="momentum"):
        a.local_update(ctx, a.broadcast(a.init(torch.zeros(1))), {})


def test_mifa_memory_hand_computed():
    a = alg("mifam", 1, 4, beta1=0.5)
    st = a.init(torch.zeros(1))
    st = a.aggregate(st, Message({"g": torch.tensor([[4.0], [8.0]])}), torch.tensor([0.5, 0.5]), info([0, 2], 4))
    assert torch.allclose(st["params"], torch.tensor([-3.0]))  # d = (4 + 8)/4, m = 3
    st = a.aggregate(st, Message({"g": torch.tensor([[0.0], [4.0]])}), torch.tensor([0.5, 0.5]), info([0, 1], 4))
    # memory (0, 4, 8, 0): d = 3, m = 0.5 * 3 + 3 = 4.5, x = -3 - 4.5
    assert torch.allclose(st["memory"][:, 0], torch.tensor([0.0, 4.0, 8.0, 0.0]))
    assert torch.allclose(st["params"], torch.tensor([-7.5]))


def test_mimelite_hand_computed():
    a = alg("mimelite", 1, 1, beta=0.5)
    st = {**a.init(torch.zeros(1)), "s": torch.tensor([0.4])}
    ctx = QuadCtx([[1.0], [3.0]], [[0], [1]], lr=0.5)  # one epoch, one sample per batch
    up, _ = a.local_update(ctx, a.broadcast(st), {})
    # c = full-batch gradient at x = 0: mean(0 - 1, 0 - 3) = -2
    assert torch.allclose(up["c"], torch.tensor([-2.0]))
    # y1 = 0 - 0.5 (0.5 (0 - 1) + 0.5 * 0.4) = 0.15; y2 = 0.15 - 0.5 (0.5 (0.15 - 3) + 0.2) = 0.7625
    assert torch.allclose(up["delta"], torch.tensor([0.7625]))
    st = a.aggregate(st, stack_trees([up]), torch.tensor([1.0]), info([0], 1))
    assert torch.allclose(st["s"], torch.tensor([-0.8])) and torch.allclose(st["params"], torch.tensor([0.7625]))


# --------------------------------------------------------------------------------------------------
# Hyperparameter validation


@pytest.mark.parametrize("name,args", [
    ("fedavgm", {"beta1": 1.0}), ("fedavgm", {"beta1": -0.1}), ("fedavgm", {"eta_g": 0.0}),
    ("fedavgm", {"weighting": "size"}), ("fedprox", {"mu": -1.0}), ("fedproxm", {"beta1": 1.5}),
    ("fedprox", {"beta1": 0.5}), ("scaffold", {"eta_g": -1.0}), ("scaffold", {"weighting": "x"}),
    ("feddyn", {"alpha": 0.0}), ("feddyn", {"weighting": "x"}), ("fednova", {"mu": -0.1}),
    ("fednova", {"eta_g": 0.0}), ("mifa", {"beta1": 0.5}), ("mifam", {"beta1": 1.0}), ("mifa", {"eta_g": 0.0}),
    ("mimelite", {"beta": 1.0}), ("mimelite", {"eta_g": 0.0}), ("mimelite", {"weighting": "x"}),
])
def test_invalid_hyperparameters_raise(name, args):
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class(name), args)


def test_defaults_validate():
    for name in ("fedavgm", "fedprox", "fedproxm", "scaffold", "feddyn", "fednova", "mifa", "mifam", "mimelite"):
        make_hyper(algorithms.get_class(name), {})


def test_mimelite_full_batch_gradient_leaves_batchnorm_statistics_alone():
    a = run_tiny("mimelite", "sequential", model=tiny_bn_model, rounds=2)
    b = run_tiny("mimelite", "vectorized", model=tiny_bn_model, rounds=2)
    assert_same_history(a, b)
    ctx = QuadCtx([[1.0], [3.0]], [[0], [1]], lr=0.5)
    ctx.buffers = {"updates": torch.zeros(())}
    inner = ctx.loss_and_grad

    def counting(p, batch, update_stats=True):
        if update_stats:
            ctx.buffers = {"updates": ctx.buffers["updates"] + 1}
        return inner(p, batch)

    ctx.loss_and_grad = counting
    m = alg("mimelite", 1, 1)
    m.local_update(ctx, m.broadcast(m.init(torch.zeros(1))), {})
    assert len(ctx.points) == 4 and int(ctx.buffers["updates"]) == 2
