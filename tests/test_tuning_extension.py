"""The 0.4.0 tuning rule (benchmark/campaign/tuning.py, steps 2-3; issue 43): a point's score is the mean over the tuning
seeds of the claim's own metric; a choice at an end of its grid extends the grid by the next value in that
direction until the choice is interior, the new point did not train on most tuning seeds, or the declared cap is
reached (reported as such); an extension step's runs are cells like any other, so a rerun skips what is recorded."""
import dataclasses
import math

import pytest

from benchmark import Experiment
from benchmark.campaign import tuning
from benchmark.campaign.tuning import Extension, TuningPlan

BASE = Experiment(algorithm="fedavg", dataset="digits", model="logreg", partition="iid", num_clients=5,
                  rounds=3, local_steps=3, batch_size=32, eval_every=3, executor="sequential")
SEEDS = (1000, 1001, 1002)


def _settle(plan: TuningPlan, score, status=lambda lr, seed: "ok", base=BASE) -> tuple[dict, dict]:
    """Play the rule against a planted landscape: the runner's part is played by ``score(lr, seed)`` (the record's
    validation accuracy) and ``status(lr, seed)``; returns the tuning record and the records made."""
    records = {}
    for _ in range(50):
        points, steps, settled = tuning.extension(base, plan, records)
        for _, seed, e in tuning.tuning_cells(base, plan, points):
            if e.config_hash() not in records:
                st = status(e.lr, seed)
                records[e.config_hash()] = {"status": st, "final": {"test_accuracy": score(e.lr, seed)
                                                                    if st == "ok" else None}}
        if settled:
            return tuning.select(base, plan, records, points, steps), records
    raise AssertionError("the rule did not settle")


def _plan(grid=(0.01, 0.03, 0.1), cap=3, seeds=SEEDS, **kw):
    return TuningPlan({"lr": list(grid)}, 100, seeds, (0, 1), {"lr": Extension(ratio=3.0, cap=cap, **kw)})


def peak(at: float):
    """A validation accuracy that peaks at lr = ``at`` (log-symmetric), the same on every seed."""
    return lambda lr, seed: 0.9 - 0.05 * abs(math.log(lr / at))


def test_a_best_beyond_the_grid_is_found_by_the_extension():
    rec, _ = _settle(_plan(), peak(0.9))
    assert rec["choice"] == {"lr": 0.9}  # two values above the declared grid: 0.3, then 0.9
    assert [s["to"] for s in rec["steps"]] == [0.3, 0.9, 2.7]  # 2.7 was tried and is worse: 0.9 is interior
    assert rec["edge"] == [] and not tuning.at_edge(rec)
    assert [p["extension"] for p in rec["points"]] == [False] * 3 + [True] * 3
    # downwards too, and a best inside the grid takes no step at all
    low, _ = _settle(_plan(), peak(0.004))
    assert low["choice"] == {"lr": 0.00333333} and [s["to"] for s in low["steps"]] == [0.00333333, 0.00111111]
    inside, _ = _settle(_plan(), peak(0.03))
    assert inside["choice"] == {"lr": 0.03} and inside["steps"] == [] and len(inside["points"]) == 3


def test_the_paper_grid_comes_before_the_ratio():
    """FedSWA's grid {1e-3, 3e-3, ..., 1e-1, 3e-1}: above 0.1 the next value is the paper's 0.3, then 0.3 x 3."""
    ext = Extension(ladder=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3), ratio=3.0, cap=2)
    assert ext.next_value([0.01, 0.03, 0.1], [0.01, 0.03, 0.1], up=True) == (0.3, "")
    assert ext.next_value([0.01, 0.03, 0.1, 0.3], [0.01, 0.03, 0.1], up=True) == (0.9, "")
    assert ext.next_value([0.01, 0.03, 0.1, 0.3, 0.9], [0.01, 0.03, 0.1], up=True) == (None, "cap")
    assert ext.next_value([0.01, 0.03, 0.1], [0.01, 0.03, 0.1], up=False) == (0.003, "")
    bounded = Extension(ladder=(0.0, 0.1, 0.3, 0.5, 0.7, 0.9), ratio=None, cap=1)  # GradMA's beta1
    assert bounded.next_value([0.1, 0.5, 0.9], [0.1, 0.5, 0.9], up=False) == (0.0, "")
    assert bounded.next_value([0.1, 0.5, 0.9], [0.1, 0.5, 0.9], up=True) == (None, "no further value")
    for bad in (dict(ratio=1.0), dict(cap=-1), dict(ratio=None)):
        with pytest.raises(ValueError):
            Extension(**bad)
    with pytest.raises(ValueError, match="grid key"):
        TuningPlan({"lr": [0.1]}, 100, extend={"beta1": ext})


def test_a_point_that_diverges_on_most_seeds_stops_the_extension():
    """The best lies beyond 0.1, but 0.3 diverges on 2 of 3 tuning seeds: the rule stops, 0.1 stays the choice
    (inside its line now, next to what does not train) and nothing beyond 0.3 is tried."""
    rec, _ = _settle(_plan(), peak(2.0), status=lambda lr, seed: "diverged" if lr > 0.2 and seed != 1000 else "ok")
    assert rec["choice"] == {"lr": 0.1} and [s["to"] for s in rec["steps"]] == [0.3]
    assert rec["edge"] == [{"key": "lr", "direction": "up", "why": "diverged beyond"}]
    assert not tuning.at_edge(rec)  # the end of what trains, not an edge the rule could still extend
    assert rec["points"][3]["untrained"] == 2 and rec["points"][3]["mean"] is None
    # diverging on one seed of three is not most: the rule goes on past it
    on, _ = _settle(_plan(), peak(2.0), status=lambda lr, seed: "diverged" if 0.2 < lr < 0.5 and seed == 1001
                    else "ok")
    assert [s["to"] for s in on["steps"]] == [0.3]  # 0.3 has no score (a seed did not train) but trained on most
    assert on["choice"] == {"lr": 0.1} and on["edge"] == []


def test_the_cap_is_reported_and_marks_the_choice():
    rec, _ = _settle(_plan(cap=2), lambda lr, seed: min(0.99, 0.5 + lr / 10))  # better and better upwards
    assert rec["choice"] == {"lr": 0.9} and [s["to"] for s in rec["steps"]] == [0.3, 0.9]
    assert rec["edge"] == [{"key": "lr", "direction": "up", "why": "cap"}] and tuning.at_edge(rec)
    assert tuning.chosen_at_end({"s / a": rec}) == [("s / a", {"lr": 0.9})]
    from theory.empirical.report_protocol import tuning_lines

    p = {"scale": {"tuning": {"rule": "r", "validation": 100, "tune_seeds": list(SEEDS)}}, "budget": {"looks": [5]},
         "tuning": {"s / a": rec}}
    md = "\n".join(tuning_lines(p))
    assert "**lr=0.9: 59.0 +- 0.0 (+)**" in md and "the declared cap of the extension is reached" in md
    assert "1 of 1 choices are still at an edge of their grid: s / a" in md
    assert TuningPlan({"lr": [0.1, 0.3]}, 100, extend={"lr": Extension(cap=2)}).most_points == 4


def test_three_tuning_seeds_are_averaged():
    """Seed 1000 alone prefers lr 0.01 by a point; the other two seeds prefer 0.03 by three: the mean chooses 0.03,
    and each point shows its mean and its spread over the seeds."""
    table = {(0.01, 1000): 0.80, (0.03, 1000): 0.79, (0.01, 1001): 0.75, (0.03, 1001): 0.78,
             (0.01, 1002): 0.75, (0.03, 1002): 0.78, (0.1, 1000): 0.6, (0.1, 1001): 0.6, (0.1, 1002): 0.6}
    rec, _ = _settle(_plan(), lambda lr, seed: table.get((lr, seed), 0.5))
    assert rec["choice"] == {"lr": 0.03}
    row = rec["points"][1]
    assert set(row["validation_accuracy"]) == {"1000", "1001", "1002"}
    assert row["mean"] == pytest.approx((0.79 + 0.78 + 0.78) / 3) and row["sd"] == pytest.approx(0.005773503, rel=1e-6)
    one, _ = _settle(_plan(seeds=(1000,)), lambda lr, seed: table.get((lr, seed), 0.5))
    assert one["choice"] == {"lr": 0.01}


def test_the_score_is_the_claims_metric_on_the_validation_split():
    """A plan scored by the tail of the validation curve picks the point whose curve ends higher, where the last
    evaluation alone would pick the other; a diverged run scores at chance (the metric's rule), a failed one not at
    all."""
    from theory.empirical.metrics import tail_accuracy

    plan = TuningPlan({"lr": [0.1, 0.3]}, 100, (1000,), (0,), score=tail_accuracy, score_name="tail")
    cells = tuning.tuning_cells(BASE, plan)

    def rec(curve, status="ok"):
        return {"status": status, "config": {"rounds": 20, "eval_every": 1},
                "partition": {"statistics": {"num_classes": 10}},
                "history": [{"round": r + 1, "test_accuracy": a} for r, a in enumerate(curve)],
                "final": {"test_accuracy": curve[-1] if curve else None}}

    recs = {cells[0][2].config_hash(): rec([0.5] * 18 + [0.9, 0.6]),
            cells[1][2].config_hash(): rec([0.5] * 18 + [0.7, 0.7])}
    assert tuning.select(BASE, plan, recs)["choice"] == {"lr": 0.1}  # tail 0.75 vs 0.70; last 0.6 vs 0.7
    recs[cells[0][2].config_hash()] = rec([0.5] * 5, "diverged")
    sel = tuning.select(BASE, plan, recs)
    assert sel["points"][0]["mean"] == pytest.approx(0.1) and sel["choice"] == {"lr": 0.3}
    recs[cells[1][2].config_hash()] = rec([], "failed")
    assert tuning.select(BASE, plan, recs)["points"][1]["mean"] is None
    assert "tail" in plan.describe()["score"]


def test_tuning_with_extension_runs_resumes_and_skips_what_is_recorded(tmp_path):
    """Real runs: lr 0.001 and 0.003 barely move the model in 3 rounds, so the choice is the grid's top and the rule
    extends it (x3, at most 2 values: cap). A rerun replays the steps from the records and runs nothing; a lost
    extension record is the only cell that runs again."""
    plan = TuningPlan({"lr": [0.001, 0.003]}, 200, (1000, 1001, 1002), (0, 1), {"lr": Extension(ratio=3.0, cap=2)})
    (rec,), counts = tuning.tune_all([(BASE, plan)], tmp_path, progress=False)
    assert [s["to"] for s in rec["steps"]] == [0.009, 0.027] and counts["ok"] == 12
    assert rec["choice"] == {"lr": 0.027} and rec["edge"][0]["why"] == "cap" and rec["complete"]
    (again,), c2 = tuning.tune_all([(BASE, plan)], tmp_path, progress=False)
    assert c2.get("ok", 0) == 0 and c2["skipped"] == 12 and again["choice"] == rec["choice"]
    lost = tmp_path / f"{again['points'][3]['cells'][1]}.json"
    lost.unlink()
    (third,), c3 = tuning.tune_all([(BASE, plan)], tmp_path, progress=False)
    assert c3["ok"] == 1 and c3["skipped"] == 11 and third["choice"] == rec["choice"]
    assert tuning.pending([(BASE, plan)], tuning._records(tmp_path)) == []


def test_without_an_extension_the_grid_is_all():
    rec, _ = _settle(dataclasses.replace(_plan(), extend={}), peak(0.9))
    assert rec["choice"] == {"lr": 0.1} and rec["steps"] == [] and rec["edge"] == []
    assert tuning.at_edge({**rec, "edge": []}) is False and tuning.grid_end([p["point"] for p in rec["points"]], 2)


def _tuned_point(lr, accs, statuses):
    ok = list(accs.values())
    mean = sum(ok) / len(ok)
    sd = (sum((a - mean) ** 2 for a in ok) / (len(ok) - 1)) ** 0.5
    return {"point": {"lr": lr}, "mean": mean, "sd": sd, "validation_accuracy": accs, "status": statuses,
            "extension": False}


def test_a_choice_below_a_point_lost_to_a_diverged_tuning_seed_is_stated():
    """FedBAT's 0.4.0 cpu tuning: lr 0.1 trained to 74.6 and 71.3 and diverged on the third seed (scored 10.0), so
    the mean chose lr 0.01 (61.9). The table marks the divergence and the report states the objection's numbers;
    a point whose trained seeds did worse than the choice, or one with no failure, gives no such line."""
    from theory.empirical import report_protocol as rp

    ok3 = {"1000": "ok", "1001": "ok", "1002": "ok"}
    points = [_tuned_point(1.0, {"1000": 0.1, "1001": 0.1, "1002": 0.1}, dict.fromkeys(ok3, "diverged")),
              _tuned_point(0.1, {"1000": 0.1, "1001": 0.7455, "1002": 0.713}, {**ok3, "1000": "diverged"}),
              _tuned_point(0.01, {"1000": 0.575, "1001": 0.633, "1002": 0.6495}, ok3)]
    tuned = {"s / fedbat": {"points": points, "chosen_index": 2, "edge": []}}
    rows, _, _ = rp.tuning_rows(tuned)
    assert "lr=0.1: 51.9 +- 36.4 (diverged on 1 of 3)" in rows[0][1]
    assert "10.0 +- 0.0 (diverged on 3 of 3)" in rows[0][1] and "lr=0.01: 61.9 +- 3.9 /" not in rows[0][1]
    [note] = rp.failure_notes(tuned)
    assert note.startswith("s / fedbat: lr=0.1 reached 72.9 on the 2 of 3 tuning seeds where it trained")
    assert note.endswith("against 61.9 at the choice lr=0.01")
    assert any("Choices below a point" in line for line in rp.tuning_lines(
        {"scale": {"tuning": {"rule": "r", "validation": 2000, "tune_seeds": [1000, 1001, 1002]}},
         "tuning": tuned, "budget": {"looks": [5]}}))
    # the diverged point's trained seeds below the choice: nothing to object
    points[1] = _tuned_point(0.1, {"1000": 0.1, "1001": 0.55, "1002": 0.56}, {**ok3, "1000": "diverged"})
    assert rp.failure_notes(tuned) == []
    # no failure at all: the mean is the whole story
    points[1] = _tuned_point(0.1, {"1000": 0.5, "1001": 0.74, "1002": 0.71}, ok3)
    assert rp.failure_notes(tuned) == [] and "lr=0.1: 65.0 +- 13.1 /" in rp.tuning_rows(tuned)[0][0][1]
