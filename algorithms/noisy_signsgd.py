"""Noisy-SignSGD (Chen et al. 2020) in FedBAT's federated form (FedBAT paper, Section 1; App. A.2).

Each client adds Gaussian noise to its update and sends the sign, one bit per entry; the server applies
a fixed step alpha (FedBAT Eq. 3 with the perturbed sign):

    C(m) = alpha * sign(m + xi),   xi ~ N(0, sigma^2 I),     w_{t+1} = w_t + sum_k p'_k C(m_{t+1}^k)

FedBAT tuned alpha = 0.01 and sigma = 0.01 (the defaults). Operator:
``compress.get("noisy_sign", alpha, sigma)``; the noise comes from a child of ``ctx.rng`` forked
before local training. Bits: 8 ceil(d_l/8) per compressed layer + 32 per fp32 entry.
"""
from __future__ import annotations

from dataclasses import dataclass

from .compress import get
from .core import register
from .compress.compressed_update import SCOPE, CompressedUpdate
from .core.hyper import BOOL, NONNEGATIVE, POSITIVE, param


@register
class NoisySignSGD(CompressedUpdate):
    name = "noisy_signsgd"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = param(0.01, POSITIVE)  # fixed step size (FedBAT App. A.2)
        sigma: float = param(0.01, NONNEGATIVE)  # standard deviation of the Gaussian noise (FedBAT App. A.2)
        scope: str = param("weights", SCOPE)
        per_layer: bool = param(True, BOOL)

    def make_operator(self):
        return get("noisy_sign", alpha=float(self.hp.alpha), sigma=float(self.hp.sigma))
