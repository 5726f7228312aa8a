"""Stoc-SignSGD (Safaryan & Richtarik 2021) in FedBAT's modified federated form (FedBAT Section 1;
App. A.2).

Entry i of the update m becomes +1 with probability 1/2 + m_i / (2 ||m||) and -1 otherwise (uniform
noise U(-||m||, ||m||) added before the sign), and the server applies a fixed step alpha:

    C(m)_i = alpha * (+1 w.p. 1/2 + m_i/(2||m||), -1 otherwise),   w_{t+1} = w_t + sum_k p'_k C(m^k)

FedBAT's modification (App. A.2): ||m|| is the infinity norm (with the l2 norm both probabilities are
about 1/2); ``norm="l2"`` gives the original. alpha = 0.01 (FedBAT's tuned value, not sent). With
``per_layer=True`` (default) the norm is per compressed layer. Operator:
``compression.get("stochastic_sign", alpha, norm)``; coins from a child of ``ctx.rng`` forked before
local training. Bits: 8 ceil(d_l/8) per compressed layer + 32 per fp32 entry.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import compression
from .base import register
from .compressed_update import CompressedUpdate, check_positive, check_scope

NORMS = ("inf", "l2")


@register
class StocSignSGD(CompressedUpdate):
    name = "stoc_signsgd"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = 0.01  # fixed step size (FedBAT App. A.2)
        norm: str = "inf"  # FedBAT's modification; "l2" = Safaryan & Richtarik's original
        scope: str = "weights"
        per_layer: bool = True

        def validate(self):
            check_positive("stoc_signsgd", "alpha", self.alpha)
            if self.norm not in NORMS:
                raise ValueError(f"stoc_signsgd: norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
            check_scope("stoc_signsgd", self.scope, self.per_layer)

    def make_operator(self):
        return compression.get("stochastic_sign", alpha=float(self.hp.alpha), norm=self.hp.norm)
