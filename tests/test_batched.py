"""Batched runs: which hyperparameters may differ inside a group, how cells are grouped, and that a
group's records equal the separate runs."""
from dataclasses import dataclass

import pytest
import torch

import algorithms
from algorithms.base import Algorithm, Message
from benchmark import Experiment, batched


class _Momentumish(Algorithm):
    """A local update that reads ``hp.beta`` (a correct, batchable field) and a server step ``eta_g``."""

    name = "_test_momentumish"

    @dataclass(frozen=True)
    class Hyper:
        beta: float = 0.5
        eta_g: float = 1.0

    def local_update(self, ctx, downlink, client_state):
        x0 = downlink["x"]

        def step(carry, batch, s):
            p, v = carry
            _, g = ctx.loss_and_grad(p, batch)
            v = self.hp.beta * v + g
            return p - ctx.lr * v, v

        p, _ = ctx.loop(step, (x0, torch.zeros_like(x0)))
        return Message.dense(p - x0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return {"params": server_state["params"] + self.hp.eta_g * self.weighted_mean(uplinks["delta"], weights)}


class _DerivedInInit(_Momentumish):
    """Planted defect: a value derived from ``beta`` in ``__init__`` (a copy with a tensor beta keeps the
    first run's value)."""

    name = "_test_derived"

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.decay = float(hp.beta)

    def local_update(self, ctx, downlink, client_state):
        x0 = downlink["x"]

        def step(carry, batch, s):
            p, v = carry
            _, g = ctx.loss_and_grad(p, batch)
            v = self.decay * v + g
            return p - ctx.lr * v, v

        p, _ = ctx.loop(step, (x0, torch.zeros_like(x0)))
        return Message.dense(p - x0, "delta"), client_state


class _ControlFlow(_Momentumish):
    """Planted defect: Python control flow on ``beta`` (fails under vmap with a batched tensor)."""

    name = "_test_control_flow"

    def local_update(self, ctx, downlink, client_state):
        if self.hp.beta > 0.7:
            return Message.dense(torch.zeros_like(downlink["x"]), "delta"), client_state
        return super().local_update(ctx, downlink, client_state)


class _FloatLr(_Momentumish):
    """Planted defect: the learning rate used as a Python float."""

    name = "_test_float_lr"

    def local_update(self, ctx, downlink, client_state):
        scale = float(ctx.lr)
        up, st = super().local_update(ctx, downlink, client_state)
        return Message.dense(up["delta"] * scale, "delta"), st


def test_probe_accepts_batchable_fields():
    assert batched.probe_fields(_Momentumish) == {"lr", "beta", "eta_g"}


@pytest.mark.parametrize("cls, missing", [(_DerivedInInit, "beta"), (_ControlFlow, "beta"), (_FloatLr, "lr")])
def test_probe_catches_planted_defects(cls, missing):
    fields = batched.probe_fields(cls)
    assert missing not in fields
    assert "eta_g" in fields  # the server-side field is still free (aggregate runs per run)


@pytest.mark.parametrize("name", algorithms.names())
def test_every_algorithm_is_probed(name):
    """Every registered algorithm gets an answer; the non-float fields never enter it."""
    fields = batched.tensor_fields(name)
    floats = set(batched._float_fields(algorithms.get_class(name)))
    assert fields <= floats | {"lr"}


def test_grouping_keys():
    base = dict(dataset="digits", num_clients=6, rounds=2, algorithm="fedprox")
    a = Experiment(seed=0, lr=0.1, algorithm_args={"mu": 0.01}, **base)
    b = Experiment(seed=1, lr=0.05, partition="dirichlet:0.3", algorithm_args={"mu": 0.1}, **base)
    c = Experiment(seed=0, lr=0.1, batch_size=16, **base)  # a shape-changing field
    assert batched.group_key(a) == batched.group_key(b) != batched.group_key(c)
    # fednova's mu is read as a Python float: cells differing in mu do not share a job
    n1 = Experiment(dataset="digits", algorithm="fednova", algorithm_args={"mu": 0.0})
    n2 = Experiment(dataset="digits", algorithm="fednova", algorithm_args={"mu": 0.01})
    assert batched.group_key(n1) != batched.group_key(n2)
    # synthetic data depend on the seed: its seeds do not share a job
    s0, s1 = Experiment(dataset="synthetic", seed=0), Experiment(dataset="synthetic", seed=1)
    assert batched.group_key(s0) != batched.group_key(s1)


def test_plan_groups_keeps_order_and_size():
    exps = [Experiment(dataset="digits", seed=s, lr=lr) for lr in (0.1, 0.05) for s in range(3)]
    exps.insert(2, Experiment(dataset="digits", batch_size=8))
    groups = batched.plan_groups(exps, 4)
    assert sorted(i for g in groups for i in g) == list(range(7))
    assert [len(g) for g in groups] == [4, 1, 2] and groups[1] == [2]
    assert batched.plan_groups(exps, 1) == [[i] for i in range(7)]
