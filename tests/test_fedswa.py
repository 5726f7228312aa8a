"""FedSWA, FedMoSWA/FedMo and the FedSWA paper's SAM-type and FedACG baselines: hand-computed updates,
the paper's equivalences, hyperparameter validation."""
import math

import pytest
import torch

import algorithms
from algorithms.core import optim
from algorithms.core import Message, ParamLayout, RoundInfo, make_hyper, stack_trees
from tests.helpers import MaskedLoopCtx, assert_same_history, run_tiny


class FakeCtx(MaskedLoopCtx):
    """A LocalContext for hand computations: ``batches[s]`` is step s's batch and the gradient is
    ``grad(p, batch)`` (loss 0). Steps s >= ``steps`` are masked like the executors do."""

    def __init__(self, batches, grad, lr=1.0, steps=None, optimizer=None):
        self.batches = [torch.as_tensor(b, dtype=torch.float32) for b in batches]
        self.grad = grad
        self.lr = lr
        self.num_steps = len(self.batches)
        self.steps = torch.tensor(self.num_steps if steps is None else steps)
        self.optimizer = optimizer or optim.SGD()
        self.calls = []  # points where gradients were taken

    def loss_and_grad(self, p, batch):
        self.calls.append(p.clone())
        return torch.zeros(()), self.grad(p, batch)


def quad(p, b):  # loss 0.5 ||p - b||^2
    return p - b


def make(name, d=2, num_clients=4, **args):
    return algorithms.make(name, ParamLayout.single(d), num_clients, args)


def info(steps, lr=1.0):
    k = len(steps)
    return RoundInfo(0, torch.arange(k), k, torch.ones(k), torch.tensor(steps), lr)


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def close(a, b, tol=1e-5):
    assert torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=tol, rtol=tol), (a, b)


def assert_same_losses(a, b, rtol=1e-4, atol=1e-5):
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("test_loss", "train_loss"):
            assert abs(ha[k] - hb[k]) <= atol + rtol * abs(hb[k]), (k, ha["round"], ha[k], hb[k])


# -------------------------------------------------------------------------------------------- FedSWA


def test_fedswa_defaults_are_the_papers():
    hp = make_hyper(algorithms.get_class("fedswa"), {})
    assert (hp.rho, hp.alpha) == (0.1, 1.5)
    hp = make_hyper(algorithms.get_class("fedmoswa"), {})
    assert (hp.rho, hp.alpha, hp.gamma, hp.option) == (0.1, 1.5, 0.2, 2)
    hp = make_hyper(algorithms.get_class("fedmo"), {})
    assert (hp.rho, hp.alpha, hp.gamma, hp.option) == (1.0, 1.0, 0.2, 2)


def test_fedswa_linear_lr_decay_and_server_step():
    # K = 4, rho = 0.5, eta_l = 1: eta_k = 1 - 0.5 k/4 = 1, 0.875, 0.75, 0.625 (Eq. 3); constant gradient a
    alg = make("fedswa", rho=0.5, alpha=1.5)
    a = t(1.0, -2.0)
    ctx = FakeCtx([a] * 4, lambda p, b: b)
    up, _ = alg.local_update(ctx, Message.dense(t(0.0, 0.0)), {})
    close(up["delta"], -3.25 * a)
    # masked steps: a client with K = 2 inside a 4-step loop uses its own K: eta = 1, 0.875
    ctx = FakeCtx([a] * 4, lambda p, b: b, steps=2)
    up2, _ = alg.local_update(ctx, Message.dense(t(0.0, 0.0)), {})
    close(up2["delta"], -(1.0 + 0.75) * a)
    # server: theta + alpha * sum p_i (theta_i - theta)
    state = alg.aggregate({"params": t(1.0, 1.0)}, stack_trees([Message.dense(t(2.0, 0.0), "delta"),
                                                               Message.dense(t(0.0, 4.0), "delta")]),
                          torch.tensor([0.75, 0.25]), info([4, 4]))
    close(state["params"], t(1.0 + 1.5 * 1.5, 1.0 + 1.5 * 1.0))


def test_fedswa_rho1_alpha1_equals_fedavg():
    a = run_tiny("fedavg", rounds=3)
    b = run_tiny("fedswa", rounds=3, algorithm_args={"rho": 1.0, "alpha": 1.0})
    assert_same_history(a, b)


def test_fedswa_default_differs_from_fedavg():
    a = run_tiny("fedavg", rounds=2)
    b = run_tiny("fedswa", rounds=2)
    assert abs(a.history[-1]["test_loss"] - b.history[-1]["test_loss"]) > 1e-4


# ------------------------------------------------------------------------------------------ FedMoSWA


def test_fedmoswa_option2_control_variate_by_hand():
    # 1-D, loss 0.5 (p - b_k)^2, theta_0 = 0, b = (1, 2), K = 2, rho = 0.5 -> eta = (1, 0.75),
    # c = 0.5, m = 0.1
    # step 0: g = -1, corrected -1 - 0.5 + 0.1 = -1.4 -> p = 1.4
    # step 1: g = 1.4 - 2 = -0.6, corrected -1.0 -> p = 1.4 + 0.75 = 2.15
    # Option II: c+ = c - m + (theta_0 - theta_K) / (1 + 0.75) = 0.4 - 2.15 / 1.75
    alg = make("fedmoswa", d=1, rho=0.5)
    ctx = FakeCtx([[1.0], [2.0]], quad)
    up, st = alg.local_update(ctx, Message({"x": t(0.0), "m": t(0.1)}), {"c": t(0.5)})
    c_plus = 0.4 - 2.15 / 1.75
    close(up["delta"], [2.15])
    close(st["c"], [c_plus])
    close(up["dc"], [c_plus - 0.1])
    # the identity of fedswa.md Sec. 1.3: c+ = LR-weighted mean of the raw local gradients
    close(st["c"], [(1.0 * -1.0 + 0.75 * -0.6) / 1.75])
    # Option I: c+ = the first minibatch gradient, taken at theta_0
    alg1 = make("fedmoswa", d=1, rho=0.5, option=1)
    _, st1 = alg1.local_update(FakeCtx([[1.0], [2.0]], quad), Message({"x": t(0.0), "m": t(0.1)}),
                               {"c": t(0.5)})
    close(st1["c"], [-1.0])


def test_fedmoswa_server_momentum_by_hand():
    alg = make("fedmoswa", gamma=0.2, alpha=1.5)
    server = {"params": t(0.0, 0.0), "m": t(1.0, 1.0)}
    ups = stack_trees([Message({"delta": t(1.0, 1.0), "dc": t(1.0, 0.0)}),
                       Message({"delta": t(3.0, 3.0), "dc": t(0.0, 2.0)})])
    new = alg.aggregate(server, ups, torch.tensor([0.9, 0.1]), info([2, 2]))
    close(new["m"], t(1.0 + 0.2 * 0.5, 1.0 + 0.2 * 1.0))  # m + gamma * (1/s) sum dc (uniform, Eq. 7)
    close(new["params"], t(1.5 * 1.2, 1.5 * 1.2))  # theta + alpha * sum p_i delta_i


def test_fedmoswa_messages_and_first_round():
    alg = make("fedmoswa", d=3)
    s = alg.init(torch.ones(3))
    assert torch.equal(s["m"], torch.zeros(3))
    assert alg.broadcast(s).bits == 2 * 3 * 32  # (theta, m)
    assert torch.equal(alg.client_init(torch.ones(3))["c"], torch.zeros(3))


def test_fedmoswa_lemma_g11_update_by_hand():
    # m_mean="all" (the proof's Lemma G.11): cbar = mean of ALL N clients' latest c_i, m <- (1-gamma) m + gamma cbar.
    # N = 4, two sampled clients move their c_i by dci = (4, 0) and (0, 8): cbar = 0 + (4, 8)/4 = (1, 2)
    alg = make("fedmoswa", gamma=0.2, alpha=1.5, m_mean="all")
    server = alg.init(t(0.0, 0.0))
    assert torch.equal(server["cbar"], torch.zeros(2))
    server["m"] = t(1.0, 1.0)
    ups = stack_trees([Message({"delta": t(1.0, 1.0), "dc": t(9.0, 9.0), "dci": t(4.0, 0.0)}),
                       Message({"delta": t(3.0, 3.0), "dc": t(9.0, 9.0), "dci": t(0.0, 8.0)})])
    new = alg.aggregate(server, ups, torch.tensor([0.5, 0.5]), RoundInfo(0, torch.tensor([0, 2]), 4,
                                                                         torch.ones(2), torch.tensor([2, 2]), 1.0))
    close(new["cbar"], t(1.0, 2.0))
    close(new["m"], t(0.8 * 1.0 + 0.2 * 1.0, 0.8 * 1.0 + 0.2 * 2.0))  # the sampled dc do not enter m
    close(new["params"], t(1.5 * 2.0, 1.5 * 2.0))
    # the client sends c_i^+ - c_i as well (counted in its bits), and only in this mode
    ctx = FakeCtx([[1.0], [2.0]], quad)
    up, st = make("fedmoswa", d=1, rho=0.5, m_mean="all").local_update(ctx, Message({"x": t(0.0), "m": t(0.1)}),
                                                                       {"c": t(0.5)})
    close(up["dci"], st["c"] - 0.5)
    up0, _ = make("fedmoswa", d=1, rho=0.5).local_update(FakeCtx([[1.0], [2.0]], quad),
                                                         Message({"x": t(0.0), "m": t(0.1)}), {"c": t(0.5)})
    assert "dci" not in up0.parts and up.bits == up0.bits + 32


def test_fedmoswa_lemma_g11_update_equals_the_algorithm_under_full_participation():
    # with every client in every round, the mean over the sampled clients IS the mean over all of them
    a = run_tiny("fedmoswa", rounds=3, algorithm_args={"m_mean": "all"}, clients_per_round=None)
    b = run_tiny("fedmoswa", rounds=3, clients_per_round=None)
    assert_same_losses(a, b, rtol=1e-5, atol=1e-6)  # the bits differ: c_i^+ - c_i travels as well


def test_fedmo_is_fedmoswa_without_swa():
    a = run_tiny("fedmo", rounds=2)
    b = run_tiny("fedmoswa", rounds=2, algorithm_args={"rho": 1.0, "alpha": 1.0})
    assert_same_history(a, b, rtol=0, atol=0)


def test_fedmoswa_option1_sequential_equals_vectorized():
    args = {"option": 1}
    assert_same_history(run_tiny("fedmoswa", "sequential", rounds=2, algorithm_args=args),
                        run_tiny("fedmoswa", "vectorized", rounds=2, algorithm_args=args))


# ---------------------------------------------------------------------------------- SAM-type baselines


def test_fedsam_step_by_hand():
    # loss 0.5 ||p||^2 at (3, 4): g = (3, 4), eps = 0.5 (0.6, 0.8), grad at p + eps = (3.3, 4.4)
    alg = make("fedsam", rho=0.5)
    ctx = FakeCtx([t(0.0, 0.0)], quad, lr=0.1)
    up, _ = alg.local_update(ctx, Message.dense(t(3.0, 4.0)), {})
    close(up["delta"], -0.1 * t(3.3, 4.4))
    close(ctx.calls[1], t(3.3, 4.4))  # the second gradient is taken at the perturbed point


def test_fedasam_step_by_hand():
    # T = |p| + eta = (4, 5) at p = (3, 4), eta = 1; Tg = (12, 20);
    # eps = rho T Tg / ||Tg|| = 0.5 (48, 100) / sqrt(544)
    alg = make("fedasam", rho=0.5, eta=1.0)
    up, _ = alg.local_update(FakeCtx([t(0.0, 0.0)], quad, lr=0.1), Message.dense(t(3.0, 4.0)), {})
    eps = 0.5 * t(48.0, 100.0) / math.sqrt(544.0)
    close(up["delta"], -0.1 * (t(3.0, 4.0) + eps))


def test_mofedsam_step_and_server_direction_by_hand():
    # v = 0.1 * (3.3, 4.4) + 0.9 * (1, -1) = (1.23, -0.46); lr 0.1
    alg = make("mofedsam", rho=0.5, alpha=0.1)
    down = Message({"x": t(3.0, 4.0), "Delta": t(1.0, -1.0)})
    up, _ = alg.local_update(FakeCtx([t(0.0, 0.0)], quad, lr=0.1), down, {})
    close(up["delta"], -0.1 * t(1.23, -0.46))
    new = alg.aggregate({"params": t(3.0, 4.0), "Delta": t(1.0, -1.0)}, stack_trees([up]), torch.ones(1),
                        info([1], lr=0.1))
    close(new["params"], t(3.0, 4.0) - 0.1 * t(1.23, -0.46))
    close(new["Delta"], t(1.23, -0.46))  # (theta - theta_i) / (lr K)


def test_fedlesam_step_by_hand():
    alg = make("fedlesam", rho=0.5)
    # theta_old - theta = (1, 0): delta = (0.5, 0); grad at (3.5, 4)
    up, st = alg.local_update(FakeCtx([t(0.0, 0.0)], quad, lr=0.1), Message.dense(t(3.0, 4.0)),
                              {"theta_old": t(4.0, 4.0), "seen": torch.tensor(1.0)})
    close(up["delta"], -0.1 * t(3.5, 4.0))
    close(st["theta_old"], t(3.0, 4.0))
    # a client's first round: no perturbation
    up0, st0 = alg.local_update(FakeCtx([t(0.0, 0.0)], quad, lr=0.1), Message.dense(t(3.0, 4.0)),
                                alg.client_init(t(9.0, 9.0)))
    close(up0["delta"], -0.1 * t(3.0, 4.0))
    assert float(st0["seen"]) == 1.0


def test_fedacg_lookahead_by_hand():
    alg = make("fedacg", lam=0.5, beta=1.0)
    server = {"params": t(0.0, 0.0), "m": t(1.0, 0.0)}
    down = alg.broadcast(server)
    close(down["x"], t(0.5, 0.0))  # theta + lam m
    # two steps on 0.5 ||p||^2 + 0.5 ||p - (0.5, 0)||^2, lr 0.1:
    # 0.5 -> 0.45 -> 0.45 - 0.1 (0.45 - 0.05) = 0.41
    up, _ = alg.local_update(FakeCtx([t(0.0, 0.0)] * 2, quad, lr=0.1), down, {})
    close(up["delta"], t(0.41 - 0.5, 0.0))
    new = alg.aggregate(server, stack_trees([up]), torch.ones(1), info([2]))
    close(new["m"], t(0.5 - 0.09, 0.0))
    close(new["params"], t(0.41, 0.0))


@pytest.mark.parametrize("name,args", [("fedsam", {"rho": 0.0}), ("fedasam", {"rho": 0.0}),
                                       ("fedlesam", {"rho": 0.0}), ("fedacg", {"lam": 0.0, "beta": 0.0})])
def test_baselines_reduce_to_fedavg(name, args):
    assert_same_history(run_tiny("fedavg", rounds=2), run_tiny(name, rounds=2, algorithm_args=args))


def test_mofedsam_reduces_to_fedavg():
    # same trajectory; its downlink also carries Delta, so only the losses are compared
    assert_same_losses(run_tiny("fedavg", rounds=2),
                       run_tiny("mofedsam", rounds=2, algorithm_args={"rho": 0.0, "alpha": 1.0}))


# ------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name,args", [
    ("fedswa", {"rho": -0.1}), ("fedswa", {"rho": 1.5}), ("fedswa", {"alpha": 0.0}),
    ("fedmoswa", {"gamma": 0.0}), ("fedmoswa", {"gamma": 1.5}), ("fedmoswa", {"option": 3}),
    ("fedmoswa", {"rho": 2.0}), ("fedmoswa", {"alpha": -1.0}), ("fedmo", {"gamma": -0.2}),
    ("fedsam", {"rho": -0.05}), ("fedasam", {"eta": -1.0}), ("fedasam", {"rho": -1.0}),
    ("mofedsam", {"alpha": 0.0}), ("mofedsam", {"alpha": 1.5}), ("mofedsam", {"rho": -1.0}),
    ("mofedsam", {"eta_g": 0.0}), ("fedlesam", {"rho": -1.0}), ("fedacg", {"lam": 1.0}),
    ("fedacg", {"lam": -0.1}), ("fedacg", {"beta": -1.0}), ("fedswa", {"sigma": 1.0}),
])
def test_invalid_hyperparameters_raise(name, args):
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class(name), args)
