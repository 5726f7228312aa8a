"""FedLESAM (Fan et al., ICML 2024, "Locally Estimated Global Perturbations are Better than Local
Perturbations for Federated Sharpness-aware Minimization"), a baseline of FedSWA (Liu et al., ICML
2025; ``fedswa.md`` Sec. 2: "each client estimates the global perturbation direction locally as the
difference between the global models received in its previous active round and the current round").

Client i keeps the global model it received when it last took part, theta_old (client state). In
round t, from theta_t:

    delta   = rho * (theta_old - theta_t) / ||theta_old - theta_t||   (0 at a client's first round)
    y      <- y - lr * grad F_i(y + delta; B)                          (one gradient per step)
    theta_old <- theta_t

theta_old - theta_t is the accumulated global descent since the client's last round, i.e. an
estimate of the global gradient direction, so ``y + delta`` is a SAM-style ascent along the *global*
loss at the cost of one gradient per step. The server averages the models as FedAvg does.

The FedSWA paper gives no radius; the default rho = 0.05 is the FedSAM radius used here. With
rho = 0 FedLESAM is FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .fedsam import _TINY
from .core.hyper import NONNEGATIVE, param


@register
class FedLESAM(Algorithm):
    name = "fedlesam"

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(0.05, NONNEGATIVE)  # perturbation radius

    def client_init(self, params):
        seen = torch.zeros((), dtype=params.dtype, device=params.device)  # 1 once the client has taken part
        return {"theta_old": params.clone(), "seen": seen}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        diff = client_state["theta_old"] - w0
        delta = self.hp.rho * client_state["seen"] * diff / torch.linalg.vector_norm(diff).clamp(min=_TINY)
        w = self.sgd_loop(ctx, w0, lambda p, b, s: ctx.loss_and_grad(p + delta, b))
        new_state = {"theta_old": w0.clone(), "seen": torch.ones_like(client_state["seen"])}
        return Message.dense(w - w0, "delta"), new_state

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + delta}
