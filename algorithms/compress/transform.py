"""The one compression type (README, Layout: operators compose like optax transforms): a ``Transform``
encodes a flat vector into a really packed ``Message`` and decodes it back. Every operator (sign, QSGD, top-k,
...) and every wrapper (error feedback, per-layer, fp32 layers) is one.

A ``Transform`` has

* ``init(layout, device=None) -> state``: the state for vectors of that layout (a ``ParamLayout`` or a length
  d). Stateless transforms (every leaf operator) return ``()``.
* ``encode(x, state=(), rng=None) -> (Message, state)`` for a 1-D float tensor ``x``. ``rng`` is anything
  ``algorithms.core.as_rng`` accepts (None, a ``torch.Generator``, an int seed, or an ``Rng`` such as
  ``CounterRng``); it is drawn only if ``needs_rng``, always the same number of times per ``encode``
  whatever the values of ``x``. Pure and vmap-safe: no ``.item()``, no branching on tensor values, no
  ``torch.nonzero``; Python branches only look at static shapes. So
  ``torch.func.vmap(lambda k, x: t.encode(x, (), CounterRng(k)))(keys, xs)`` gives the same messages as a loop
  over clients, and ``torch.func.vmap(t.decode)(stacked_messages)`` decodes a round at once.
* ``decode(message) -> Tensor``: float32, the same length as ``x``.
* ``compress(x, rng=None)``: ``decode(encode(x, init, rng))``, one draw of C(x) (the Monte-Carlo checks).
* ``needs_rng`` and ``stateless`` (declared by each operator, propagated by the wrappers), ``name`` (the
  registry name), ``params`` (its parameters) and ``properties`` (``Properties``: unbiasedness and a bound on
  ``E||C(x) - x||^2``, where the operator states them).

Bits are honest: ``Message.bits`` counts 8 bits per byte of every part actually sent (``packing``: signs 8 per
byte, indices and levels at a fixed number of bits in one packed string, scalars in fp32), padding included;
static decoding information (the length d, the operator's parameters) is in ``Message.meta`` and is not
counted. The registry of named operators and their bit counts is ``compress.registry``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch

from ..core import Message, ParamLayout, Rng

State = Any

# --------------------------------------------------------------------------------------------------
# Small vmap-safe helpers of the operators


def _vec(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"compression operators take a 1-D tensor, got shape {tuple(x.shape)}")
    return x.to(torch.float32)


def _amax(a: torch.Tensor) -> torch.Tensor:
    """max of a 1-D tensor, 0 for an empty one (the length is static, so the branch is vmap-safe)."""
    return a.amax() if a.shape[-1] > 0 else a.sum()


def _amin(a: torch.Tensor) -> torch.Tensor:
    return a.amin() if a.shape[-1] > 0 else a.sum()


def _safe(den: torch.Tensor) -> torch.Tensor:
    """``den`` where it is positive, 1 elsewhere (to divide without NaN; numerators are 0 there)."""
    return torch.where(den > 0, den, torch.ones_like(den))


def _uniform(rng: Rng, d: int, like: torch.Tensor) -> torch.Tensor:
    return rng.uniform((d,)).to(device=like.device, dtype=torch.float32)


def _normal(rng: Rng, d: int, like: torch.Tensor) -> torch.Tensor:
    return rng.normal((d,)).to(device=like.device, dtype=torch.float32)


def _stochastic_round(u: torch.Tensor, top: int, rng: Rng) -> torch.Tensor:
    """Round ``u`` in [0, top] to floor(u) or floor(u)+1 with P(up) = u - floor(u): unbiased (int64)."""
    low = torch.floor(u)
    up = _uniform(rng, u.shape[-1], u) < (u - low)
    return (low + up.to(u.dtype)).clamp(0, top).to(torch.int64)


def _signed(positive: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    return torch.where(positive, magnitude, -magnitude)


def _f64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).to(torch.float64)


# --------------------------------------------------------------------------------------------------
# The transform type


@dataclass(frozen=True)
class Properties:
    """What an operator guarantees.

    ``unbiased``: E[C(x)] = x for every x. When it holds only under conditions, ``unbiased`` is False
    and ``note`` states the conditions. ``variance_bound(x)``: a bound on E||C(x) - x||^2 for that x
    (float), or None when the operator states none.
    """

    unbiased: bool
    variance_bound: Callable[[torch.Tensor], float] | None = None
    note: str = ""


class Transform:
    """Base class of every compression transform (see the module docstring). Leaf operators set ``name``,
    take their parameters as keyword arguments and implement ``encode`` / ``decode`` / ``properties``;
    wrappers hold an ``inner`` transform."""

    name: ClassVar[str] = ""
    #: whether ``encode`` draws from ``rng`` (declared by each operator; callers that fork or replay
    #: noise ask this, never a list of names)
    needs_rng: bool = True
    #: whether the state is ``()`` (every leaf operator); error feedback keeps a residual
    stateless: bool = True

    @property
    def params(self) -> dict[str, Any]:
        return {}

    @property
    def properties(self) -> Properties:
        raise NotImplementedError

    def init(self, layout: ParamLayout | int, device: torch.device | str | None = None) -> State:
        """The initial state for vectors of ``layout`` (``()`` for a stateless transform)."""
        return ()

    def encode(self, x: torch.Tensor, state: State = (), rng: Rng | Any = None) -> tuple[Message, State]:
        raise NotImplementedError

    def decode(self, message: Message) -> torch.Tensor:
        raise NotImplementedError

    def compress(self, x: torch.Tensor, rng: Rng | Any = None) -> torch.Tensor:
        """``decode(encode(x, init, rng))``: one draw of C(x) from the initial state."""
        state = () if self.stateless else self.init(x.shape[-1], device=x.device)
        return self.decode(self.encode(x, state, rng)[0])

    def _meta(self, d: int) -> dict[str, Any]:
        return {"op": self.name, "d": d, **self.params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({args})"


def _check_positive(name: str, op: str, v: Any, allow_none: bool = False) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        extra = " or None" if allow_none else ""
        raise ValueError(f"{op}: {name} must be a positive finite number{extra}, got {v!r}")
    return float(v)


def _check_int(name: str, op: str, v: Any, low: int, high: int | None = None) -> int:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)
    if not ok:
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{op}: {name} must be an integer {rng}, got {v!r}")
    return v
