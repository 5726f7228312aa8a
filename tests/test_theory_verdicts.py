"""The theory verdict vocabulary (theory/outcome.py, theory/verdicts.py, theory/claims/__init__.py): VIOLATED only with
every hypothesis verified in the run, PREMISE FAILS for a failed assumption, NOT REPRODUCED for a figure, and the
Markov-Fisher test behind the FedMoSWA verdict; the report, the compare page and the paper pages show them."""
import json

import numpy as np
import pytest

from benchmark.reports import compare
from benchmark.reports.theory_report import hypotheses_lines
from theory import pages
from theory.claims import (INCONCLUSIVE, NOT_REPRODUCED, PAPER_CLAIM, PREMISE, PREMISE_FAILS, VIOLATED, Claim,
                           CheckContext, Outcome, hypothesis)
from theory.claims import gradma as G
from theory.verdicts import markov_fisher

CAP = hypothesis("eta <= 1/(81 beta K alpha)", "Lemma G.12", True, "eta = 0.004")
A4 = hypothesis("A4 with eps_l = T^-1/2", "Assumption 4", True, "realized 0.001", kind=PREMISE)


def test_violated_with_every_hypothesis_met_stays_violated():
    out = Outcome(VIOLATED, "k", {}, "c", hypotheses=[CAP, A4])
    assert out.verdict == VIOLATED and out.reason == ""


def test_a_run_that_breaks_its_step_cap_is_outside_the_hypotheses():
    above = hypothesis("eta <= 1/(81 beta K alpha)", "Lemma G.12", False, "eta = 0.167 (40x)")
    out = Outcome(VIOLATED, "k", {}, "c", hypotheses=[above, A4])
    assert out.verdict == INCONCLUSIVE
    assert "outside the statement's hypotheses" in out.reason and "40x" in out.reason


def test_a_planted_premise_failure_is_premise_fails_not_violated():
    failed = hypothesis("A4 with eps_l = T^-1/2", "Assumption 4", False, "realized 6.1 vs 1/T = 0.01", kind=PREMISE)
    out = Outcome(VIOLATED, "k", {}, "c", hypotheses=[CAP, failed])
    assert out.verdict == PREMISE_FAILS and "premise" in out.reason and "Assumption 4" in out.reason
    # a broken setting takes precedence: the run says nothing about the statement then
    above = hypothesis("eta cap", "Lemma G.12", False)
    assert Outcome(VIOLATED, "k", {}, "c", hypotheses=[above, failed]).verdict == INCONCLUSIVE


def test_premise_fails_and_not_reproduced_need_their_evidence():
    with pytest.raises(ValueError, match="premise"):
        Outcome(PREMISE_FAILS, "k", {}, "c", hypotheses=[CAP])
    with pytest.raises(ValueError, match="NOT REPRODUCED"):
        Outcome(NOT_REPRODUCED, "k", {}, "", reason="why")
    assert Outcome(NOT_REPRODUCED, "k", {}, "a toy", reason="alpha = 0.1 converges").verdict == NOT_REPRODUCED


def test_a_paper_claims_violated_without_hypotheses_is_not_reported_violated():
    def bare(ctx):
        return Outcome(VIOLATED, "k", {"x": 1}, "c")

    r = Claim("x.bare", "x", "Thm 1", "s", bare, kind=PAPER_CLAIM).run(CheckContext(0, True))
    assert r["verdict"] == INCONCLUSIVE and "records no hypothesis" in r["reason"]
    r = Claim("x.ok", "x", "Thm 1", "s", lambda ctx: Outcome(VIOLATED, "k", {}, "c", hypotheses=[CAP]),
              kind=PAPER_CLAIM).run(CheckContext(0, True))
    assert r["verdict"] == VIOLATED and r["hypotheses"] == [CAP.to_dict()]
    json.dumps(r, default=str)


def _premises(met: bool) -> dict:
    return {"all_met": met, "per_setting": {"S=4,I=5": {"T": 800, "T_ok": met, "T_min_printed": 775.0,
                                                        "T_min_rederived": 775.0, "cond1": True, "cond2": True,
                                                        "cond3": True, "cond3_lhs": 0.5, "met": met}}}


def _assumptions(a4: bool) -> dict:
    return {"A4_eps_l_sq_realized": 1e-4 if a4 else 6.0, "A4_eps_l_sq_required": 1 / 800, "A4_met": a4,
            "A5_eps_g_sq": {"S=4": {"realized": 0.0, "required": 1e-3}}, "A5_met": True, "all_met": a4}


@pytest.mark.parametrize("premises,a4,verdict", [(True, True, VIOLATED), (True, False, PREMISE_FAILS),
                                                 (False, True, INCONCLUSIVE), (False, False, INCONCLUSIVE)])
def test_gradma_corollary_decision_with_a_planted_rejected_rate(premises, a4, verdict):
    # a metric that grows like S^+0.5 where the Corollary allows S^-0.5: the rate test rejects
    rng = np.random.default_rng(0)
    xs = [2, 4, 8]
    metric = np.exp(0.5 * np.log(xs)[None, :] + 0.01 * rng.normal(size=(4, 3)))
    out = G.rate_outcome("S", xs, metric, -0.5, _premises(premises), _assumptions(a4), {}, "c", {}, 1e-3)
    assert not out.evidence["test"]["passed"] and out.verdict == verdict, out.reason


def test_markov_fisher_is_calibrated_and_has_power():
    rng = np.random.default_rng(1)
    # H0 at its edge, E[X] = bound, a heavy-tailed X: the false-alarm rate stays below alpha
    rej = [markov_fisher(rng.exponential(1.0, size=4) ** 2 / 2, 1.0, 0.05)["rejected"] for _ in range(4000)]
    assert np.mean(rej) <= 0.05
    assert markov_fisher([60.0, 80.0, 120.0, 50.0], 1.0, 5e-4)["rejected"]  # a floor 50-120x the bound
    assert not markov_fisher([2.0, 3.0, 2.5], 1.0, 5e-4)["rejected"]  # 2-3x: Markov cannot tell
    with pytest.raises(ValueError):
        markov_fisher([-1.0], 1.0, 0.01)


def _result(verdict, reason="", hyps=()):
    return {"id": "p.c", "paper": "fedswa", "kind": "paper", "source": "Thm 1", "statement": "s", "quote": "\"q\"",
            "false_alarm": 1e-3, "verdict": verdict, "key_number": "k", "reason": reason,
            "hypotheses": [h.to_dict() for h in hyps], "evidence": {}, "conditions": "c", "series": {},
            "seconds": 0.0, "quick": False, "seed": 0}


def test_report_pages_and_compare_show_the_hypotheses_and_the_reason(tmp_path):
    broken = hypothesis("A4", "Assumption 4", False, "6.1", kind=PREMISE)
    lines = "\n".join(hypotheses_lines([CAP.to_dict(), broken.to_dict()]))
    assert "eta <= 1/(81 beta K alpha)" in lines and "**no**" in lines and "premise" in lines
    text = "\n".join(pages.findings([_result(PREMISE_FAILS, "QP_l forces it", [CAP, broken])]))
    assert "PREMISE FAILS" in text and "\"q\"" in text and "(1 of 2)" in text and "Not met: A4 (6.1)" in text
    assert "Why: QP_l forces it." in text
    for v, rows in (("0.3.0", [{"id": "p.c", "verdict": "VIOLATED"}]),
                    ("0.4.0", [_result(PREMISE_FAILS, "an assumption fails", [broken])])):
        (tmp_path / "theory" / v).mkdir(parents=True)
        (tmp_path / "theory" / v / "report.json").write_text(json.dumps({"claims": rows}))
    c = compare.compare(tmp_path, "0.3.0", "0.4.0")
    assert c["theory"]["changed"] == [{"id": "p.c", "old": "VIOLATED", "new": "PREMISE FAILS",
                                       "reason": "an assumption fails"}]
    md = compare.markdown(c)
    assert "an assumption fails" in md and "No report for 0.3.0 and 0.4.0." in md  # no claims reports: still works
