"""The wrappers: transforms that wrap any transform (``transform.Transform``), in the style of optax's
``chain`` and ``masked``. Each is itself a ``Transform`` (init / encode / decode), so they nest.

* ``error_feedback(inner)`` (registry name ``ef``): ``p = x + e``; send ``inner(p)``; ``e' = p - decode(inner(p))``
  (Karimireddy et al. 2019, EF-SignSGD Alg. 1; LFL Eq. 3; LGM's server-side error): the one error-feedback
  code. The state is the residual e (zeros at first), so ``inner`` must be stateless.
* ``per_layer(inner, layout)``: ``inner`` applied to each tensor of ``layout`` separately (per-layer
  scales, one message per tensor; parts ``g{l}.<part>``).
* ``fp32_layers(inner, layout, scope)``: the tensors outside ``scope`` travel in fp32 (part ``fp``, 32
  bits per entry); ``inner`` compresses the concatenation of the others, whose layout is
  ``scope_layout(layout, scope)``. ``scope="weights"``: conv/linear weights are compressed (FedBAT's
  public code; ``ParamLayout`` kind ``"weight"``), ``"all"``: every tensor. ``SCOPES`` lists them.
* ``chain(*wrappers)(op)``: ``chain(a, b, c)(op) = a(b(c(op)))``, e.g. EF-SignSGD's uplink is
  ``chain(partial(fp32_layers, layout=L, scope="weights"), error_feedback,
  partial(per_layer, layout=scope_layout(L, "weights")))(get("scaled_sign"))``; ``uplink`` builds
  this recipe.

Uplink sign convention (every compressed algorithm): a client sends its update ``m = w - w0``, the
model it trained to minus the model it received (``update(w, w0)``), and the server adds the weighted
mean of the decoded updates (``w <- w0 + sum_k p_k C(m_k)``). BiFL sends models, not updates.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..core import Message, ParamLayout, ParamSlice
from .transform import Properties, Transform

__all__ = ["SCOPES", "error_feedback", "per_layer", "fp32_layers", "chain", "uplink", "scope_layout",
           "split_layout", "update", "Replay"]

#: which tensors a compressed algorithm compresses (the rest travel in fp32)
SCOPES = ("weights", "all")
State = Any


def update(w: torch.Tensor, w0: torch.Tensor) -> torch.Tensor:
    """The uplink update m = w - w0 (trained minus received): the one sign convention of the uplinks."""
    return w - w0


def _size(layout: ParamLayout | int) -> int:
    return layout.size if isinstance(layout, ParamLayout) else int(layout)


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(map(repr, SCOPES))}, got {scope!r}")


def split_layout(layout: ParamLayout, scope: str) -> tuple[tuple[ParamSlice, ...], tuple[ParamSlice, ...]]:
    """(compressed slices, fp32 slices) of ``layout`` for ``scope``, in layout order."""
    _check_scope(scope)
    comp = tuple(s for s in layout.slices if scope == "all" or s.kind == "weight")
    rest = tuple(s for s in layout.slices if not (scope == "all" or s.kind == "weight"))
    return comp, rest


def _rebased(slices: tuple[ParamSlice, ...]) -> ParamLayout:
    out, off = [], 0
    for s in slices:
        out.append(ParamSlice(s.name, off, off + s.numel, s.shape, s.kind))
        off += s.numel
    return ParamLayout(tuple(out))


def scope_layout(layout: ParamLayout, scope: str) -> ParamLayout:
    """The layout of the compressed part: the slices in ``scope``, concatenated in layout order."""
    return _rebased(split_layout(layout, scope)[0])


def _gather(x: torch.Tensor, slices: tuple[ParamSlice, ...]) -> torch.Tensor:
    """The entries of ``slices`` of ``x``, concatenated (static slicing: vmap-safe)."""
    if not slices:
        return x[..., :0]
    return torch.cat([x[..., s.start:s.stop] for s in slices], dim=-1)


def _sub(message: Message, prefix: str) -> Message:
    """The parts and meta of ``message`` under ``prefix``, without it."""
    n = len(prefix)
    return Message({k[n:]: v for k, v in message.parts.items() if k.startswith(prefix)},
                   {k[n:]: v for k, v in message.meta.items() if k.startswith(prefix)})


class Replay:
    """An ``Rng`` that returns noise drawn earlier: ``uniform``/``normal`` hand back the given tensors in
    order. For algorithms that must draw their upload noise before local training (so that both
    executors draw it from the same position of ``ctx.rng``) and encode after it."""

    def __init__(self, *draws: torch.Tensor):
        self._draws = list(draws)

    def _next(self, shape) -> torch.Tensor:
        if not self._draws:
            raise RuntimeError("Replay: no recorded draw left")
        t = self._draws.pop(0)
        if tuple(t.shape[-len(shape):] if shape else ()) != tuple(shape):
            raise RuntimeError(f"Replay: recorded draw of shape {tuple(t.shape)}, asked for {tuple(shape)}")
        return t

    uniform = normal = _next


def _transform(t: Transform, who: str) -> Transform:
    if not isinstance(t, Transform):
        raise TypeError(f"{who}: expected a compression Transform (e.g. compress.get('sign')), got {type(t).__name__}")
    return t


class error_feedback(Transform):  # noqa: N801 (a wrapper, read like a function)
    """Error feedback around any stateless transform (Karimireddy et al. 2019, EF-SignSGD Algorithm 1; LFL's
    uplink, Eq. 3): ``p = x + e``; send ``inner(p)``; ``e' = p - inner.decode(inner(p))``. The state is the
    residual e (zeros at ``init``; ``None`` also means zeros). Messages and bits are the inner transform's.

    Registered as ``ef`` (``registry.get("ef", inner=..., **params)``; ``get("ef")`` is EF-SignSGD's compressor,
    error feedback around ``scaled_sign``)."""

    name = "ef"
    stateless = False

    def __init__(self, inner: Transform):
        self.inner = _transform(inner, "error_feedback")
        if not self.inner.stateless:
            raise ValueError(f"error_feedback wraps a stateless transform; {self.inner!r} keeps state")
        self.needs_rng = self.inner.needs_rng

    @property
    def params(self):
        return {"inner": self.inner.name, **self.inner.params}

    @property
    def properties(self) -> Properties:
        return Properties(False, None, f"stateful error feedback around {self.inner!r}; each message "
                                       "is the inner operator applied to x + residual")

    def init(self, layout, device=None):
        return torch.zeros(_size(layout), dtype=torch.float32, device=device)

    def encode(self, x, state=None, rng=None):
        x = x.to(torch.float32)
        p = x + (torch.zeros_like(x) if state is None else state.to(torch.float32))
        message, _ = self.inner.encode(p, (), rng)
        return message, p - self.inner.decode(message)

    def decode(self, message):
        return self.inner.decode(message)

    def __repr__(self):
        return f"ef({self.inner!r})"


class per_layer(Transform):  # noqa: N801
    """``inner`` applied to each tensor of ``layout`` on its own (in layout order, sharing ``rng``).

    Parts and meta of tensor l are prefixed ``g{l}.``; the state is the tuple of the tensors' states."""

    def __init__(self, inner: Transform, layout: ParamLayout):
        self.inner = _transform(inner, "per_layer")
        self.layout = layout
        self.needs_rng = self.inner.needs_rng
        self.stateless = self.inner.stateless

    def init(self, layout=None, **kw):
        if self.stateless:
            return ()
        return tuple(self.inner.init(s.numel, **kw) for s in self.layout.slices)

    def encode(self, x, state=(), rng=None):
        parts, meta, new = {}, {}, []
        for g, s in enumerate(self.layout.slices):
            msg, st = self.inner.encode(x[..., s.start:s.stop], state[g] if not self.stateless else (), rng)
            parts.update({f"g{g}.{k}": v for k, v in msg.parts.items()})
            meta.update({f"g{g}.{k}": v for k, v in msg.meta.items()})
            new.append(st)
        return Message(parts, meta), (() if self.stateless else tuple(new))

    def decode(self, message):
        values = [self.inner.decode(_sub(message, f"g{g}.")) for g in range(len(self.layout.slices))]
        if not values:
            return torch.zeros(0, dtype=torch.float32)
        return torch.cat(values, dim=-1)

    def __repr__(self):
        return f"per_layer({self.inner!r})"


class fp32_layers(Transform):  # noqa: N801
    """The tensors of ``layout`` outside ``scope`` travel in fp32 (part ``fp``); ``inner`` compresses the
    others, concatenated in layout order (layout ``scope_layout(layout, scope)``). The state is
    ``inner``'s. No part is sent for an empty side (no compressed tensor, or no fp32 tensor)."""

    def __init__(self, inner: Transform, layout: ParamLayout, scope: str = "weights"):
        self.inner = _transform(inner, "fp32_layers")
        self.layout, self.scope = layout, scope
        self.comp, self.rest = split_layout(layout, scope)
        self.comp_layout = _rebased(self.comp)
        self.d_comp = self.comp_layout.size
        self.d_rest = sum(s.numel for s in self.rest)
        self.needs_rng = self.inner.needs_rng
        self.stateless = self.inner.stateless

    def init(self, layout=None, **kw):
        return self.inner.init(self.comp_layout, **kw) if not self.stateless else ()

    def encode(self, x, state=(), rng=None):
        parts, meta = {}, {}
        if self.comp:
            msg, state = self.inner.encode(_gather(x, self.comp), state, rng)
            if "fp" in msg.parts:
                raise ValueError(f"fp32_layers: the inner message of {self.inner!r} has a part named 'fp'")
            parts, meta = dict(msg.parts), dict(msg.meta)
        if self.d_rest:
            parts["fp"] = _gather(x, self.rest).to(torch.float32)
        return Message(parts, meta), state

    def decode(self, message):
        pieces: dict[str, torch.Tensor] = {}
        if self.comp:
            inner = Message({k: v for k, v in message.parts.items() if k != "fp"}, message.meta)
            v = self.inner.decode(inner)
            for s, r in zip(self.comp, self.comp_layout.slices):
                pieces[s.name] = v[..., r.start:r.stop]
        off = 0
        for s in self.rest:
            pieces[s.name] = message["fp"][..., off:off + s.numel].to(torch.float32)
            off += s.numel
        return torch.cat([pieces[s.name] for s in self.layout.slices], dim=-1)

    def __repr__(self):
        return f"fp32_layers({self.inner!r}, scope={self.scope!r})"


def chain(*wrappers: Callable[[Transform], Transform]) -> Callable[[Transform], Transform]:
    """``chain(a, b, c)(op) = a(b(c(op)))``: wrappers applied inside out, the first one outermost."""
    def build(op: Transform) -> Transform:
        t = _transform(op, "chain")
        for w in reversed(wrappers):
            t = w(t)
        return t

    return build


def uplink(op: Transform, layout: ParamLayout, scope: str = "weights", per_layer_: bool = True,
           ef: bool = False) -> Transform:
    """The compressed uplink of the FedBAT-style baselines: ``op`` on the tensors in ``scope`` (each on
    its own when ``per_layer_``), with error feedback when ``ef`` (one residual over the compressed
    entries), the other tensors in fp32."""
    comp = scope_layout(layout, scope)
    t = _transform(op, "uplink")
    if per_layer_:
        t = per_layer(t, comp)
    if ef:
        t = error_feedback(t)
    return fp32_layers(t, layout, scope)
