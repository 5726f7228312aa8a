"""BHerd (Luo et al., arXiv 2403.16557v1): the herding step (Eqs. 1, 12), Proposition 1, Theorems 1-2, and the
alpha sweep of Fig. 3(a), checked on the project's bherd code (algorithms/bherd.py, algorithms/core/herding.py)
through the engine.

Summary of the theory: ../shared/papers/bherd.md, Sec. 5. The paper's analysis replaces the herded subset mean
(1/(alpha tau)) g_i by the full local mean mu_i (Eq. 12 / Prop. 1), so the bounds are FedAvg bounds with a 1/alpha;
the checks below measure how far the algorithm is from that idealisation and evaluate the printed bounds with
constants measured along the run. The stored local steps z_l (what herding orders), which rows are real and which
were kept are the algorithm's own diagnostics (``herd_steps``, ``herd_valid``, ``herd_selected``), collected by an
observer of the benchmark's run (``theory.runs``), so nothing is recomputed outside the project's code path.

Sections: ``formulas`` (reference formulas and the printed bounds), ``runs`` (the runs and the toy quadratic),
``herding_step`` (V1, Eq. 1 / Eq. 12, Proposition 1), ``convergence`` (Theorems 1-2, Fig. 3(a)).
"""
from __future__ import annotations

from theory.claims.bherd.convergence import alpha_sweep, bounds_check
from theory.claims.bherd.formulas import (
                                          random_subset_mse,
                                          subset_mse,
                                          theorem1_rhs,
                                          theorem2_rhs,
                                          theorem_conditions,
                                          with_replacement_mse,
)
from theory.claims.bherd.herding_step import herding_vs_random, prop1, prop1_gaps, random_reference

__all__ = ["alpha_sweep", "bounds_check", "herding_vs_random", "prop1", "prop1_gaps", "random_reference",
           "random_subset_mse", "subset_mse", "theorem1_rhs", "theorem2_rhs", "theorem_conditions",
           "with_replacement_mse"]
