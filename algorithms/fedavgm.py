"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg with a server momentum buffer.

FedAvg's local rule with the server momentum optimizer (``optim.ServerMomentum``), written as in the
GradMA paper, Appendix Alg. 5 (FedAvgM branch):

    d_{t+1}^(i) = x_t - x_{t,I}^(i)                        (plain local SGD from x_t)
    d_{t+1}     = sum_{i in S_t} p_i d_{t+1}^(i)
    m_{t+1}     = beta1 m_t + d_{t+1},     m_0 = 0          (optim.ServerMomentum)
    x_{t+1}     = x_t - eta_g m_{t+1}

With beta1 = 0 and eta_g = 1 this is FedAvg exactly (tested). ``weighting`` chooses p_i: ``"samples"``
(default: p_i = n_i / sum_{j in S_t} n_j, the engine's weights, as FedAvg and Hsu et al.) or
``"uniform"`` (p_i = 1/S, the 1/S of GradMA's Alg. 5).
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import optim
from .core import Algorithm, Message, register
from .core.hyper import MOMENTUM, POSITIVE, WEIGHTING, param


@register
class FedAvgM(Algorithm):
    name = "fedavgm"
    server_optimizer = optim.ServerMomentum

    @dataclass(frozen=True)
    class Hyper:
        # server momentum (GradMA grid {0.1, 0.5, 0.9}; Hsu et al. use 0.9)
        beta1: float = param(0.9, MOMENTUM)
        eta_g: float = param(1.0, POSITIVE)  # server learning rate (GradMA grid {0.1, 1.0, 10.0})
        weighting: str = param("samples", WEIGHTING)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w0 - w, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = self.weighted_mean(uplinks["d"], self.client_weights(weights, self.hp.weighting))
        return self.server_step(server_state, d)
