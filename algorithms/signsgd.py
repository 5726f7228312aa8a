"""SignSGD (Bernstein et al. 2018) in FedBAT's federated form (FedBAT paper, Section 1, Eq. 3; App. A.2).

Each client trains locally like FedAvg and sends the sign of its update m = w_{t+1}^k - w_t, one bit per
entry; the server applies a fixed step alpha to the signs (Eq. 3):

    w_{t+1} = w_t + sum_{k in S_t} p'_k * alpha * sign(m_{t+1}^k)

alpha is a hyperparameter that is not sent (FedBAT tuned it over {1, 0.1, 0.01, 0.001}: 0.001 for all
datasets, the default). sign(0) = +1. Operator: ``compress.get("sign", alpha=...)``. Bits: 8 ceil(d_l/8)
per compressed layer + 32 per fp32 entry (``scope``/``per_layer``: see ``compressed_update``; with a fixed
alpha, per-layer and whole-model signs give the same update and differ only by the byte padding).
"""
from __future__ import annotations

from dataclasses import dataclass

from .compress import get
from .core import register
from .compress.compressed_update import SCOPE, CompressedUpdate
from .core.hyper import BOOL, POSITIVE, param


@register
class SignSGD(CompressedUpdate):
    name = "signsgd"

    @dataclass(frozen=True)
    class Hyper:
        # fixed step size of Eq. 3 (FedBAT App. A.2: 0.001 for all datasets)
        alpha: float = param(0.001, POSITIVE)
        scope: str = param("weights", SCOPE)  # compress conv/linear weights only ("all": every parameter)
        per_layer: bool = param(True, BOOL)

    def make_operator(self):
        return get("sign", alpha=float(self.hp.alpha))
