"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg with a server momentum buffer.

Written as in the GradMA paper, Appendix Alg. 5 (FedAvgM branch):

    d_{t+1}^(i) = x_t - x_{t,I}^(i)                        (plain local SGD from x_t)
    d_{t+1}     = sum_{i in S_t} p_i d_{t+1}^(i)
    m_{t+1}     = beta1 m_t + d_{t+1},     m_0 = 0
    x_{t+1}     = x_t - eta_g m_{t+1}

With beta1 = 0 and eta_g = 1 this is FedAvg exactly (tested). ``weighting`` chooses p_i: ``"samples"``
(default: p_i = n_i / sum_{j in S_t} n_j, the engine's weights, as FedAvg and Hsu et al.) or
``"uniform"`` (p_i = 1/S, the 1/S of GradMA's Alg. 5).

``client_weights`` and ``WEIGHTINGS`` are shared by the other modules of this family.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Algorithm, Message, register

WEIGHTINGS = ("samples", "uniform")


def client_weights(weights: torch.Tensor, weighting: str) -> torch.Tensor:
    """The aggregation weights of the sampled clients: the engine's (``samples``) or 1/S (``uniform``)."""
    if weighting == "uniform":
        return torch.full_like(weights, 1.0 / weights.shape[0])
    return weights


def check_weighting(name: str, weighting: str) -> None:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"{name}: weighting must be one of {WEIGHTINGS}, got {weighting!r}")


def check_eta_g(name: str, eta_g: float) -> None:
    if not eta_g > 0:
        raise ValueError(f"{name}: eta_g must be > 0, got {eta_g}")


def check_beta(name: str, symbol: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: {symbol} must be in [0, 1), got {value}")


@register
class FedAvgM(Algorithm):
    name = "fedavgm"

    @dataclass(frozen=True)
    class Hyper:
        beta1: float = 0.9  # server momentum (GradMA grid {0.1, 0.5, 0.9}; Hsu et al. use 0.9)
        eta_g: float = 1.0  # server learning rate (GradMA grid {0.1, 1.0, 10.0})
        weighting: str = "samples"

        def validate(self):
            check_beta("fedavgm", "beta1", self.beta1)
            check_eta_g("fedavgm", self.eta_g)
            check_weighting("fedavgm", self.weighting)

    @property
    def beta1(self) -> float:
        return getattr(self.hp, "beta1", 0.0)

    def init(self, params):
        return {"params": params.clone(), "momentum": torch.zeros_like(params)}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w0 - w, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = self.weighted_mean(uplinks["d"], client_weights(weights, self.hp.weighting))
        m = self.beta1 * server_state["momentum"] + d
        return {**server_state, "params": server_state["params"] - self.hp.eta_g * m, "momentum": m}
