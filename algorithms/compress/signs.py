"""Sign-based operators (FedBAT Section 2's baselines) and FedBAT's stochastic binarization: ``sign`` (SignSGD's
fixed step), ``scaled_sign`` (EF-SignSGD's ||x||_1/d), ``noisy_sign`` (Noisy-SignSGD), ``stochastic_sign``
(Stoc-SignSGD), ``binarize`` (FedBAT Eqs. 6-7, ``binary_code``). Each is a stateless ``Transform``; wherever a
sign is sent, sign(0) = +1 (the bit is ``x >= 0``). Bits per operator: ``compress.registry``.
"""
from __future__ import annotations

import math

import torch

from ..core import Message, as_rng
from .registry import register_operator
from .packing import pack_bits, unpack_bits
from .transform import (Properties, Transform, _amax, _check_positive, _f64, _normal, _safe,
                        _signed, _uniform, _vec)


@register_operator
class Sign(Transform):
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

    def encode(self, x, state=(), rng=None):
        x = _vec(x)
        return Message({"signs": pack_bits(x >= 0)}, self._meta(x.shape[-1])), state

    def decode(self, message):
        d = message.meta["d"]
        signs = message["signs"]
        return _signed(unpack_bits(signs, d), torch.full((d,), self.alpha, device=signs.device))


@register_operator
class ScaledSign(Transform):
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

    def encode(self, x, state=(), rng=None):
        x = _vec(x)
        d = x.shape[-1]
        scale = x.abs().sum() / max(d, 1)
        return Message({"signs": pack_bits(x >= 0), "scale": scale}, self._meta(d)), state

    def decode(self, message):
        d = message.meta["d"]
        scale = message["scale"].to(torch.float32).expand(d)
        return _signed(unpack_bits(message["signs"], d), scale)


@register_operator
class NoisySign(Transform):
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

    def encode(self, x, state=(), rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        noisy = x + self.sigma * _normal(rng, d, x)
        return Message({"signs": pack_bits(noisy >= 0)}, self._meta(d)), state

    def decode(self, message):
        d = message.meta["d"]
        signs = message["signs"]
        return _signed(unpack_bits(signs, d), torch.full((d,), self.alpha, device=signs.device))


@register_operator
class StochasticSign(Transform):
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

    def encode(self, x, state=(), rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        n = self._norm(x)
        p = 0.5 + x / (2 * _safe(n))
        parts = {"signs": pack_bits(_uniform(rng, d, x) < p)}
        if self.alpha is None:
            parts["scale"] = n
        return Message(parts, self._meta(d)), state

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


@register_operator
class Binarize(Transform):
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

    def encode(self, x, state=(), rng=None):
        x, rng = _vec(x), as_rng(rng)
        d = x.shape[-1]
        alpha = _amax(x.abs()) if self.alpha is None else torch.tensor(self.alpha, device=x.device)
        return self.encode_with(x, alpha, _uniform(rng, d, x)), state

    def encode_with(self, x: torch.Tensor, alpha: torch.Tensor, zeta: torch.Tensor) -> Message:
        """The message of S(x, alpha) for the noise ``zeta`` (d uniforms): packed bits and alpha (fp32)."""
        bits = binary_code(x, alpha, zeta) > 0
        return Message({"signs": pack_bits(bits), "alpha": torch.as_tensor(alpha).to(torch.float32)},
                       self._meta(x.shape[-1]))

    def decode(self, message):
        d = message.meta["d"]
        alpha = message["alpha"].to(torch.float32).expand(d)
        return _signed(unpack_bits(message["signs"], d), alpha)
