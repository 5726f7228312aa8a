"""What TF32 does to one claims cell (issue 48): ``fedrepro bench --tf32-cell``.

TF32 (CUDA matmuls and cuDNN convolutions with 10 mantissa bits) is never the runs' default
(``benchmark.sim.numerics``). Whether to offer it is a trade of speed against numbers, so both are measured on
the same cell: FedBAT's deciding claims cell (``fedrepro bench --profile-claims``'s, at most ``rounds`` rounds),
run twice from the same seed, TF32 off then on, on the chosen device. Each run's record states the numerics in
force (``environment.numerics``); the result gives each run's seconds, final test accuracy and loss, and their
differences, after an untimed warm-up run of one round (the first run in a process loads and partitions the
data: 96 against 14 s on a CPU for the same round). One seed: the difference is the change in this run, to be read beside the spread over seeds of the
claims report, not a distribution. On a CPU TF32 changes nothing (the two runs are equal): a check of the path.
"""
from __future__ import annotations

import dataclasses
import datetime
import time

from benchmark.runs.plan import run
from benchmark.runs.record import code_version
from benchmark.sim import numerics


def compare_tf32(exp, device: str | None = None, log=None) -> dict:
    """``exp`` on ``device`` with TF32 off, then on: seconds, final accuracy and loss of each, and the change."""
    exp = exp if device is None else dataclasses.replace(exp, device=device)  # None: the experiment's (the planner's)
    run(dataclasses.replace(exp, rounds=1, eval_rounds=None))  # untimed: data loading, caches, kernel choices
    out = {}
    for tf32 in (False, True):
        with numerics.using(numerics.Numerics(tf32=tf32)):
            t0 = time.perf_counter()
            r = run(exp)
            secs = time.perf_counter() - t0
        last = [h for h in r.history if h.get("test_accuracy") is not None][-1]
        out["tf32" if tf32 else "fp32"] = {
            "seconds": secs, "status": r.status, "final_test_accuracy": last["test_accuracy"],
            "final_test_loss": last.get("test_loss"), "round": last["round"],
            "numerics": r.environment["numerics"], "device": r.environment["device"]}
        if log is not None:
            log(f"  TF32 {'on' if tf32 else 'off'}: {secs:.1f} s, test accuracy {last['test_accuracy']:.4f}")
    a, b = out["fp32"], out["tf32"]
    return {"kind": "tf32-cell", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code_version": code_version(), "config_hash": exp.config_hash(), "rounds": exp.rounds,
            "algorithm": exp.algorithm, "model": exp.model, "runs": out,
            "speedup": a["seconds"] / b["seconds"] if b["seconds"] else None,
            "accuracy_change_points": 100 * (b["final_test_accuracy"] - a["final_test_accuracy"]),
            "loss_change": (None if a["final_test_loss"] is None or b["final_test_loss"] is None
                            else b["final_test_loss"] - a["final_test_loss"])}


def summary(result: dict) -> str:
    a, b = result["runs"]["fp32"], result["runs"]["tf32"]
    return (f"{result['algorithm']} / {result['model']}, {result['rounds']} rounds on {a['device']}: TF32 off "
            f"{a['seconds']:.1f} s, accuracy {a['final_test_accuracy']:.4f}; TF32 on {b['seconds']:.1f} s, accuracy "
            f"{b['final_test_accuracy']:.4f}; TF32 {result['speedup']:.2f}x the speed, accuracy "
            f"{result['accuracy_change_points']:+.2f} points (one seed)")
