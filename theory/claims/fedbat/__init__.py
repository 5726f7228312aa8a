"""Claims of FedBAT (Li et al., ICML 2024), Section 4 and Appendices C-E: Theorems 1-3 for the theory
variant, and Remark 3 on the learned step size, checked with the project's ``fedbat`` algorithm run by
``benchmark.sim.engine`` (``papers/fedbat.md`` Sec. 5 and its recipes 4-8).

The theory variant (Sec. 4, App. C.1) is ``fedbat`` with ``phi=0`` (no warm-up) and ``alpha_mode="inf"``
(alpha_l = ||m_l||_inf at every forward pass and for the upload, so S is unbiased); local training is SGD
on the latent update m with the gradient taken at the binarized point (STE), and the step size
eta_t = 2/(mu (gamma + t)) decays over the *cumulative local step* t (t = 1, 2, ..., T = R tau), which
``theory.runs.InverseTimeSGD`` provides through the engine's optimizer slot (the round's step size comes
from ``LoopConfig.lr_schedule``).

Claims
------
* ``fedbat.theorem1.rate`` / ``fedbat.theorem1.bound``: strongly convex quadratic, full participation:
  E[F(w_T)] - F* = O(1/T), and below Eq. (15) with its printed constants.
* ``fedbat.theorem2.rate`` / ``fedbat.theorem2.bound``: the same with K < N devices sampled without
  replacement (balanced data), and Theorem 2's B.
* ``fedbat.theorem3.rate`` / ``fedbat.theorem3.bound``: a smooth non-convex problem (single-index tanh
  regression), eta = 1/(L sqrt(T)): (1/T) sum_t E||grad F(w_t)||^2 = O(1/sqrt(T)) and below Eq. (16).
* ``fedbat.operator.unbiased_in_range`` / ``fedbat.operator.biased_outside_range``: the binarization S(x, alpha)
  of Eqs. (6)-(7), by Monte Carlo.
* ``fedbat.remark3.learned_alpha_bias`` / ``fedbat.remark3.smaller_q``: the default FedBAT (learned alpha,
  phi = 0.5) along real training on digits: how biased S(m, alpha) is (the theory does not cover it), and
  whether the learned alpha gives a smaller binarization variance ratio q^2 than alpha = ||m||_inf.

Sections: ``operator`` (Eqs. 6-7), ``formulas`` (the printed constants and bounds), ``theorem12``, ``theorem3``,
``remark3``.

Constants. mu, L, Gamma come from the problem (closed form or least squares); sigma = 0 exactly because the
strongly convex and non-convex checks use full local batches (the only randomness is FedBAT's binarization,
and client sampling for K < N); q^2 = max_l d_l - 1, the smallest constant valid for every x in A5 with
alpha = ||x||_inf (E||S(x) - x||^2 = d alpha^2 - ||x||^2 <= (d - 1)||x||^2, tight for 1-sparse x); G^2 is the
recipe's plug-in, the largest mean over seeds of ||g||^2 along the runs.
"""

from __future__ import annotations

from theory.claims.fedbat.formulas import (
                                           THEORY_VARIANT,
                                           B_theorem1,
                                           B_theorem2,
                                           P_theorem3,
                                           Q_theorem3,
                                           delta_bound,
                                           gamma_of,
                                           learned_alpha_stats,
                                           q2_inf,
                                           schedule,
                                           schedule_eta,
                                           theorem3_rhs,
                                           theorem12_bound,
)
from theory.claims.fedbat.operator import fedbat_in_range, fedbat_outside
from theory.claims.fedbat.remark3 import learned_bias, smaller_q
from theory.claims.fedbat.theorem3 import t3_bound, t3_rate
from theory.claims.fedbat.theorem12 import sc_bound, sc_rate

__all__ = ["THEORY_VARIANT", "B_theorem1", "B_theorem2", "P_theorem3", "Q_theorem3", "delta_bound", "fedbat_in_range",
           "fedbat_outside", "gamma_of", "learned_alpha_stats", "learned_bias", "q2_inf", "sc_bound", "sc_rate",
           "schedule", "schedule_eta", "smaller_q", "t3_bound", "t3_rate", "theorem3_rhs", "theorem12_bound"]
