"""FedSAM (Qu et al., ICML 2022, "Generalized Federated Learning via Sharpness Aware Minimization"),
a baseline of FedSWA (Liu et al., ICML 2025; ``fedswa.md`` Sec. 2 and App. A.1).

Clients run SAM as the local optimizer (FedSWA App. A.1, p = 2): at each local step

    g         = grad F_i(theta; B)                                (first gradient)
    eps_hat   = rho * g / ||g||_2                                 (ascent to the neighbourhood's worst point)
    theta    <- theta - eta * grad F_i(theta + eps_hat; B)        (second gradient, same minibatch)

(through the experiment's local optimizer, so weight decay/momentum apply to the SAM gradient), and
the server averages the models as FedAvg does: theta <- theta + sum_i p_i (theta_i - theta).

rho is not given by the FedSWA paper; the default 0.05 is the radius hard-coded in FedSWA's public
code (``sam.py``). With rho = 0 FedSAM is FedAvg. Two gradient evaluations per step: the reported
local loss is the perturbed one, and BatchNorm running statistics (if any) see both forward passes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, register
from .core.hyper import NONNEGATIVE, param

_TINY = 1e-12


def sam_perturbation(g: torch.Tensor, rho: float) -> torch.Tensor:
    """eps_hat = rho * g / ||g||_2 (0 where g = 0); vmap-safe."""
    return rho * g / torch.linalg.vector_norm(g).clamp(min=_TINY)


def sam_grad(ctx, p: torch.Tensor, batch, perturb) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, gradient) at ``p + perturb(p, g)`` where g is the gradient at p on the same batch."""
    _, g = ctx.loss_and_grad(p, batch)
    return ctx.loss_and_grad(p + perturb(p, g), batch)


@register
class FedSAM(Algorithm):
    name = "fedsam"

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(0.05, NONNEGATIVE)  # SAM neighbourhood radius

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        rho = self.hp.rho
        def perturb(_p, g):
            return sam_perturbation(g, rho)

        w = self.sgd_loop(ctx, w0, lambda p, b, s: sam_grad(ctx, p, b, perturb))
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + delta}
