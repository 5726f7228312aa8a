"""Functional optimizers on flat parameter vectors (pure, vmap-safe): the clients' local optimizers
and the server optimizers.

Local: ``init(params) -> state`` and ``step(params, grad, state, lr) -> (params, state)``. The learning
rate is passed per step so that algorithms can schedule it inside a round (FedSWA's linear decay).

Server (``ServerSGD``, ``ServerMomentum``): a parameter of an algorithm, as FedJAX passes
``server_optimizer`` (``Algorithm.server_optimizer``). ``init(params) -> state`` and
``step(params, d, state) -> (params, state)`` on the pseudo-gradient d = sum_i p_i (x_t - x_i); the
state is a dict whose keys join the server state. Their fields are hyperparameters of the algorithm
(``eta_g``, ``beta1``), and ``from_hyper(hp)`` builds one from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


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
