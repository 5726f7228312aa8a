"""Compression that composes: the transforms (``transforms``), FedBAT's layer-wise binarization
(``layer_binarize``) and the LFL family's downlink quantizer (``downlink``). The stateless operators
they wrap are in ``algorithms.compression``."""
from .transforms import (SCOPES, Replay, Transform, as_transform, chain, error_feedback, fp32_layers, lift,
                         per_layer, scope_layout, split_layout, update, uplink)

__all__ = ["SCOPES", "Replay", "Transform", "as_transform", "chain", "error_feedback", "fp32_layers", "lift",
           "per_layer", "scope_layout", "split_layout", "update", "uplink"]
