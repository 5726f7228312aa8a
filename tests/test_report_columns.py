"""Leaderboard columns: every experiment field that varies (besides algorithm and seed) separates
columns, so different experiments are never averaged together."""
from __future__ import annotations

from benchmark.reports import leaderboard as report, columns


def _rec(algorithm, seed, acc, **cfg):
    base = {"algorithm": algorithm, "seed": seed, "dataset": "digits", "partition": "iid", "model": "logreg",
            "lr": 0.1, "num_clients": 5, "clients_per_round": None, "dataset_args": {}, "model_args": {},
            "algorithm_args": {}}
    base.update(cfg)
    return {"config": base, "status": "ok", "final": {"test_accuracy": acc, "num_params": 10},
            "history": [], "code_version": {"git_commit": "abc"}, "environment": {"device": "cpu"}}


def test_models_are_columns_and_a_per_model_lr_adds_none():
    recs = [_rec("fedavg", s, 0.5, model="logreg", lr=0.1) for s in (0, 1)]
    recs += [_rec("fedavg", s, 0.9, model="mlp", lr=0.05, model_args={"hidden": 64}) for s in (0, 1)]
    assert columns.column_keys(recs) == ("model",)
    md = report.leaderboard(recs, title="t")
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    assert "logreg" in header and "mlp" in header
    assert "50.00 ± 0.00" in md and "90.00 ± 0.00" in md  # not averaged into 70


def test_a_field_outside_the_usual_keys_becomes_a_column_when_it_varies_alone():
    recs = [_rec("fedavg", 0, 0.5, lr=0.1), _rec("fedavg", 0, 0.7, lr=0.01)]
    assert columns.column_keys(recs) == ("lr",)
    md = report.leaderboard(recs, title="t")
    assert "lr=0.1" in md and "lr=0.01" in md


def test_dataset_args_label():
    recs = [_rec("fedavg", 0, 0.5), _rec("fedavg", 0, 0.6, dataset_args={"labels": "parity"})]
    assert columns.column_keys(recs) == ("dataset_args",)
    md = report.leaderboard(recs, title="t")
    assert "labels=parity" in md and "dataset_args default" in md


def test_nothing_varies():
    recs = [_rec("fedavg", s, 0.5) for s in (0, 1)] + [_rec("fedprox", 0, 0.4)]
    assert columns.column_keys(recs) == ("dataset",)
