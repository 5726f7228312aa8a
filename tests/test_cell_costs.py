"""A claims run's measured cost (benchmark/runs/cell_costs.py): the profiled cell's costs scaled by the work, and the FLOPs
model where no cell of that dataset and model was profiled."""
from __future__ import annotations

import dataclasses

from benchmark.runs import cell_costs
from benchmark.runs.experiment import Experiment

EXP = Experiment(algorithm="fedavg", dataset="digits", model="mlp", num_clients=10, clients_per_round=5, rounds=10,
                 local_steps=4, batch_size=16, eval_every=2, eval_train_samples=200)


def _profile(exp):
    cfg = exp.config()
    return {"_path": "p.json", "cells": [{
        "label": "digits", "algorithm": exp.algorithm, "config": cfg, "rounds_run": exp.rounds,
        "per_round": {"local": 1.0, "data": 0.5, "client": 0.25, "round": 0.25, "server": 2.0},
        "seconds": {"evaluate": 10.0, "job": 3.0}}]}


def test_scaled_by_the_work():
    prof = _profile(EXP)
    same = cell_costs.run_seconds(EXP, prof)
    assert same["seconds"] == 10 * (2.0 + 2.0) + 10.0 + 3.0 and "profiled cell digits" in same["source"]
    more = cell_costs.run_seconds(dataclasses.replace(EXP, rounds=20, local_steps=8, eval_every=4), prof)
    assert more["seconds"] == 20 * 2 * 2.0 + 20 * 2.0 + 10.0 + 3.0  # twice the steps, as many evaluations
    other = cell_costs.run_seconds(dataclasses.replace(EXP, algorithm="scaffold"), prof)
    assert other["seconds"] == 10 * 2.0 + 10.0 + 3.0  # another algorithm's server is not the profiled one's
    fewer = cell_costs.run_seconds(dataclasses.replace(EXP, eval_rounds=(10,)), prof)
    assert fewer["seconds"] < same["seconds"]  # 1 test evaluation instead of 5


def test_no_matching_cell_falls_back_to_the_flops_model():
    prof = _profile(dataclasses.replace(EXP, model="logreg"))
    got = cell_costs.run_seconds(EXP, prof)
    assert got["source"].startswith("FLOPs model") and got["seconds"] is None  # no cost model given: no seconds
