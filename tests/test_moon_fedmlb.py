"""MOON / MOONM and FedMLB / FedMLBM: the losses on hand-computed cases, the model stages they rely
on, and their equivalences (mu = 0, lambda1 = lambda2 = 0)."""
from __future__ import annotations

import math

import pytest
import torch

import algorithms
from algorithms.core import optim
from algorithms.fedmlb import branched_loss
from algorithms.moon import contrastive_loss
from benchmark import models
from benchmark.sim.functional import Batch, FunctionalModel
from benchmark.sim.executors import ClientContext, ClientShare, LocalSetup
from tests.helpers import assert_same_history, run_tiny, tiny_bn_model


def _batch(y):
    y = torch.as_tensor(y)
    return Batch(torch.zeros(len(y), 1), y, torch.ones(len(y)))


def test_contrastive_loss_hand_computed():
    # z . z_glob: cosine 1; z . z_prev: cosine 0; tau = 0.5 -> logits 2 and 0.
    z = torch.tensor([[3.0, 0.0]])
    loss = contrastive_loss(z, torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 5.0]]), 0.5, torch.ones(1))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-2.0)), rel=1e-6)
    # cosine -1 with the global model and 1 with the previous one; a zero-weight sample is ignored
    z2 = torch.tensor([[1.0, 1.0], [7.0, -3.0]])
    loss2 = contrastive_loss(z2, -z2, z2, 1.0, torch.tensor([1.0, 0.0]))
    assert loss2.item() == pytest.approx(math.log(1 + math.exp(2.0)), rel=1e-6)


def test_branched_loss_hand_computed():
    main = torch.tensor([[0.0, 0.0]])  # uniform
    hyb = torch.tensor([[math.log(3.0), 0.0]])  # (0.75, 0.25)
    batch = _batch([0])
    ce_main = math.log(2.0)
    ce_hyb = -math.log(0.75)
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    got = branched_loss(torch.tensor(ce_main), main, [hyb, hyb], batch, 0.5, 2.0, 1.0)
    assert got.item() == pytest.approx(ce_main + 0.5 * ce_hyb + 2.0 * kl, rel=1e-6)
    # temperature: KL of the tempered softmaxes, times tau^2
    tau = 2.0
    q = torch.softmax(hyb / tau, 1)[0]
    kl_t = sum(q[i].item() * math.log(q[i].item() / 0.5) for i in range(2)) * tau ** 2
    got_t = branched_loss(torch.tensor(0.0), main, [hyb], batch, 0.0, 1.0, tau)
    assert got_t.item() == pytest.approx(kl_t, rel=1e-6)


@pytest.mark.parametrize("name", models.names())
def test_stages_compose_to_the_training_forward(name):
    spec = models.SPECS[name]
    shape = spec.default_input if len(spec.default_input) == 1 else (spec.default_input[0], 32, 32)
    if name == "gradma_resnet20":
        shape = (3, 16, 16)
    torch.manual_seed(0)
    fm = FunctionalModel(models.build(name, shape, spec.default_classes), "classification")
    flat = fm.layout.flatten(dict(fm.module.named_parameters()))
    x = torch.randn(3, *shape)
    outs, _ = fm.forward_stages(flat, x)
    assert len(outs) == len(fm.stage_modules()) >= 1
    torch.testing.assert_close(outs[-1], fm.forward_train(flat, x)[0])
    # restarting from an intermediate output gives the same logits
    if len(outs) > 1:
        torch.testing.assert_close(fm.forward_stages(flat, outs[0], start=1)[0][-1], outs[-1])
    # every parameter belongs to exactly one stage
    names = [n for _, ns in fm.stage_modules() for n in ns]
    assert sorted(names) == sorted(n for n, _ in fm.module.named_parameters())


def _ctx(fm, x, y):
    n = len(y)
    idx = torch.arange(n).reshape(1, n)
    setup = LocalSetup(fm, x, y, optim.make("sgd", 0.0, 0.0), 0)
    return ClientContext(setup, ClientShare(idx, torch.ones(1, n), None, torch.tensor(7), torch.tensor(1),
                                            torch.tensor(float(n)), torch.tensor(0), fm.initial_buffers(), 0.1))


def test_reference_forward_records_nothing_and_one_training_forward_per_objective():
    torch.manual_seed(0)
    fm = FunctionalModel(tiny_bn_model((4,), 3), "classification")
    flat = fm.layout.flatten(dict(fm.module.named_parameters()))
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    ctx = _ctx(fm, x, y)
    before = {k: v.clone() for k, v in ctx.buffers.items()}

    def ref_only(p, model_fn, b):
        return ctx.criterion(model_fn.reference(p, b.x)[-1], b)

    ctx.value_and_grad(ref_only, flat, ctx.batch(0))
    for k in before:
        torch.testing.assert_close(ctx.buffers[k], before[k])
    ctx.loss_and_grad(flat, ctx.batch(0), update_stats=False)  # an auxiliary gradient
    for k in before:
        torch.testing.assert_close(ctx.buffers[k], before[k])

    def twice(p, model_fn, b):
        return ctx.criterion(model_fn(p, b.x), b) + ctx.criterion(model_fn.stages(p, b.x)[-1], b)

    with pytest.raises(RuntimeError, match="one training forward|training forwards"):
        ctx.value_and_grad(twice, flat, ctx.batch(0))

    def once(p, model_fn, b):
        return ctx.criterion(model_fn.stages(p, b.x)[-1], b) + 0 * model_fn.reference(p, b.x)[-1].sum()

    ctx.value_and_grad(once, flat, ctx.batch(0))
    assert any(not torch.equal(ctx.buffers[k], before[k]) for k in before)


def test_fedmlb_hybrid_paths_equal_main_at_the_global_model():
    """At p = w_t every hybrid path is the main path: KL = 0 and the loss is (1 + lambda1) CE."""
    torch.manual_seed(1)
    fm = FunctionalModel(tiny_bn_model((4,), 3), "classification")
    w0 = fm.layout.flatten(dict(fm.module.named_parameters()))
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 2, 1])
    ctx = _ctx(fm, x, y)
    b = ctx.batch(0)

    def obj(p, model_fn, batch):
        outs = model_fn.stages(p, batch.x)
        hyb = [model_fn.reference(w0, outs[i], start=i + 1)[-1] for i in range(model_fn.num_stages - 1)]
        return branched_loss(ctx.criterion(outs[-1], batch), outs[-1], hyb, batch, 0.7, 3.0, 1.0)

    loss, _ = ctx.value_and_grad(obj, w0, b)
    ce, _ = ctx.loss_and_grad(w0, b)
    assert loss.item() == pytest.approx(1.7 * ce.item(), rel=1e-5)


@pytest.mark.parametrize("name, off, base", [
    ("moon", {"mu": 0.0}, "fedavg"),
    ("moonm", {"mu": 0.0, "beta1": 0.5}, "fedavgm"),
    ("fedmlb", {"lambda1": 0.0, "lambda2": 0.0}, "fedavg"),
    ("fedmlbm", {"lambda1": 0.0, "lambda2": 0.0, "beta1": 0.5}, "fedavgm"),
])
def test_switched_off_equals_the_base_algorithm(name, off, base):
    base_args = {"beta1": 0.5} if base == "fedavgm" else {}
    a = run_tiny(name, rounds=4, model=tiny_bn_model, algorithm_args=off)
    b = run_tiny(base, rounds=4, model=tiny_bn_model, algorithm_args=base_args)
    assert_same_history(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["moon", "fedmlb"])
def test_switched_on_differs_from_fedavg(name):
    a = run_tiny(name, rounds=3, model=tiny_bn_model)
    b = run_tiny("fedavg", rounds=3, model=tiny_bn_model)
    assert a.history[-1]["test_loss"] != pytest.approx(b.history[-1]["test_loss"], rel=1e-6)


def test_moon_keeps_the_previous_local_model():
    from algorithms.moon import MOON

    alg = MOON.__new__(MOON)
    w0 = torch.arange(4.0)
    assert torch.equal(alg.client_init(w0)["prev"], w0)
    r = run_tiny("moon", rounds=2, model=tiny_bn_model, clients_per_round=None)
    assert r.status == "ok"


@pytest.mark.parametrize("name, args, msg", [
    ("moon", {"mu": -1.0}, "mu must be >= 0"),
    ("moon", {"tau": 0.0}, "tau must be > 0"),
    ("moonm", {"beta1": 1.0}, "beta1"),
    ("fedmlb", {"lambda1": -0.1}, "lambda1 must be >= 0"),
    ("fedmlbm", {"tau": -1.0}, "tau must be > 0"),
])
def test_invalid_hyperparameters(name, args, msg):
    fm = FunctionalModel(tiny_bn_model((4,), 3), "classification")
    with pytest.raises(ValueError, match=msg):
        algorithms.make(name, fm.layout, 4, args)


@pytest.mark.parametrize("name", ["moon", "fedmlb"])
def test_single_stage_model_is_rejected(name):
    def linear(input_shape, num_classes):
        return torch.nn.Sequential(torch.nn.Linear(input_shape[0], num_classes))

    with pytest.raises(ValueError, match="stages"):
        run_tiny(name, rounds=1, model=linear)
