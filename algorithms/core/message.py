"""What travels on a link: every uplink and downlink is a ``Message`` whose size in bits is computed from what is
actually encoded (README, "How runs are made reproducible": bits are counted from the packed payload), and the
pytree helpers that stack messages and states over clients.

Uplinks arrive at ``Algorithm.aggregate`` *stacked*: one ``Message`` whose tensors have a leading client axis;
``torch.func.vmap(decode)(uplinks)`` decodes them all. Client and server states are pytrees of tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch.utils import _pytree as pytree


@dataclass(frozen=True)
class Message:
    """What travels on a link.

    ``parts`` are the encoded tensors that are actually sent (packed signs as uint8, level indices,
    fp32 scalars, ...); ``meta`` is static decoding information that both ends know in advance
    (shapes, operator parameters) and is not counted. ``bits`` is computed from the payload: 8 bits
    per byte of every part, so padding of packed data is counted honestly.
    """

    parts: Mapping[str, torch.Tensor]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bits(self) -> int:
        return int(sum(8 * t.numel() * t.element_size() for t in self.parts.values()))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.parts[key]

    @staticmethod
    def dense(x: torch.Tensor, key: str = "x") -> "Message":
        """A full-precision (fp32) message: 32 bits per entry."""
        return Message({key: x.to(torch.float32)})

    def stacked_bits(self) -> int:
        """Bits of one client's message when ``parts`` carry a leading client axis."""
        n = next(iter(self.parts.values())).shape[0] if self.parts else 1
        return self.bits // max(n, 1)


def _msg_flatten(m: Message):
    keys = tuple(m.parts.keys())
    return [m.parts[k] for k in keys], (keys, tuple(sorted(m.meta.items(), key=lambda kv: kv[0])))


def _msg_unflatten(values, context):
    keys, meta = context
    return Message(dict(zip(keys, values)), dict(meta))


def _msg_flatten_with_keys(m: Message):
    values, ctx = _msg_flatten(m)
    return [(pytree.MappingKey(k), v) for k, v in zip(ctx[0], values)], ctx


pytree.register_pytree_node(
    Message,
    _msg_flatten,
    _msg_unflatten,
    serialized_type_name="algorithms.core.message.Message",
    flatten_with_keys_fn=_msg_flatten_with_keys,
)


def stack_trees(trees: list) -> Any:
    """Stack a list of identically-shaped pytrees along a new leading axis."""
    flat = [pytree.tree_flatten(t) for t in trees]
    spec = flat[0][1]
    leaves = [torch.stack(list(col)) for col in zip(*(f[0] for f in flat))]
    return pytree.tree_unflatten(leaves, spec)


def unstack_tree(tree: Any, n: int) -> list:
    """Inverse of ``stack_trees``."""
    leaves, spec = pytree.tree_flatten(tree)
    return [pytree.tree_unflatten([leaf[i] for leaf in leaves], spec) for i in range(n)]


def tree_map(fn: Callable, *trees: Any) -> Any:
    return pytree.tree_map(fn, *trees)
