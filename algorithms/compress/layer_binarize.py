"""FedBAT's uplink operator (Li et al., ICML 2024, Alg. 1 lines 23-24, Eq. 11) as a transform: the
stochastic binarization S(x_l, alpha_l) of Eqs. 6-7 (``signs.binary_code``) on every tensor l of a
layout, each with its own step size alpha_l.

The state is the vector of per-tensor step sizes (FedBAT learns them during local training and sets
the state before encoding). The message packs the bits of all tensors into one string
(``8 ceil(d/8)`` bits for d entries) and sends alpha in fp32 (32 bits per tensor). The noise zeta ~ U(0,1)
is one ``rng.uniform((d,))`` draw. Decoding gives alpha_l * (+-1) on tensor l.
"""
from __future__ import annotations

import torch

from ..core import Message, ParamLayout
from .packing import pack_bits, unpack_bits
from .signs import binary_code
from .transform import Transform


class layer_binarize(Transform):  # noqa: N801 (a transform, read like a function)
    """S(x_l, alpha_l) per tensor of ``layout`` with the per-tensor alpha as the state."""

    needs_rng = True
    stateless = False

    def __init__(self, layout: ParamLayout):
        self.layout = layout
        self.d = layout.size

    def init(self, layout=None, device=None):
        return torch.zeros(len(self.layout.slices), dtype=torch.float32, device=device)

    def encode(self, x, state, rng=None):
        alpha = state
        zeta = rng.uniform((self.d,)).to(device=x.device, dtype=torch.float32)
        codes = [binary_code(x[..., s.start:s.stop], alpha[..., li], zeta[..., s.start:s.stop]) > 0
                 for li, s in enumerate(self.layout.slices)]
        parts = {"signs": pack_bits(torch.cat(codes, dim=-1)), "alpha": alpha.detach().to(torch.float32)}
        return Message(parts), state

    def decode(self, message):
        signs = unpack_bits(message["signs"], self.d)
        alpha = message["alpha"].to(torch.float32)
        pieces = []
        for li, s in enumerate(self.layout.slices):
            a = alpha[li].expand(s.numel)
            pieces.append(torch.where(signs[s.start:s.stop], a, -a))
        return torch.cat(pieces)
