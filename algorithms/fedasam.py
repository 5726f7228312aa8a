"""FedASAM (Caldarola et al., ECCV 2022, "Improving Generalization in Federated Learning by Seeking
Flat Minima"), a baseline of FedSWA (Liu et al., ICML 2025; ``fedswa.md`` Sec. 2).

Clients run Adaptive SAM (ASAM, Kwon et al., ICML 2021) as the local optimizer: with the
element-wise normalisation operator T_theta = diag(|theta| + eta),

    g        = grad F_i(theta; B)
    eps_hat  = rho * T_theta^2 g / ||T_theta g||_2          (ASAM's p = 2 ascent step)
    theta   <- theta - lr * grad F_i(theta + eps_hat; B)

and the server averages the models as FedAvg does. Neither the FedSWA paper nor its code gives
FedASAM's hyperparameters; the defaults rho = 0.5, eta = 0.01 are ASAM's (Kwon et al.) CIFAR
settings. T_theta is applied to every parameter (ASAM's definition; no per-layer exclusion). With
rho = 0 FedASAM is FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .fedsam import _TINY, sam_grad
from .core.hyper import NONNEGATIVE, param


def asam_perturbation(p: torch.Tensor, g: torch.Tensor, rho: float, eta: float) -> torch.Tensor:
    """eps_hat = rho * T^2 g / ||T g||, T = |p| + eta (element-wise); 0 where T g = 0."""
    t = p.abs() + eta
    tg = t * g
    return rho * t * tg / torch.linalg.vector_norm(tg).clamp(min=_TINY)


@register
class FedASAM(Algorithm):
    name = "fedasam"

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(0.5, NONNEGATIVE)  # ASAM neighbourhood radius
        eta: float = param(0.01, NONNEGATIVE)  # ASAM's offset in T_theta = |theta| + eta

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        rho, eta = self.hp.rho, self.hp.eta
        def perturb(q, g):
            return asam_perturbation(q, g, rho, eta)

        w = self.sgd_loop(ctx, w0, lambda p, b, s: sam_grad(ctx, p, b, perturb))
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + delta}
