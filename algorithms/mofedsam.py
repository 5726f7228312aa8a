"""MoFedSAM (Qu et al., ICML 2022, "Generalized Federated Learning via Sharpness Aware
Minimization"), a baseline of FedSWA (Liu et al., ICML 2025; ``fedswa.md`` Sec. 2 and 7.1).

FedSAM plus client-side momentum towards the server's last global direction (FedCM-style). The
server broadcasts theta_t and Delta_t, the previous round's average pseudo-gradient; each local step
mixes the SAM gradient (``fedsam.sam_grad``, eps_hat = rho g/||g||) with it:

    v      = alpha * grad F_i(theta + eps_hat; B) + (1 - alpha) * Delta_t
    theta <- theta - lr * v

and the server (eta_g = 1: plain model averaging)

    theta_{t+1} = theta_t + eta_g * sum_i p_i (theta_{i,K} - theta_t)
    Delta_{t+1} = sum_i p_i (theta_t - theta_{i,K}) / (lr * K_i)        (K_i: client i's local steps)

The FedSWA paper gives no formula or values; the defaults rho = 0.1, alpha = 0.1 are those of
FedSWA's public code (``main.py``: SAM rho 0.1, local LR lr * (1 - 0.9) on the SAM gradient plus
-0.9 * lr * Delta per step, i.e. alpha = 0.1). Delta_0 = 0, so the first round's steps are alpha * lr.
With alpha = 1 and rho = 0 MoFedSAM is FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .fedsam import sam_grad, sam_perturbation
from .core.hyper import NONNEGATIVE, POSITIVE, Range, param


@register
class MoFedSAM(Algorithm):
    name = "mofedsam"

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(0.1, NONNEGATIVE)  # SAM radius
        # weight of the fresh SAM gradient (1 - alpha on the server direction)
        alpha: float = param(0.1, Range("(0, 1]"))
        eta_g: float = param(1.0, POSITIVE)  # server step size

    def init(self, params):
        return {"params": params.clone(), "Delta": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return Message({"x": server_state["params"].to(torch.float32),
                        "Delta": server_state["Delta"].to(torch.float32)})

    def local_update(self, ctx, downlink, client_state):
        w0, big_delta = downlink["x"], downlink["Delta"]
        rho, a = self.hp.rho, self.hp.alpha

        def grad_fn(p, b, s):
            loss, g = sam_grad(ctx, p, b, lambda _p, g0: sam_perturbation(g0, rho))
            return loss, a * g + (1.0 - a) * big_delta

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = uplinks["delta"]
        delta = self.weighted_mean(d, weights)
        scale = 1.0 / (info.lr * info.steps.to(d.dtype))  # 1 / (lr K_i)
        big_delta = -self.weighted_mean(d * scale[:, None], weights)
        return {**server_state, "params": server_state["params"] + self.hp.eta_g * delta, "Delta": big_delta}
