"""Evaluation at the rounds a claim's metrics read (issue 45): ``Experiment.eval_rounds`` skips the test set at the
other scheduled evaluations, with the same numbers where it does evaluate, the training objective (and so the
divergence rule) at every scheduled one, and the config hash of a run that does not set it unchanged."""
from __future__ import annotations

import dataclasses

import pytest

from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import run
from theory.empirical.metrics import METRICS, READS, mean_accuracy, rounds_read

EXP = Experiment(dataset="digits", model="mlp", num_clients=6, clients_per_round=3, rounds=5, batch_size=16,
                 local_steps=2, eval_every=1, eval_train_samples=200, seed=4)


def _strip(h):
    return {k: v for k, v in h.items() if k != "wall_time"}


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_same_numbers_at_the_rounds_evaluated(executor):
    full = run(dataclasses.replace(EXP, executor=executor), threads=1)
    part = run(dataclasses.replace(EXP, executor=executor, eval_rounds=(2, 4)), threads=1)
    tested = [h["round"] for h in part.history if h["test_accuracy"] is not None]
    assert tested == [2, 4, 5]  # the last round always
    for a, b in zip(full.history, part.history):
        if b["round"] in tested:
            assert _strip(a) == _strip(b)
        else:  # the training objective still measured; the test set not
            assert b["test_loss"] is None and b["train_loss"] == a["train_loss"] and b["local_loss"] == a["local_loss"]
    assert part.final["test_accuracy"] == full.final["test_accuracy"]


def test_default_keeps_the_hash_and_a_set_value_changes_it():
    assert "eval_rounds" in EXP.config() and EXP.config()["eval_rounds"] is None
    assert dataclasses.replace(EXP, eval_rounds=None).config_hash() == EXP.config_hash()
    assert dataclasses.replace(EXP, eval_rounds=[3, 5]).config_hash() != EXP.config_hash()
    with pytest.raises(ValueError, match="eval_rounds"):
        dataclasses.replace(EXP, eval_rounds=(0, 9)).validate()


def test_rounds_read_by_each_metric():
    assert rounds_read({"final_accuracy"}, 20, 5) == (20,)
    assert rounds_read({"tail_accuracy", "final_accuracy"}, 40, 1) == (37, 38, 39, 40)
    assert rounds_read({"mean_accuracy"}, 30, 2) is None  # every evaluated round: the default, the same hash
    assert rounds_read({"bits_down_per_round"}, 10, 1) == (10,)


def test_metrics_read_only_what_they_declare():
    """A record evaluated at the declared rounds gives each metric the value of the fully evaluated record."""
    rec = run(EXP, threads=1).record()
    assert set(READS) == set(METRICS)  # every metric declares what it reads
    for metric, (fn, *_) in METRICS.items():
        keep = rounds_read({metric}, EXP.rounds, EXP.eval_every) or range(1, EXP.rounds + 1)
        cut = {**rec, "history": [h if h["round"] in keep else {**h, "test_accuracy": None} for h in rec["history"]]}
        assert fn(cut) == fn(rec)
    planted = {**rec, "history": [{**h, "test_accuracy": None} if h["round"] == 3 else h for h in rec["history"]]}
    assert mean_accuracy(planted) != mean_accuracy(rec)  # a metric that reads a skipped round would move
