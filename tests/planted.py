"""Planted defects for the claims' power tests: algorithms that are wrong in a known way, registered only for
the duration of a test, and compression operators with a bias or extra variance."""
from __future__ import annotations

import contextlib

import torch

import algorithms
from algorithms.core import registry
from algorithms import compress as C


@contextlib.contextmanager
def registered(cls):
    """Register a test-only algorithm class for the block (the registry is per process)."""
    if cls.name in registry._REGISTRY:
        raise ValueError(f"{cls.name} is already registered")
    registry._REGISTRY[cls.name] = cls
    try:
        yield cls.name
    finally:
        registry._REGISTRY.pop(cls.name, None)


def frozen(name: str) -> type:
    """``name`` with a frozen server: aggregate keeps the server state (the model never moves)."""
    parent = algorithms.get_class(name)

    class Frozen(parent):
        def aggregate(self, server_state, uplinks, weights, info):
            return dict(server_state)

    Frozen.name = f"{name}__frozen_test"
    return Frozen


def subclass(name: str, suffix: str, **methods) -> type:
    """``name`` with some methods replaced (a planted defect or repair)."""
    parent = algorithms.get_class(name)
    cls = type(f"{parent.__name__}_{suffix}", (parent,), dict(methods))
    cls.name = f"{name}__{suffix}_test"
    return cls


class Planted(C.Transform):
    """An operator with a planted defect for the Monte-Carlo claims: C'(x) = x + scale (C(x) - x) + bias x.

    ``bias`` makes E[C'(x)] = (1 + bias) x (a biased quantizer); ``scale`` multiplies the variance by scale^2
    (scale = 0: the identity, an operator that does nothing)."""

    def __init__(self, inner, scale: float = 1.0, bias: float = 0.0):
        self.inner, self.scale, self.bias = inner, float(scale), float(bias)

    def __getattr__(self, item):  # name, q, s, alpha, params: the inner operator's
        if item in ("inner", "scale", "bias"):
            raise AttributeError(item)
        return getattr(self.inner, item)

    def compress(self, x, rng=None):
        c = self.inner.compress(x, rng)
        return x + self.scale * (c - x) + self.bias * x

    def __repr__(self):
        return f"planted({self.inner!r}, scale={self.scale}, bias={self.bias})"


class NoErrorFeedback:
    """An "error feedback" that keeps no residual (passes any bound on ||e_t||)."""

    def __init__(self):
        self.inner = C.get("scaled_sign")

    def encode(self, x, residual, rng=None):
        return self.inner.encode(x + residual, (), rng)[0], torch.zeros_like(residual)

    def decode(self, m):
        return self.inner.decode(m)
