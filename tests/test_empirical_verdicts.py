"""The paired verdicts of theory/empirical: calibration under the null (no false verdict beyond the stated rate),
power on a planted difference, Holm's correction, pairing checks, and real paired runs: a method with a
deliberately worse learning rate is caught, two equivalent methods get no false verdict."""
import dataclasses

import numpy as np
import pytest

from benchmark import Experiment, run
from theory import stats
from theory.empirical import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Claim, Comparison
from theory.empirical import paired
from theory.empirical.run import judge

SETTING = "s"


def fake_rec(seed: int, acc: float, status: str = "ok", part: str = "p", init: str = "i") -> dict:
    return {"config": {"seed": seed, "rounds": 4, "eval_every": 1}, "status": status,
            "final": {"test_accuracy": acc, "bits_down_per_round": 33.0},
            "history": [{"round": r, "test_accuracy": acc} for r in range(1, 5)],
            "partition": {"fingerprint": f"{part}{seed}", "statistics": {"num_classes": 10}},
            "initial_model": {"fingerprint": f"{init}{seed}"}}


def claim(cid: str, test: str, margin: float, a: str = "A", b: str = "B") -> Claim:
    return Claim(cid, "toy", "made up", "q", "s", "final_accuracy", (Comparison(a, b, test, margin, SETTING),))


def runs_from(xa, xb) -> dict:
    return {(SETTING, "A"): {s: fake_rec(s, v) for s, v in enumerate(xa)},
            (SETTING, "B"): {s: fake_rec(s, v) for s, v in enumerate(xb)}}


def verdict_rates(test: str, margin: float, shift: float, n_seeds: int, reps: int, k_claims: int = 1,
                  seed: int = 0) -> dict:
    """Verdict frequencies of the first of k identical-in-law claims, differences N(shift, 0.02^2) per seed."""
    rng = np.random.default_rng(seed)
    counts = {SUPPORTED: 0, CONTRADICTED: 0, INCONCLUSIVE: 0}
    fam_sup = 0
    claims = [claim(f"toy.c{i}", test, margin) for i in range(k_claims)]
    for _ in range(reps):
        pr = {}
        for c in claims:
            b = rng.uniform(0.5, 0.8, n_seeds)  # a seed effect shared by both arms (pairing removes it)
            x = rng.normal(shift, 0.02, n_seeds)
            pr[c.id] = [paired.pair(c.comparisons[0], "final_accuracy", {s: fake_rec(s, b[s] + x[s]) for s in
                                                                          range(n_seeds)},
                                    {s: fake_rec(s, b[s]) for s in range(n_seeds)})]
        out = paired.decide(claims, pr)
        counts[out[0]["verdict"]] += 1
        fam_sup += any(o["verdict"] == SUPPORTED for o in out)
    return {k: v / reps for k, v in counts.items()} | {"family_supported": fam_sup / reps}


@pytest.mark.parametrize("test, margin, boundary_shift", [("superior", 0.0, 0.0), ("noninferior", 0.01, -0.01)])
def test_no_false_verdict_at_the_boundary(test, margin, boundary_shift):
    """True mean exactly at the boundary: SUPPORTED and CONTRADICTED each at most ALPHA (Clopper-Pearson)."""
    reps = 600
    r = verdict_rates(test, margin, boundary_shift, n_seeds=5, reps=reps)
    for v in (SUPPORTED, CONTRADICTED):
        lo, _ = stats.bernoulli_rate_interval(round(r[v] * reps), reps, alpha=1e-3)
        assert lo <= paired.ALPHA, (v, r)


def test_holm_keeps_the_family_rate():
    """Four null claims: the chance that any is SUPPORTED stays at ALPHA (uncorrected it would be ~4x)."""
    reps = 400
    r = verdict_rates("superior", 0.0, 0.0, n_seeds=5, reps=reps, k_claims=4, seed=1)
    lo, _ = stats.bernoulli_rate_interval(round(r["family_supported"] * reps), reps, alpha=1e-3)
    assert lo <= paired.ALPHA, r


def test_a_planted_difference_is_detected():
    """A true improvement of 2 sd of the per-seed noise, 8 seeds: SUPPORTED nearly always, never CONTRADICTED;
    the reverse claim is CONTRADICTED."""
    r = verdict_rates("superior", 0.0, 0.04, n_seeds=8, reps=100, seed=2)
    assert r[SUPPORTED] >= 0.9 and r[CONTRADICTED] == 0
    r = verdict_rates("noninferior", 0.01, -0.05, n_seeds=8, reps=100, seed=3)
    assert r[CONTRADICTED] >= 0.9 and r[SUPPORTED] == 0


def test_inconclusive_says_how_many_seeds_would_decide():
    xb = [0.6, 0.7, 0.65, 0.62, 0.68]
    d = [0.01, -0.004, 0.012, 0.003, 0.008]
    out = judge([claim("toy.c", "superior", 0.0)], runs_from([b + e for b, e in zip(xb, d)], xb))[0]
    assert out["verdict"] == INCONCLUSIVE
    n = out["seeds_needed"]
    assert n and n > 5
    # the same differences repeated to n seeds (same mean, about the same spread) are decided
    dd = (d * n)[:n]
    assert judge([claim("toy.c", "superior", 0.0)], runs_from([0.6 + e for e in dd], [0.6] * n))[0]["verdict"] \
        == SUPPORTED


def test_identical_arms_give_no_verdict_either_way():
    x = [0.7, 0.71, 0.69, 0.72]
    out = judge([claim("toy.sup", "superior", 0.0), claim("toy.noninf", "noninferior", 0.01)], runs_from(x, x))
    assert out[0]["verdict"] == INCONCLUSIVE and out[0]["undecidable"]  # exactly at the boundary: no n decides
    assert out[1]["verdict"] == SUPPORTED  # 0 >= -1 point, with no spread


def test_intersection_claim_needs_every_comparison():
    c = Claim("toy.all", "toy", "s", "q", "s", "final_accuracy",
              (Comparison("A", "B", "superior", 0.0, SETTING), Comparison("A", "C", "superior", 0.0, SETTING)))
    base = [0.5, 0.6, 0.55, 0.52, 0.58, 0.61]
    runs = {(SETTING, "A"): {s: fake_rec(s, v + 0.1) for s, v in enumerate(base)},
            (SETTING, "B"): {s: fake_rec(s, v + 0.001 * s) for s, v in enumerate(base)},
            (SETTING, "C"): {s: fake_rec(s, v + 0.1 + 0.002 * (s % 2) - 0.001) for s, v in enumerate(base)}}
    out = judge([c], runs)[0]
    assert [x["side"] for x in out["comparisons"]] == ["supports", "undecided"]
    assert out["verdict"] == INCONCLUSIVE
    runs[(SETTING, "C")] = {s: fake_rec(s, v + 0.2) for s, v in enumerate(base)}  # C clearly better than A
    assert judge([c], runs)[0]["verdict"] == CONTRADICTED


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


def test_planted_worse_learning_rate_is_caught_and_equivalent_methods_are_not():
    """Real paired runs on digits: FedAvg at lr 0.3 against itself at a deliberately poor lr 0.003 (planted
    defect): 'good beats bad' SUPPORTED and 'bad within 1 point of good' CONTRADICTED. FedProx(mu = 0) computes
    FedAvg (tests/test_drift_baselines.py): no claim between them is decided the wrong way."""
    seeds = range(5)
    good, bad, prox0 = _runs(seeds), _runs(seeds, lr=0.003), _runs(seeds, algorithm="fedprox",
                                                                    algorithm_args={"mu": 0.0})
    runs = {(SETTING, "good"): good, (SETTING, "bad"): bad, (SETTING, "prox0"): prox0}
    claims = [claim("t.good_beats_bad", "superior", 0.0, "good", "bad"),
              claim("t.bad_matches_good", "noninferior", 0.01, "bad", "good"),
              claim("t.prox0_beats_avg", "superior", 0.0, "prox0", "good"),
              claim("t.avg_beats_prox0", "superior", 0.0, "good", "prox0"),
              claim("t.prox0_matches_avg", "noninferior", 0.01, "prox0", "good")]
    out = {o["id"]: o["verdict"] for o in judge(claims, runs)}
    assert out["t.good_beats_bad"] == SUPPORTED
    assert out["t.bad_matches_good"] == CONTRADICTED
    assert out["t.prox0_beats_avg"] == INCONCLUSIVE and out["t.avg_beats_prox0"] == INCONCLUSIVE
    assert out["t.prox0_matches_avg"] == SUPPORTED


def test_no_worse_than_a_model_that_did_not_learn_is_not_supported():
    chance = [0.1, 0.102, 0.099, 0.1]  # B at chance (10 classes): "A within 1 point of B" says nothing
    out = judge([claim("toy.vacuous", "noninferior", 0.01)], runs_from(chance, chance))[0]
    assert out["verdict"] == INCONCLUSIVE and out["reason"].startswith("uninformative")
    assert out["comparisons"][0]["side"] == "uninformative"
    learned = [0.8, 0.81, 0.79, 0.8]
    assert judge([claim("toy.ok", "noninferior", 0.01)], runs_from(learned, learned))[0]["verdict"] == SUPPORTED
