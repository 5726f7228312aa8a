"""Bit packing, vmap-safe (reshape, multiply by powers of two, sum): how every operator's payload is packed, so
that ``Message.bits`` (8 bits per byte of every part) is the real size. ``B(n) = 8 ceil(n/8)`` is the size in
bits of an n-bit string padded to whole bytes, ``L(m) = ceil(log2 m)`` (0 for m = 1) the bits of an index
below m."""
from __future__ import annotations

import torch

__all__ = ["pack_bits", "unpack_bits", "pack_uint", "unpack_uint"]


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Pack a 1-D bool tensor into uint8, 8 entries per byte (entry ``8j + i`` is bit ``i`` of byte ``j``).

    The last byte is zero-padded; the result has ``ceil(n/8)`` bytes.
    """
    n = bits.shape[-1]
    v = bits.to(torch.uint8)
    pad = (-n) % 8
    if pad:
        v = torch.cat([v, torch.zeros(pad, dtype=torch.uint8, device=v.device)])
    weights = 2 ** torch.arange(8, dtype=torch.uint8, device=v.device)
    # distinct powers of two: the sum of a byte's 8 products is at most 255, no overflow in uint8
    return (v.reshape(-1, 8) * weights).sum(-1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of ``pack_bits``: the first ``n`` bits of ``packed`` (uint8) as a bool tensor."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    b = torch.bitwise_and(torch.bitwise_right_shift(packed.to(torch.uint8).unsqueeze(-1), shifts), 1)
    return b.reshape(-1)[:n].to(torch.bool)


def pack_uint(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack non-negative integers ``< 2**bits`` at ``bits`` bits each into one bit string (uint8).

    Value ``j`` occupies bits ``j*bits .. j*bits + bits - 1`` of the string, least significant first,
    so ``n`` values take ``ceil(n * bits / 8)`` bytes. Higher bits of a value are dropped.
    """
    _check_bits(bits)
    values = values.to(torch.int64)
    if bits == 0:
        return values[..., :0].to(torch.uint8)
    planes = torch.stack([torch.bitwise_and(torch.bitwise_right_shift(values, b), 1).to(torch.bool)
                          for b in range(bits)], dim=-1)  # (n, bits): value-major bit string
    return pack_bits(planes.reshape(-1))


def unpack_uint(packed: torch.Tensor, n: int, bits: int) -> torch.Tensor:
    """Inverse of ``pack_uint``: ``n`` int64 values of ``bits`` bits each."""
    _check_bits(bits)
    planes = unpack_bits(packed, n * bits).reshape(n, bits)
    out = torch.zeros(n, dtype=torch.int64, device=packed.device)
    for b in range(bits):
        out = out + planes[:, b].to(torch.int64) * (1 << b)
    return out


def _check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 62:
        raise ValueError(f"bits must be an integer in [0, 62], got {bits!r}")


def _ceil_log2(m: int) -> int:
    """ceil(log2 m) for m >= 1 (0 for m = 1); 0 for m = 0."""
    return max(m - 1, 0).bit_length()
