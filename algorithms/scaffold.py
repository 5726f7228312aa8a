"""SCAFFOLD (Karimireddy et al., 2020, Alg. 1 with control-variate option II).

Server state (x, c); each client keeps its control variate c_i (c_i = 0 at first). The server
broadcasts x and c (2 fp32 vectors); the client runs K_i local steps on the corrected gradient

    y <- y - eta_l ( g_i(y) - c_i + c )                                  (Alg. 1, line 10)
    c_i+ = c_i - c + (x - y) / (K_i eta_l)                               (line 12, option II)

and sends (Delta y_i, Delta c_i) = (y - x, c_i+ - c_i) (2 fp32 vectors: 64 bits per parameter up and
down, the "2x" of the GradMA paper's Table 2). The server applies

    x <- x + eta_g sum_{i in S} p_i Delta y_i,     c <- c + (1/N) sum_{i in S} Delta c_i   (lines 16-17)

so c stays the uniform mean of the N client variates. ``weighting`` chooses p_i: ``"uniform"``
(default, the paper's 1/|S|) or ``"samples"`` (n_i / sum n_j, as FedAvg; only the x update changes).
K_i is the client's own number of local steps and eta_l the round's local learning rate; option II
assumes plain local SGD (with another optimizer the formula is applied unchanged). With c = c_i = 0
(the first round) a client's update is FedAvg's (tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .core.hyper import POSITIVE, WEIGHTING, param


@register
class Scaffold(Algorithm):
    name = "scaffold"

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)  # global step size (1 in the paper's experiments)
        weighting: str = param("uniform", WEIGHTING)

    def init(self, params):
        return {"params": params.clone(), "c": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return Message({"x": server_state["params"].to(torch.float32),
                        "c": server_state["c"].to(torch.float32)})

    def client_init(self, params):
        return {"c_i": torch.zeros_like(params)}

    def local_update(self, ctx, downlink, client_state):
        x = self.receive(downlink, client_state)
        c, c_i = downlink["c"], client_state["c_i"]
        correction = c - c_i

        def grad_fn(p, batch, s):
            loss, g = ctx.loss_and_grad(p, batch)
            return loss, g + correction

        y = self.sgd_loop(ctx, x, grad_fn)
        k = ctx.steps.to(x.dtype)
        c_new = c_i - c + (x - y) / (k * ctx.lr)
        return Message({"dy": y - x, "dc": c_new - c_i}), {"c_i": c_new}

    def aggregate(self, server_state, uplinks, weights, info):
        dy = self.weighted_mean(uplinks["dy"], self.client_weights(weights, self.hp.weighting))
        dc = uplinks["dc"].sum(0) / info.num_clients
        return {**server_state, "params": server_state["params"] + self.hp.eta_g * dy,
                "c": server_state["c"] + dc}
