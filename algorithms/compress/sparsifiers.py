"""Sparsifiers: ``topk`` (the k largest |x_i|) and ``randk`` (k uniformly random coordinates), values in fp32 and
indices at ceil(log2 d) bits each, packed. Each is a stateless ``Transform``; bits: ``compress.registry``."""
from __future__ import annotations

import math

import torch

from ..core import Message, as_rng
from .registry import register_operator
from .packing import _ceil_log2, pack_uint, unpack_uint
from .transform import (Properties, Transform, _check_int, _check_positive, _f64, _uniform, _vec)


class _Sparsifier(Transform):
    """Shared by topk / randk: k coordinates, values fp32 + indices at ceil(log2 d) bits each.

    ``k`` (an int) or ``ratio`` (in (0, 1]; k = ceil(ratio d), at least 1) is given, not both; the
    default is ratio = 0.01. k is capped at d. Bits: ``32 k + 8 ceil(k ceil(log2 d) / 8)``.
    """

    def __init__(self, k: int | None = None, ratio: float | None = None):
        if k is not None and ratio is not None:
            raise ValueError(f"{self.name}: give k or ratio, not both")
        if k is None and ratio is None:
            ratio = 0.01
        self.k = None if k is None else _check_int("k", self.name, k, 1)
        if ratio is not None:
            r = _check_positive("ratio", self.name, ratio)
            if r > 1:
                raise ValueError(f"{self.name}: ratio must be in (0, 1], got {ratio!r}")
            ratio = r
        self.ratio = ratio

    def k_for(self, d: int) -> int:
        """The number of coordinates kept for a vector of length d (static)."""
        if d == 0:
            return 0
        k = self.k if self.k is not None else math.ceil(self.ratio * d - 1e-9)
        return min(max(k, 1), d)

    @property
    def params(self):
        return {"k": self.k, "ratio": self.ratio}

    def _message(self, values: torch.Tensor, idx: torch.Tensor, d: int) -> Message:
        return Message({"values": values, "indices": pack_uint(idx, _ceil_log2(d))}, self._meta(d))

    def decode(self, message):
        d = message.meta["d"]
        values = message["values"].to(torch.float32)
        idx = unpack_uint(message["indices"], values.shape[-1], _ceil_log2(d))
        return torch.zeros(d, dtype=torch.float32, device=values.device).scatter(0, idx, values)


@register_operator
class TopK(_Sparsifier):
    """Top-k sparsification (Stich et al. 2018; Aji & Heafield 2017): keep the k largest |x_i|.

    Biased; a (k/d)-contraction: ``||C(x) - x||^2 <= (1 - k/d) ||x||^2`` (``variance_bound``).
    Ties are broken by ``torch.topk``.
    """

    name = "topk"
    needs_rng = False

    @property
    def properties(self) -> Properties:
        def bound(x):
            x = _f64(x)
            d = x.numel()
            return 0.0 if d == 0 else float((1 - self.k_for(d) / d) * x.pow(2).sum())

        return Properties(False, bound, "biased; ||C(x)-x||^2 <= (1 - k/d) ||x||^2")

    def encode(self, x, state=(), rng=None):
        x = _vec(x)
        d = x.shape[-1]
        idx = torch.topk(x.abs(), self.k_for(d)).indices
        return self._message(torch.gather(x, 0, idx), idx, d), state


@register_operator
class RandK(_Sparsifier):
    """Random-k sparsification: k coordinates uniformly without replacement (the k largest of d
    uniforms from ``rng``), values multiplied by d/k when ``scale=True``.

    scale=True: unbiased, ``E||C(x) - x||^2 = (d/k - 1) ||x||^2`` exactly. scale=False: biased
    (E[C(x)] = (k/d) x), ``E||C(x) - x||^2 = (1 - k/d) ||x||^2`` exactly. The indices are sent
    (they could be regenerated from a shared seed; we count them, as a real uplink would).
    """

    name = "randk"

    def __init__(self, k: int | None = None, ratio: float | None = None, scale: bool = True):
        super().__init__(k=k, ratio=ratio)
        if not isinstance(scale, bool):
            raise ValueError(f"{self.name}: scale must be True or False, got {scale!r}")
        self.scale = scale

    @property
    def params(self):
        return {**super().params, "scale": self.scale}

    @property
    def properties(self) -> Properties:
        def exact(x):
            x = _f64(x)
            d = x.numel()
            if d == 0:
                return 0.0
            k = self.k_for(d)
            factor = d / k - 1 if self.scale else 1 - k / d
            return float(factor * x.pow(2).sum())

        if self.scale:
            return Properties(True, exact, "exact: (d/k - 1) ||x||^2")
        return Properties(False, exact, "E[C(x)] = (k/d) x; exact error (1 - k/d) ||x||^2")

    def encode(self, x, state=(), rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        k = self.k_for(d)
        idx = torch.topk(_uniform(rng, d, x), k).indices
        values = torch.gather(x, 0, idx)
        if self.scale and k > 0:
            values = values * (d / k)
        return self._message(values, idx, d), state
