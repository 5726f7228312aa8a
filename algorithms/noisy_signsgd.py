"""Noisy-SignSGD (Chen et al. 2020) in FedBAT's federated form (FedBAT paper, Section 1; App. A.2).

Each client adds Gaussian noise to its update and sends the sign, one bit per entry; the server applies
a fixed step alpha (FedBAT Eq. 3 with the perturbed sign):

    C(m) = alpha * sign(m + xi),   xi ~ N(0, sigma^2 I),     w_{t+1} = w_t + sum_k p'_k C(m_{t+1}^k)

FedBAT tuned alpha = 0.01 and sigma = 0.01 (the defaults). Operator:
``compression.get("noisy_sign", alpha, sigma)``; the noise comes from a child of ``ctx.rng`` forked
before local training. Bits: 8 ceil(d_l/8) per compressed layer + 32 per fp32 entry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import compression
from .base import register
from .compressed_update import CompressedUpdate, check_positive, check_scope


@register
class NoisySignSGD(CompressedUpdate):
    name = "noisy_signsgd"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = 0.01  # fixed step size (FedBAT App. A.2)
        sigma: float = 0.01  # standard deviation of the Gaussian noise (FedBAT App. A.2)
        scope: str = "weights"
        per_layer: bool = True

        def validate(self):
            check_positive("noisy_signsgd", "alpha", self.alpha)
            if isinstance(self.sigma, bool) or not isinstance(self.sigma, (int, float)) \
                    or not math.isfinite(self.sigma) or self.sigma < 0:
                raise ValueError(f"noisy_signsgd: sigma must be a finite number >= 0, got {self.sigma!r}")
            check_scope("noisy_signsgd", self.scope, self.per_layer)

    def make_operator(self):
        return compression.get("noisy_sign", alpha=float(self.hp.alpha), sigma=float(self.hp.sigma))
