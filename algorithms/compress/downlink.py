"""The downlinks of the LFL paper's schemes (Amiri et al., arXiv 2006.10672v2, Sec. 4 and Appendix A): the exact
33-bit model of lossless broadcasting, the quantizer shared by LFL, LGM and LTGM, and the server-side noise
of their broadcasts.

``encode_exact`` / ``decode_exact``: the exact global model at the paper's 33 bits per entry ("each entry of
the global model is represented by 33 bits", R_LB = 33 d, Sec. 4): one packed sign bit per entry (the sign
bit of the float, so -0.0 and NaN signs survive) plus the fp32 magnitude, ``8 ceil(d/8) + 32 d`` bits, 33 d
when 8 divides d; decoding is bit-exact. Sent by ``lossless``, ``lb`` and, after a missed broadcast, ``lfl``.

``quantizer(q)``: LFL's range quantizer Q(., q) (``quantizers.LFL``, Eqs. 17-20), or
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

from ..core import CounterRng, Message, splitmix64
from ..core.hyper import NONE, Either, Range
from .packing import pack_bits, unpack_bits
from .registry import get
from .transform import Transform

#: a quantization level (the number of intervals, Appendix A): an integer >= 1, or None (no quantization)
LEVEL = Either(Range("[1, inf)", integer=True), NONE)


def quantizer(q: int | None) -> Transform:
    """LFL's Q(., q) with packed levels, or the identity (fp32) for q = None."""
    return get("identity") if q is None else get("lfl", q=q)


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


def encode_exact(x: torch.Tensor) -> Message:
    """An exact global model at the paper's 33 bits per entry: packed sign bits + fp32 magnitudes."""
    x = x.to(torch.float32)
    return Message({"negative": pack_bits(torch.signbit(x)), "magnitude": x.abs()},
                   {"op": "exact33", "d": x.shape[-1]})


def decode_exact(message: Message) -> torch.Tensor:
    """Inverse of ``encode_exact`` (bit-exact, including the sign of zero)."""
    mag = message["magnitude"].to(torch.float32)
    negative = unpack_bits(message["negative"], mag.shape[-1])
    return torch.where(negative, -mag, mag)


def is_exact(message: Message) -> bool:
    """Whether ``message`` came from ``encode_exact`` (a static check on its parts, vmap-safe)."""
    return "magnitude" in message.parts
