"""Every claim's check can change its verdict: a planted defect (a frozen server, a biased operator, a wrong step
size, a missing correction, a data bug) turns a HOLDS into VIOLATED or at least out of HOLDS (a check that runs
outside its statement's hypotheses, e.g. above the proof's step cap, reports its rejection as INCONCLUSIVE, never
VIOLATED), and where the published verdict is VIOLATED a planted control turns it into HOLDS. Sizes are small: the
defects are gross on purpose.

The list ``DEFECTS`` below names the defect of every claim; ``test_every_claim_has_a_planted_defect`` keeps it
complete."""
import numpy as np
import pytest
import torch

from algorithms import compress as C
from algorithms.core import herding
from theory import montecarlo as MC
from theory.claims import HOLDS, INCONCLUSIVE, PREMISE_FAILS, UNINFORMATIVE, VIOLATED, CheckContext, all_claims
from theory.claims import bherd as B
from theory.claims import compression as TC
from theory.claims import fedbat as F
from theory.claims import fedswa as S
from theory.claims import gradma as G
from theory.claims import lfl as L
from theory.claims import qsgd as QS

from .planted import NoErrorFeedback, Planted, frozen, registered, subclass

Q = CheckContext(seed=0, quick=True)

DEFECTS = {
    "lfl.lemma1.unbiased": "quantizer with a 10% bias -> VIOLATED",
    "lfl.lemma1.variance": "10% more spread (21% more variance) -> VIOLATED; an operator that does nothing -> not HOLDS",
    "qsgd.lemma3_1.unbiased": "quantizer with a 10% bias -> VIOLATED",
    "qsgd.lemma3_1.variance": "10% more spread -> VIOLATED; an operator that does nothing -> not HOLDS",
    "fedbat.operator.unbiased_in_range": "binarizer with a 10% bias -> VIOLATED",
    "fedbat.operator.biased_outside_range": "an unbiased operator (alpha = ||x||_inf) -> VIOLATED",
    "compression.scaled_sign.biased": "the identity in place of scaled sign -> VIOLATED",
    "compression.topk.biased": "the identity in place of top-k -> VIOLATED",
    "compression.ef.residual_bounded": "EF compressing x instead of x + e, and EF keeping no residual -> VIOLATED",
    "compression.bits.honest": "an operator carrying its scale in the uncounted meta -> VIOLATED",
    "gradma.cor1.speedup_S": "frozen server (eta_g ~ 0): the rate test rejects (correct GradMA: does not)",
    "gradma.cor1.local_steps_I": "repair: no worker QP (GradMA-S) -> the I-rate is no longer rejected",
    "gradma.a4.eps_l_rate": "PREMISE FAILS; repair: no worker QP (GradMA-S, g~ = g) -> HOLDS",
    "gradma.a4.projection_real_training": "PREMISE FAILS; repair: no worker QP (GradMA-S) -> HOLDS",
    "bherd.v1.random_reference": "a sampler that never picks the last step -> VIOLATED",
    "bherd.eq12.herding_vs_random": "a selection keeping the steps farthest along one direction -> VIOLATED",
    "bherd.prop1.gap": "repair: alpha = 1 (every step kept) -> HOLDS",
    "bherd.thm12.bounds": "frozen server -> not HOLDS (the bounds are above the initial gap: UNINFORMATIVE)",
    "bherd.fig3a.alpha": "NOT REPRODUCED; server step (1/alpha)^2 instead of 1/alpha -> the trend test passes",
    "fedbat.theorem1.rate": "frozen server -> VIOLATED",
    "fedbat.theorem1.bound": "frozen server -> not HOLDS (UNINFORMATIVE)",
    "fedbat.theorem2.rate": "frozen server -> VIOLATED",
    "fedbat.theorem2.bound": "frozen server -> not HOLDS (UNINFORMATIVE)",
    "fedbat.theorem3.rate": "frozen server -> VIOLATED",
    "fedbat.theorem3.bound": "frozen server -> not HOLDS",
    "fedbat.remark3.learned_alpha_bias": "alpha = ||m||_inf (the unbiased theory variant) -> VIOLATED",
    "fedbat.remark3.smaller_q": "a step size floored at 1.5 ||m_l||_inf -> VIOLATED",
    "fedswa.thm51.stability": "data bug (every run sees the first 10 samples only) -> VIOLATED",
    "fedswa.thm52.faster_alpha_s_K": "eta_l = eta~/(K^2 alpha) (a step that shrinks with K) -> rejected (outside the "
                                     "proof's cap: INCONCLUSIVE)",
    "fedswa.thm52.sigma_g_free_full": "drift correction removed (FedSWA) -> rejected (not the algorithm as stated: "
                                      "INCONCLUSIVE); frozen server -> UNINFORMATIVE",
    "fedswa.thm52.sigma_g_free_partial": "control: the proof's all-clients m (Lemma G.11) -> HOLDS; above the proof's "
                                         "cap -> INCONCLUSIVE (outside the hypotheses)",
    "lfl.theorem1.bound": "frozen server -> not HOLDS (its own plug-in constants keep the bound above its error)",
    "lfl.corollary1.bound_vanishes": "repair: Gamma = 0 -> HOLDS",
    "lfl.corollary1.gap_vanishes_noniid": "frozen server -> not HOLDS",
    "lfl.corollary1.floor": "frozen server -> not HOLDS",
    "lfl.rate.tau1": "frozen server -> VIOLATED",
    "lfl.rate.gamma0": "frozen server -> VIOLATED",
}


def test_every_claim_has_a_planted_defect():
    assert set(DEFECTS) == {c.id for c in all_claims()}


# ------------------------------------------------------------------------------------------ operators


@pytest.mark.parametrize("check", [L.lfl_unbiased, QS.qsgd_unbiased, F.fedbat_in_range])
def test_biased_operator_is_caught(check):
    assert check(Q, wrap=lambda op: Planted(op, bias=0.1)).verdict == VIOLATED


@pytest.mark.parametrize("check", [L.lfl_variance, QS.qsgd_variance])
def test_larger_variance_is_caught_and_a_trivial_operator_does_not_pass(check):
    assert check(Q, wrap=lambda op: Planted(op, scale=1.1)).verdict == VIOLATED
    assert check(Q, wrap=lambda op: Planted(op, scale=0.0)).verdict == INCONCLUSIVE


def test_unbiased_operator_flips_the_bias_claims():
    assert F.fedbat_outside(Q, make=lambda alpha: C.get("binarize")).verdict == VIOLATED
    assert TC.scaled_sign_biased(Q, C.get("identity")).verdict == VIOLATED
    assert TC.topk_biased(Q, C.get("identity")).verdict == VIOLATED


def test_error_feedback_without_residual_is_caught():
    out = TC.ef_residual_check(NoErrorFeedback(), S=8, T=200, families=("iid_gaussian",))
    assert out.verdict == VIOLATED and not out.evidence["ef_identity_holds"]


def test_smuggled_bits_flip_the_bits_claim():
    class MetaScale(C.Transform):
        name = "scaled_sign"

        def encode(self, x, state=(), rng=None):
            from algorithms.core import Message

            return Message({"signs": C.pack_bits(x >= 0)}, {"d": x.shape[-1], "scale": float(x.abs().mean())}), state

        def decode(self, m):
            return torch.where(C.unpack_bits(m["signs"], m.meta["d"]), 1.0, -1.0) * m.meta["scale"]

    assert TC.bits_honest(Q, [C.get("scaled_sign")]).verdict == HOLDS
    assert TC.bits_honest(Q, [C.get("scaled_sign"), MetaScale()]).verdict == VIOLATED


# ------------------------------------------------------------------------------------------ GradMA


def test_gradma_speedup_rejects_a_frozen_server():
    ok = G.speedup_s(Q, require_premises=False)
    bad = G.speedup_s(Q, args={"eta_g": 1e-9}, require_premises=False)
    assert ok.evidence["test"]["passed"] and not bad.evidence["test"]["passed"]
    assert bad.verdict != HOLDS


def test_gradma_local_steps_rate_is_restored_without_the_worker_qp():
    kw = dict(I=[2, 8], T=40, seeds=3, require_premises=False, control=False)
    assert not G.local_steps_i(Q, **kw).evidence["test"]["passed"]
    assert G.local_steps_i(Q, algorithm="gradma_s", **kw).evidence["test"]["passed"]


def test_gradma_assumption4_holds_without_the_worker_qp():
    out = G.eps_l_rate(Q)
    assert out.verdict == PREMISE_FAILS and "tau = 1" in out.reason  # an assumption, not a conclusion
    assert G.eps_l_rate(Q, algorithm="gradma_s").verdict == HOLDS
    assert G.projection_real(Q, algorithm="gradma_s").verdict == HOLDS


# ------------------------------------------------------------------------------------------ BHerd


def test_bherd_random_reference_catches_a_biased_sampler():
    def skip_last(Z, valid, k, u):
        keep = valid & (torch.arange(valid.shape[0]) < valid.shape[0] - 1)
        return herding.random_subset(Z, keep, k, u)

    assert B.random_reference(Q, sampler=skip_last).verdict == VIOLATED


def _one_sided(self, ctx, Z, valid, k):
    """Keep the k steps lying farthest along one direction from the mean (the opposite of herding: the kept
    mean is pushed away from the mean of all steps)."""
    v = valid.to(Z.dtype)
    mu = (v[:, None] * Z).sum(0) / v.sum()
    Zc = (Z - mu) * v[:, None]
    direction = Zc[torch.argmax((Zc ** 2).sum(1))]
    score = torch.where(valid, Zc @ direction, torch.full_like(v, -float("inf")))
    order = torch.argsort(score, descending=True)
    return torch.zeros_like(valid).scatter(0, order[:k], True) & valid


def test_bherd_herding_vs_random_catches_an_anti_herding_selection():
    with registered(subclass("bherd", "one_sided", select=_one_sided)) as name:
        out = B.herding_vs_random(Q, algorithm=name, seeds=4, rounds=3, digits=False)
    assert out.verdict == VIOLATED, out.key_number


def test_bherd_prop1_holds_when_every_step_is_kept():
    assert B.prop1(Q, alpha=1.0).verdict == HOLDS


def test_bherd_bounds_do_not_hold_for_a_frozen_server():
    with registered(frozen("bherd")) as name:
        out = B.bounds_check(Q, algorithm=name)
    assert out.verdict != HOLDS and not out.evidence["slack_and_frozen_reference"]["informative"]


def _alpha_squared(self, ctx, w0, grad_fn=None):
    from algorithms.bherd import HerdedSteps

    return HerdedSteps.herded_update(self, ctx, w0, grad_fn) / self.hp.alpha


def test_bherd_alpha_trend_passes_with_a_larger_step_for_smaller_alpha():
    with registered(subclass("bherd", "alpha_sq", herded_update=_alpha_squared)) as name:
        out = B.alpha_sweep(Q, algorithm=name)
    assert out.evidence["herding_slope_test"]["passed"], out.key_number


# ------------------------------------------------------------------------------------------ FedBAT


@pytest.mark.parametrize("theorem", [1, 2])
def test_fedbat_strongly_convex_checks_with_a_frozen_server(theorem):
    with registered(frozen("fedbat")) as name:
        assert F.sc_rate(theorem, Q, algorithm=name).verdict == VIOLATED
        assert F.sc_bound(theorem, Q, algorithm=name).verdict == UNINFORMATIVE


def test_fedbat_nonconvex_checks_with_a_frozen_server():
    with registered(frozen("fedbat")) as name:
        assert F.t3_rate(Q, algorithm=name, seeds=3).verdict == VIOLATED
        assert F.t3_bound(Q, algorithm=name, seeds=3).verdict != HOLDS


def test_fedbat_unbiased_variant_flips_the_bias_claim():
    assert F.learned_bias(Q, args=(("alpha_mode", "inf"),)).verdict == VIOLATED


def _alpha_floor(self, m, alpha_e, alpha0):
    """The step size never below 1.5 ||m_l||_inf (a planted bug: every entry is binarized at +-1.5x its range)."""
    from algorithms.fedbat import FedBAT, _layer_inf_norms

    return torch.maximum(FedBAT.step_size(self, m, alpha_e, alpha0), 1.5 * _layer_inf_norms(m, self.bin_slices).detach())


def test_fedbat_step_size_floored_above_the_range_flips_smaller_q():
    with registered(subclass("fedbat", "alpha_floor", step_size=_alpha_floor)) as name:
        out = F.smaller_q(Q, algorithm=name)
    assert out.verdict == VIOLATED, out.key_number


# ------------------------------------------------------------------------------------------ FedSWA


def test_fedswa_stability_catches_a_data_bug():
    assert S.stability(Q, truncate=10).verdict == VIOLATED


def test_fedswa_faster_catches_a_step_that_shrinks_with_K():
    out = S.faster(Q, lr_fn=lambda eta_tilde, K, alpha: eta_tilde / (K * K * alpha), only=("K",), seeds=8)
    # rejected; run at the main text's step condition, above the proof's cap: outside the hypotheses, not VIOLATED
    assert not out.evidence["K"]["test"]["passed"], out.key_number
    assert out.verdict == INCONCLUSIVE and "eta_l <= 1/(81 beta K alpha)" in out.reason


def test_fedswa_sigma_g_free_full_without_drift_correction_and_frozen():
    out = S.sigma_g_full(Q, algorithm="fedswa", args=S._FEDSWA, rounds=60, seeds=3)
    assert not out.evidence["fedmoswa_slope_test"]["passed"] and out.verdict == INCONCLUSIVE
    with registered(frozen("fedmoswa")) as name:
        out = S.sigma_g_full(Q, algorithm=name)
    assert out.verdict in (UNINFORMATIVE, INCONCLUSIVE) and not out.evidence["frozen_reference_convergence"][
        "converged"]


def test_fedswa_partial_control_the_proofs_all_clients_update_holds():
    # the same check on FedMoSWA with Lemma G.11's m (all m clients' c_i): the floor is gone, the bound holds
    out = S.cap_outcome(Q, m_mean="all", rounds=600, seeds=3)
    assert out.verdict == HOLDS, out.key_number
    assert out.evidence["frozen_reference"]["fails_the_bound"]  # informative: an algorithm that never moves fails


def test_fedswa_partial_above_the_proofs_step_cap_is_outside_the_hypotheses():
    out = S.cap_outcome(Q, lr=1 / 6, rounds=200, seeds=3)  # the main text's 1/(2 beta K alpha): 40x the proof's cap
    assert out.evidence["markov_fisher"]["rejected"]  # the numbers would reject the bound ...
    assert out.verdict == INCONCLUSIVE and "outside the statement's hypotheses" in out.reason  # ... but not VIOLATED


# ------------------------------------------------------------------------------------------ LFL


def test_lfl_theorem1_bound_does_not_hold_for_a_frozen_server():
    with registered(frozen("lfl")) as name:
        out = L.theorem1_bound_check(CheckContext(0, False), algorithm=name, rounds=400, seeds=3)
    # the frozen run's own plug-in constants (3 seeds) put the bound just above ||theta(0) - theta*||^2 at 400
    # rounds: the check then reports the frozen algorithm UNINFORMATIVE, never HOLDS
    assert out.verdict != HOLDS, out.key_number


def test_lfl_bound_vanishes_with_gamma_zero():
    assert L.bound_vanishes_check(Q).verdict == VIOLATED
    assert L.bound_vanishes_check(Q, Gamma=0.0).verdict == HOLDS


def test_lfl_rates_and_floor_with_a_frozen_server():
    with registered(frozen("lfl")) as name:
        assert L.rate_tau1(Q, algorithm=name, reference=False).verdict == VIOLATED
        assert L.rate_gamma0(Q, algorithm=name).verdict == VIOLATED
        assert L.floor_check(Q, algorithm=name).verdict != HOLDS
        assert L.gap_vanishes_check(Q, algorithm=name).verdict != HOLDS


def test_planted_operator_keeps_its_randomness():
    # the planted operator is a transform of the real one (same draws): scale 1, bias 0 is the operator itself
    x = torch.randn(16)
    op = C.get("qsgd", s=2)
    from algorithms.core import CounterRng

    assert torch.allclose(Planted(op).compress(x, CounterRng(3)), op.compress(x, CounterRng(3)), atol=1e-6)
    assert np.isfinite(MC.lattice_spacing(Planted(op), x))
