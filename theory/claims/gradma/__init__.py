"""GradMA (Luo et al., CVPR 2023), Sec. 5: Corollary 1 and Assumption 4, checked on the project's GradMA code.

Summary of the theory: ../shared/papers/gradma.md, Sec. 5. The analysis is for smooth non-convex f with
full local gradients; the only randomness is the sampling of S of the N workers. Theorem 1 bounds

    (1/T) sum_{t=0}^{T-1} E ||grad f(x_t)||^2                                            (the quantity)

and Corollary 1 sets eta_l = 1/(sqrt(T) L I), eta_g = sqrt(S/I), eps_l = T^-1/2, eps_g = I^1/4/(T^3/4 S^1/4 L)
to get O(I^1/2/(S^1/2 T^1/2) + 1/T) for T >= T_min. At fixed T the bound therefore falls like S^-1/2, not
S^-1: "linear speedup" is about the rounds needed for an eps-accuracy, T(eps) ~ I/(S eps^2), i.e. slope -1
of T(eps) in S. The checks here run the toy T-QUAD of gradma.md 5.5 (``problems.quadratic``: every worker has
the same Hessian, so A3 holds globally with rho^2 = max_i ||grad f_i(x*)||^2, and A2 holds with L exactly),
full local gradients (batch_size=None), and the Corollary's step sizes, through ``benchmark.sim.engine`` (via
``theory.runs``: the benchmark's own run path with observers; the worker-side QP_l corrections come from
the algorithm's ``qp_l`` diagnostic).

Corollary 1 is checked at T >= T_min (the printed and the re-derived threshold). T_min grows like
(N - S)^2 / ((1 - beta1)^4 S I): with beta1 = 0.5 (the public code's value) and S = 2 of N = 8 it is 19,894
rounds, with beta1 = 0 (the Corollary holds for every beta1 in [0, 1)) and S >= 4 it is 775, so the
Corollary checks use beta1 = 0 and S in {4, 6, 8} (speedup) or S = 6 (local steps).

Sections: ``setup`` (the printed conditions and thresholds, T-QUAD, the runs, QP_l along a run), ``corollary1``
(the rates in S and I), ``assumption4`` (A4 with eps_l = T^-1/2 on T-QUAD and on real training).
"""
from __future__ import annotations

from theory.claims.gradma.assumption4 import TAU1_REASON, eps_l_rate, projection_real
from theory.claims.gradma.corollary1 import corollary_hypotheses, local_steps_i, rate_outcome, speedup_s
from theory.claims.gradma.setup import (
    _corollary_run,
    _tquad,
    corollary1_eps_g,
    corollary1_steps,
    corollary1_tmin,
    has_worker_qp,
    projection_stats,
    quad_hessian,
    rho_sq,
    theorem1_conditions,
)

__all__ = ["TAU1_REASON", "_corollary_run", "_tquad", "corollary1_eps_g", "corollary1_steps", "corollary1_tmin",
           "corollary_hypotheses", "eps_l_rate", "has_worker_qp", "local_steps_i", "projection_real",
           "projection_stats", "quad_hessian", "rate_outcome", "rho_sq", "speedup_s", "theorem1_conditions"]
