"""LFL's "fully lossless" baseline (Amiri et al., arXiv 2006.10672v2, Sec. 4): FedAvg with the paper's
33-bit downlink count.

The PS sends theta(t) exactly, every device runs tau local steps from it and sends Delta_m(t) exactly,
and the PS sets theta(t+1) = theta(t) + sum_m (B_m/B) Delta_m(t). The learning dynamics are FedAvg's
(``fedavg`` with eta_g = 1; tested to be identical); Adam as the local optimizer is an experiment setting
(``optimizer = "adam"``), not part of the algorithm. So this is a thin alias of FedAvg that differs in one
thing the paper states: the size of an exact global model.

Bits. The paper assumes "each entry of the global model is represented by 33 bits" (R_LB = 33 d, Sec. 4,
stated for LB; the fully lossless scheme has the same downlink, "in addition to having the accurate
global model at the devices", the PS receives exact updates). A message of exactly that size that
really carries the model is sent here (``compress.downlink.encode_exact``): one packed sign bit per entry (``pack_bits``, the sign bit of the float, so -0.0
and NaN signs survive) plus the fp32 magnitude |theta_i| (32 bits), i.e. ``8 ceil(d/8) + 32 d`` bits,
which is 33 d when 8 divides d. The redundant bit is the one the paper counts (sign-magnitude, as its
quantizer sends a separate sign); decoding is bit-exact. The uplink is a plain fp32 update (32 d bits):
the paper assigns no count to exact updates.
"""
from __future__ import annotations

from dataclasses import dataclass


from .core import Algorithm, Message, register
from .compress import update
from .compress.downlink import decode_exact, encode_exact


@register
class Lossless(Algorithm):
    """Fully lossless (LFL paper, Sec. 4): exact 33-bit broadcast, exact fp32 updates; FedAvg dynamics."""

    name = "lossless"

    @dataclass(frozen=True)
    class Hyper:
        pass

    def broadcast(self, server_state):
        return encode_exact(server_state["params"])

    def receive(self, downlink, client_state):
        return decode_exact(downlink)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(update(w, w0), "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        delta = self.weighted_mean(uplinks["delta"], weights)
        return {**server_state, "params": server_state["params"] + delta}
