"""Claims of QSGD (Alistarh et al., NeurIPS 2017), Lemma 3.1: the stochastic quantizer Q_s is unbiased and its
variance is at most min(d/s^2, sqrt(d)/s) ||x||^2, checked by Monte Carlo on the project's ``qsgd`` operator
(``algorithms/compress/``) with the shared drivers of ``theory.operator_checks``.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from algorithms import compress as C
from theory.claims import PAPER_CLAIM, CheckContext, Outcome, claim, hypothesis
from theory.operator_checks import (
    equal_magnitudes,
    gaussian,
    outliers,
    resolution,
    sizes,
    unbiased_outcome,
    variance_outcome,
    wrapped,
)

_QSGD_D = 256
_QSGD_SS = (1, 4, 16)


def _qsgd_configs(ctx: CheckContext, wrap: Callable | None = None):
    d = _QSGD_D
    out = []
    for s in _QSGD_SS:
        op = wrapped(C.get("qsgd", s=s), wrap)
        for xname, x in (("gaussian", gaussian(d, ctx.seed)), ("outliers", outliers(d, ctx.seed, frac=0.02)),
                         ("equal_magnitudes", equal_magnitudes(d, ctx.seed))):
            out.append((f"s{s}_{xname}", op, x))
    return out


def _qsgd_sizes(ctx):
    return sizes(ctx, full=30000, quick=3000)


def qsgd_bound(x: torch.Tensor, s: int) -> float:
    x = x.double()
    d = x.numel()
    return min(d / s ** 2, math.sqrt(d) / s) * float((x ** 2).sum())


def qsgd_exact_variance(x: torch.Tensor, s: int) -> float:
    """(||x||^2/s^2) sum_i p_i (1 - p_i), p_i = frac(s |x_i| / ||x||)."""
    x = x.double()
    nrm = float(torch.linalg.vector_norm(x))
    if nrm == 0:
        return 0.0
    u = s * x.abs() / nrm
    p = u - torch.floor(u)
    return float(nrm * nrm / (s * s) * (p * (1 - p)).sum())


@claim("qsgd.lemma3_1.unbiased", "qsgd", "Lemma 3.1 (i), quantizer Q_s of Section 3.1",
       "E[Q_s(x)] = x, where Q_s(x)_i = ||x||_2 sign(x_i) xi_i(x, s) and xi_i rounds |x_i|/||x||_2 "
       "stochastically to a neighbour in {0, 1/s, ..., 1} (P(up) = s |x_i|/||x||_2 - l)", kind=PAPER_CLAIM, json_safe=True)
def _qsgd_unbiased(ctx: CheckContext) -> Outcome:
    return qsgd_unbiased(ctx)


def lemma31_hypotheses() -> list:
    """Lemma 3.1's hypotheses in these draws: Q_s of Sec. 3.1, x != 0, s >= 1."""
    return [hypothesis("Q_s(x) as stated: ||x||_2 sign(x_i) xi_i(x, s), stochastic rounding to s + 1 levels",
                       "Sec. 3.1", True, "the project's qsgd operator"),
            hypothesis("x in R^d, x != 0, s >= 1", "Lemma 3.1", min(_QSGD_SS) >= 1, f"d = {_QSGD_D}, s in {_QSGD_SS}")]


def qsgd_unbiased(ctx: CheckContext, wrap: Callable | None = None) -> Outcome:
    return unbiased_outcome(ctx, _qsgd_configs(ctx, wrap), "qsgd", _qsgd_sizes(ctx), resolution(ctx),
                           f"d = {_QSGD_D}; s in {_QSGD_SS}; x Gaussian, Gaussian with 2% of entries x10, and "
                           "equal magnitudes (+-1)", lemma31_hypotheses())


@claim("qsgd.lemma3_1.variance", "qsgd", "Lemma 3.1 (ii)",
       "E||Q_s(x) - x||_2^2 <= min(d/s^2, sqrt(d)/s) ||x||_2^2", kind=PAPER_CLAIM, json_safe=True)
def _qsgd_variance(ctx: CheckContext) -> Outcome:
    return qsgd_variance(ctx)


def qsgd_variance(ctx: CheckContext, wrap: Callable | None = None) -> Outcome:
    cfgs = [(name, op, x, qsgd_bound(x, q), qsgd_exact_variance(x, q))
            for (name, op, x), q in zip(_qsgd_configs(ctx, wrap), [q for q in _QSGD_SS for _ in range(3)])]
    return variance_outcome(ctx, cfgs, "qsgd", _qsgd_sizes(ctx),
                           f"d = {_QSGD_D}; s in {_QSGD_SS}; same vectors and draws as qsgd.lemma3_1.unbiased "
                           "(equal magnitudes with s = 1: E||Q - x||^2 = (1 - 1/sqrt(d)) x bound)", lemma31_hypotheses())
