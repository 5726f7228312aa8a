"""The downlink quantizer shared by LFL, LGM and LTGM (Amiri et al., arXiv 2006.10672v2, Sec. 4 and
Appendix A), and the server-side noise of their broadcasts.

``quantizer(q)``: LFL's range quantizer Q(., q) (``compression.LFL``, Eqs. 17-20) as a transform, or
the identity (fp32) for q = None. The same quantizer is the uplink of LB, LFL, LGM and LTGM (inside
``error_feedback``).

Server noise: the stochastic rounding of a broadcast is drawn on the server, outside the devices'
``ctx.rng``, from a ``CounterRng`` keyed by (hash of theta(0), round): ``server_rng(state)`` for a server
state with ``key`` (``downlink_key``) and ``round``. So the broadcast of round t is a deterministic
function of the server state, and the server can recompute it in ``aggregate``.
"""
from __future__ import annotations

import hashlib

import torch

from ..core.base import CounterRng, splitmix64
from ..compression import get
from ..core.hyper import NONE, Either, Range
from .transforms import Transform, lift

#: a quantization level (the number of intervals, Appendix A): an integer >= 1, or None (no quantization)
LEVEL = Either(Range("[1, inf)", integer=True), NONE)


def quantizer(q: int | None) -> Transform:
    """LFL's Q(., q) with packed levels, or the identity (fp32) for q = None."""
    return lift(get("identity") if q is None else get("lfl", q=q))


def downlink_key(params: torch.Tensor, salt: str) -> torch.Tensor:
    """A 64-bit key (0-d int64 tensor) hashed from the initial parameters, for server-side noise."""
    data = params.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
    digest = hashlib.blake2b(data, digest_size=8, key=salt.encode()).digest()
    return torch.tensor(int.from_bytes(digest, "little", signed=True), dtype=torch.int64,
                        device=params.device)


def round_seed(key: torch.Tensor, round_: torch.Tensor) -> torch.Tensor:
    """The seed of round t's server-side noise stream (0-d int64)."""
    return splitmix64(key) + round_


def server_rng(server_state: dict) -> CounterRng:
    """The noise stream of this round's broadcast (server state with ``key`` and ``round``)."""
    return CounterRng(round_seed(server_state["key"], server_state["round"]))
