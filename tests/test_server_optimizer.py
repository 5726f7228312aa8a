"""Server optimizers as a parameter: the "<base>M" variants are configurations of their base algorithm with
``optim.ServerMomentum`` (``registry.with_server_momentum``), not subclasses, with the numbers of the subclass
code they replace."""
import dataclasses

import pytest
import torch

import algorithms
from algorithms.core import Algorithm, Message, ParamLayout, RoundInfo, optim, registry
from tests.helpers import run_tiny, tiny_bn_model

# variant -> its base algorithm (FedAvgM's base rule is FedAvg's local SGD, averaged with ``weighting``)
VARIANTS = {"fedproxm": "fedprox", "moonm": "moon", "fedmlbm": "fedmlb", "mifam": "mifa"}
MOMENTUM_ALGORITHMS = ("fedavgm",) + tuple(VARIANTS)
# the methods of the algorithm contract, which a variant must take unchanged from its base
CONTRACT = ("init", "broadcast", "receive", "client_init", "local_update", "aggregate", "global_params")


def _history(result):
    return [{k: v for k, v in h.items() if k != "wall_time"} for h in result.history]


def _run(name, **args):
    return run_tiny(name, rounds=3, model=tiny_bn_model, algorithm_args=args)


# ----------------------------------------------------------------------------------------- structure


def _is_configuration_of(v, b):
    """v is b's code under another name: not a class (so it overrides nothing), built as an instance of b."""
    assert isinstance(v, registry.Configuration) and not isinstance(v, type) and v.algorithm is b
    assert b.__bases__ == (Algorithm,) and b.server_optimizer is optim.ServerSGD
    assert v.server_optimizer is optim.ServerMomentum and v.Hyper().beta1 == 0.9
    alg = v(v.Hyper(), ParamLayout.single(3), 4)
    assert type(alg) is b and alg.name == v.name and isinstance(alg.server_opt, optim.ServerMomentum)
    assert not set(vars(alg)) & set(CONTRACT)  # the instance replaces no method of the contract either


@pytest.mark.parametrize("variant, base_name", VARIANTS.items())
def test_variant_is_a_configuration_of_its_base_with_the_momentum_optimizer(variant, base_name):
    v, b = algorithms.get_class(variant), algorithms.get_class(base_name)
    _is_configuration_of(v, b)
    bf = [f.name for f in dataclasses.fields(b.Hyper)]
    vf = [f.name for f in dataclasses.fields(v.Hyper)]
    assert vf == bf[:bf.index("eta_g")] + ["beta1"] + bf[bf.index("eta_g"):]
    assert v.__module__ == b.__module__


def test_fedavgm_is_fedavg_with_the_momentum_optimizer_and_a_weighting():
    v = algorithms.get_class("fedavgm")
    _is_configuration_of(v, algorithms.get_class("fedavg"))
    assert [f.name for f in dataclasses.fields(v.Hyper)] == ["beta1", "eta_g", "weighting"]
    assert v.__module__ == "algorithms.fedavgm"  # registered there (``fedrepro list``'s "about" comes from it)


def test_with_server_momentum_refuses_a_base_without_the_plain_server_step():
    with pytest.raises(TypeError, match="ServerSGD"):
        registry.with_server_momentum(algorithms.get_class("scaffold"), "scaffold_m")


# ------------------------------------------------------------------------------- the server step


def _hand_momentum_round(x, m, d, beta1, eta_g):
    """GradMA Alg. 5, written out: m <- beta1 m + d, x <- x - eta_g m."""
    m = beta1 * m + d
    return x - eta_g * m, m


@pytest.mark.parametrize("name", MOMENTUM_ALGORITHMS)
def test_momentum_server_step_is_the_hand_computed_recurrence(name):
    torch.manual_seed(0)
    n, d, beta1, eta_g = 5, 7, 0.7, 0.8
    args = {"beta1": beta1, "eta_g": eta_g}
    if name != "mifam":
        args["weighting"] = "uniform"
    alg = algorithms.make(name, ParamLayout.single(d), n, args)
    key = "g" if name == "mifam" else "d"
    st = alg.init(torch.randn(d))
    x, m, memory = st["params"].clone(), torch.zeros(d), torch.zeros(n, d)
    for r in range(4):
        ids = torch.tensor([(r + j) % n for j in range(3)])
        ups = torch.randn(3, d)
        w = torch.rand(3)
        info = RoundInfo(r, ids, n, torch.ones(3), torch.ones(3, dtype=torch.int64), 0.1)
        st = alg.aggregate(st, Message({key: ups}), w / w.sum(), info)
        if name == "mifam":  # the memory of every worker's last update, averaged over all N
            memory[ids] = ups
            pseudo = memory.mean(0)
        else:
            pseudo = torch.tensordot(torch.full((3,), 1.0 / 3), ups, dims=1)
        x, m = _hand_momentum_round(x, m, pseudo, beta1, eta_g)
        assert torch.equal(st["params"], x) and torch.equal(st["momentum"], m)


def test_server_optimizers():
    x, d = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.25])
    sgd = optim.ServerSGD(eta_g=2.0)
    assert sgd.init(x) == {} and torch.equal(sgd.step(x, d, {})[0], torch.tensor([0.0, -2.5]))
    mom = optim.ServerMomentum(eta_g=2.0, beta1=0.5)
    st = mom.init(x)
    x1, st = mom.step(x, d, st)
    x2, st = mom.step(x1, d, st)
    assert torch.equal(x1, x - 2.0 * d) and torch.equal(st["momentum"], 1.5 * d)  # m = 0.5 d + d
    assert torch.equal(x2, x1 - 3.0 * d)


# --------------------------------------------------------------------------- whole runs, bit for bit


@pytest.mark.parametrize("variant, base_name", VARIANTS.items())
def test_variant_with_beta1_zero_is_its_base_bit_for_bit(variant, base_name):
    # the momentum optimizer at beta1 = 0 and the plain server step give the same numbers
    assert _history(_run(variant, beta1=0.0, eta_g=0.8)) == _history(_run(base_name, eta_g=0.8))


def _subclass_momentum(base_cls, beta1):
    """The server rule the "<base>M" subclasses had before server optimizers were a parameter: the base's
    own aggregate, with the momentum written inline (FedAvgM.aggregate of the old ``fedavgm.py``)."""

    class OldStyle(base_cls):
        name = f"old_{base_cls.name}m"
        server_optimizer = None

        def init(self, params):
            st = {"params": params.clone(), "momentum": torch.zeros_like(params)}
            if base_cls.name == "mifa":
                st["memory"] = torch.zeros(self.num_clients, params.numel(), dtype=params.dtype)
            return st

        def aggregate(self, server_state, uplinks, weights, info):
            st = dict(server_state)
            if base_cls.name == "mifa":
                st["memory"] = st["memory"].index_copy(0, info.client_ids.to(torch.int64), uplinks["g"])
                d = st["memory"].mean(0)
            else:
                d = self.weighted_mean(uplinks["d"], self.client_weights(weights, self.hp.weighting))
            m = beta1 * st["momentum"] + d
            return {**st, "params": st["params"] - self.hp.eta_g * m, "momentum": m}

    return OldStyle


@pytest.mark.parametrize("variant, base_name", VARIANTS.items())
def test_variant_equals_the_old_subclass_code_bit_for_bit(variant, base_name, monkeypatch):
    old = _subclass_momentum(algorithms.get_class(base_name), 0.5)
    monkeypatch.setitem(registry._REGISTRY, old.name, old)  # registered for this test only
    assert _history(_run(variant, beta1=0.5, eta_g=0.8)) == _history(_run(old.name, eta_g=0.8))
