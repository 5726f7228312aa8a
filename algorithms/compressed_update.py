"""The pattern shared by FedBAT's post-training compression baselines (FedBAT paper, Section 2 and
App. A.2): train locally exactly like FedAvg, compress the update m = w_{t+1}^k - w_t, send it, and let
the server apply the weighted mean of the decoded updates (FedBAT Eq. 3, the FedAvg rule Eq. 2 with
m replaced by its compressed version C(m)):

    w_{t+1} = w_t + sum_{k in S_t} p'_k C(m_{t+1}^k)

Used by ``signsgd``, ``ef_signsgd``, ``noisy_signsgd``, ``stoc_signsgd``, ``zerofl`` and ``fedpaq``; each
of them only chooses the compression operator (``algorithms.compression``) and its parameters.

Choices the paper leaves open, and what is done here (the same for every baseline, and the same as
FedBAT's binarization scope, so that the bits compare like with like):

* ``scope="weights"`` (default): only conv/linear weights (``ParamLayout`` kind ``"weight"``) are
  compressed; BatchNorm affine parameters and biases travel in fp32. FedBAT's public code binarizes
  exactly this set for FedBAT itself; the paper says nothing about the baselines. ``scope="all"``
  compresses every parameter.
* ``per_layer=True`` (default): the operator is applied to each compressed tensor separately, so every
  data-dependent scale (EF-SignSGD's ||m||_1/d, Stoc-SignSGD's ||m||_inf, QSGD's ||m||_2, top-k's k) is
  per layer, like FedBAT's per-layer alpha and like a Flower client that compresses its list of
  arrays one by one. ``per_layer=False`` applies the operator once to the concatenation of the
  compressed tensors (one scale for the model).
* Bits are what is packed: each group's operator message (padding of its last byte included) plus 32
  bits per fp32 entry that is not compressed. BatchNorm running statistics are buffers averaged by
  the engine and are not counted (as for every algorithm).
* Randomness of stochastic operators comes from a child ``CounterRng`` forked from ``ctx.rng`` before
  local training (``fork_rng``), so the sequential and the vectorized executors, whose loops advance
  ``ctx.rng`` by different numbers of masked steps, draw the same compression noise. Deterministic
  operators (identity, sign, scaled sign, top-k) do not touch ``ctx.rng``, so local training draws the
  same dropout masks as FedAvg's.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import compression
from .base import Algorithm, CounterRng, Message, ParamLayout, ParamSlice, Rng
from .hyper import choice

SCOPES = ("weights", "all")
SCOPE = choice(*SCOPES)  # the ``scope`` hyperparameter of the compressed algorithms
DETERMINISTIC_OPERATORS = ("identity", "sign", "scaled_sign", "topk")


def needs_rng(op: compression.Operator) -> bool:
    """Whether ``op.encode`` draws random numbers (error feedback: whether its inner operator does)."""
    if isinstance(op, compression.ErrorFeedback):
        op = op.inner
    return op.name not in DETERMINISTIC_OPERATORS


def fork_rng(rng: Rng) -> CounterRng:
    """A child counter-based RNG keyed by three draws of ``rng`` (63 random bits).

    Call it before the local loop: the executors run different numbers of (masked) loop steps, so a
    draw after the loop would come from a different position of ``ctx.rng`` in each executor.
    """
    u = rng.uniform((3,))
    a = (u[0] * 2.0 ** 24).to(torch.int64)
    b = (u[1] * 2.0 ** 24).to(torch.int64)
    c = (u[2] * 2.0 ** 15).to(torch.int64)
    return CounterRng(a + b * (1 << 24) + c * (1 << 48))


def split_layout(layout: ParamLayout, scope: str) -> tuple[tuple[ParamSlice, ...], tuple[ParamSlice, ...]]:
    """(compressed slices, fp32 slices) of a layout for ``scope`` ("weights" or "all")."""
    comp = tuple(s for s in layout.slices if scope == "all" or s.kind == "weight")
    rest = tuple(s for s in layout.slices if not (scope == "all" or s.kind == "weight"))
    return comp, rest


def assemble_signed(layout: ParamLayout, signed: set, signs: torch.Tensor | None, fp: torch.Tensor | None,
                    scale: torch.Tensor | None = None) -> torch.Tensor:
    """A flat vector (one client) from unpacked sign bits on the tensors named in ``signed``: +-1, or
    +-scale[l] for the l-th of them, in layout order; and the fp32 values ``fp`` on the others."""
    pieces, li, off, foff = [], 0, 0, 0
    for s in layout.slices:
        if s.name in signed:
            a = (torch.ones(s.numel, dtype=torch.float32, device=signs.device) if scale is None
                 else scale[li].expand(s.numel))
            pieces.append(torch.where(signs[off:off + s.numel], a, -a))
            li += 1
            off += s.numel
        else:
            pieces.append(fp[foff:foff + s.numel].to(torch.float32))
            foff += s.numel
    return torch.cat(pieces)


def gather(x: torch.Tensor, slices: tuple[ParamSlice, ...]) -> torch.Tensor:
    """The entries of ``slices`` of the flat vector ``x``, concatenated (static slicing: vmap-safe)."""
    if not slices:
        return x[..., :0]
    return torch.cat([x[..., s.start:s.stop] for s in slices], dim=-1)


@dataclass(frozen=True)
class Group:
    """Slices compressed together by one call of the operator, and their offsets in the compressed
    part of the vector (the concatenation of all compressed slices in layout order)."""

    slices: tuple[ParamSlice, ...]
    offset: int
    d: int


class Packer:
    """Splits a flat vector into compression groups and an fp32 rest, and puts it back together."""

    def __init__(self, layout: ParamLayout, scope: str, per_layer: bool):
        self.layout = layout
        self.comp, self.rest = split_layout(layout, scope)
        groups, off = [], 0
        if per_layer:
            for s in self.comp:
                groups.append(Group((s,), off, s.numel))
                off += s.numel
        elif self.comp:
            d = sum(s.numel for s in self.comp)
            groups.append(Group(self.comp, 0, d))
            off = d
        self.groups = tuple(groups)
        self.d_comp = off
        self.d_rest = sum(s.numel for s in self.rest)

    def group_values(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [gather(x, g.slices) for g in self.groups]

    def rest_values(self, x: torch.Tensor) -> torch.Tensor:
        return gather(x, self.rest)

    def assemble(self, group_values: list[torch.Tensor], rest: torch.Tensor | None) -> torch.Tensor:
        """Inverse of (group_values, rest_values): the full flat vector in layout order."""
        pieces: dict[str, torch.Tensor] = {}
        for g, v in zip(self.groups, group_values):
            off = 0
            for s in g.slices:
                pieces[s.name] = v[..., off:off + s.numel]
                off += s.numel
        off = 0
        for s in self.rest:
            pieces[s.name] = rest[..., off:off + s.numel]
            off += s.numel
        return torch.cat([pieces[s.name] for s in self.layout.slices], dim=-1)


class CompressedUpdate(Algorithm):
    """Base class: local SGD as FedAvg, the update compressed group by group, decoded at the server.

    Subclasses set ``name``, ``Hyper`` (with ``scope`` and ``per_layer``) and ``make_operator``;
    ``encode``/``client_init`` are overridden for stateful schemes (error feedback).
    """

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.op = self.make_operator()
        self.packer = Packer(layout, hp.scope, hp.per_layer)

    def make_operator(self) -> compression.Operator:
        raise NotImplementedError

    # -- messages --
    def _meta(self, d: int) -> dict:
        return {"op": self.op.name, "d": d, **self.op.params}

    def _parts(self, messages: list[Message], rest: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = {}
        for g, msg in enumerate(messages):
            parts.update({f"g{g}.{k}": v for k, v in msg.parts.items()})
        if self.packer.d_rest:
            parts["rest"] = rest.to(torch.float32)
        return parts

    def encode(self, delta: torch.Tensor, rng: Rng, client_state: dict) -> tuple[Message, dict]:
        """Compress each group of ``delta`` with the operator; the rest travels in fp32."""
        msgs = [self.op.encode(v, rng) for v in self.packer.group_values(delta)]
        return Message(self._parts(msgs, self.packer.rest_values(delta))), client_state

    def decode(self, message: Message) -> torch.Tensor:
        """The decoded update C(m), a flat vector in layout order (one client; vmap for many)."""
        values = []
        for g, group in enumerate(self.packer.groups):
            prefix = f"g{g}."
            sub = {k[len(prefix):]: v for k, v in message.parts.items() if k.startswith(prefix)}
            values.append(self.op.decode(Message(sub, self._meta(group.d))))
        rest = message.parts.get("rest")
        return self.packer.assemble(values, rest)

    # -- the contract --
    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        rng = fork_rng(ctx.rng) if needs_rng(self.op) else None
        w = self.sgd_loop(ctx, w0)
        return self.encode(w - w0, rng, client_state)

    def aggregate(self, server_state, uplinks, weights, info):
        deltas = torch.func.vmap(self.decode)(uplinks)
        delta = self.weighted_mean(deltas, weights)
        return {**server_state, "params": server_state["params"] + delta}
