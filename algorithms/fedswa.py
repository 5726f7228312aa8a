"""FedSWA (Liu et al., ICML 2025, "Improving Generalization in Federated Learning with Highly
Heterogeneous Data via Momentum-Based Stochastic Controlled Weight Averaging", Sec. 3.2, Eq. (3)-(4)).

Local training restarts every round at the local learning rate eta_l (the round's ``ctx.lr``) and
lets it fall linearly within the round (a cyclical, SWA-style schedule, Eq. (3) / Alg. 1 line 8):

    eta_k = eta_l * (1 - k/K) + (k/K) * rho * eta_l,      k = 0, ..., K-1,   0 <= rho <= 1

    theta_{i,k+1} = theta_{i,k} - eta_k * g_i(theta_{i,k})                     (Alg. 1 line 9)

where K is the client's own number of local steps (``ctx.steps``; clients with fewer steps in a
vectorized round are masked by ``ctx.loop``). The server extrapolates towards the clients' average
(Eq. (4), Alg. 1 line 17):

    v_t = sum_{i in S_t} p_i theta_{i,K},     theta_t = theta_{t-1} + alpha * (v_t - theta_{t-1})

with alpha = 1.5 (> 1: a server step, not a convex EMA). The paper writes v_t with uniform weights
1/s; its clients all hold n samples, so the engine's sample weights p_i coincide with 1/s there (and
FedSWA(rho=1, alpha=1) is then exactly FedAvg, the paper's stated special case).

Public-code variants (``fedswa.md`` Sec. 7, not the paper): ``main_FedSWA.py`` hard-codes rho = 0
and a local step of 2 * eta_k with a plain average (``rho=0, alpha=1`` and a doubled ``lr``
reproduce it); ``main.py`` is the paper's rule but needs ``--alpha 1.5`` passed explicitly. The
code's per-round cosine LR is an engine-level schedule (``lr_decay`` is multiplicative only).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, descend, optim, register
from .core.hyper import POSITIVE, Range, param


def linear_decay_lr(ctx, s: int, rho: float) -> torch.Tensor:
    """eta_s = eta_l * (1 - (1 - rho) * s / K) with K = ``ctx.steps`` (a per-client tensor), Eq. (3).

    ``s`` is the 0-based step index. At ``rho == 1`` this is ``eta_l`` exactly.
    """
    k = ctx.steps.to(torch.float32)
    return ctx.lr * (1.0 - (1.0 - rho) * (s / k))


def swa_local_loop(ctx, params: torch.Tensor, rho: float, correction: torch.Tensor | None = None,
                   first_grad: bool = False):
    """Local SGD with the linearly decaying LR of Eq. (3) and an optional fixed gradient
    correction (FedMoSWA's ``m - c_i``). Returns ``(theta_K, sum_k eta_k, g_i(theta_0) or None)``.

    Under a heavy-ball optimizer with momentum beta the second value is sum_k eta_k (1 - beta^{k+1}) / (1 - beta)
    (``optim.momentum_gain``): how far the loop moves per unit of a constant gradient, of which sum_k eta_k is
    the plain-SGD case (FedMoSWA's option II divides the model change by it).
    """
    opt = ctx.optimizer
    beta = optim.heavy_ball(opt) or 0.0  # Adam and other optimizers: sum_k eta_k (FedSWA does not use it)

    def step(carry, batch, s):
        p, state, lr_sum, g0 = carry
        lr_s = linear_decay_lr(ctx, s, rho)
        if correction is None and not (first_grad and s == 0):  # s is a Python int: static under vmap
            p, state = descend(ctx, p, batch, opt, state, lr_s)  # the plain step (an executor may fuse it)
        else:
            _, g = ctx.loss_and_grad(p, batch)
            if first_grad and s == 0:
                g0 = g
            if correction is not None:
                g = g + correction
            p, state = opt.step(p, g, state, lr_s)
        return p, state, lr_sum + (lr_s * optim.momentum_gain(beta, s) if beta else lr_s), g0

    zero = torch.zeros((), dtype=params.dtype, device=params.device)
    g0 = torch.zeros_like(params) if first_grad else zero
    p, _, lr_sum, g0 = ctx.loop(step, (params, opt.init(params), zero, g0))
    return p, lr_sum, (g0 if first_grad else None)


@register
class FedSWA(Algorithm):
    name = "fedswa"

    @dataclass(frozen=True)
    class Hyper:
        # within-round LR floor: eta goes from eta_l to rho*eta_l (Eq. 3)
        rho: float = param(0.1, Range("[0, 1]"))
        alpha: float = param(1.5, POSITIVE)  # server step towards the clients' average (Eq. 4)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w, _, _ = swa_local_loop(ctx, w0, self.hp.rho)
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        # theta + alpha * (v - theta) = theta + alpha * sum_i p_i (theta_i - theta)
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + self.hp.alpha * delta}
