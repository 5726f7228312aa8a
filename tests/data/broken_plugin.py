"""Planted defects for the contract tests (tests/test_plugins.py): a plugin whose algorithms each break one
rule of the Algorithm contract (algorithms/core/base.py), so that ``pytest --fedrepro-plugin`` must fail them."""
from dataclasses import dataclass

import torch

from algorithms import Algorithm, Message, register
from algorithms.core import optim
from algorithms.core.hyper import POSITIVE, param


class _Base(Algorithm):
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)

    def update(self, ctx, delta):
        return delta

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        return Message.dense(self.update(ctx, w0 - self.sgd_loop(ctx, w0)), "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return self.server_step(server_state, self.weighted_mean(uplinks["d"], weights))


@register
class GlobalRng(_Base):
    """Defect: noise from torch's global generator, not ctx.rng (runs are not reproducible)."""

    name = "broken_global_rng"

    def update(self, ctx, delta):
        return delta + 0.01 * torch.randn(delta.shape)


@register
class ReadsValues(_Base):
    """Defect: Python control flow on a tensor value (.item() fails under vmap)."""

    name = "broken_reads_values"

    def update(self, ctx, delta):
        return delta * 0.5 if delta.norm().item() > 1.0 else delta


@register
class NoConstraint(_Base):
    """Defect: a hyperparameter without a declared constraint (hyper.param)."""

    name = "broken_no_constraint"

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)
        clip: float = 1.0


@register
class LeaksState(_Base):
    """Defect: state kept across runs in the class (a second run with the same seed differs)."""

    name = "broken_leaks_state"
    runs = 0

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        type(self).runs += 1

    def update(self, ctx, delta):
        return delta * (1.0 + 0.1 * type(self).runs)


@register
class SendsNothing(_Base):
    """Defect: an empty uplink (no bits), the server keeps its model."""

    name = "broken_sends_nothing"

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        return Message.dense(w0[:0], "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return server_state


@register
class HidesState(_Base):
    """Defect: state carried from round to round in the instance, not in the server state (a run resumed from
    its checkpoint starts the count again)."""

    name = "broken_hides_state"

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.rounds_seen = 0

    def aggregate(self, server_state, uplinks, weights, info):
        self.rounds_seen += 1
        return self.server_step(server_state, self.weighted_mean(uplinks["d"], weights) * (1.0 + 0.1 * self.rounds_seen))
