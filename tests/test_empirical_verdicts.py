"""The verdicts of theory/empirical from records: pairing checks, the verdict of each kind (SUPPORTED,
CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE with the closest decision), the all/any logic of a claim with several
comparisons, the margin rules, and the pairing of real runs. A method with a deliberately worse learning rate is
caught at the first look and two methods that compute the same thing are NEGLIGIBLE, through the claims runner
(tests/test_empirical_claims.py). The error rates under optional stopping: tests/test_empirical_calibration.py."""
import dataclasses

import pytest

from benchmark import Experiment, run
from theory.empirical import CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, SUPPORTED, Claim, Comparison, Margin, paired
from theory.empirical.judge import Judge
from theory.empirical.report import verdict_lines
from theory.empirical.run import judge

SETTING = "s"
POINT = Margin(0.01, "1 point (test)")


def fake_rec(seed: int, acc: float, status: str = "ok", part: str = "p", init: str = "i") -> dict:
    return {"config": {"seed": seed, "rounds": 4, "eval_every": 1}, "status": status,
            "final": {"test_accuracy": acc, "bits_down_per_round": 33.0},
            "history": [{"round": r, "test_accuracy": acc} for r in range(1, 5)],
            "partition": {"fingerprint": f"{part}{seed}", "statistics": {"num_classes": 10}},
            "initial_model": {"fingerprint": f"{init}{seed}"}}


def claim(cid: str, test: str, margin: float, a: str = "A", b: str = "B", **kw) -> Claim:
    m = Margin(margin, "the boundary") if test == "noninferior" else POINT
    return Claim(cid, "toy", "made up", "q", "s", "final_accuracy", (Comparison(a, b, test, margin, SETTING, **kw),),
                 margin=m)


def runs_from(xa, xb) -> dict:
    return {(SETTING, "A"): {s: fake_rec(s, v) for s, v in enumerate(xa)},
            (SETTING, "B"): {s: fake_rec(s, v) for s, v in enumerate(xb)}}


def test_identical_arms_are_negligible_never_different():
    x = [0.7, 0.71, 0.69, 0.72]
    out = judge([claim("toy.sup", "superior", 0.0), claim("toy.noninf", "noninferior", 0.01)], runs_from(x, x))
    assert out[0]["verdict"] == NEGLIGIBLE  # a difference of exactly 0 with no spread lies within +-1 point
    assert out[1]["verdict"] == SUPPORTED  # 0 >= -1 point: what "A is no worse than B" asserts


def test_a_superiority_claim_shown_negligible_is_not_supported():
    """A real but tiny advantage (+0.2 points, spread 0.05): positive, yet shown within +-1 point, so the claim
    is NEGLIGIBLE and the report says plainly that it is not supported."""
    xb = [0.60, 0.70, 0.65, 0.62, 0.68, 0.61, 0.66, 0.64]
    d = [0.002, 0.0025, 0.0015, 0.002, 0.0022, 0.0018, 0.0021, 0.0019]
    out = judge([claim("toy.small", "superior", 0.0)], runs_from([b + e for b, e in zip(xb, d)], xb))[0]
    assert out["verdict"] == NEGLIGIBLE and out["comparisons"][0]["side"] == "negligible"
    out["scale"] = "cpu"
    assert any(line.startswith("**Not supported**") for line in verdict_lines(out))


def test_clear_differences_are_supported_or_contradicted():
    xb = [0.60, 0.70, 0.65, 0.62, 0.68]
    better = [b + 0.05 + 0.001 * i for i, b in enumerate(xb)]
    assert judge([claim("toy.c", "superior", 0.0)], runs_from(better, xb))[0]["verdict"] == SUPPORTED
    assert judge([claim("toy.c", "superior", 0.0)], runs_from(xb, better))[0]["verdict"] == CONTRADICTED


def test_inconclusive_says_why_and_which_decision_was_closest():
    xb = [0.6, 0.7, 0.65, 0.62, 0.68]
    d = [0.01, -0.004, 0.012, 0.003, 0.008]
    out = judge([claim("toy.c", "superior", 0.0)], runs_from([b + e for b, e in zip(xb, d)], xb))[0]
    assert out["verdict"] == INCONCLUSIVE and out["stopped"] == "seeds" and "seed budget is spent" in out["why_stopped"]
    assert out["closest"]["verdict"] == SUPPORTED and out["closest"]["p_holm"] > 0.05
    assert "lower end" in out["closest"]["text"]
    n = out["closest"]["seeds_to_reach"]
    assert n and n > 5
    # the same differences repeated whole to at least that many seeds (the same mean, about the same spread; a
    # cut-off repeat would change the mean) are decided
    dd = d * -(-n // len(d))
    assert judge([claim("toy.c", "superior", 0.0)], runs_from([0.6 + e for e in dd], [0.6] * len(dd)))[0]["verdict"] \
        == SUPPORTED


def test_intersection_claim_needs_every_comparison():
    c = Claim("toy.all", "toy", "s", "q", "s", "final_accuracy",
              (Comparison("A", "B", "superior", 0.0, SETTING), Comparison("A", "C", "superior", 0.0, SETTING)),
              margin=Margin(0.001, "a tenth of a point (test)"))
    base = [0.5, 0.6, 0.55, 0.52, 0.58, 0.61]
    runs = {(SETTING, "A"): {s: fake_rec(s, v + 0.1) for s, v in enumerate(base)},
            (SETTING, "B"): {s: fake_rec(s, v + 0.001 * s) for s, v in enumerate(base)},
            (SETTING, "C"): {s: fake_rec(s, v + 0.1 + 0.002 * (s % 2) - 0.001) for s, v in enumerate(base)}}
    out = judge([c], runs)[0]
    assert [x["side"] for x in out["comparisons"]] == ["supports", "undecided"]
    assert out["verdict"] == INCONCLUSIVE
    runs[(SETTING, "C")] = {s: fake_rec(s, v + 0.2) for s, v in enumerate(base)}  # C clearly better than A
    assert judge([c], runs)[0]["verdict"] == CONTRADICTED


def test_a_decided_comparison_keeps_its_seeds():
    """Looks of 5 and 10 seeds: the comparison decided at 5 seeds stops there (later runs do not change it),
    the other goes on to 10."""
    c = Claim("toy.two", "toy", "s", "q", "s", "final_accuracy",
              (Comparison("A", "B", "superior", 0.0, SETTING), Comparison("A", "C", "superior", 0.0, SETTING)),
              margin=POINT)
    base = [0.5 + 0.01 * s for s in range(10)]
    noise = [0.004, -0.003, 0.006, -0.001, 0.002, -0.005, 0.003, 0.001, -0.002, 0.004]
    runs = {(SETTING, "A"): {s: fake_rec(s, v + 0.2) for s, v in enumerate(base)},
            (SETTING, "B"): {s: fake_rec(s, v) for s, v in enumerate(base)},
            (SETTING, "C"): {s: fake_rec(s, v + 0.2 + e) for s, (v, e) in enumerate(zip(base, noise))}}
    out = judge([c], runs, looks=(5, 10))[0]
    assert [x["n"] for x in out["comparisons"]] == [5, 10]
    assert out["comparisons"][0]["side"] == "supports" and out["comparisons"][0]["stop_look"] == 0


def test_unpaired_runs_are_not_compared():
    ra = {s: fake_rec(s, 0.8) for s in range(3)}
    rb = {s: fake_rec(s, 0.7, part="other") for s in range(3)}
    pr = paired.pair(Comparison("A", "B", "superior", 0.0, SETTING), "final_accuracy", ra, rb)
    assert pr["x"] == [] and len(pr["unpaired"]) == 3 and "partitions differ" in pr["unpaired"][0]
    rb = {s: fake_rec(s, 0.7, init="other") for s in range(3)}
    pr = paired.pair(Comparison("A", "B", "superior", 0.0, SETTING), "final_accuracy", ra, rb)
    assert "initial models differ" in pr["unpaired"][0]


def test_failed_runs_are_listed_and_diverged_count_at_chance():
    ra = {0: fake_rec(0, 0.8), 1: fake_rec(1, 0.8), 2: fake_rec(2, None, status="failed")}
    rb = {0: fake_rec(0, 0.7), 1: fake_rec(1, None, status="diverged"), 2: fake_rec(2, 0.7)}
    pr = paired.pair(Comparison("A", "B", "superior", 0.0, SETTING), "final_accuracy", ra, rb)
    assert pr["seeds"] == [0, 1] and pr["x"] == pytest.approx([0.1, 0.7])  # diverged B counts at 1/10
    assert any("failed" in p for p in pr["problems"]) and pr["diverged"] == ["B seed 1"]


def test_holm_adjustment():
    assert paired.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert paired.holm([0.5]) == [0.5]


def test_ratio_claims_are_decided_exactly_when_deterministic():
    c = Claim("toy.bits", "toy", "s", "q", "s", "bits_down_per_round", (Comparison("A", "B", "ratio", 10.9, SETTING),))
    runs = {(SETTING, "A"): {s: fake_rec(s, 0.5) for s in range(3)},
            (SETTING, "B"): {s: fake_rec(s, 0.5) for s in range(3)}}
    for s in range(3):
        runs[(SETTING, "A")][s]["final"]["bits_down_per_round"] = 3.0
    assert judge([c], runs)[0]["verdict"] == SUPPORTED  # 33 / 3 = 11 >= 10.9
    for s in range(3):
        runs[(SETTING, "A")][s]["final"]["bits_down_per_round"] = 3.1
    assert judge([c], runs)[0]["verdict"] == CONTRADICTED  # 10.6 < 10.9


def test_no_worse_than_a_model_that_did_not_learn_is_not_supported():
    chance = [0.1, 0.102, 0.099, 0.1]  # B at chance (10 classes): "A within 1 point of B" says nothing
    out = judge([claim("toy.vacuous", "noninferior", 0.01)], runs_from(chance, chance))[0]
    assert out["verdict"] == INCONCLUSIVE and out["uninformative"].startswith("B did not learn")
    assert out["comparisons"][0]["side"] == "uninformative"
    learned = [0.8, 0.81, 0.79, 0.8]
    assert judge([claim("toy.ok", "noninferior", 0.01)], runs_from(learned, learned))[0]["verdict"] == SUPPORTED


def test_margins_are_declared_and_obey_the_papers_gaps():
    with pytest.raises(ValueError, match="smallest effect that matters"):
        Claim("t.c", "t", "s", "q", "s", "final_accuracy", (Comparison("A", "B", "superior", 0.0, SETTING),))
    # a claimed 1.5-point gain cannot be called negligible at 1 point (more than half of it)
    with pytest.raises(ValueError, match="half the difference the paper reports"):
        claim("t.c", "superior", 0.0, paper_gap=0.015)
    assert claim("t.c", "superior", 0.0, paper_gap=0.015, negligible=0.0075).comparisons[0].paper_gap == 0.015
    with pytest.raises(ValueError, match="non-inferiority"):
        Claim("t.c", "t", "s", "q", "s", "final_accuracy", (Comparison("A", "B", "noninferior", 0.01, SETTING),),
              margin=Margin(0.02, "not the boundary"))
    with pytest.raises(ValueError, match="reason"):
        Margin(0.01, "")


def test_a_claim_may_stop_at_fewer_seeds_than_its_paper():
    c = dataclasses.replace(claim("toy.c", "superior", 0.0), max_seeds=10)
    assert Judge([c], (5, 10, 20, 40)).designs[0].looks == (5, 10)


# ---------------------------------------------------------------------------------------------- real runs


def _runs(seeds, **kw) -> dict:
    base = Experiment(algorithm="fedavg", dataset="digits", model="logreg", partition="dirichlet:0.5",
                      num_clients=10, clients_per_round=5, rounds=6, local_steps=5, batch_size=32, lr=0.3,
                      eval_every=6, executor="sequential")
    out = {}
    for s in seeds:
        out[s] = run(dataclasses.replace(base, seed=s, **kw)).record()
    return out


def test_same_seed_same_partition_and_initial_model_across_algorithms():
    a = _runs([0, 1])
    b = _runs([0, 1], algorithm="scaffold")
    for s in (0, 1):
        assert paired.pairing_mismatch(a[s], b[s]) == ""
    assert a[0]["partition"]["fingerprint"] != a[1]["partition"]["fingerprint"]
    assert a[0]["initial_model"]["fingerprint"] != a[1]["initial_model"]["fingerprint"]


def test_a_scales_seed_maximum_ends_its_looks_and_a_companion_metric_is_shown_on_the_same_seeds():
    from theory.empirical.run import scale_looks

    assert scale_looks((5, 10, 20, 40), 20) == (5, 10, 20) and scale_looks((5, 10, 20, 40), 15) == (5, 10, 15)
    assert scale_looks((5, 10, 20, 40)) == (5, 10, 20, 40)
    c = Claim("toy.auc", "toy", "s", "q", "s", "mean_accuracy", (Comparison("A", "B", "superior", 0.0, SETTING),),
              margin=POINT)
    runs = runs_from([0.8 + 0.001 * s for s in range(6)], [0.7] * 6)
    for r in runs[(SETTING, "A")].values():
        r["final"]["test_accuracy"] = 0.9  # the last evaluation differs from the curve's mean
    j = Judge([c], (5, 10), companions={"mean_accuracy": "final_accuracy"})
    j.look(0, runs, range(5))
    out = j.results()[0]
    assert out["verdict"] == SUPPORTED and out["seeds"] == 5 and "seeds_used" not in out and "stop_reason" not in out
    comp = out["companion"]
    assert comp["metric"] == "final_accuracy" and comp["comparisons"][0]["n"] == 5
    assert comp["comparisons"][0]["mean"] == pytest.approx(0.2)


def test_not_supported_names_each_setting_when_a_claim_has_several():
    """Two settings of one comparison: the "Not supported" sentence names each (it repeated itself word for word)."""
    from theory.empirical.report import verdict_lines
    comp = {"a": "A", "b": "B", "side": "negligible", "negligible": 0.01}
    c = {"verdict": "NEGLIGIBLE", "scale": "cpu", "why_stopped": "decided", "direction": "superior",
         "metric": "final_accuracy", "margin": {"value": 0.01, "reason": "1 point of accuracy"},
         "comparisons": [{**comp, "setting": "iid"}, {**comp, "setting": "skew"}], "p_holm": {"NEGLIGIBLE": 0.001},
         "alpha": 0.05}
    text = "\n".join(verdict_lines(c))
    assert "A's difference from B (iid) is shown" in text and "A's difference from B (skew) is shown" in text
    assert "Smallest effect that matters: 1 point of accuracy." in text
    one = "\n".join(verdict_lines({**c, "comparisons": [{**comp, "setting": "iid"}]}))
    assert "A's difference from B is shown" in one


def test_a_tie_of_p_values_names_no_closest_decision():
    """When every family's Holm-adjusted p-value is the same (all at the cap of 1, as for a mean near 0 with a
    wide interval), the sentence says that no decision came closer and gives each tied family's distance; the
    planning figure names the tied decision fewest seeds would reach, not the first family in order."""
    from theory.empirical.judge import closest, seeds_to_reach_family
    lv = {SUPPORTED: 0.0125, CONTRADICTED: 0.0125, NEGLIGIBLE: 0.0125}
    comp = {"a": "A", "b": "B", "mean": -0.0082, "sd": 0.05, "lower": -0.126, "upper": 0.075, "boundary": 0.0,
            "negligible": 0.01, "levels": lv}
    tie = {SUPPORTED: 1.0, CONTRADICTED: 1.0, NEGLIGIBLE: 1.0}
    out = closest(tie, [comp], 0.05, "final_accuracy")
    assert out["text"].startswith("no decision came closer than another")
    assert out["tied"] == [SUPPORTED, CONTRADICTED, NEGLIGIBLE]
    assert "lower end is 12.60 points below" in out["text"] and "upper end is 7.50 points above" in out["text"]
    assert "NEGLIGIBLE: the interval [-12.60 points, 7.50 points] reaches 11.60 points beyond the negligible band " \
        "+-1.00 points" in out["text"]
    # a non-inferiority claim cannot be NEGLIGIBLE (no margin of its own): it is never among the tied
    noninf = dict(comp, boundary=-0.01, negligible=0.0)
    assert closest(tie, [noninf], 0.05, "final_accuracy")["tied"] == [SUPPORTED, CONTRADICTED]
    # a mean of -0.82 points is nearer CONTRADICTED's boundary (0) than NEGLIGIBLE's (-1 point); SUPPORTED is away
    need = {f: seeds_to_reach_family(f, [comp]) for f in tie}
    assert need[SUPPORTED] is None and need[CONTRADICTED] < need[NEGLIGIBLE]
    assert out["verdict"] == CONTRADICTED and out["seeds_to_reach"] == need[CONTRADICTED]
    line = verdict_lines({"verdict": INCONCLUSIVE, "scale": "cpu", "why_stopped": "its seed budget is spent",
                          "metric": "final_accuracy", "direction": "superior", "margin": None, "comparisons": [],
                          "p_holm": tie, "alpha": 0.05, "closest": out})
    assert any("would reach CONTRADICTED, the nearest of the tied decisions" in x for x in line)
    # no tie: the smallest p-value names its family, as before
    one = closest({SUPPORTED: 0.3, CONTRADICTED: 1.0, NEGLIGIBLE: 1.0}, [comp], 0.05, "final_accuracy")
    assert one["text"].startswith("closest to SUPPORTED") and one["tied"] == [SUPPORTED]
    assert one["seeds_to_reach"] is None
