"""GradMA-W and GradMA-S are configurations of GradMA (``registry.configure`` with ``fixed`` values), not
subclasses toggled by flags (issue 46): one algorithm class, the variants' hyperparameters as before, the fixed
values not settable, and GradMA-W equal to GradMA with m = 0 and beta1 = 0 to the bit."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import algorithms
from algorithms.core import configure, hyper, make_hyper
from algorithms.core.registry import Configuration
from algorithms.gradma import GradMA
from tests.helpers import run_tiny
from tests.test_gradma import conflicting_dataset

# the variants' hyperparameters, in order, as the subclasses declared them before (aa98dfe), and then ``gram``
# (how the server holds its memory) where there is a memory
FIELDS = {
    "gradma": ["eta_g", "beta1", "beta2", "m", "weighting", "prev_model", "per_layer", "rho_l", "rho_g", "qp_tol",
               "on_qp_failure", "gram"],
    "gradma_w": ["eta_g", "weighting", "prev_model", "per_layer", "rho_l", "qp_tol", "on_qp_failure"],
    "gradma_s": ["eta_g", "beta1", "beta2", "m", "weighting", "per_layer", "rho_g", "qp_tol", "on_qp_failure",
                 "gram"],
}


def test_variants_are_configurations_of_one_class_with_their_hyperparameters():
    assert algorithms.get_class("gradma") is GradMA
    for name in ("gradma_w", "gradma_s"):
        c = algorithms.get_class(name)
        assert isinstance(c, Configuration) and c.algorithm is GradMA and c.name == name
    for name, names in FIELDS.items():
        cls = algorithms.get_class(name)
        assert [f.name for f in dataclasses.fields(cls.Hyper)] == names
        # defaults as before: the paper's
        hp = make_hyper(cls, {})
        assert {k: getattr(hp, k) for k in names} == {k: getattr(make_hyper(GradMA, {}), k) for k in names}
    w, s = make_hyper(algorithms.get_class("gradma_w"), {}), make_hyper(algorithms.get_class("gradma_s"), {})
    assert (w.m, w.beta1, w.worker_qp) == (0, 0.0, True) and (s.worker_qp, s.m) is not None and not s.worker_qp
    assert make_hyper(GradMA, {}).worker_qp is True
    from theory.claims.gradma import has_worker_qp  # the theory claims read it from the registered Hyper

    assert [has_worker_qp(n) for n in ("gradma", "gradma_w", "gradma_s", "fedavg")] == [True, True, False, False]


@pytest.mark.parametrize("name,key", [("gradma_w", "beta1"), ("gradma_w", "m"), ("gradma_w", "beta2"),
                                      ("gradma_w", "rho_g"), ("gradma_w", "gram"), ("gradma_s", "prev_model"),
                                      ("gradma_s", "rho_l"), ("gradma_s", "worker_qp"), ("gradma", "worker_qp")])
def test_fixed_values_are_not_hyperparameters(name, key):
    with pytest.raises(ValueError, match=f"{name}: unknown algorithm_args \\['{key}'\\]"):
        make_hyper(algorithms.get_class(name), {key: 0})


def test_built_variants_carry_their_names_and_refusals():
    from algorithms.core import ParamLayout, optim

    a = algorithms.make("gradma_w", ParamLayout.single(3), 4)
    assert type(a) is GradMA and a.name == "gradma_w" and not a.server_update and a.memory_size == 0
    assert a.init(torch.zeros(3)).keys() == {"params", "qp_l_failures"}  # the server state GradMA-W had
    s = algorithms.make("gradma_s", ParamLayout.single(3), 4)
    assert s.server_update and s.memory_size == 4 and s.client_init(torch.zeros(3)) == {}
    with pytest.raises(optim.UnsupportedOptimizer, match="gradma_w: the local optimizer adam"):
        algorithms.get_class("gradma_w").check_optimizer(make_hyper(algorithms.get_class("gradma_w"), {}),
                                                         optim.Adam())
    algorithms.get_class("gradma_s").check_optimizer(make_hyper(algorithms.get_class("gradma_s"), {}), optim.Adam())


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_gradma_w_is_gradma_without_memory_and_momentum_to_the_bit(executor):
    data = conflicting_dataset()  # QP_g is active on it
    a = run_tiny("gradma_w", executor, rounds=3, algorithm_args={"eta_g": 0.7}, data=data)
    b = run_tiny("gradma", executor, rounds=3, algorithm_args={"eta_g": 0.7, "m": 0, "beta1": 0.0}, data=data)
    assert [h["test_loss"] for h in a.history] == [h["test_loss"] for h in b.history]
    pa, pb = (torch.nn.utils.parameters_to_vector(r.model.parameters()) for r in (a, b))
    assert torch.equal(pa, pb)
    # and the memory matters: with it the run differs (the equality above is not vacuous)
    c = run_tiny("gradma", executor, rounds=3, algorithm_args={"eta_g": 0.7, "beta1": 0.0}, data=data)
    assert not torch.equal(pa, torch.nn.utils.parameters_to_vector(c.model.parameters()))


def test_derive_fixed_checks_its_names():
    with pytest.raises(ValueError, match=r"has no hyperparameters \['nope'\]"):
        configure(GradMA, "gradma_x", fixed={"nope": 1})
    with pytest.raises(ValueError, match="cannot be both a default and fixed"):
        configure(GradMA, "gradma_x", fixed={"m": 0}, m=3)
    H = hyper.derive(GradMA.Hyper, {"eta_g": 2.0}, fixed={"m": 0, "worker_qp": False})
    hp = hyper.build("x", H, {})
    assert (hp.eta_g, hp.m, hp.worker_qp) == (2.0, 0, False) and "m" not in {f.name for f in dataclasses.fields(H)}
    assert hyper.derive(GradMA.Hyper, {}).worker_qp is True  # a class constant is kept
