"""Stoc-SignSGD (Safaryan & Richtarik 2021) in FedBAT's modified federated form (FedBAT Section 1;
App. A.2).

Entry i of the update m becomes +1 with probability 1/2 + m_i / (2 ||m||) and -1 otherwise (uniform
noise U(-||m||, ||m||) added before the sign), and the server applies a fixed step alpha:

    C(m)_i = alpha * (+1 w.p. 1/2 + m_i/(2||m||), -1 otherwise),   w_{t+1} = w_t + sum_k p'_k C(m^k)

FedBAT's modification (App. A.2): ||m|| is the infinity norm (with the l2 norm both probabilities are
about 1/2); ``norm="l2"`` gives the original. alpha = 0.01 (FedBAT's tuned value, not sent). With
``per_layer=True`` (default) the norm is per compressed layer. Operator:
``compress.get("stochastic_sign", alpha, norm)``; coins from a child of ``ctx.rng`` forked before
local training. Bits: 8 ceil(d_l/8) per compressed layer + 32 per fp32 entry.
"""
from __future__ import annotations

from dataclasses import dataclass

from .compress import get
from .core import register
from .compress.compressed_update import SCOPE, CompressedUpdate
from .core.hyper import BOOL, POSITIVE, choice, param

NORMS = ("inf", "l2")


@register
class StocSignSGD(CompressedUpdate):
    name = "stoc_signsgd"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = param(0.01, POSITIVE)  # fixed step size (FedBAT App. A.2)
        # FedBAT's modification; "l2" = Safaryan & Richtarik's original
        norm: str = param("inf", choice(*NORMS))
        scope: str = param("weights", SCOPE)
        per_layer: bool = param(True, BOOL)

    def make_operator(self):
        return get("stochastic_sign", alpha=float(self.hp.alpha), norm=self.hp.norm)
