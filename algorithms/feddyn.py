"""FedDyn (Acar et al., 2021, Alg. 1): dynamic regularisation of the local objectives.

Each client k keeps its gradient memory nabla L_k(theta_k^{t-1}) (0 at first) and minimises, by local
SGD from the broadcast theta^{t-1},

    L_k(theta) - <nabla L_k(theta_k^{t-1}), theta> + alpha/2 ||theta - theta^{t-1}||^2     (Alg. 1, line 5)

i.e. the local gradient is g_k(theta) - nabla L_k(theta_k^{t-1}) + alpha (theta - theta^{t-1}). Then

    nabla L_k(theta_k^t) = nabla L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1})     (line 6)
    h^t     = h^{t-1} - alpha (1/N) sum_{k in P_t} (theta_k^t - theta^{t-1})                 (line 8)
    theta^t = sum_{k in P_t} p_k theta_k^t - h^t / alpha                                     (line 9)

The client sends theta_k^t - theta^{t-1} (fp32, as FedAvg). ``weighting`` chooses p_k: ``"uniform"``
(default, the paper's 1/|P_t|) or ``"samples"`` (n_k / sum n_j); h always averages over all N
clients (the paper's 1/m). theta^t is both the broadcast and the evaluated model.

Local optimizer: any. Line 6 is the stationarity condition of the local objective at theta_k^t, not a
displacement over K steps and a learning rate, so it holds for whatever solver approximates the local minimiser
(plain SGD, heavy ball, Adam; tested not to diverge under each, and to reach the optimum of a heterogeneous
least-squares problem under momentum 0.9).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .core.hyper import POSITIVE, WEIGHTING, param


@register
class FedDyn(Algorithm):
    name = "feddyn"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = param(0.01, POSITIVE)  # regularisation strength (GradMA grid {0.001, 0.01, 0.1})
        weighting: str = param("uniform", WEIGHTING)

    def init(self, params):
        return {"params": params.clone(), "h": torch.zeros_like(params)}

    def client_init(self, params):
        return {"grad_mem": torch.zeros_like(params)}

    def local_update(self, ctx, downlink, client_state):
        theta = self.receive(downlink, client_state)
        mem = client_state["grad_mem"]
        alpha = self.hp.alpha

        def grad_fn(p, batch, s):
            loss, g = ctx.loss_and_grad(p, batch)
            return loss, g - mem + alpha * (p - theta)

        delta = self.sgd_loop(ctx, theta, grad_fn) - theta
        return Message.dense(delta, "delta"), {"grad_mem": mem - alpha * delta}

    def aggregate(self, server_state, uplinks, weights, info):
        alpha = self.hp.alpha
        delta = uplinks["delta"]
        h = server_state["h"] - alpha * delta.sum(0) / info.num_clients
        mean = self.weighted_mean(delta, self.client_weights(weights, self.hp.weighting))
        return {**server_state, "params": server_state["params"] + mean - h / alpha, "h": h}
