"""LGM, "lossy global model" (the LFL paper's name, Amiri et al., arXiv 2006.10672v2, Sec. 4, for the
scheme of its ref. [42]): the PS broadcasts the quantized global model plus the accumulated quantization
error, with LFL's quantizer and LFL's uplink ("for fairness").

    PS broadcasts   Q(theta(t) + e(t), q1)
    e(t+1)        = theta(t) + e(t) - Q(theta(t) + e(t), q1),   e(0) = 0      (error feedback at the PS)
    devices train from theta_tilde(t) = Q(theta(t) + e(t), q1);  Delta_m(t) = theta_m^{tau+1}(t) - theta_tilde(t)
    device m sends  Q(Delta_m(t) + delta_m(t), q2) with error feedback (Eq. 3, as LB)
    theta(t+1)    = theta(t) + sum_m (B_m/B) Q(Delta_m(t) + delta_m(t), q2)

Choices the paper leaves open (lfl.md, Sec. 2 and pitfall 14): the error update is the natural
error-feedback reading (``compress.error_feedback`` around the shared ``compress.downlink.quantizer``) of "quantizes the global model plus the quantization error accumulated from the
previous iterations ... while updating the quantization error"; the PS adds the aggregate to its exact
theta(t) (the convention of [42]), not to the quantized copy; Delta_m is taken relative to the model the
device received. Each broadcast is self-contained, so partial participation needs nothing special. The
evaluated model is theta(t). The broadcast noise comes from a ``CounterRng`` keyed by (hash of theta(0),
t), as in ``lfl``; ``aggregate`` recomputes the broadcast (a pure function of the server state) to update e.

Bits: as LFL's downlink, ``64 + 8 ceil(d/8) + 8 ceil(d ceil(log2(q1+1))/8)`` per device (paper:
64 + d (1 + log2(q1+1))): 3 bits/entry for q1 = 2 (11.0x fewer than LB's 33; paper 12.77x) and 4 for
q1 = 5 (8.25x; paper 9.2x). q1 = None broadcasts theta(t) in fp32 (32 bits/entry) and keeps e = 0: LGM(q1=None) has LB's dynamics
(tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import register
from .compress import error_feedback
from .compress.downlink import LEVEL, downlink_key, quantizer, server_rng
from .core.hyper import param
from .lb import LB


@register
class LGM(LB):
    """LGM ([42] in the LFL paper): quantized global model with server-side error accumulation."""

    name = "lgm"

    @dataclass(frozen=True)
    class Hyper:
        q1: int | None = param(2, LEVEL)  # downlink level: 2 on MNIST, 5 on CIFAR-10 (Sec. 4)
        q2: int | None = param(2, LEVEL)  # uplink level: 2 on MNIST, 3 on CIFAR-10

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.downlink = error_feedback(quantizer(hp.q1))  # state: the PS's accumulated error e

    def init(self, params):
        return {"params": params.clone(), "e": torch.zeros_like(params),
                "key": downlink_key(params, self.name),
                "round": torch.zeros((), dtype=torch.int64, device=params.device)}

    def _broadcast(self, server_state):
        """Q(theta + e, q1) and e(t+1) = theta + e - Q(theta + e, q1)."""
        return self.downlink.encode(server_state["params"], server_state["e"], server_rng(server_state))

    def broadcast(self, server_state):
        return self._broadcast(server_state)[0]

    def receive(self, downlink, client_state):
        return self.downlink.decode(downlink)

    def aggregate(self, server_state, uplinks, weights, info):
        _, e = self._broadcast(server_state)
        return {**server_state, "params": server_state["params"] + self.uplink_mean(uplinks, weights),
                "e": e, "round": server_state["round"] + 1}
