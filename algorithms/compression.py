"""Compression operators: encode a flat update into a really packed ``Message``, decode it back.

Every operator has

* ``encode(x, rng=None) -> Message`` for a 1-D float tensor ``x``. ``rng`` is anything
  ``algorithms.base.as_rng`` accepts (None, a ``torch.Generator``, an int seed, or an ``Rng`` such as
  ``CounterRng``). All randomness comes from ``rng.uniform(shape)`` / ``rng.normal(shape)``, called a
  fixed number of times per ``encode`` whatever the values of ``x``.
* ``decode(message) -> Tensor``: float32, the same length as ``x``.
* ``compress(x, rng=None)``: ``decode(encode(x, rng))``.
* ``properties``: ``Properties(unbiased, variance_bound, note)``. ``variance_bound(x)`` is a bound on
  ``E||C(x) - x||^2`` for that ``x`` (the note says when it is exact), or None.
* ``name`` (the registry name) and ``params`` (the operator's parameters).
* ``needs_rng``: whether ``encode`` draws from ``rng`` (declared by each operator class).

These are the stateless leaves. ``algorithms.compress`` makes them composable transforms
(``init(layout) -> state``, ``encode(x, state, rng) -> (Message, state)``, ``decode``) and adds the
wrappers: error feedback, per-layer application, fp32 for the tensors outside a scope.

``encode`` and ``decode`` are vmap-safe: no ``.item()``, no branching on tensor values, no
``torch.nonzero``; Python branches only look at static shapes. So
``torch.func.vmap(lambda k, x: op.encode(x, CounterRng(k)))(keys, xs)`` gives the same messages as a
loop over clients, and ``torch.func.vmap(op.decode)(stacked_messages)`` decodes a round at once.

Bits are honest: signs travel 8 per byte (``pack_bits``), level indices and coordinate indices at a
fixed number of bits each, concatenated into one bit string (``pack_uint``); scalars that travel
(norms, ``x_max``, ``x_min``, ``alpha``) are fp32 parts of 32 bits. ``Message.bits`` counts 8 bits per
byte of every part, so the padding of the last byte is counted. Static information (the length ``d``,
the operator's parameters) is in ``Message.meta`` and is not counted. Below, ``B(n) = 8 ceil(n/8)``
is the size in bits of an ``n``-bit string padded to whole bytes, ``L(m) = ceil(log2 m)`` (0 for m = 1).

Registry (``get(name, **params)``, ``names()``)::

    name             params (defaults)                 bits for d entries
    identity         -                                 32 d
    lfl              q=2                               64 + B(d) + B(d L(q+1))
    qsgd             s=1                               32 + B(d) + B(d L(s+1))
    fedpaq           bits=3                            QSGD with s = 2^(bits-1) - 1: 32 + B(d) + B(d (bits-1))
    sign             alpha=0.001                       B(d)
    scaled_sign      -                                 B(d) + 32
    noisy_sign       alpha=0.01, sigma=0.01            B(d)
    stochastic_sign  alpha=0.01, norm="inf"            B(d)   (+32 when alpha=None)
    binarize         alpha=None                        B(d) + 32
    topk             k | ratio (ratio=0.01)            32 k + B(k L(d))
    randk            k | ratio (ratio=0.01), scale     32 k + B(k L(d))
    ef               inner="scaled_sign", **inner      the inner operator's bits

Sign convention: wherever a sign is sent, ``sign(0) = +1`` (the bit is ``x >= 0``). For the
quantizers (lfl, qsgd, fedpaq) this never matters: a zero entry has level 0 in QSGD, and in LFL a
zero magnitude equals ``x_min = 0`` and is reconstructed as 0 whatever the sign bit.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch

from .core import Message, Rng, as_rng

__all__ = [
    "Operator", "Properties", "ErrorFeedback", "get", "names",
    "pack_bits", "unpack_bits", "pack_uint", "unpack_uint",
]

# --------------------------------------------------------------------------------------------------
# Bit packing (vmap-safe: reshape, multiply by powers of two, sum)


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


# --------------------------------------------------------------------------------------------------
# Small vmap-safe helpers


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
# Operator base


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


class Operator:
    """Base class. Subclasses set ``name``, take their parameters as keyword arguments, and implement
    ``encode`` / ``decode`` / ``properties``."""

    name: ClassVar[str] = ""
    #: whether ``encode`` draws from ``rng`` (declared by each operator; callers that fork or replay
    #: noise ask this, never a list of names)
    needs_rng: ClassVar[bool] = True

    @property
    def params(self) -> dict[str, Any]:
        return {}

    @property
    def properties(self) -> Properties:
        raise NotImplementedError

    def encode(self, x: torch.Tensor, rng: Any = None) -> Message:
        raise NotImplementedError

    def decode(self, message: Message) -> torch.Tensor:
        raise NotImplementedError

    def compress(self, x: torch.Tensor, rng: Any = None) -> torch.Tensor:
        """``decode(encode(x, rng))``."""
        return self.decode(self.encode(x, rng))

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


# --------------------------------------------------------------------------------------------------
# Full precision


class Identity(Operator):
    """No compression: the fp32 vector itself, 32 d bits. Unbiased, zero error."""

    name = "identity"
    needs_rng = False

    @property
    def properties(self) -> Properties:
        return Properties(True, lambda x: 0.0, "exact: C(x) = x")

    def encode(self, x, rng=None):
        x = _vec(x)
        return Message({"x": x}, self._meta(x.shape[-1]))

    def decode(self, message):
        return message["x"].to(torch.float32)


# --------------------------------------------------------------------------------------------------
# Stochastic quantizers


class LFL(Operator):
    """LFL's range quantizer Q(x, q) (Amiri et al., Appendix A, Eqs. 17-20).

    ``x_max = max_i |x_i|``, ``x_min = min_i |x_i|`` (17); each entry is sent as its sign and a level
    ``k in {0..q}`` with ``Q(x_i) = sign(x_i) (x_min + (x_max - x_min) k/q)`` (18a), where k is the
    normalised magnitude ``(|x_i| - x_min)/(x_max - x_min)`` times q, stochastically rounded to a
    neighbouring integer (18b). Unbiased, and (Lemma 1, 1b, with unbiasedness)
    ``E||Q(x) - x||^2 <= d (x_max - x_min)^2 / (4 q^2) = eps d ||x||^2 / (4 q^2)``; the exact value is
    ``(r^2/q^2) sum_i p_i (1 - p_i)`` with r = x_max - x_min and p_i the fractional part of the
    normalised magnitude times q. When x_max = x_min (all magnitudes equal, x = 0) every level is 0
    and the entries are reproduced exactly.

    Bits. The paper counts ``R_Q = 64 + d (1 + log2(q+1))`` (20): 2 x 32 bits for x_max and x_min,
    one sign bit per entry (the sign does apply: Q keeps sign(x_i), Eq. 18a), and log2(q+1) bits per
    level, which assumes ideal (fractional) coding. We send

        64 + 8 ceil(d/8) + 8 ceil(d ceil(log2(q+1)) / 8)

    bits: the same 64 bits, the signs packed 8 per byte, and each level at ceil(log2(q+1)) bits in a
    packed bit string. This equals the paper's count exactly when q+1 is a power of two and 8 divides
    d (e.g. q = 1, 3, 7); otherwise it is larger, by at most d (ceil(log2(q+1)) - log2(q+1)) bits plus
    two bytes of padding. For q = 2 (LFL's MNIST setting) we send 3 bits per entry where the paper
    counts 2.585 (16% more); for q = 5 (CIFAR-10) 4 where the paper counts 3.585.
    """

    name = "lfl"

    def __init__(self, q: int = 2):
        self.q = _check_int("q", self.name, q, 1)
        self.level_bits = _ceil_log2(self.q + 1)

    @property
    def params(self):
        return {"q": self.q}

    @property
    def properties(self) -> Properties:
        q = self.q

        def bound(x):
            a = _f64(x).abs()
            if a.numel() == 0:
                return 0.0
            return float(a.numel() * (a.max() - a.min()) ** 2 / (4 * q * q))

        return Properties(True, bound, "Lemma 1 (1b): d (x_max - x_min)^2 / (4 q^2), an upper bound")

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        a = x.abs()
        x_max, x_min = _amax(a), _amin(a)
        r = x_max - x_min
        u = ((a - x_min) / _safe(r)).clamp(0, 1) * self.q
        k = _stochastic_round(u, self.q, rng)
        parts = {"signs": pack_bits(x >= 0), "levels": pack_uint(k, self.level_bits),
                 "x_max": x_max, "x_min": x_min}
        return Message(parts, self._meta(x.shape[-1]))

    def decode(self, message):
        d = message.meta["d"]
        k = unpack_uint(message["levels"], d, self.level_bits).to(torch.float32)
        t = k / self.q
        x_max, x_min = message["x_max"].to(torch.float32), message["x_min"].to(torch.float32)
        mag = x_min * (1 - t) + x_max * t  # exact at t = 0 and t = 1
        return _signed(unpack_bits(message["signs"], d), mag)


class QSGD(Operator):
    """QSGD's stochastic quantizer Q_s (Alistarh et al. 2017, Section 3.1).

    ``Q_s(x)_i = ||x||_2 sign(x_i) xi_i(x, s)`` where ``xi_i`` is ``|x_i|/||x||_2`` stochastically
    rounded to a neighbour in {0, 1/s, ..., 1}. Lemma 3.1: unbiased, and
    ``E||Q_s(x) - x||^2 <= min(d/s^2, sqrt(d)/s) ||x||^2``; the exact value is
    ``(||x||^2/s^2) sum_i p_i (1 - p_i)`` with p_i the fractional part of ``s |x_i|/||x||``.

    Sends ||x||_2 (fp32), one sign bit per entry and the level in {0..s} at ceil(log2(s+1)) bits
    (fixed-length code, not the paper's Elias coding): ``32 + 8 ceil(d/8) + 8 ceil(d ceil(log2(s+1))/8)``.
    """

    name = "qsgd"

    def __init__(self, s: int = 1):
        self.s = _check_int("s", self.name, s, 1)
        self.level_bits = _ceil_log2(self.s + 1)

    @property
    def params(self):
        return {"s": self.s}

    @property
    def properties(self) -> Properties:
        s = self.s

        def bound(x):
            x = _f64(x)
            d = x.numel()
            return float(min(d / s**2, math.sqrt(d) / s) * x.pow(2).sum())

        return Properties(True, bound, "Lemma 3.1: min(d/s^2, sqrt(d)/s) ||x||^2, an upper bound")

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        norm = torch.linalg.vector_norm(x)
        u = (x.abs() / _safe(norm)).clamp(0, 1) * self.s
        k = _stochastic_round(u, self.s, rng)
        parts = {"signs": pack_bits(x >= 0), "levels": pack_uint(k, self.level_bits), "norm": norm}
        return Message(parts, self._meta(x.shape[-1]))

    def decode(self, message):
        d = message.meta["d"]
        k = unpack_uint(message["levels"], d, self.level_bits).to(torch.float32)
        mag = message["norm"].to(torch.float32) * (k / self.s)
        return _signed(unpack_bits(message["signs"], d), mag)


class FedPAQ(QSGD):
    """FedPAQ's low-precision quantizer at ``bits`` bits per entry (Reisizadeh et al. 2020).

    Definition chosen: FedPAQ's "low-precision quantizer" (its Example 1) is QSGD's Q_s, which is
    also what its analysis assumes (unbiased, variance <= q ||x||^2 with q = min(d/s^2, sqrt(d)/s)).
    FedBAT (App. B.1, Table 5) reports "FedPAQ [3-bit]" and "[4-bit]" without giving s, so we map
    ``bits`` b to the largest s whose sign + level fit in b bits per entry: one sign bit and a level
    in {0..s} at b - 1 bits, i.e. ``s = 2^(b-1) - 1`` (b = 3: s = 3; b = 4: s = 7). Signed values then
    take 2s + 1 = 2^b - 1 of the 2^b codes, so no larger s fits in b bits. Cost:
    ``32 + 8 ceil(d/8) + 8 ceil(d (b-1)/8)`` bits, i.e. b bits per entry plus the fp32 norm.

    A uniform quantizer over [min, max] with 2^b levels would also be "b-bit", but it is not the
    quantizer FedPAQ defines or analyses, so it is not used.
    """

    name = "fedpaq"

    def __init__(self, bits: int = 3):
        self.bits = _check_int("bits", self.name, bits, 2, 32)
        super().__init__(s=2 ** (self.bits - 1) - 1)

    @property
    def params(self):
        return {"bits": self.bits}


# --------------------------------------------------------------------------------------------------
# Sign-based operators (FedBAT Section 2 baselines) and FedBAT's binarization


class Sign(Operator):
    """SignSGD's fixed-step sign (FedBAT Eq. 3): ``C(x) = alpha sign(x)``, 1 bit per entry.

    ``alpha`` is a fixed hyperparameter and is not sent (FedBAT tuned alpha = 0.001 for all datasets,
    the default). sign(0) = +1. Biased; ``variance_bound`` is the exact (deterministic) error
    ``||alpha sign(x) - x||^2``. Bits: ``8 ceil(d/8)``.
    """

    name = "sign"
    needs_rng = False

    def __init__(self, alpha: float = 0.001):
        self.alpha = _check_positive("alpha", self.name, alpha)

    @property
    def params(self):
        return {"alpha": self.alpha}

    @property
    def properties(self) -> Properties:
        alpha = self.alpha

        def exact(x):
            x = _f64(x)
            return float((alpha * torch.where(x >= 0, 1.0, -1.0) - x).pow(2).sum())

        return Properties(False, exact, "biased; variance_bound is the exact deterministic error")

    def encode(self, x, rng=None):
        x = _vec(x)
        return Message({"signs": pack_bits(x >= 0)}, self._meta(x.shape[-1]))

    def decode(self, message):
        d = message.meta["d"]
        signs = message["signs"]
        return _signed(unpack_bits(signs, d), torch.full((d,), self.alpha, device=signs.device))


class ScaledSign(Operator):
    """EF-SignSGD's scaled sign (Karimireddy et al. 2019; FedBAT Section 2): ``C(x) = (||x||_1/d) sign(x)``.

    Sends the scale ||x||_1/d (fp32) and one sign bit per entry: ``8 ceil(d/8) + 32`` bits. Biased.
    It is a delta-contraction: ``||C(x) - x||^2 = ||x||^2 - ||x||_1^2/d = (1 - delta(x)) ||x||^2`` with
    ``delta(x) = ||x||_1^2 / (d ||x||_2^2) >= 1/d``; ``variance_bound`` returns this exact value.
    """

    name = "scaled_sign"
    needs_rng = False

    @property
    def properties(self) -> Properties:
        def exact(x):
            x = _f64(x)
            d = x.numel()
            return 0.0 if d == 0 else float(x.pow(2).sum() - x.abs().sum() ** 2 / d)

        return Properties(False, exact, "biased; exact error ||x||^2 - ||x||_1^2/d (a delta-contraction)")

    def encode(self, x, rng=None):
        x = _vec(x)
        d = x.shape[-1]
        scale = x.abs().sum() / max(d, 1)
        return Message({"signs": pack_bits(x >= 0), "scale": scale}, self._meta(d))

    def decode(self, message):
        d = message.meta["d"]
        scale = message["scale"].to(torch.float32).expand(d)
        return _signed(unpack_bits(message["signs"], d), scale)


class NoisySign(Operator):
    """Noisy-SignSGD (Chen et al. 2020, as in FedBAT Section 2): ``C(x) = alpha sign(x + N(0, sigma^2 I))``.

    Defaults alpha = 0.01, sigma = 0.01 (FedBAT's tuned values); alpha is static, not sent.
    Bits: ``8 ceil(d/8)``. Biased. Since ``E sign(x_i + n_i) = erf(x_i / (sigma sqrt 2))``,
    ``E||C(x) - x||^2 = d alpha^2 - 2 alpha sum_i x_i erf(x_i/(sigma sqrt 2)) + ||x||^2`` exactly,
    which ``variance_bound`` returns. sigma = 0 gives ``sign``.
    """

    name = "noisy_sign"

    def __init__(self, alpha: float = 0.01, sigma: float = 0.01):
        self.alpha = _check_positive("alpha", self.name, alpha)
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) \
                or sigma < 0:
            raise ValueError(f"{self.name}: sigma must be a finite number >= 0, got {sigma!r}")
        self.sigma = float(sigma)

    @property
    def params(self):
        return {"alpha": self.alpha, "sigma": self.sigma}

    @property
    def properties(self) -> Properties:
        alpha, sigma = self.alpha, self.sigma

        def exact(x):
            x = _f64(x)
            if sigma > 0:
                mean_sign = torch.special.erf(x / (sigma * math.sqrt(2.0)))
            else:
                mean_sign = torch.where(x >= 0, 1.0, -1.0).to(torch.float64)
            return float((alpha**2 - 2 * alpha * x * mean_sign + x * x).sum())

        return Properties(False, exact, "biased; variance_bound is the exact E||C(x)-x||^2")

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        noisy = x + self.sigma * _normal(rng, d, x)
        return Message({"signs": pack_bits(noisy >= 0)}, self._meta(d))

    def decode(self, message):
        d = message.meta["d"]
        signs = message["signs"]
        return _signed(unpack_bits(signs, d), torch.full((d,), self.alpha, device=signs.device))


class StochasticSign(Operator):
    """Stoc-SignSGD (Safaryan & Richtarik 2021) in FedBAT's variant (FedBAT Section 2).

    Entry i becomes ``+alpha`` w.p. ``1/2 + x_i/(2||x||)`` and ``-alpha`` otherwise, with
    ``||x|| = ||x||_inf`` (``norm="inf"``, FedBAT's modification: with the l2 norm both probabilities
    are about 1/2) or ``||x||_2`` (``norm="l2"``, the original). ``alpha`` is a fixed step (FedBAT:
    0.01), not sent: ``8 ceil(d/8)`` bits. ``alpha=None`` uses ``alpha = ||x||`` and sends it (fp32):
    ``8 ceil(d/8) + 32`` bits.

    ``E[C(x)] = (alpha/||x||) x``: unbiased iff alpha = ||x|| (``alpha=None``), otherwise the right
    direction with the wrong length. ``E||C(x) - x||^2 = d alpha^2 - 2 alpha ||x||_2^2/||x|| + ||x||_2^2``
    exactly (``variance_bound``); with alpha = ||x||_inf that is FedBAT's ``binarize(alpha=None)``.
    x = 0 gives fair coin flips (times alpha), or exactly 0 when alpha=None.
    """

    name = "stochastic_sign"

    def __init__(self, alpha: float | None = 0.01, norm: str = "inf"):
        self.alpha = _check_positive("alpha", self.name, alpha, allow_none=True)
        if norm not in ("inf", "l2"):
            raise ValueError(f"{self.name}: norm must be one of 'inf', 'l2', got {norm!r}")
        self.norm = norm

    @property
    def params(self):
        return {"alpha": self.alpha, "norm": self.norm}

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return _amax(x.abs()) if self.norm == "inf" else torch.linalg.vector_norm(x)

    @property
    def properties(self) -> Properties:
        alpha = self.alpha

        def exact(x):
            x = _f64(x)
            n = float(self._norm(x)) if x.numel() else 0.0
            step = n if alpha is None else alpha
            sq = float(x.pow(2).sum())
            return x.numel() * step**2 - (2 * step * sq / n if n > 0 else 0.0) + sq

        if alpha is None:
            return Properties(True, exact, "exact: E||C(x)-x||^2 = d ||x||^2 - ||x||_2^2")
        return Properties(False, exact, "E[C(x)] = (alpha/||x||) x: unbiased only if alpha = ||x||; "
                                        "variance_bound is the exact E||C(x)-x||^2")

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        n = self._norm(x)
        p = 0.5 + x / (2 * _safe(n))
        parts = {"signs": pack_bits(_uniform(rng, d, x) < p)}
        if self.alpha is None:
            parts["scale"] = n
        return Message(parts, self._meta(d))

    def decode(self, message):
        d = message.meta["d"]
        step = message["scale"].to(torch.float32).expand(d) if self.alpha is None \
            else torch.full((d,), self.alpha, device=message["signs"].device)
        return _signed(unpack_bits(message["signs"], d), step)


def binary_code(x: torch.Tensor, alpha: torch.Tensor, zeta: torch.Tensor) -> torch.Tensor:
    """FedBAT's binarization S(x, alpha) = alpha c (Eqs. 6-7) as its code c in {-1, +1}: the clip outside
    [-alpha, alpha]; inside, c = 2 floor((alpha + x)/(2 alpha) + zeta) - 1, i.e. +1 w.p. (alpha + x)/(2 alpha),
    for zeta ~ U(0, 1). ``alpha`` is a scalar or broadcasts against ``x``; alpha = 0 gives S = 0 (x = 0).
    No gradient (``algorithms.fedbat.binarize_ste`` adds the straight-through ones). This one function
    makes the bits of FedBAT's uplink and of the ``binarize`` operator the theory checks."""
    x, alpha, zeta = x.detach(), torch.as_tensor(alpha).detach(), zeta.detach()
    inside = x.abs() <= alpha
    b = torch.floor((alpha + x) / (2 * _safe(alpha)) + zeta).clamp(0, 1)
    outside = torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))
    return torch.where(inside, 2 * b - 1, outside)


class Binarize(Operator):
    """FedBAT's stochastic binarization S(x, alpha) (Eqs. 6-7), the operator FedBAT's uplink sends with.

    ``S(x_i) = alpha`` if x_i > alpha, ``-alpha`` if x_i < -alpha, and for |x_i| <= alpha
    ``+alpha`` w.p. ``(alpha + x_i)/(2 alpha)``, ``-alpha`` otherwise (Eq. 7: the bit is
    ``floor((alpha + x)/(2 alpha) + zeta)`` with zeta ~ U(0,1); :func:`binary_code`, which
    ``algorithms.fedbat`` applies per layer with its learned or inf-norm alpha). ``alpha=None`` means
    ``alpha = ||x||_inf`` (the theory variant, Sec. 1.5 / App. C.1), which makes S unbiased; x = 0 then
    has alpha = 0 and S(0) := 0. Sends one bit per entry and alpha (fp32): ``8 ceil(d/8) + 32`` bits.

    For alpha >= ||x||_inf: unbiased and ``E||S(x) - x||^2 = d alpha^2 - ||x||_2^2`` (<= (d-1)||x||^2
    for alpha = ||x||_inf, equality for 1-sparse x). For alpha < ||x||_inf: E[S(x)] = clip(x, -alpha,
    alpha) (biased). ``variance_bound`` returns the exact error in both regimes:
    ``sum_{|x_i|<=alpha} (alpha^2 - x_i^2) + sum_{|x_i|>alpha} (|x_i| - alpha)^2``.
    """

    name = "binarize"

    def __init__(self, alpha: float | None = None):
        self.alpha = _check_positive("alpha", self.name, alpha, allow_none=True)

    @property
    def params(self):
        return {"alpha": self.alpha}

    @property
    def properties(self) -> Properties:
        fixed = self.alpha

        def exact(x):
            a = _f64(x).abs()
            if a.numel() == 0:
                return 0.0
            alpha = float(a.max()) if fixed is None else fixed
            inside = a <= alpha
            return float(torch.where(inside, alpha**2 - a * a, (a - alpha) ** 2).sum())

        if fixed is None:
            return Properties(True, exact, "alpha = ||x||_inf: exact d ||x||_inf^2 - ||x||^2")
        return Properties(False, exact, "unbiased iff alpha >= ||x||_inf (then E||S(x)-x||^2 = "
                                        "d alpha^2 - ||x||^2); else E[S(x)] = clip(x, -alpha, alpha)")

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        alpha = _amax(x.abs()) if self.alpha is None else torch.tensor(self.alpha, device=x.device)
        return self.encode_with(x, alpha, _uniform(rng, d, x))

    def encode_with(self, x: torch.Tensor, alpha: torch.Tensor, zeta: torch.Tensor) -> Message:
        """The message of S(x, alpha) for the noise ``zeta`` (d uniforms): packed bits and alpha (fp32)."""
        bits = binary_code(x, alpha, zeta) > 0
        return Message({"signs": pack_bits(bits), "alpha": torch.as_tensor(alpha).to(torch.float32)},
                       self._meta(x.shape[-1]))

    def decode(self, message):
        d = message.meta["d"]
        alpha = message["alpha"].to(torch.float32).expand(d)
        return _signed(unpack_bits(message["signs"], d), alpha)


# --------------------------------------------------------------------------------------------------
# Sparsifiers


class _Sparsifier(Operator):
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

    def encode(self, x, rng=None):
        x = _vec(x)
        d = x.shape[-1]
        idx = torch.topk(x.abs(), self.k_for(d)).indices
        return self._message(torch.gather(x, 0, idx), idx, d)


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

    def encode(self, x, rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        k = self.k_for(d)
        idx = torch.topk(_uniform(rng, d, x), k).indices
        values = torch.gather(x, 0, idx)
        if self.scale and k > 0:
            values = values * (d / k)
        return self._message(values, idx, d)


# --------------------------------------------------------------------------------------------------
# Error feedback


def error_feedback_step(encode: Callable, decode: Callable, x: torch.Tensor, residual: torch.Tensor | None,
                        rng: Any = None) -> tuple[Message, torch.Tensor]:
    """One step of error feedback (Karimireddy et al. 2019; LFL Eq. 3), the one EF code: ``p = x + e``; the
    message is ``encode(p, rng)``; the new residual is ``e' = p - decode(message)`` (e = 0 when None).
    ``ErrorFeedback`` and the ``algorithms.compress.error_feedback`` transform both step with it."""
    x = x.to(torch.float32)
    residual = torch.zeros_like(x) if residual is None else residual
    p = x + residual.to(torch.float32)
    message = encode(p, rng)
    return message, p - decode(message)


class ErrorFeedback(Operator):
    """Error feedback around any operator (Karimireddy et al. 2019, EF-SignSGD Algorithm 1; also
    LFL's uplink, Eq. 3): ``p = x + e``; send ``C(p)``; ``e' = p - decode(C(p))``.

    EF is stateful, so the step is functional: ``ef_encode(x, residual, rng) -> (message,
    new_residual)``, starting from ``init_residual(d)`` (zeros); it is one step of the
    ``algorithms.compress.error_feedback`` transform, which wraps any operator. ``encode``/``decode`` are the inner
    operator's (``encode(x)`` = ``ef_encode(x, 0)``'s message). Messages and bits are the inner
    operator's. ``get("ef")`` wraps ``scaled_sign``, i.e. EF-SignSGD's compressor.
    """

    name = "ef"

    def __init__(self, inner: "str | Operator" = "scaled_sign", **inner_params: Any):
        if isinstance(inner, Operator):
            if inner_params:
                raise ValueError(f"ef: parameters {sorted(inner_params)} given with an operator instance; "
                                 "pass them to get() of the inner operator")
            self.inner = inner
        elif isinstance(inner, str):
            self.inner = get(inner, **inner_params)
        else:
            raise ValueError(f"ef: inner must be an operator name or Operator, got {inner!r}; "
                             f"valid names: {', '.join(names())}")
        if isinstance(self.inner, ErrorFeedback):
            raise ValueError("ef: the inner operator cannot itself be 'ef'")

    @property
    def params(self):
        return {"inner": self.inner.name, **self.inner.params}

    @property
    def properties(self) -> Properties:
        return Properties(False, None, f"stateful error feedback around {self.inner!r}; each message "
                                       "is the inner operator applied to x + residual")

    def init_residual(self, d: int, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.zeros(d, dtype=torch.float32, device=device)

    @property
    def needs_rng(self) -> bool:
        return self.inner.needs_rng

    def ef_encode(self, x: torch.Tensor, residual: torch.Tensor, rng: Any = None
                  ) -> tuple[Message, torch.Tensor]:
        """One step of error feedback around the inner operator (``error_feedback_step``, the one EF code)."""
        return error_feedback_step(self.inner.encode, self.inner.decode, _vec(x), residual, rng)

    def encode(self, x, rng=None):
        return self.inner.encode(x, rng)

    def decode(self, message):
        return self.inner.decode(message)

    def __repr__(self) -> str:
        return f"ef({self.inner!r})"


# --------------------------------------------------------------------------------------------------
# Registry

_OPERATORS: dict[str, type[Operator]] = {
    cls.name: cls
    for cls in (Identity, LFL, QSGD, FedPAQ, Sign, ScaledSign, NoisySign, StochasticSign, Binarize,
                TopK, RandK, ErrorFeedback)
}


def names() -> list[str]:
    """The registered operator names."""
    return sorted(_OPERATORS)


def get(name: str, **params: Any) -> Operator:
    """Build operator ``name`` with ``params``; ValueError (naming the valid choices) otherwise."""
    try:
        cls = _OPERATORS[name]
    except (KeyError, TypeError):
        import difflib

        close = difflib.get_close_matches(str(name), _OPERATORS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown compression operator {name!r}.{hint} Valid: {', '.join(names())}") from None
    sig = inspect.signature(cls.__init__).parameters.values()
    var = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    valid = [p.name for p in sig if p.name != "self" and p.kind not in var]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig)
    unknown = sorted(set(params) - set(valid))
    if unknown and not takes_any:
        raise ValueError(f"{name}: unknown parameter(s) {unknown}; valid parameters: "
                         f"{', '.join(valid) or 'none'}")
    return cls(**params)
