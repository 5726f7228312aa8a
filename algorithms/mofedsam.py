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

Local optimizer (``check_optimizer`` refuses the rest before any training). Delta_{t+1} divides the model
change by lr K_i, which assumes plain SGD. Under heavy-ball momentum beta (torch semantics) the change is
lr sum_k a_k v_k with a_k = (1 - beta^{K_i-k}) / (1 - beta), amplified over lr K_i by r = ||a||_1 / K_i (2.6 at
K = 5, beta = 0.9), and Delta re-enters its own estimate with the factor r (1 - alpha) (2.3 with the defaults):
MoFedSAM diverges (tested). So K_i is replaced by the momentum's effective number of steps ||a_i||_1
(``optim.effective_steps``, FedNova's a_i), Delta_{t+1} = sum_i p_i (theta_t - theta_{i,K}) / (lr ||a_i||_1), an
a-weighted mean of the local directions v_k; the client sends ||a_i||_1 as one fp32 scalar (as FedNova does;
only under momentum: the plain-SGD uplink is unchanged). Adam (or another optimizer) is refused: its model
change is not a fixed linear combination of the v_k.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register
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

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if optim.heavy_ball(optimizer) is None:
            raise optim.refuse(cls.name, optimizer, "Delta divides the model change by lr K_i, a rule for plain or "
                               "heavy-ball SGD only", "Use optimizer 'sgd' (with any momentum)")

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
        beta = optim.heavy_ball(ctx.optimizer)
        if not beta:
            return Message.dense(w - w0, "delta"), client_state
        a = optim.effective_steps(beta, ctx.steps).reshape(1)  # ||a_i||_1, sent under momentum only
        return Message({"delta": (w - w0).to(torch.float32), "a": a}), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = uplinks["delta"]
        delta = self.weighted_mean(d, weights)
        steps = uplinks["a"][:, 0] if "a" in uplinks.parts else info.steps  # ||a_i||_1 under momentum, else K_i
        scale = 1.0 / (info.lr * steps.to(d.dtype))  # 1 / (lr K_i)
        big_delta = -self.weighted_mean(d * scale[:, None], weights)
        return {**server_state, "params": server_state["params"] + self.hp.eta_g * delta, "Delta": big_delta}
