"""The vectorized executor's fused plain-SGD step (``benchmark.sim.chain_grad.value_and_descend`` through
``ClientContext.descend`` and ``algorithms.core.descend``; issue 45, ninth round): one step equals the gradient's
``p - lr * g`` to float32 rounding on MLPs with and without biases, a logistic regression and BHerd's SVM loss,
padded and weighted batches and a learning rate per client; in place it writes into the vector it is given and out
of place leaves it alone; a run takes it only where it applies (vectorized, plain SGD, a plain chain), never
mutates the received model, and a whole vectorized FedAvg and FedSWA run stays within rounding of the unfused one;
planted defects (the bias left out, the product taken from the updated weights) are caught."""
import pytest
import torch
from torch.func import vmap

from benchmark.sim import chain_grad
from benchmark.sim.functional import FunctionalModel
from tests.test_chain_grad import CASES, _data


def _setup(case, clients=5):
    make, shape, classes = CASES[case]
    torch.manual_seed(1)
    fm = FunctionalModel(make(), "classification")
    flat0 = torch.nn.utils.parameters_to_vector(fm.module.parameters()).detach()
    flat = flat0 + 0.3 * torch.randn(clients, flat0.numel())
    x, y, w = _data(shape, classes, clients=clients, svm=case == "svm")
    return fm, flat, x, y, w


def _reference(fm, flat, x, y, w, lr):
    def one(p, xi, yi, wi, lri):
        v, g = chain_grad.value_and_grad(fm.chain_grad, fm.layout, p, xi, yi, wi)
        return v, p - lri * g
    return vmap(one)(flat, x, y, w, lr)


def _fused(fm, flat, x, y, w, lr, in_place, descend=chain_grad.value_and_descend):
    def one(p, xi, yi, wi, lri):
        return descend(fm.chain_grad, fm.layout, p, xi, yi, wi, lri, in_place)
    return vmap(one)(flat, x, y, w, lr)


def _close(a, b, scale):
    return torch.allclose(a, b, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_fused_step_equals_the_gradient_step_to_rounding(case, in_place):
    fm, flat, x, y, w = _setup(case)
    lr = torch.tensor([0.1, 0.05, 0.2, 0.01, 0.1])  # a learning rate per client (a batched job's runs)
    v_ref, p_ref = _reference(fm, flat, x, y, w, lr)
    given = flat.clone()
    v, p = _fused(fm, given, x, y, w, lr, in_place)
    assert torch.equal(v, v_ref)  # the loss is the forward's, before the step
    assert _close(p, p_ref, flat.abs().max()) and not torch.equal(p, flat)
    if in_place:
        assert torch.equal(given, p)  # written into the vector given
    else:
        assert torch.equal(given, flat)  # the vector given is left alone


def _no_bias_update(chain, layout, flat, x, y, w, lr, in_place):
    """Planted: the biases are not updated."""
    v, p = chain_grad.value_and_descend(chain, layout, flat, x, y, w, lr, False)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    for s in layout.slices:
        if s.name.endswith("bias"):
            keep[s.start:s.stop] = True
    return v, torch.where(keep, flat, p)


def _stale_product(chain, layout, flat, x, y, w, lr, in_place):
    """Planted: the input's gradient taken from the weights after their update (the order the in-place path must
    not have)."""
    real = torch.Tensor.mm
    calls = []

    def late(a, b):
        calls.append(1)
        return real(a, b * (1 - 1e-3))
    torch.Tensor.mm = late
    try:
        return chain_grad.value_and_descend(chain, layout, flat, x, y, w, lr, False)
    finally:
        torch.Tensor.mm = real


@pytest.mark.parametrize("planted", [_no_bias_update, _stale_product])
def test_planted_defects_are_caught(planted):
    fm, flat, x, y, w = _setup("mlp")
    lr = torch.full((5,), 0.1)
    _, p_ref = _reference(fm, flat, x, y, w, lr)
    _, p = _fused(fm, flat.clone(), x, y, w, lr, False, descend=planted)
    assert not _close(p, p_ref, flat.abs().max())


def _run(name, executor, fused=True, monkeypatch=None, **change):
    from benchmark import Experiment
    from benchmark.runs.plan import run

    cfg = dict(dataset="digits", model="mlp", algorithm=name, num_clients=6, clients_per_round=4, rounds=2,
               local_steps=5, batch_size=16, lr=0.1, seed=3, eval_every=1, executor=executor)
    e = Experiment(**{**cfg, **change})
    if not fused:
        from benchmark.sim.executors import ClientContext
        monkeypatch.delattr(ClientContext, "descend")
    return run(e, threads=1)


def _accuracies(r):
    return [h["test_accuracy"] for h in r.history if h["test_accuracy"] is not None]


def _spy(monkeypatch) -> list:
    """The ``in_place`` of every fused step taken, in order."""
    calls = []
    real = chain_grad.value_and_descend

    def spy(*a, **k):
        calls.append(k.get("in_place"))
        return real(*a, **k)
    monkeypatch.setattr(chain_grad, "value_and_descend", spy)
    return calls


@pytest.mark.parametrize("name", ["fedavg", "fedswa"])
def test_a_vectorized_run_takes_the_fused_step_and_stays_within_rounding(name, monkeypatch):
    calls = _spy(monkeypatch)
    fused = _run(name, "vectorized")
    assert calls and True in calls and False in calls  # out of place at each loop's first step, then in place
    with monkeypatch.context() as m:
        plain = _run(name, "vectorized", fused=False, monkeypatch=m)
    assert fused.status == plain.status == "ok"
    for a, b in zip(_accuracies(fused), _accuracies(plain)):
        assert abs(a - b) <= 0.02  # rounding, not another algorithm: 2 rounds of a few hundred test images
    assert fused.final["train_loss"] == pytest.approx(plain.final["train_loss"], rel=1e-3)


def test_the_sequential_executor_and_other_optimizers_do_not_take_it(monkeypatch):
    calls = []
    monkeypatch.setattr(chain_grad, "value_and_descend", lambda *a, **k: calls.append(1))
    _run("fedavg", "sequential")
    _run("fedavg", "vectorized", momentum=0.9)  # heavy ball: the gradient, then the optimizer
    _run("fedprox", "vectorized")  # a proximal term changes the gradient: not the plain step
    assert calls == []


def test_padded_steps_fall_back_where_masked_and_match_the_unfused_run(monkeypatch):
    """Clients with unequal numbers of local steps (epochs over unequal shards) are masked at the steps only some
    run: there the step is taken out of place, since the loop keeps the carry to fall back to."""
    change = dict(local_steps=None, local_epochs=1, partition="dirichlet:0.3")
    calls = _spy(monkeypatch)
    fused = _run("fedavg", "vectorized", **change)
    assert True in calls and calls.count(False) > 2  # in place where every client steps; out of place where masked
    with monkeypatch.context() as m:
        plain = _run("fedavg", "vectorized", fused=False, monkeypatch=m, **change)
    for a, b in zip(_accuracies(fused), _accuracies(plain)):
        assert abs(a - b) <= 0.02
    assert fused.final["train_loss"] == pytest.approx(plain.final["train_loss"], rel=1e-3)
