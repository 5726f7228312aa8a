"""FedAvg (McMahan et al., 2017), the backbone every paper compares against.

Clients run local SGD from the broadcast model w_t and send their update in fp32; the server applies the
weighted mean of the updates (FedBAT paper, Eq. 2):

    w_{t+1} = w_t + eta_g * sum_{k in S_t} p'_k (w_{t+1}^k - w_t),   p'_k = p_k / sum_{j in S_t} p_j

with eta_g = 1 in the original algorithm. The update travels as d_k = w_t - w_{t+1}^k and the server step is
the server optimizer's on the pseudo-gradient d = sum_k p'_k d_k (``optim.ServerSGD``: w_{t+1} = w_t - eta_g d,
the same rule), so that FedAvgM (``fedavgm``) is this algorithm with ``optim.ServerMomentum``. ``weighting``
chooses p'_k: ``"samples"`` (the formula above, the engine's weights) or ``"uniform"`` (1/S, GradMA's Alg. 5
for FedAvgM).
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import Algorithm, Message, optim, register
from .core.hyper import POSITIVE, WEIGHTING, param


@register
class FedAvg(Algorithm):
    name = "fedavg"
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)  # server step size (1 = plain FedAvg)
        weighting: str = param("samples", WEIGHTING)  # p'_k: n_k / sum_{j in S_t} n_j, or 1/S

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w0 - w, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        p = self.client_weights(weights, self.hp.weighting)
        return self.server_step(server_state, self.weighted_mean(uplinks["d"], p))
