"""FedPAQ (Reisizadeh et al., AISTATS 2020) as FedBAT runs it (FedBAT App. B.1, Table 5: "FedPAQ
quantizes model updates after local training", at 3 and 4 bits per parameter).

Each client trains locally like FedAvg (periodic averaging), quantizes its update with FedPAQ's
low-precision quantizer and sends it; the server adds the weighted mean of the dequantized updates
(FedBAT Eq. 2 with Q(m)). Quantizer: ``compress.get("fedpaq", bits=b)``, QSGD's Q_s with
s = 2^(b-1) - 1 levels (one sign bit + b-1 level bits per entry, plus the fp32 norm), applied per
compressed layer (``per_layer=True``, as QSGD's bucketing by tensor) to conv/linear weights
(``scope="weights"``); see ``compress.FedPAQ`` for why this is the b-bit quantizer. Bits per layer:
32 + 8 ceil(d_l/8) + 8 ceil(d_l (b-1)/8).

``bits=32`` sends the update in fp32 (the identity operator, no quantization): FedPAQ(identity) ==
FedAvg (tested in ``tests/test_sign_baselines.py``). Registered twice: ``fedpaq`` (3 bits by default) and
``fedpaq_4bit`` (a configuration with 4 bits by default), so that a suite's algorithm list can hold both Table 5 columns.
"""
from __future__ import annotations

from dataclasses import dataclass

from .compress import get
from .core import configure, register
from .compress.compressed_update import SCOPE, CompressedUpdate
from .core.hyper import BOOL, Either, Range, choice, param

BITS = Either(Range("[2, 16]", integer=True), choice(32))  # quantized, or 32: fp32, no quantization


@register
class FedPAQ(CompressedUpdate):
    name = "fedpaq"

    @dataclass(frozen=True)
    class Hyper:
        bits: int = param(3, BITS)  # bits per parameter (FedBAT Table 5: 3 and 4); 32 = fp32 identity
        scope: str = param("weights", SCOPE)
        per_layer: bool = param(True, BOOL)

    def make_operator(self):
        if self.hp.bits == 32:
            return get("identity")
        return get("fedpaq", bits=int(self.hp.bits))


FedPAQ4 = register(configure(FedPAQ, "fedpaq_4bit", "FedPAQ at 4 bits per parameter (FedBAT Table 5).", bits=4))
