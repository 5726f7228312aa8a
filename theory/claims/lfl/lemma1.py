"""LFL (Amiri et al., arXiv 2006.10672v2), Lemma 1: the quantizer Q(x, q) of Eqs. (17)-(19) is unbiased and its
variance is at most eps d ||x||^2 / (4 q^2), checked by Monte Carlo on the project's ``lfl`` operator
(``algorithms/compress/``) with the shared drivers of ``theory.operator_checks``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from algorithms import compress as C
from theory.claims import PAPER_CLAIM, CheckContext, Outcome, claim, hypothesis
from theory.operator_checks import (
    gaussian,
    outliers,
    resolution,
    rng_for,
    sizes,
    t32,
    unbiased_outcome,
    variance_outcome,
    wrapped,
)


def _lfl_near_tight(d: int, q: int, seed: int, frac: float = 0.45) -> torch.Tensor:
    """|x_i| = x_min + (x_max - x_min)(k_i + frac)/q (so p_i = frac for all but the two endpoints),
    random signs; x_min = 0.5, x_max = 2.5. Then E||Q - x||^2 = 4 frac (1 - frac) (d - 2)/d x bound."""
    g = rng_for(seed, f"near_tight{q}")
    lo, hi = 0.5, 2.5
    mags = lo + (hi - lo) * (g.integers(0, q, d) + frac) / q
    mags[0], mags[1] = lo, hi
    return t32(mags * np.where(g.random(d) < 0.5, -1.0, 1.0))


_LFL_D = 1000
_LFL_QS = (2, 5)


def _lfl_configs(ctx: CheckContext, wrap: Callable | None = None):
    d = _LFL_D
    out = []
    for q in _LFL_QS:
        op = wrapped(C.get("lfl", q=q), wrap)
        for xname, x in (("gaussian", gaussian(d, ctx.seed)), ("outliers", outliers(d, ctx.seed)),
                         ("near_tight", _lfl_near_tight(d, q, ctx.seed))):
            out.append((f"q{q}_{xname}", op, x))
    return out


def _lfl_sizes(ctx):
    return sizes(ctx, full=8000, quick=1000)


def lfl_bound(x: torch.Tensor, q: int) -> float:
    """Lemma 1 (1b) with unbiasedness: eps d ||x||^2 / (4 q^2), eps = (max|x| - min|x|)^2 / ||x||^2."""
    a = x.double().abs()
    sq = float((a ** 2).sum())
    if sq == 0:
        return 0.0
    eps = float(a.max() - a.min()) ** 2 / sq
    return eps * a.numel() * sq / (4 * q * q)


def lfl_exact_variance(x: torch.Tensor, q: int) -> float:
    """(r^2/q^2) sum_i p_i (1 - p_i), r = x_max - x_min, p_i = frac(q (|x_i| - x_min)/r) (lfl.md 1.3)."""
    a = x.double().abs()
    r = float(a.max() - a.min())
    if r == 0:
        return 0.0
    u = q * (a - a.min()) / r
    p = u - torch.floor(u)
    return float(r * r / (q * q) * (p * (1 - p)).sum())


@claim("lfl.lemma1.unbiased", "lfl", "Lemma 1, Eq. (1b) (proof Eq. 23a); quantizer Eqs. (17)-(19)",
       "E_phi[Q(x, q)] = x for every x in R^d, where Q(x_i, q) = sign(x_i) (x_min + (x_max - x_min) "
       "phi((|x_i| - x_min)/(x_max - x_min), q)), x_max = max_i |x_i|, x_min = min_i |x_i|, and phi(., q) "
       "rounds stochastically to the neighbouring levels in {0, 1/q, ..., 1} with P(up) = x q - l (18b)", kind=PAPER_CLAIM, json_safe=True)
def _lfl_unbiased(ctx: CheckContext) -> Outcome:
    return lfl_unbiased(ctx)


def lemma1_hypotheses() -> list:
    """Lemma 1's hypotheses in these draws: the quantizer of Eqs. (17)-(19), any x in R^d, q >= 1 levels."""
    return [hypothesis("Q(x, q) as stated: range-normalised, q + 1 levels, stochastic rounding (18b)",
                       "Eqs. (17)-(19)", True, "the project's lfl quantizer, the one the algorithm sends"),
            hypothesis("x in R^d, q >= 1", "Lemma 1", min(_LFL_QS) >= 1, f"d = {_LFL_D}, q in {_LFL_QS}")]


def lfl_unbiased(ctx: CheckContext, wrap: Callable | None = None) -> Outcome:
    return unbiased_outcome(ctx, _lfl_configs(ctx, wrap), "lfl", _lfl_sizes(ctx), resolution(ctx),
                           f"d = {_LFL_D}; q in {_LFL_QS}; x Gaussian, Gaussian with 1% of entries x10 "
                           "(outliers), and magnitudes at (k + 0.45)/q of the range (near-tight)", lemma1_hypotheses())


@claim("lfl.lemma1.variance", "lfl", "Lemma 1, Eq. (1b) (proof Eq. 23b)",
       "E||Q(x, q)||^2 <= ||x||^2 + eps d ||x||^2 / (4 q^2), eps = (max|x| - min|x|)^2 / ||x||^2; with "
       "E[Q(x, q)] = x this is E||Q(x, q) - x||^2 <= eps d ||x||^2 / (4 q^2) = d (x_max - x_min)^2 / (4 q^2)", kind=PAPER_CLAIM, json_safe=True)
def _lfl_variance(ctx: CheckContext) -> Outcome:
    return lfl_variance(ctx)


def lfl_variance(ctx: CheckContext, wrap: Callable | None = None) -> Outcome:
    cfgs = [(name, op, x, lfl_bound(x, q), lfl_exact_variance(x, q))
            for (name, op, x), q in zip(_lfl_configs(ctx, wrap), [q for q in _LFL_QS for _ in range(3)])]
    return variance_outcome(ctx, cfgs, "lfl", _lfl_sizes(ctx),
                           f"d = {_LFL_D}; q in {_LFL_QS}; same vectors and draws as lfl.lemma1.unbiased (the "
                           "near-tight vectors have E||Q - x||^2 = 0.988 x bound)", lemma1_hypotheses())
