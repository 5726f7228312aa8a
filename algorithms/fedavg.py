"""FedAvg (McMahan et al., 2017), the backbone every paper compares against.

Clients run local SGD from the broadcast model w_t and send their update Delta_k = w_k - w_t in
fp32; the server applies the weighted mean of the updates (FedBAT paper, Eq. 2):

    w_{t+1} = w_t + eta_g * sum_{k in S_t} p'_k (w_{t+1}^k - w_t),   p'_k = p_k / sum_{j in S_t} p_j

with eta_g = 1 in the original algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import Algorithm, Message, register
from .core.hyper import POSITIVE, param


@register
class FedAvg(Algorithm):
    name = "fedavg"

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)  # server step size (1 = plain FedAvg)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + self.hp.eta_g * delta}
