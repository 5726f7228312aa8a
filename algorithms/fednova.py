"""FedNova (Wang et al., 2020): normalised averaging, which removes the objective inconsistency caused
by clients running different numbers of local steps tau_i.

A client's change after local training is x - y_i = eta_l G_i a_i, a weighted sum of its local
gradients with coefficient vector a_i; the client sends the normalised update and ||a_i||_1,

    d_i = (x - y_i) / ||a_i||_1,

and the server steps with the effective number of steps (Wang et al., Eq. 6 with the server rate):

    tau_eff = sum_{i in S} p_i ||a_i||_1,     x <- x - eta_g tau_eff sum_{i in S} p_i d_i.

||a_i||_1 for the local solvers of the paper (Sec. 4 / App.): plain SGD, tau_i; SGD with momentum rho
(torch semantics, the experiment's ``momentum``), [tau_i - rho (1 - rho^tau_i)/(1 - rho)] / (1 - rho);
proximal SGD (``mu`` > 0, FedProx's term), [1 - (1 - eta_l mu)^tau_i] / (eta_l mu). Momentum and mu
together, and Adam, are not covered by the paper and are refused before any training (``check_optimizer``).
Weight decay is treated as part of the gradient. With equal tau_i and eta_g = 1 this is FedAvg (tested).
``weighting`` chooses p_i (``"samples"``, the paper's data-size weights, or ``"uniform"``). The uplink is
the fp32 d_i plus the fp32 scalar ||a_i||_1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register
from .core.hyper import NONNEGATIVE, POSITIVE, WEIGHTING, param


@register
class FedNova(Algorithm):
    name = "fednova"

    @dataclass(frozen=True)
    class Hyper:
        mu: float = param(0.0, NONNEGATIVE)  # proximal coefficient of the local solver (0: plain local SGD)
        eta_g: float = param(1.0, POSITIVE)
        weighting: str = param("samples", WEIGHTING)

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        beta = optim.heavy_ball(optimizer)
        if beta is None:
            raise optim.refuse(cls.name, optimizer, "FedNova derives ||a_i||_1 for SGD only (Wang et al. 2020, "
                               "Sec. 4)", "Use optimizer 'sgd' (with or without momentum)")
        if beta > 0 and hp.mu > 0:
            raise optim.refuse(cls.name, optimizer, "local momentum together with mu > 0 is not covered by the "
                               "paper's ||a_i||_1", "Set momentum = 0 or mu = 0")

    def a_norm(self, optimizer, steps: torch.Tensor, lr: float) -> torch.Tensor:
        """||a_i||_1 for this client's local solver (a 0-d tensor; steps may be batched under vmap)."""
        if not isinstance(optimizer, optim.SGD):
            raise TypeError("fednova: the local optimizer must be sgd (the paper derives ||a||_1 for SGD)")
        tau = steps.to(torch.float32)
        rho, mu = float(optimizer.momentum), float(self.hp.mu)
        if rho > 0 and mu > 0:
            raise ValueError("fednova: local momentum together with mu > 0 is not covered by the paper")
        if rho > 0:
            return optim.effective_steps(rho, steps)
        if mu > 0:
            return (1 - (1 - lr * mu) ** tau) / (lr * mu)
        return tau

    def local_update(self, ctx, downlink, client_state):
        x = self.receive(downlink, client_state)
        mu = self.hp.mu
        grad_fn = None
        if mu > 0:
            def grad_fn(p, batch, s):
                loss, g = ctx.loss_and_grad(p, batch)
                return loss, g + mu * (p - x)

        y = self.sgd_loop(ctx, x, grad_fn)
        a = self.a_norm(ctx.optimizer, ctx.steps, ctx.lr)
        return Message({"d": (x - y) / a, "a": a.to(torch.float32)}), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        p = self.client_weights(weights, self.hp.weighting)
        tau_eff = (p * uplinks["a"].to(p.dtype)).sum()
        d = self.weighted_mean(uplinks["d"], p)
        return {**server_state, "params": server_state["params"] - self.hp.eta_g * tau_eff * d}
