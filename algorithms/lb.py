"""LB, "lossless broadcasting" (Amiri et al., arXiv 2006.10672v2, Sec. 4), LFL's main baseline.

The PS sends the exact global model theta(t); device m runs tau local steps from it,
Delta_m(t) = theta_m^{tau+1}(t) - theta(t), and sends its update quantized with error feedback exactly as
in LFL's Sec. 2.2:

    device m sends  Q(Delta_m(t) + delta_m(t), q2)                                       (Alg. 1, line 8)
    delta_m(t+1) = Delta_m(t) + delta_m(t) - Q(Delta_m(t) + delta_m(t), q2),  delta_m(0) = 0   (Eq. 3)
    theta(t+1)   = theta(t) + sum_m (B_m/B) Q(Delta_m(t) + delta_m(t), q2)               (Eq. 4 with theta_hat = theta)

Q is LFL's range quantizer (Appendix A, ``compress.downlink.quantizer(q2)``); the error feedback is
the ``compress.error_feedback`` transform around it, with the per-device residual delta_m in the client state (it
persists across rounds and is only touched when the device is sampled). ``q2=None`` sends Delta_m in
fp32 (the residual stays 0): LB(q2=None) is the fully lossless scheme, i.e. FedAvg (tested).

Bits per parameter (d entries). Downlink: the paper's R_LB = 33 d (``compress.downlink.encode_exact``: packed sign
bits + fp32 magnitudes, 32 d + 8 ceil(d/8) bits, exactly 33 d when 8 divides d). Uplink per device:
``64 + 8 ceil(d/8) + 8 ceil(d ceil(log2(q2+1))/8)`` bits, i.e. 1 + ceil(log2(q2+1)) bits per entry
(3 for q2 = 2 and q2 = 3) where the paper counts 64 + d (1 + log2(q2+1)) (2.585 and 3 per entry).

The uplink of ``LB`` is shared by ``lfl``, ``lgm`` and ``ltgm`` ("for fairness", Sec. 4), which subclass it
and replace its downlink (``broadcast``, ``receive``), and so is the quantizer (``compress.downlink``:
``LEVEL``, ``quantizer``). The exact downlink is ``lossless``'s (``compress.downlink.encode_exact``). The
update is Delta = w - w0 (``compress.update``, the uplink sign convention).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import vmap

from .compress import error_feedback, update
from .compress.downlink import LEVEL, decode_exact, encode_exact, quantizer
from .core import Algorithm, register
from .core.hyper import param

__all__ = ["LB", "LEVEL", "quantizer"]


@register
class LB(Algorithm):
    """Lossless broadcasting (exact 33-bit downlink), uplink Q(Delta + delta, q2) with error feedback."""

    name = "lb"

    @dataclass(frozen=True)
    class Hyper:
        q2: int | None = param(2, LEVEL)  # uplink level: 2 on MNIST, 3 on CIFAR-10 (Sec. 4)

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.uplink = error_feedback(quantizer(hp.q2))

    # -- the exact downlink (lossless broadcasting) --
    def broadcast(self, server_state):
        return encode_exact(server_state["params"])

    def receive(self, downlink, client_state):
        return decode_exact(downlink)

    # -- device side --
    def client_init(self, params):
        return {"delta": torch.zeros_like(params)}

    def upload(self, ctx, delta_m: torch.Tensor, client_state: dict):
        """Q(delta_m + delta, q2) and the new residual (Eq. 3); the noise comes from ``ctx.rng``."""
        message, residual = self.uplink.encode(delta_m, client_state["delta"], ctx.rng)
        return message, {**client_state, "delta": residual}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return self.upload(ctx, update(w, w0), client_state)

    # -- server side --
    def uplink_mean(self, uplinks, weights) -> torch.Tensor:
        """sum_m w_m Q(Delta_m + delta_m, q2), decoding the stacked uplinks at once."""
        return self.weighted_mean(vmap(self.uplink.decode)(uplinks), weights)

    def aggregate(self, server_state, uplinks, weights, info):
        return {**server_state, "params": server_state["params"] + self.uplink_mean(uplinks, weights)}
