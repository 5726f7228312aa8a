"""Shared drivers of the compression operators' Monte-Carlo claims (LFL's Q, QSGD's Q_s, FedBAT's S):
the test vectors, the sizes and required resolution per mode, and the two claim shapes over a list of
configurations (operator, input vector):

* :func:`unbiased_outcome`: E[C(x)] = x on every configuration (``theory.montecarlo.unbiasedness_test``), HOLDS
  when none rejects and every test can see a relative bias of :func:`resolution` (eps_99);
* :func:`variance_outcome`: E||C(x) - x||^2 below the paper's bound and equal to the operator's exact variance.

Every claim splits its false-alarm rate (``theory.montecarlo.ALPHA`` = 1e-3) over its configurations
(Bonferroni). Each input vector is drawn from a generator keyed by (ctx seed, name) (:func:`rng_for`).
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from algorithms import compress as C
from theory.montecarlo import (
    ALPHA,
    lattice_spacing,
    monte_carlo,
    unbiasedness_test,
    variance_bound_test,
    variance_identity_test,
)
from theory.outcome import INCONCLUSIVE, VIOLATED, CheckContext, Outcome
from theory.verdicts import combine


def resolution(ctx: CheckContext) -> float:
    """The relative bias an unbiasedness check must be able to detect (eps_99) for HOLDS."""
    return 0.10 if ctx.quick else 0.03


def sizes(ctx: CheckContext, full: int, quick: int, rows_full: int = 1000, rows_quick: int = 500):
    """(n, batch) for this mode: n draws in batches so that there are about ``rows`` rows."""
    n, rows = (quick, rows_quick) if ctx.quick else (full, rows_full)
    batch = max(1, n // rows)
    return batch * (n // batch), batch


def wrapped(op: C.Transform, wrap: Callable | None) -> C.Transform:
    """``wrap(op)`` when given: tests plant defects (a bias, extra variance) in the operator under test."""
    return op if wrap is None else wrap(op)


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def t32(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float32))


def gaussian(d: int, seed: int, name: str = "gaussian") -> torch.Tensor:
    return t32(rng_for(seed, name).standard_normal(d))


def outliers(d: int, seed: int, factor: float = 10.0, frac: float = 0.01) -> torch.Tensor:
    """Gaussian with a fraction ``frac`` (at least 1) of the entries multiplied by ``factor``."""
    g = rng_for(seed, "outliers")
    x = g.standard_normal(d)
    idx = g.choice(d, max(1, round(frac * d)), replace=False)
    x[idx] *= factor
    return t32(x)


def equal_magnitudes(d: int, seed: int) -> torch.Tensor:
    g = rng_for(seed, "equal")
    return t32(np.where(g.random(d) < 0.5, -1.0, 1.0))


def unbiased_outcome(ctx: CheckContext, configs: list[tuple[str, C.Transform, torch.Tensor]], stream: str,
                     sizes: tuple[int, int], resolution: float, conditions: str, hypotheses: list = ()) -> Outcome:
    """``hypotheses``: the lemma's hypotheses in these draws (``theory.outcome.Hypothesis``)."""
    n, batch = sizes
    a = ALPHA / len(configs)
    ev: dict[str, Any] = {"alpha_per_config": a, "resolution_required": resolution}
    parts, epss, ps = [], [], []
    for name, op, x in configs:
        mc = monte_carlo(op, x, n, seed=ctx.seed, stream=f"{stream}:{name}", batch=batch)
        x64 = x.double().numpy()
        r = unbiasedness_test(mc, x64, lattice_spacing(op, x), alpha=a)
        eps = r["resolution"]["eps_99"]
        parts.append((r["passed"], eps <= resolution))
        epss.append(eps)
        ps.append(r["p_value"])
        ev[name] = {"operator": repr(op), "d": int(x.numel()), "seconds": mc.seconds, **r}
    verdict = combine(parts)
    key = f"min p = {min(ps):.2g} over {len(configs)} configurations; eps_99 <= {max(epss):.2%}"
    return Outcome(verdict, key, ev, conditions + f"; {n} draws per configuration in batches of {batch}; "
                   f"HOLDS needs no rejection and a relative bias of {resolution:.0%} on the random "
                   "coordinates detectable with probability 0.99 (eps_99)", hypotheses=list(hypotheses))


def variance_outcome(ctx: CheckContext, configs: list[tuple[str, C.Transform, torch.Tensor, float, float]],
                     stream: str, sizes: tuple[int, int], conditions: str, hypotheses: list = ()) -> Outcome:
    """configs: (name, op, x, bound, exact). Two tests per configuration, each at half the configuration's
    level: the paper's bound (``upper_bound``, rejection -> VIOLATED) and the operator's exact variance
    (``mean_equals`` against the closed form). The second makes the check informative: an operator that
    does less than the analysed one (no noise at all, e.g. the identity) passes any upper bound but not the
    identity; it then reads INCONCLUSIVE (the draws are not those of the analysed operator)."""
    n, batch = sizes
    a = ALPHA / (2 * len(configs))
    ev: dict[str, Any] = {"alpha_per_test": a}
    parts, ucbs, slacks, ident = [], [], [], []
    for name, op, x, bound, exact in configs:
        mc = monte_carlo(op, x, n, seed=ctx.seed, stream=f"{stream}:{name}", batch=batch)
        r = variance_bound_test(mc.sq_err, bound, alpha=a)
        idt = variance_identity_test(mc.sq_err, exact, alpha=a) if exact and exact > 0 else None
        parts.append((r["passed"], r["confirmed"]))
        ident.append(idt is None or idt["passed"])
        ucbs.append(r["ucb_ratio"])
        slack = bound / r["mean"] if r["mean"] > 0 else math.inf
        slacks.append(slack)
        ev[name] = {"operator": repr(op), "d": int(x.numel()), "exact_closed_form": exact,
                    "exact_over_bound": exact / bound if bound > 0 else None,
                    "mc_over_exact": r["mean"] / exact if exact and exact > 0 else None,
                    "slack_bound_over_measured": slack, **r,
                    "exact_variance_test": idt}
    verdict = combine(parts)
    if verdict != VIOLATED and not all(ident):
        verdict = INCONCLUSIVE
        ev["why_inconclusive"] = ("the measured E||C(x) - x||^2 differs from the operator's exact variance in "
                                  f"{sum(not i for i in ident)} configuration(s): the draws are not those of the "
                                  "analysed operator, so passing the bound says nothing about it")
    worst = int(np.argmax(ucbs))
    key = f"max E/bound = {max(ev[c[0]]['ratio'] for c in configs):.3f}, max UCB/bound = {max(ucbs):.3f} " \
          f"({configs[worst][0]}); min slack bound/E = {min(slacks):.3f}"
    return Outcome(verdict, key, ev, conditions + f"; {n} draws per configuration; HOLDS needs the one-sided "
                   "upper confidence bound of E||C(x)-x||^2 below the bound in every configuration, and the "
                   "measured error equal to the operator's exact variance (closed form, two-sided test)",
                   hypotheses=list(hypotheses))
