"""The tuning protocol (benchmark/campaign/tuning.py, ``fedrepro tune``) and the validation split it selects on
(datasets ``validation``): selection never sees the test set, final seeds are fresh, reruns resume."""
import json

import numpy as np
import pytest
import torch

from benchmark import Experiment, cli, datasets
from benchmark.campaign import tuning
from benchmark.runs.build import load_dataset

BASE = Experiment(algorithm="fedavg", dataset="digits", model="logreg", partition="iid", num_clients=5,
                  rounds=3, local_steps=3, batch_size=32, eval_every=3, executor="sequential")


def test_validation_split_is_held_out_training_data_and_replaces_the_test_set():
    full = datasets.load("digits")
    ds = datasets.load("digits", validation=200)
    assert len(ds.y_test) == 200 and len(ds.y_train) == len(full.y_train) - 200
    idx = ds.meta["validation_index"].numpy()
    # the evaluation set is the held-out training samples, not the test set
    assert torch.equal(ds.x_test, full.x_train[idx]) and torch.equal(ds.y_test, full.y_train[idx])
    keep = np.setdiff1d(np.arange(len(full.y_train)), idx)
    assert torch.equal(ds.x_train, full.x_train[keep])
    assert np.bincount(ds.y_test.numpy()).min() >= 19  # stratified (10 classes)
    assert "test set is not used" in ds.meta["evaluation"]
    again = datasets.load("digits", validation=200)
    assert torch.equal(again.meta["validation_index"], ds.meta["validation_index"])  # fixed seed


def test_validation_with_train_subset_comes_from_outside_the_subset():
    sub = datasets.load("digits", train_subset=500)
    ds = datasets.load("digits", train_subset=500, validation=300)
    assert torch.equal(ds.x_train, sub.x_train)  # tuning trains on exactly the final runs' subset
    assert not set(ds.meta["validation_index"].tolist()) & set(sub.meta["train_subset_index"].tolist())


@pytest.mark.parametrize("opts, msg", [({"validation": 0}, "positive integer"),
                                       ({"validation": 1.5}, "positive integer"),
                                       ({"validation": 2000}, "choose a smaller validation"),
                                       ({"train_subset": 1300, "validation": 100}, "outside train_subset")])
def test_bad_validation_splits_are_clear_errors(opts, msg):
    with pytest.raises(ValueError, match=msg):
        datasets.load("digits", **opts)


def test_plan_checks():
    with pytest.raises(ValueError, match="fresh"):
        tuning.TuningPlan({"lr": [0.1]}, 100, tune_seeds=(0,), final_seeds=(0, 1))
    with pytest.raises(ValueError, match="cannot be tuned"):
        tuning.TuningPlan({"seed": [1, 2]}, 100)
    with pytest.raises(ValueError, match="non-empty"):
        tuning.TuningPlan({"lr": []}, 100)
    with pytest.raises(ValueError, match="not valid for fedavg"):
        tuning.tuning_cells(BASE, tuning.TuningPlan({"beta1": [0.5]}, 100))


def test_grid_keys_go_to_fields_or_algorithm_args():
    plan = tuning.TuningPlan({"lr": [0.1, 1.0], "beta1": [0.5, 0.9]}, 100, (7,), (0, 1))
    cells = tuning.tuning_cells(Experiment(**{**BASE.__dict__, "algorithm": "fedavgm"}), plan)
    assert plan.size == 4 and len(cells) == 4
    assert {(e.lr, e.algorithm_args["beta1"]) for _, _, e in cells} == {(0.1, 0.5), (0.1, 0.9), (1.0, 0.5), (1.0, 0.9)}
    assert all(e.dataset_args["validation"] == 100 and e.seed == 7 for _, _, e in cells)
    fin = tuning.final_cells(BASE, {"lr": 1.0}, plan)
    assert [e.seed for e in fin] == [0, 1] and all("validation" not in e.dataset_args for e in fin)


def test_tuning_cells_never_load_the_test_set():
    plan = tuning.TuningPlan({"lr": [0.1]}, 150)
    (_, _, e), = tuning.tuning_cells(BASE, plan)
    data = load_dataset(e, torch.device("cpu"))
    test = datasets.load("digits")
    assert len(data.y_test) == 150
    assert not any(torch.equal(data.x_test[i], test.x_test[j]) for i in range(5) for j in range(len(test.x_test)))


def _rec(acc, status="ok"):
    return {"status": status, "final": {"test_accuracy": acc}}


def test_selection_rule():
    plan = tuning.TuningPlan({"lr": [0.01, 0.1, 1.0]}, 100, (5, 6), (0,))
    cells = tuning.tuning_cells(BASE, plan)
    by = {(i, s): e.config_hash() for i, s, e in cells}
    recs = {by[(0, 5)]: _rec(0.5), by[(0, 6)]: _rec(0.7),    # mean 0.6
            by[(1, 5)]: _rec(0.65), by[(1, 6)]: _rec(0.55),  # mean 0.6: a tie, the earlier point wins
            by[(2, 5)]: _rec(0.99), by[(2, 6)]: _rec(None, "diverged")}  # a diverged seed: never chosen
    sel = tuning.select(BASE, plan, recs)
    assert sel["chosen_index"] == 0 and sel["choice"] == {"lr": 0.01} and sel["complete"]
    assert sel["points"][2]["mean"] is None
    del recs[by[(1, 6)]]
    assert not tuning.select(BASE, plan, recs)["complete"]


def test_tune_runs_selects_and_resumes(tmp_path):
    plan = tuning.TuningPlan({"lr": [0.001, 0.5]}, 200, (100,), (0, 1))
    res = tuning.tune(BASE, plan, tmp_path, progress=False)
    assert res.counts["ok"] == 4 and res.record["choice"] == {"lr": 0.5}  # lr 0.001 barely moves in 3 rounds
    assert [r["config"]["seed"] for r in res.final] == [0, 1]
    assert all("validation" not in r["config"]["dataset_args"] for r in res.final)
    saved = json.loads(res.path.read_text())
    assert saved["choice"] == {"lr": 0.5} and saved["plan"]["grid"] == {"lr": [0.001, 0.5]}
    again = tuning.tune(BASE, plan, tmp_path, progress=False)
    assert again.counts["skipped"] == 4 and again.counts["ok"] == 0


def test_tune_command(tmp_path, capsys):
    rc = cli.main(["tune", "--algorithm", "fedavg", "--dataset", "digits", "--model", "logreg", "--num-clients", "5",
                   "--rounds", "2", "--local-steps", "2", "--grid", "lr=0.01,0.3", "--validation", "200",
                   "--seeds", "0", "1", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "chosen: lr=" in out and "fresh seeds [0, 1]" in out
    assert len(list((tmp_path / "tuning").glob("*.json"))) == 1
    rc = cli.main(["tune", "--algorithm", "fedavg", "--grid", "lr=0.1", "--validation", "100", "--seeds", "1000",
                   "--out", str(tmp_path)])
    assert rc == 2 and "fresh" in capsys.readouterr().err


def test_a_choice_at_an_end_of_its_grid_is_named_by_value():
    from benchmark.campaign.tuning import grid_end

    lrs = [{"lr": 1.0}, {"lr": 0.1}, {"lr": 0.01}]  # declared in descending order, as FedBAT's grid
    assert grid_end(lrs, 0) == "the largest lr of the grid"
    assert grid_end(lrs, 2) == "the smallest lr of the grid"
    assert grid_end(lrs, 1) is None and grid_end(lrs, None) is None
    assert grid_end(lrs[:2], 0) is None  # two points have no inside to miss
    assert grid_end([{"lr": 0.1, "mu": 1}] * 3, 0) is None  # several keys: no single direction
    assert grid_end([{"opt": "sgd"}, {"opt": "adam"}, {"opt": "x"}], 0) is None


def test_the_claims_report_marks_a_choice_at_an_end_of_its_grid():
    from theory.empirical.report import _tuning_lines

    pts = [{"point": {"lr": v}, "mean": m} for v, m in ((0.01, 0.5), (0.03, 0.6), (0.1, 0.7))]
    p = {"scale": {"tuning": {"rule": "lr over 3 values", "validation": 100, "tune_seeds": [1000]}},
         "budget": {"looks": [5]},
         "tuning": {"s / a": {"points": pts, "chosen_index": 2}, "s / b": {"points": pts, "chosen_index": 1}}}
    md = "\n".join(_tuning_lines(p))
    assert "**lr=0.1: 70.0** (an end)" in md and "**lr=0.03: 60.0** /" in md
    assert "1 of 2 choices are an end of their grid" in md
