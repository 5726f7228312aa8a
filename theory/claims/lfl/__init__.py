"""Claims of LFL (Amiri, Gunduz, Kulkarni, Poor, arXiv 2006.10672v2), Section 3: Theorem 1, Corollary 1 and
the asymptotic statement of Sec. 3.2, checked with the project's own ``lfl`` algorithm run by
``benchmark.sim.engine`` (``papers/lfl.md`` Sec. 5 and its recipes 6-9).

The theory covers lossy *broadcasting* only: the uplink is lossless (``lfl`` with ``q2=None``), all M
devices take part, local training is plain SGD with eta_m^i(t) = eta(t). Every check runs exactly that.

Claims
------
* ``lfl.theorem1.bound``: the bound (11a)-(11c) on E||theta(t) - theta*||^2 holds round by round, with the
  constants mu, L, Gamma of the problem and G^2, eps measured along the runs (the recipe's plug-in).
* ``lfl.corollary1.floor``: tau = 1, constant eta: the closed form (13), round by round, and its floor.
* ``lfl.rate.tau1`` / ``lfl.rate.gamma0``: with eta(t) = alpha/(t + beta) the error is O(1/T) when
  tau = 1 or Gamma = 0 (derived in lfl.md 5.6; the paper only claims the limit 0).
* ``lfl.corollary1.bound_vanishes``: Sec. 3.2's argument that the RHS of (12) tends to 0 under
  eta(t) -> 0, evaluated in the regime tau > 1, Gamma > 0 (lfl.md 5.7: it tends to L(tau-1)Gamma/(mu tau)).
* ``lfl.corollary1.gap_vanishes_noniid``: whether the algorithm's error itself goes to 0 in that regime.
* ``lfl.lemma1.unbiased`` / ``lfl.lemma1.variance``: the quantizer Q(x, q) of Lemma 1, by Monte Carlo.

Sections: ``lemma1`` (the quantizer), ``formulas`` (Theorem 1 and Corollary 1 as printed), ``theorem1``,
``corollary1`` (the floor of (13) and the asymptotic statements), ``rates`` (the derived O(1/T) rates).

Running the algorithms (``theory.runs.run_lfl``, shared with FedBAT's claims)
-----------------------------------------------------------------------------
``theory.runs.run_lfl`` runs a problem through ``theory.runs.run_problem`` (the benchmark's ``prepare`` and
``benchmark.sim.engine.run_rounds``, observed, nothing patched) with

* the round's step size eta(t) as ``LoopConfig.lr_schedule`` (LFL's eta(t) = alpha/(t + beta), which the
  engine's multiplicative ``lr_decay`` cannot express), and FedBAT's per-local-step eta_t = 2/(mu (gamma + t))
  with ``step_decay`` (``theory.runs.InverseTimeSGD``);
* observers: the global parameters after every round, and a per-round hook with the old and new server
  states (LFL's theta(t+1) - theta_hat(t) for eps(t), Eq. 43);
* a fixed starting point theta(0) = theta* + r u_seed with a seeded random unit vector u, so that
  ||theta(0) - theta*||^2 is the same in every run while theta(0) differs: LFL keys its server-side
  quantization noise by a hash of theta(0), so equal starting points would give equal downlink noise in
  every seed (runs that are not independent).

With ``record_grads=True`` a per-step observer records ||g||^2 of every local stochastic gradient (the
engine then runs the sequential executor), for the plug-in G^2 = max over (t, m, i) of the mean over seeds
(recipe 6).
"""

from __future__ import annotations

from theory.claims.lfl.corollary1 import bound_vanishes_check, floor_check, gap_vanishes_check
from theory.claims.lfl.formulas import (
                                        bound_far,
                                        corollary1_floor,
                                        corollary1_rhs,
                                        eps_of,
                                        lr_schedule,
                                        noniid_limit,
                                        theorem1_bound,
                                        theorem1_terms,
                                        u_stats,
)
from theory.claims.lfl.lemma1 import lfl_bound, lfl_exact_variance, lfl_unbiased, lfl_variance
from theory.claims.lfl.rates import rate_gamma0, rate_tau1
from theory.claims.lfl.theorem1 import theorem1_bound_check

__all__ = ["bound_far", "bound_vanishes_check", "corollary1_floor", "corollary1_rhs", "eps_of", "floor_check",
           "gap_vanishes_check", "lfl_bound", "lfl_exact_variance", "lfl_unbiased", "lfl_variance", "lr_schedule",
           "noniid_limit", "rate_gamma0", "rate_tau1", "theorem1_bound", "theorem1_bound_check", "theorem1_terms",
           "u_stats"]
