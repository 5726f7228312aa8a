"""Functional optimizers on flat parameter vectors (pure, vmap-safe): the clients' local optimizers
and the server optimizers.

Local: ``init(params) -> state`` and ``step(params, grad, state, lr) -> (params, state)``. The learning
rate is passed per step so that algorithms can schedule it inside a round (FedSWA's linear decay).

Server (``ServerSGD``, ``ServerMomentum``): a parameter of an algorithm, as FedJAX passes
``server_optimizer`` (``Algorithm.server_optimizer``). ``init(params) -> state`` and
``step(params, d, state) -> (params, state)`` on the pseudo-gradient d = sum_i p_i (x_t - x_i); the
state is a dict whose keys join the server state. Their fields are hyperparameters of the algorithm
(``eta_g``, ``beta1``), and ``from_hyper(hp)`` builds one from them.

Rules for algorithms whose formulas assume plain local SGD (``UnsupportedOptimizer``, ``describe``,
``heavy_ball``, ``momentum_gain``, ``effective_steps``): an estimate built from the local displacement
divided by K eta_l (SCAFFOLD's option II, MoFedSAM's server direction, FedNova's tau_i) must be divided
by the optimizer's effective number of steps instead; an algorithm with no such rule for an optimizer
refuses it before any training (``Algorithm.check_optimizer``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SGD:
    """torch.optim.SGD semantics: g <- g + wd*p; b <- mu*b + g (b_0 = g); p <- p - lr*b."""

    momentum: float = 0.0
    weight_decay: float = 0.0

    def init(self, params: torch.Tensor) -> dict:
        if self.momentum == 0.0:
            return {}
        return {"buf": torch.zeros_like(params), "started": torch.zeros((), dtype=params.dtype)}

    def step(self, params, grad, state, lr):
        if self.weight_decay:
            grad = grad + self.weight_decay * params
        if self.momentum == 0.0:
            return params - lr * grad, state
        started = state["started"]
        buf = torch.where(started > 0, self.momentum * state["buf"] + grad, grad)
        return params - lr * buf, {"buf": buf, "started": torch.ones_like(started)}


@dataclass(frozen=True)
class Adam:
    """torch.optim.Adam semantics (no amsgrad), state reset every round as in the papers' clients."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def init(self, params: torch.Tensor) -> dict:
        z = torch.zeros_like(params)
        return {"m": z, "v": z.clone(), "t": torch.zeros((), dtype=params.dtype)}

    def step(self, params, grad, state, lr):
        if self.weight_decay:
            grad = grad + self.weight_decay * params
        t = state["t"] + 1
        m = self.beta1 * state["m"] + (1 - self.beta1) * grad
        v = self.beta2 * state["v"] + (1 - self.beta2) * grad * grad
        mhat = m / (1 - self.beta1 ** t)
        vhat = v / (1 - self.beta2 ** t)
        return params - lr * mhat / (torch.sqrt(vhat) + self.eps), {"m": m, "v": v, "t": t}


@dataclass(frozen=True)
class ServerSGD:
    """The plain server step x_{t+1} = x_t - eta_g d_{t+1} (FedAvg's server, eta_g = 1; no state)."""

    eta_g: float = 1.0

    @classmethod
    def from_hyper(cls, hp) -> "ServerSGD":
        return cls(eta_g=hp.eta_g)

    def init(self, params: torch.Tensor) -> dict:
        return {}

    def step(self, params, d, state):
        return params - self.eta_g * d, state


@dataclass(frozen=True)
class ServerMomentum:
    """Server (heavy-ball) momentum, FedAvgM (Hsu, Qi & Brown 2019) as the GradMA paper writes it
    (Appendix Alg. 5):

        m_{t+1} = beta1 m_t + d_{t+1},   m_0 = 0,      x_{t+1} = x_t - eta_g m_{t+1}

    The state is ``{"momentum": m}``. beta1 = 0 gives ``ServerSGD``'s numbers.
    """

    eta_g: float = 1.0
    beta1: float = 0.9

    @classmethod
    def from_hyper(cls, hp) -> "ServerMomentum":
        return cls(eta_g=hp.eta_g, beta1=hp.beta1)

    def init(self, params: torch.Tensor) -> dict:
        return {"momentum": torch.zeros_like(params)}

    def step(self, params, d, state):
        m = self.beta1 * state["momentum"] + d
        return params - self.eta_g * m, {"momentum": m}


def make(name: str, momentum: float = 0.0, weight_decay: float = 0.0):
    if name == "sgd":
        return SGD(momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return Adam(weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose 'sgd' or 'adam'")


# --------------------------------------------------------------------------------------------------
# Local optimizers seen by algorithms whose formulas assume plain SGD


class UnsupportedOptimizer(ValueError):
    """An algorithm has no stated rule for this local optimizer (raised before any training)."""


def describe(optimizer) -> str:
    """The local optimizer as a user names it: "sgd", "sgd with momentum 0.9", "adam", or its class."""
    if isinstance(optimizer, SGD):
        return "sgd" if optimizer.momentum == 0 else f"sgd with momentum {optimizer.momentum:g}"
    if isinstance(optimizer, Adam):
        return "adam"
    return type(optimizer).__name__


def heavy_ball(optimizer) -> float | None:
    """beta of a heavy-ball ``SGD`` (0.0 for plain SGD), or None for any other optimizer (Adam, a custom one)."""
    return float(optimizer.momentum) if isinstance(optimizer, SGD) else None


def refuse(algorithm: str, optimizer, why: str, instead: str = "") -> UnsupportedOptimizer:
    """The error an algorithm raises for a local optimizer it has no rule for (``raise optim.refuse(...)``)."""
    msg = f"{algorithm}: the local optimizer {describe(optimizer)} is not supported: {why}"
    return UnsupportedOptimizer(f"{msg}. {instead}" if instead else msg)


def momentum_gain(beta: float, s: int) -> float:
    """sum_{j=0}^{s} beta^j = (1 - beta^{s+1}) / (1 - beta): the step s (0-based) of torch's heavy ball
    (b_0 = g, b_s = beta b_{s-1} + g, p <- p - lr b_s) under a constant gradient g is lr * gain * g.
    1.0 exactly for beta = 0."""
    return 1.0 if beta == 0 else (1.0 - beta ** (s + 1)) / (1.0 - beta)


def effective_steps(beta: float, steps: Tensor) -> Tensor:
    """||a||_1 = sum_{s<K} momentum_gain(beta, s) = [K - beta (1 - beta^K) / (1 - beta)] / (1 - beta): the
    effective number of steps of K heavy-ball steps at a constant learning rate (FedNova, Wang et al. 2020,
    Sec. 4, local momentum; K for plain SGD). Unrolling b_s, x - y_K = lr sum_{k<K} a_k h_k with
    a_k = (1 - beta^{K-k}) / (1 - beta) for the gradients h_k actually fed to the optimizer, so
    (x - y_K) / (lr ||a||_1) is an a-weighted mean of the h_k, as (x - y_K) / (lr K) is their plain mean under
    SGD. ``steps`` may be a per-client tensor (vmap-safe); returned as float32."""
    tau = steps.to(torch.float32)
    if beta == 0:
        return tau
    return (tau - beta * (1 - beta ** tau) / (1 - beta)) / (1 - beta)
