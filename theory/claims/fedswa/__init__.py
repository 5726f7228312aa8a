"""FedSWA / FedMoSWA (Liu et al., ICML 2025), Sec. 5: Theorem 5.2 (optimization error) and Theorem 5.1
(generalization via uniform stability), checked on the project's fedswa / fedmoswa code through the engine.

Summary of the theory: ../shared/papers/fedswa.md, Sec. 5. Sections: ``toy`` (Toy A, the runs on it, the step-size
conditions of Theorem 5.2 and of its proof as hypotheses), ``thm52`` (the sigma_g-free claims and the alpha/s/K
claim), ``proof_cap`` (partial participation at the proof's own step cap, judged against Lemma G.13's bound, with
the proof's Lemma G.11 update as the control), ``thm51`` (uniform stability).
"""
from __future__ import annotations

from theory.claims.fedswa.proof_cap import cap_lr, cap_outcome, cap_runs, lemma_g13_bound
from theory.claims.fedswa.thm51 import (
    _dataset,
    b_tilde,
    nested_clients,
    stability,
    stability_bound,
)
from theory.claims.fedswa.thm52 import faster, main_text_partial, predicted_floor_ratio, sigma_g_full, sigma_g_partial
from theory.claims.fedswa.toy import (
    _FEDSWA,
    _MOSWA,
    _eta_tilde_ok,
    _run,
    _unit,
    hetero_quadratic,
    problem_hypotheses,
    step_caps,
)

__all__ = ["_FEDSWA", "_MOSWA", "_dataset", "_eta_tilde_ok", "_run", "_unit", "b_tilde", "cap_lr", "cap_outcome",
           "cap_runs", "faster", "hetero_quadratic", "lemma_g13_bound", "main_text_partial", "nested_clients",
           "predicted_floor_ratio", "problem_hypotheses", "sigma_g_full", "sigma_g_partial", "stability",
           "stability_bound", "step_caps"]
