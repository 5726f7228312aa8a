"""Functional local optimizers on flat parameter vectors (pure, vmap-safe).

``init(params) -> state`` and ``step(params, grad, state, lr) -> (params, state)``. The learning rate
is passed per step so that algorithms can schedule it inside a round (FedSWA's linear decay).
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


def make(name: str, momentum: float = 0.0, weight_decay: float = 0.0):
    if name == "sgd":
        return SGD(momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return Adam(weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose 'sgd' or 'adam'")
