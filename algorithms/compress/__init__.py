"""All compression, one transform type (README, Layout: operators compose like optax transforms).

Every operator and every wrapper is a ``Transform`` (``transform``): ``init(layout) -> state``,
``encode(x, state, rng) -> (Message, state)``, ``decode(message)``, with bits counted from the packed payload
(``packing``). The named operators (``get(name, **params)``, ``names()``, ``@register_operator``; the table of their
bits in ``registry``): full precision and the quantizers (``quantizers``: identity, lfl, qsgd, fedpaq), the sign-based
operators and FedBAT's binarization (``signs``), the sparsifiers (``sparsifiers``: topk, randk), and error
feedback (``ef``). The wrappers (``wrappers``): ``error_feedback``, ``per_layer``, ``fp32_layers``, ``chain`` and
the FedBAT-style ``uplink`` recipe. Also here: FedBAT's per-layer binarization with learned step sizes
(``layer_binarize``), the LFL paper's downlinks (``downlink``) and ``compressed_update``, the base of the
post-training compression baselines (FedAvg's local rule, the update sent through the ``uplink`` recipe). An algorithm and the checks of its operator
use the same transform.
"""
from .packing import pack_bits, pack_uint, unpack_bits, unpack_uint
from .quantizers import LFL, QSGD, FedPAQ, Identity
from .registry import get, names, register_operator
from .signs import Binarize, NoisySign, ScaledSign, Sign, StochasticSign, binary_code
from .sparsifiers import RandK, TopK
from .transform import Properties, Transform
from .wrappers import (SCOPES, Replay, chain, error_feedback, fp32_layers, per_layer, scope_layout, split_layout,
                       update, uplink)

__all__ = ["SCOPES", "LFL", "QSGD", "Binarize", "FedPAQ", "Identity", "NoisySign", "Properties", "RandK", "Replay",
           "ScaledSign", "Sign", "StochasticSign", "TopK", "Transform", "binary_code", "chain", "error_feedback",
           "fp32_layers", "get", "names", "pack_bits", "pack_uint", "per_layer", "register_operator", "scope_layout", "split_layout",
           "unpack_bits", "unpack_uint", "update", "uplink"]
