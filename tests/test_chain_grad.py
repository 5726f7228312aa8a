"""``benchmark.sim.chain_grad``: a plain chain's gradient written out under vmap equals torch.func's bit for bit
(MLPs with and without biases, BHerd's SVM loss, padded batches), is used only where it applies, and a planted
change of one backward formula is caught."""
import pytest
import torch
from torch.func import grad_and_value, vmap

from benchmark.models.blocks import _Flatten
from benchmark.sim import chain_grad
from benchmark.sim.functional import Batch, FunctionalModel


def _mlp(sizes, bias=True, flatten=True):
    layers = [_Flatten()] if flatten else []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(a, b, bias=bias))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _svm(d):
    m = torch.nn.Sequential(_Flatten(), torch.nn.Linear(d, 1))
    m.fedrepro_loss = "squared_hinge"
    return m


CASES = {
    "mlp": (lambda: _mlp([64, 32, 10]), (8, 8), 10),
    "mlp2_nobias": (lambda: _mlp([784, 200, 100, 10], bias=False), (28, 28), 10),
    "logreg": (lambda: _mlp([20, 5], flatten=False), (20,), 5),
    "svm": (lambda: _svm(30), (30,), 2),
}


def _data(shape, classes, clients=5, rows=16, svm=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(clients, rows, *shape, generator=g)
    y = torch.randint(0, classes, (clients, rows), generator=g)
    y = y.float() if svm else y
    w = torch.ones(clients, rows)
    w[1, 10:] = 0.0  # a padded batch
    w[2] = torch.rand(rows, generator=g)  # sample weights
    return x, y, w


def _both(fm, flat, x, y, w):
    def ref(p, xi, yi, wi):
        b = Batch(xi, yi, wi)
        return grad_and_value(lambda q: fm.criterion(fm.forward_train(q, xi, wi)[0], b, vectorized=True))(p)

    def manual(p, xi, yi, wi):
        v, g = chain_grad.value_and_grad(fm.chain_grad, fm.layout, p, xi, yi, wi)
        return g, v

    return vmap(ref)(flat, x, y, w), vmap(manual)(flat, x, y, w)


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_torch_func_bit_for_bit(case):
    make, shape, classes = CASES[case]
    torch.manual_seed(1)
    fm = FunctionalModel(make(), "classification")
    assert fm.chain_grad is not None
    flat0 = torch.nn.utils.parameters_to_vector(fm.module.parameters()).detach()
    flat = flat0 + 0.3 * torch.randn(5, flat0.numel())  # each client its own point
    x, y, w = _data(shape, classes, svm=case == "svm")
    (g_ref, v_ref), (g, v) = _both(fm, flat, x, y, w)
    assert torch.equal(v, v_ref) and torch.equal(g, g_ref)
    if case == "svm":  # some margins active, some not: both sides of the clamp are exercised
        assert 0 < int((g_ref[:, :-1] != 0).any(-1).sum()) and (g_ref != 0).any()


def test_a_planted_change_of_one_formula_is_caught(monkeypatch):
    """The bias gradient summed in another order (a float32 sum in two halves) differs in the last bits."""
    make, shape, classes = CASES["mlp2_nobias"]
    torch.manual_seed(1)
    fm = FunctionalModel(_mlp([784, 200, 100, 10]), "classification")
    flat = torch.nn.utils.parameters_to_vector(fm.module.parameters()).detach().repeat(5, 1)
    x, y, w = _data(shape, classes, rows=64)
    real = torch.Tensor.mm

    def mm_other_order(a, b):  # the same product summed over the rows in two halves
        if a.shape[0] == 200 and b.shape[1] == 784:
            k = a.shape[1] // 2
            return real(a[:, :k], b[:k]) + real(a[:, k:], b[k:])
        return real(a, b)

    monkeypatch.setattr(torch.Tensor, "mm", mm_other_order)
    (g_ref, _), (g, _) = _both(fm, flat, x, y, w)
    assert not torch.equal(g, g_ref)


def test_applies_only_to_plain_chains_under_vmap_alone():
    assert FunctionalModel(torch.nn.Sequential(_Flatten(), torch.nn.Linear(4, 3), torch.nn.Tanh(),
                                               torch.nn.Linear(3, 2)), "classification").chain_grad is None
    assert FunctionalModel(_mlp([4, 3]), "regression").chain_grad is None
    assert FunctionalModel(torch.nn.Sequential(_Flatten(), torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                               torch.nn.Linear(3, 2)), "classification").chain_grad is None
    seen = []
    vmap(lambda t: seen.append(chain_grad.only_vmap()) or t)(torch.ones(2, 3))
    vmap(grad_and_value(lambda t: (seen.append(chain_grad.only_vmap()), t.sum())[1]))(torch.ones(2, 3))
    assert seen == [True, False] and not chain_grad.only_vmap()


def test_a_layout_whose_slices_do_not_tile_the_vector_is_refused():
    """The flat gradient is one ``cat`` of the tensors' gradients in the slices' order, so a layout whose slices do
    not tile the vector (a gap) has no chain gradient; one that tiles it in another order has."""
    from algorithms.core.layout import ParamLayout, ParamSlice

    fm = FunctionalModel(_mlp([4, 3]), "classification")
    assert fm.chain_grad is not None
    w, b = fm.layout.slices
    swapped = ParamLayout((ParamSlice(b.name, 0, b.numel, b.shape, b.kind),
                           ParamSlice(w.name, b.numel, b.numel + w.numel, w.shape, w.kind)))
    gap = ParamLayout((w, ParamSlice(b.name, w.stop + 1, w.stop + 1 + b.numel, b.shape, b.kind)))
    ops = [("flatten",), ("linear", w.name, b.name)]
    assert chain_grad.plan(ops, "default", "classification", swapped) is not None  # tiles, in its own order
    assert chain_grad.plan(ops, "default", "classification", gap) is None
    assert chain_grad.plan(ops, "default", "classification", fm.layout) is not None
