"""FedACG (Kim et al., CVPR 2024, "Communication-Efficient Federated Learning with Accelerated Client
Gradient"), a baseline of FedSWA (Liu et al., ICML 2025; ``fedswa.md`` Sec. 2: "the server broadcasts
a global model with a look-ahead").

The server keeps a global momentum m (zero at first) and broadcasts the look-ahead model

    theta_tilde_t = theta_{t-1} + lambda * m_{t-1}

Clients start from theta_tilde_t and run local SGD on the regularised objective

    F_i(y) + (beta / 2) ||y - theta_tilde_t||^2     (gradient g + beta (y - theta_tilde_t))

and send Delta_i = y_{i,K} - theta_tilde_t. The server updates

    m_t = lambda * m_{t-1} + sum_i p_i Delta_i,     theta_t = theta_{t-1} + m_t = theta_tilde_t + mean Delta

and theta_t is the evaluated model. The FedSWA paper gives no values; lambda = 0.85 is the look-ahead
of FedSWA's public code (whose regulariser is detached there, i.e. has no effect; not reproduced) and
beta = 0.001 is our choice after FedACG's CIFAR setting. With lambda = 0 and beta = 0 FedACG is FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .core.hyper import MOMENTUM, NONNEGATIVE, param


@register
class FedACG(Algorithm):
    name = "fedacg"

    @dataclass(frozen=True)
    class Hyper:
        lam: float = param(0.85, MOMENTUM)  # momentum / look-ahead coefficient lambda
        beta: float = param(0.001, NONNEGATIVE)  # proximal coefficient towards the look-ahead model

    def init(self, params):
        return {"params": params.clone(), "m": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return Message.dense(server_state["params"] + self.hp.lam * server_state["m"])

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        beta = self.hp.beta

        def grad_fn(p, b, s):
            loss, g = ctx.loss_and_grad(p, b)
            return loss, g + beta * (p - w0)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        m = self.hp.lam * server_state["m"] + self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + m, "m": m}
