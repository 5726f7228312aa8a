"""Randomness that works the same under vmap and in a plain loop: a counter-based generator (SplitMix64 of
key, call counter and position), so the vectorized and the sequential executors draw exactly the same
numbers for every client; and an adapter that puts a ``torch.Generator`` behind the same ``Rng`` protocol."""
from __future__ import annotations

import math
from typing import Protocol

import torch


_MASK64 = (1 << 64) - 1


def _to_signed(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


_GOLDEN = _to_signed(0x9E3779B97F4A7C15)
_C1 = _to_signed(0xBF58476D1CE4E5B9)
_C2 = _to_signed(0x94D049BB133111EB)


def _lsr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def splitmix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on int64 tensors (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ _lsr(z, 30)) * _C1
    z = (z ^ _lsr(z, 27)) * _C2
    return z ^ _lsr(z, 31)


class Rng(Protocol):
    def uniform(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor: ...

    def normal(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor: ...


class CounterRng:
    """Counter-based generator: numbers are a hash of (key, call counter, position).

    The key is an int64 tensor (a 0-d tensor per client, batched under vmap), so every client gets
    its own independent stream while the vectorized and the sequential executors draw exactly the
    same numbers. Each call advances a Python-side counter, so the sequence of calls (not their
    values) must be the same in both executors, which holds for pure local updates.
    """

    def __init__(self, key: torch.Tensor | int, device: torch.device | str | None = None):
        if not isinstance(key, torch.Tensor):
            key = torch.tensor(int(key), dtype=torch.int64, device=device)
        self.key = splitmix64(key.to(torch.int64))
        self.device = self.key.device if device is None else torch.device(device)
        self.counter = 0

    def _bits(self, shape) -> torch.Tensor:
        self.counter += 1
        n = math.prod(shape)
        pos = torch.arange(n, dtype=torch.int64, device=self.device).reshape(tuple(shape))
        stream = splitmix64(self.key + _to_signed(self.counter * 0x94D049BB133111EB))
        return splitmix64(stream + pos * _GOLDEN)

    def uniform(self, shape) -> torch.Tensor:
        """U[0, 1) in float32 with 24 random bits."""
        return _lsr(self._bits(tuple(shape)), 40).to(torch.float32) * (2.0 ** -24)

    def normal(self, shape) -> torch.Tensor:
        """Standard normal via Box-Muller (float32)."""
        u1 = self.uniform(shape)
        u2 = self.uniform(shape)
        return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)

    def integers(self, high: int, shape) -> torch.Tensor:
        return (self.uniform(shape) * high).to(torch.int64).clamp_(max=high - 1)


class TorchRng:
    """Adapter: a ``torch.Generator`` behind the ``Rng`` protocol (not usable under vmap)."""

    def __init__(self, generator: torch.Generator | None = None):
        self.generator = generator
        self.device = generator.device if generator is not None else torch.device("cpu")

    def uniform(self, shape) -> torch.Tensor:
        return torch.rand(tuple(shape), generator=self.generator, device=self.device)

    def normal(self, shape) -> torch.Tensor:
        return torch.randn(tuple(shape), generator=self.generator, device=self.device)

    def integers(self, high: int, shape) -> torch.Tensor:
        return torch.randint(high, tuple(shape), generator=self.generator, device=self.device)


def as_rng(r: Rng | torch.Generator | int | None) -> Rng:
    """Accept an ``Rng``, a ``torch.Generator``, an int seed, or None (global generator)."""
    if r is None or isinstance(r, torch.Generator):
        return TorchRng(r)
    if isinstance(r, int):
        g = torch.Generator()
        g.manual_seed(r)
        return TorchRng(g)
    return r
