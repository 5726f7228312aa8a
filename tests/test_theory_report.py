"""The committed theory report (results/theory/<version>/report.json): generated on the current claims code, every
claim with its kind, and its published verdicts pinned by quick runs where quick mode decides them.

When ``test_committed_report_is_current`` fails, theory/ or an algorithm the claims use changed after the report
was generated: regenerate it with ``fedrepro theory --publish`` (about 10 minutes on 2 CPU cores) and commit it. The hashed
files are listed in theory/provenance.py."""
import json
import pathlib

import pytest

from benchmark.runs.record import code_version
from theory import provenance
from theory.claims import KINDS, VERDICTS, CheckContext, all_claims

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPORT = ROOT / "results" / "theory" / code_version()["package"] / "report.json"


def _report() -> dict:
    if not REPORT.exists():
        pytest.fail(f"no committed theory report for this version at {REPORT}; run `fedrepro theory --publish`")
    return json.loads(REPORT.read_text())


def test_committed_report_is_current():
    rep = _report()
    now = provenance.file_hashes()
    then = rep.get("hashed_files", {})
    changed = sorted(p for p in set(now) | set(then) if now.get(p) != then.get(p))
    assert rep.get("code_hash") == provenance.code_hash(now), (
        f"the theory report was generated on other code: {changed} changed since; regenerate it with "
        "`fedrepro theory --publish` and commit results/theory/")


def test_committed_report_covers_every_claim_with_its_kind():
    rep = _report()
    got = {c["id"]: c for c in rep["claims"]}
    claims = {c.id: c for c in all_claims()}
    assert set(got) == set(claims)
    for cid, c in got.items():
        assert c["verdict"] in VERDICTS and c["kind"] in KINDS and c["kind"] == claims[cid].kind
        assert not c["quick"]
    counts = {k: {v: sum(1 for c in got.values() if c["kind"] == k and c["verdict"] == v) for v in VERDICTS}
              for k in KINDS}
    assert {k: {v: n for v, n in c.items() if n} for k, c in counts.items()} == {
        k: {v: n for v, n in c.items() if n} for k, c in rep["summary"].items()}


def test_committed_findings_carry_their_hypotheses_and_reason():
    """No VIOLATED rests on a premise failure or on an empirical figure: each names the hypotheses it verified in
    the run (all met); a PREMISE FAILS names the failed premise; a NOT REPRODUCED states its setting and why."""
    for c in _report()["claims"]:
        hyps = c.get("hypotheses")
        if c["verdict"] == "VIOLATED" and c["kind"] == "paper":
            assert hyps and all(h["holds"] for h in hyps) and c["reason"], c["id"]
        if c["verdict"] == "PREMISE FAILS":
            assert any(h["kind"] == "premise" and not h["holds"] for h in hyps) and c["reason"], c["id"]
        if c["verdict"] == "NOT REPRODUCED":
            assert c["reason"] and c["conditions"], c["id"]


def test_the_hashed_files_cover_theory_and_the_algorithms_the_claims_run():
    files = set(provenance.file_hashes())
    assert {"theory/claims/gradma/setup.py", "theory/runs.py", "algorithms/gradma.py", "algorithms/core/qp.py",
            "algorithms/fedbat.py", "algorithms/compress/signs.py", "algorithms/bherd.py", "algorithms/core/herding.py",
            "algorithms/lfl.py", "algorithms/fedmoswa.py", "algorithms/scaffold.py", "algorithms/core/base.py"} <= files
    assert not any(f.startswith("benchmark/") for f in files)
    # what the claims import, transitively (theory/stats/__init__.py runs before theory/stats/core.py), and not
    # the empirical claims nor the paper pages: no theory claim imports them, so no theory verdict depends on them
    assert {"theory/stats/core.py", "theory/stats/__init__.py", "theory/problems.py", "theory/__init__.py"} <= files
    assert not any(f.startswith("theory/empirical/") or f == "theory/pages.py" for f in files)
    with pytest.raises(ValueError, match="CLAIM_ALGORITHMS"):
        provenance.check_algorithm("fedprox")


# Published verdicts that quick mode reproduces (CheckContext(quick=True) decides them, with the same verdict);
# the others are pinned in tests/test_claims_pinned.py at the size that decides them.
QUICK_PINNED = {
    "bherd.eq12.herding_vs_random", "bherd.fig3a.alpha", "bherd.prop1.gap", "bherd.thm12.bounds",
    "bherd.v1.random_reference", "compression.bits.honest", "compression.ef.residual_bounded",
    "compression.scaled_sign.biased", "compression.topk.biased", "fedbat.operator.biased_outside_range",
    "fedbat.operator.unbiased_in_range", "fedbat.remark3.learned_alpha_bias", "fedbat.remark3.smaller_q",
    "fedbat.theorem1.bound", "fedbat.theorem2.bound", "fedbat.theorem3.bound", "fedswa.thm51.stability",
    "fedswa.thm52.sigma_g_free_full", "fedswa.thm52.sigma_g_free_partial", "gradma.a4.eps_l_rate",
    "gradma.a4.projection_real_training", "lfl.corollary1.bound_vanishes", "lfl.corollary1.floor",
    "lfl.lemma1.unbiased", "lfl.lemma1.variance", "lfl.rate.gamma0", "qsgd.lemma3_1.unbiased",
    "qsgd.lemma3_1.variance",
}


def _bherd_v1(r):  # the planted defect inside the check (with replacement) is caught for k > 1
    for name, case in r["evidence"]["cases"].items():
        assert case["subset_sizes_exact"] and (name.endswith("_k1") or case["with_replacement_rejected"]), name


def _lfl_vanishes(r):  # deterministic: the printed bound tends to L (tau-1) Gamma / (mu tau) > 0 in this regime
    assert r["evidence"]["rhs12"][-1] == pytest.approx(r["evidence"]["derived_limit"], rel=0.05)


def _corollary_premises(r):  # quick mode is below T_min: INCONCLUSIVE for that reason, and says so
    assert r["verdict"] == "INCONCLUSIVE" and not r["evidence"]["premises"]["all_met"]
    assert "T_min" in r["evidence"]["why_inconclusive"]


EXTRA = {"bherd.v1.random_reference": _bherd_v1, "lfl.corollary1.bound_vanishes": _lfl_vanishes,
         "gradma.cor1.speedup_S": _corollary_premises, "gradma.cor1.local_steps_I": _corollary_premises}


@pytest.mark.parametrize("cid", sorted(c.id for c in all_claims()))
def test_every_claim_in_quick_mode(cid):
    """Runs, says what it checked, and (QUICK_PINNED) reproduces the published verdict."""
    (c,) = [c for c in all_claims(claim_id=cid) if c.id == cid]
    r = c.run(CheckContext(seed=0, quick=True))
    assert r["verdict"] in VERDICTS and r["key_number"] not in ("error", "diverged"), r["evidence"]
    assert r["evidence"] and r["conditions"] and r["source"] and r["statement"] and r["kind"] in KINDS
    json.dumps(r["evidence"], default=str)
    if cid in QUICK_PINNED:
        published = {c["id"]: c["verdict"] for c in _report()["claims"]}[cid]
        assert r["verdict"] == published, (r["key_number"], r["evidence"].get("why_inconclusive"))
    if cid in EXTRA:
        EXTRA[cid](r)
