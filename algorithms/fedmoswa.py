"""FedMoSWA and its ablation FedMo (Liu et al., ICML 2025, Sec. 3.3, Eq. (5)-(7), Alg. 1).

Momentum-based stochastic control on top of FedSWA. Every client i keeps a control variate c_i
(client state, zero at first), the server a control variate m (zero at first; the paper states no
initialisation, the public code uses zeros). Round t, client i in S_t, from theta_{t-1} with the
linearly decaying LR eta_k of FedSWA (Eq. (3), ``fedswa.linear_decay_lr``):

    theta_{i,k+1} = theta_{i,k} - eta_k * ( g_i(theta_{i,k}) - c_i + m )                    (Eq. 5)

    Option I:   c_i^+ = g_i(theta_{t-1})     (the first minibatch gradient of the round, which is
                                              taken at theta_{i,0} = theta_{t-1}; no extra cost)
    Option II:  c_i^+ = c_i - m + (theta_{t-1} - theta_{i,K}) / sum_k eta_k                (Eq. 6)

The client sends (theta_{i,K} - theta_{t-1}, Delta c_i = c_i^+ - m) and keeps c_i <- c_i^+. The
server (Eq. 7, Alg. 1 lines 16-17):

    m       <- m + gamma * (1/s) sum_{i in S_t} Delta c_i  =  (1 - gamma) m + gamma * mean_S c_i^+
    theta_t  = theta_{t-1} + alpha * sum_{i in S_t} p_i (theta_{i,K} - theta_{t-1})

The m update uses the paper's uniform 1/s over the sampled clients (an EMA of the uploaded c_i^+);
the model update uses the engine's sample weights p_i as FedAvg/FedSWA do (the paper's clients all
hold n samples, where both are 1/s). Paper defaults: rho = 0.1, alpha = 1.5, gamma = 0.2, Option II
(the experiments use Option II).

Under Option II, c_i^+ = sum_k eta_k g_i(theta_{i,k}) / sum_k eta_k (the LR-weighted mean of the local
minibatch gradients) when the local optimizer is plain SGD.

``m_mean = "all"`` is the update the appendix's proof analyses instead (Lemma G.11: m^t = (1 - gamma) m^{t-1}
+ gamma (1/m) sum_{i=1}^m c_i^t, an average over ALL m clients' latest c_i, the unsampled ones keeping theirs):
the server keeps cbar = (1/N) sum_i c_i as SCAFFOLD keeps its c (cbar <- cbar + (1/N) sum_{i in S} (c_i^+ - c_i),
exact since every c_i starts at 0), the client sends c_i^+ - c_i as well (counted in its bits), and
m <- (1 - gamma) m + gamma cbar. It is not the algorithm of the paper's box (the default ``"sampled"`` is);
``theory/claims/fedswa.py`` runs both under partial participation, where they differ.

Local optimizer (``check_optimizer`` refuses the rest before any training). The corrected gradient
h_k = g_i(theta_{i,k}) - c_i + m of Eq. (5) is what the experiment's optimizer steps on. Under heavy-ball
momentum beta (torch semantics, b_k = beta b_{k-1} + h_k, b_0 = h_0) the model change is
sum_k eta_k b_k = sum_j w_j h_j with w_j = sum_{k>=j} eta_k beta^{k-j}, amplified over sum_k eta_k by up to
1 / (1 - beta); Option II then divides by sum_j w_j = sum_k eta_k (1 - beta^{k+1}) / (1 - beta) instead of
sum_k eta_k (``fedswa.swa_local_loop``, ``optim.momentum_gain``), so c_i^+ is the w-weighted mean of the
local gradients, as SCAFFOLD's rule under momentum (``scaffold.py``). Dividing by sum_k eta_k, c_i re-enters
its own update with the factor 1 - r (r = sum_j w_j / sum_k eta_k, about 2.6 at K = 5, beta = 0.9), and
FedMo / FedMoSWA diverge (tested). Option I (c_i^+ = a gradient) needs no rule and takes any optimizer;
Option II with Adam (or another optimizer) is refused: Adam's model change is not a fixed linear combination
of the h_k.

FedMo (``fedmo``): the paper's ablation "FedMoSWA without SWA", i.e. rho = 1 and alpha = 1 (Tables
4-6), registered with those defaults.

Public-code variants (``fedswa.md`` Sec. 7, not the paper): ``main.py`` hard-codes gamma = 0.1,
``main_FedSWA.py`` (flag MoFedSWA) gamma = 0.4 with a constant local LR (pass ``gamma=0.1`` or
``gamma=0.4, rho=1``); the newer code also keeps c_i per Ray actor instead of per client (a bug, not
reproduced) and sets m to the first round's mean upload (not reproduced).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register
from .fedswa import swa_local_loop
from .core.hyper import POSITIVE, Range, choice, param


@register
class FedMoSWA(Algorithm):
    name = "fedmoswa"

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(0.1, Range("[0, 1]"))  # within-round LR floor ratio (Eq. 3)
        alpha: float = param(1.5, POSITIVE)  # server step (Eq. 4)
        gamma: float = param(0.2, Range("(0, 1]"))  # server control-variate momentum (Eq. 7)
        # client control-variate update, Eq. (6): 1 = g_i(theta), 2 = from the model change
        option: int = param(2, choice(1, 2))
        # the server's m: EMA of the sampled clients' c_i^+ (Eq. 7, Alg. 1 line 16) or of all m clients' latest
        # c_i (the proof's Lemma G.11; see the module docstring)
        m_mean: str = param("sampled", choice("sampled", "all"))

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if hp.option == 2 and optim.heavy_ball(optimizer) is None:
            raise optim.refuse(cls.name, optimizer, "Option II's c_i^+ divides the model change by the local "
                               "steps' learning rates, a rule for plain or heavy-ball SGD only",
                               "Use optimizer 'sgd' (with any momentum), or option=1")

    def init(self, params):
        state = {"params": params.clone(), "m": torch.zeros_like(params)}
        if self.hp.m_mean == "all":
            state["cbar"] = torch.zeros_like(params)
        return state

    def broadcast(self, server_state):
        return Message({"x": server_state["params"].to(torch.float32),
                        "m": server_state["m"].to(torch.float32)})

    def client_init(self, params):
        return {"c": torch.zeros_like(params)}

    def local_update(self, ctx, downlink, client_state):
        w0, m, c = downlink["x"], downlink["m"], client_state["c"]
        w, lr_sum, g0 = swa_local_loop(ctx, w0, self.hp.rho, correction=m - c, first_grad=self.hp.option == 1)
        if self.hp.option == 1:
            c_new = g0
        else:
            c_new = c - m + (w0 - w) / lr_sum
        parts = {"delta": (w - w0).to(torch.float32), "dc": (c_new - m).to(torch.float32)}
        if self.hp.m_mean == "all":
            parts["dci"] = (c_new - c).to(torch.float32)
        return Message(parts), {"c": c_new}

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        params = server_state["params"] + self.hp.alpha * delta
        if self.hp.m_mean == "all":  # Lemma G.11: the mean of all N clients' latest c_i
            cbar = server_state["cbar"] + uplinks["dci"].sum(dim=0) / info.num_clients
            m = (1 - self.hp.gamma) * server_state["m"] + self.hp.gamma * cbar
            return {**server_state, "params": params, "m": m, "cbar": cbar}
        m = server_state["m"] + self.hp.gamma * uplinks["dc"].mean(dim=0)
        return {**server_state, "params": params, "m": m}


@register
class FedMo(FedMoSWA):
    """FedMoSWA without SWA (rho = 1, alpha = 1): momentum stochastic control only (the paper's FedMo)."""

    name = "fedmo"

    @dataclass(frozen=True)
    class Hyper(FedMoSWA.Hyper):
        rho: float = 1.0
        alpha: float = 1.0
