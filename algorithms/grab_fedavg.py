"""GraB-FedAvg, the online gradient-balancing baseline of BHerd (Luo et al., arXiv 2403.16557v1,
Algorithm 4, ``bherd.md`` Sec. 2 item 3).

During ordinary local SGD (the trajectory is unchanged) client i balances its steps online:

    mu <- mu + z / tau_i                  (a running *partial* sum / tau_i, as printed)
    c  <- z - mu
    if ||s + c|| < ||s - c||:  s <- s + c,  g_i <- g_i + z       ("selected")
    else:                      s <- s - c                          (discarded)

with z = w^l - w^{l+1} = eta * grad F_i(w^l; batch_l) (the applied step; every decision is invariant
to the common positive factor eta). ||s + c|| < ||s - c|| is evaluated as <s, c> < 0 (equivalent;
ties, e.g. s = 0 at the first step, are discarded as with the strict "<"). The client sends -g_i and
its selected fraction alpha_i; the server applies

    alpha_t = sum_i p_i alpha_i,      w_{t+1} = w_t - (1 / alpha_t) * sum_i p_i g_i      (eta inside g_i)

Local optimizer: any; z is the step it applied, and tau_i only scales the running mean and counts the selected
fraction alpha_i (no displacement is divided by tau_i eta), so the rescaling 1/alpha_t needs no rule.

This is the paper's baseline, not the original GraB (which centers with the previous epoch's mean and
reorders without discarding).
"""
from __future__ import annotations

import torch

from .core import Algorithm, Message, NoHyperparameters, register


@register
class GraBFedAvg(Algorithm):
    name = "grab_fedavg"
    Hyper = NoHyperparameters

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        opt = ctx.optimizer
        tau = ctx.steps.to(w0.dtype)

        def step(carry, batch, s):
            p, state, mu, bal, g, count = carry
            _, grad = ctx.loss_and_grad(p, batch)
            p_new, state = opt.step(p, grad, state, ctx.lr)
            z = p - p_new
            mu = mu + z / tau
            c = z - mu
            plus = (bal * c).sum() < 0
            bal = torch.where(plus, bal + c, bal - c)
            g = torch.where(plus, g + z, g)
            return p_new, state, mu, bal, g, count + plus.to(count.dtype)

        zero = torch.zeros_like(w0)
        carry = (w0, opt.init(w0), zero, zero, zero, torch.zeros((), dtype=w0.dtype, device=w0.device))
        _, _, _, _, g, count = ctx.loop(step, carry)
        up = Message({"delta": (-g).to(torch.float32), "alpha": (count / tau).to(torch.float32).reshape(1)})
        return up, client_state

    def aggregate(self, server_state, uplinks, weights, info):
        alpha_t = self.weighted_mean(uplinks["alpha"][:, 0], weights).clamp(min=1e-12)
        delta = self.weighted_mean(uplinks["delta"], weights) / alpha_t
        return {**server_state, "params": server_state["params"] + delta}
