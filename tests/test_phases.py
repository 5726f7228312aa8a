"""The phase clock of ``fedrepro bench --profile-claims`` (benchmark/sim/phases.py, benchmark/perf/claims_profile.py)."""
from __future__ import annotations

import itertools

from benchmark.sim import phases
from benchmark.perf.claims_profile import markdown, profile_cell
from benchmark.runs.experiment import Experiment


def test_nested_phases_are_exclusive_and_add_up():
    ticks = itertools.count()
    clock = phases.Clock(timer=lambda: float(next(ticks)))
    with phases.measuring(clock):
        with phases.phase("round"):  # t 0 .. 5: 1 tick in round, then local, then 1 more tick in round
            with phases.phase("local"):  # t 1 .. 4 less data's 2 .. 3
                with phases.phase("data"):
                    pass
    assert clock.seconds == {"round": 2.0, "local": 2.0, "data": 1.0}
    assert clock.total() == 5.0
    assert dict(clock.calls) == {"round": 1, "local": 1, "data": 1}


def test_no_clock_no_measurement():
    assert phases._ACTIVE is None
    with phases.phase("local"):  # a no-op
        pass
    with phases.measuring() as clock:
        pass
    assert phases._ACTIVE is None and clock.total() == 0.0


def test_profile_of_a_run_covers_its_cpu_time_and_changes_no_number():
    import dataclasses

    from benchmark.runs import plan

    exp = Experiment(dataset="digits", model="mlp", num_clients=4, clients_per_round=2, rounds=3, batch_size=16,
                     eval_every=2, seed=3, executor="sequential")
    r = profile_cell(dataclasses.replace(exp, rounds=2), full=3, label="digits")
    assert r["rounds_run"] == 2 and r["rounds_full"] == 3 and r["evaluations"] == 1  # round 2 of 2
    assert abs(sum(r["seconds"].values()) - r["cpu_seconds"]) < 1e-6 * max(1.0, r["cpu_seconds"])
    assert r["seconds"]["local"] > 0 and r["seconds"]["evaluate"] > 0 and r["calls"]["data"] >= 2
    assert "| digits | sequential | 2 (3) | 1 |" in markdown({"code": {}, "date": "d", "threads": 1, "load_start": None,
                                                          "load_end": None, "cpus": 2, "cells": [r]})
    plain = plan.run(dataclasses.replace(exp, rounds=2), threads=1)
    with phases.measuring():
        measured = plan.run(dataclasses.replace(exp, rounds=2), threads=1)
    strip = [{k: v for k, v in h.items() if k != "wall_time"} for h in plain.history]
    assert strip == [{k: v for k, v in h.items() if k != "wall_time"} for h in measured.history]
