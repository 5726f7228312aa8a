"""Per-run metrics of the empirical claims: the number a comparison takes from one run record.

* ``final_accuracy``: the test accuracy after the last round (the paper's "final" accuracy).
* ``tail_accuracy``: the mean test accuracy over the evaluations in the last ``TAIL_FRACTION`` (10%) of the
  rounds, rounds T - L + 1, ..., T with L = ceil(T / 10). It estimates the same quantity as the final
  accuracy, the accuracy level the method ends at, with less noise: under strong label skew the global
  model's test accuracy swings from round to round with the sampled clients (GradMA's omega = 0.01: tens
  of points between consecutive evaluations), and a single last evaluation adds that swing to every
  seed's paired difference. A scale that measures a final-accuracy claim by it declares so
  (``CpuScale.metrics``) and needs at least ``MIN_TAIL_EVALS`` evaluations in the tail; the final
  accuracy stays in the report beside it (``COMPANIONS``).
* ``mean_accuracy``: the mean over all evaluated rounds, the normalised area under the accuracy curve (a
  convergence-speed metric over the whole run; where a method's curve reaches its level within the first rounds,
  as FedAvg's does on BHerd's SVM at a tuned step, the mean sits within a tenth of a point of the tail, so no
  faster method can gain on it).
* ``early_accuracy``: the mean test accuracy over the evaluations in the first ``EARLY_FRACTION`` (10%) of the
  rounds, rounds 1, ..., E with E = ceil(T / 10): the accuracy a method has reached early, fixed before any run,
  which a faster method raises and a slower one lowers (a speed metric that can see a speed-up: the room a faster
  method has is the distance from the reference's early curve to its final level). It needs at least
  ``MIN_TAIL_EVALS`` evaluations in that window.
* ``best_accuracy``: the best test accuracy over the evaluated rounds (GradMA's Table 1 "top test accuracy"):
  a selection on the test set, so it is biased upwards by the round-to-round swings, and shown beside the
  deciding metric as the paper's own number, never deciding.
* ``bits_down_per_round``: downlink bits per round, counted from the packed payloads.

Accuracies are fractions in [0, 1]; a run that diverged counts at chance level (1 / number of classes) from
its divergence on.
"""
from __future__ import annotations

import math

TAIL_FRACTION = 0.1
EARLY_FRACTION = 0.1
MIN_TAIL_EVALS = 3


def chance_level(rec: dict) -> float:
    k = (rec.get("partition") or {}).get("statistics", {}).get("num_classes")
    return 1.0 / k if k else 0.0


def final_accuracy(rec: dict) -> float:
    """Test accuracy after the last round; a diverged run counts at chance level (1 / number of classes)."""
    if rec["status"] == "diverged":
        return chance_level(rec)
    return float(rec["final"]["test_accuracy"])


def eval_rounds(rounds: int, every: int) -> list[int]:
    """The rounds a run evaluates: every ``every``-th round and the last (``benchmark.sim.engine``)."""
    return sorted(set(range(every, rounds + 1, every)) | {rounds})


def tail_rounds(rounds: int, every: int, fraction: float = TAIL_FRACTION) -> list[int]:
    """The evaluated rounds in the last ``fraction`` of ``rounds`` (at least the last round)."""
    tail = max(1, math.ceil(fraction * rounds))
    return [r for r in eval_rounds(rounds, every) if r > rounds - tail]


def _curve(rec: dict) -> tuple[dict, int, int]:
    cfg = rec["config"]
    acc = {h["round"]: h["test_accuracy"] for h in rec["history"] if h.get("test_accuracy") is not None}
    return acc, int(cfg.get("eval_every") or 1), int(cfg["rounds"])


def mean_accuracy(rec: dict) -> float:
    """Mean test accuracy over the evaluated rounds (eval_every, 2 eval_every, ..., rounds): the normalised area
    under the accuracy curve, a convergence-speed metric; rounds after a divergence count at chance level."""
    acc, every, rounds = _curve(rec)
    chance = chance_level(rec)
    grid = eval_rounds(rounds, every)
    return float(sum(acc.get(r, chance) for r in grid) / len(grid))


def tail_accuracy(rec: dict) -> float:
    """Mean test accuracy over the evaluations in the last 10% of the rounds (``tail_rounds``); rounds after a
    divergence count at chance level."""
    acc, every, rounds = _curve(rec)
    chance = chance_level(rec)
    grid = tail_rounds(rounds, every)
    return float(sum(acc.get(r, chance) for r in grid) / len(grid))


def early_rounds(rounds: int, every: int, fraction: float = EARLY_FRACTION) -> list[int]:
    """The evaluated rounds in the first ``fraction`` of ``rounds`` (at least the first evaluation)."""
    early = max(1, math.ceil(fraction * rounds))
    grid = eval_rounds(rounds, every)
    return [r for r in grid if r <= early] or grid[:1]


def early_accuracy(rec: dict) -> float:
    """Mean test accuracy over the evaluations in the first 10% of the rounds (``early_rounds``); rounds after a
    divergence count at chance level."""
    acc, every, rounds = _curve(rec)
    chance = chance_level(rec)
    grid = early_rounds(rounds, every)
    return float(sum(acc.get(r, chance) for r in grid) / len(grid))


def best_accuracy(rec: dict) -> float:
    """The best test accuracy over the evaluated rounds (a selection on the test set: the paper's "top"
    accuracy); a run that diverged counts its rounds after the divergence at chance level, so its best is that of
    the rounds before."""
    acc, every, rounds = _curve(rec)
    chance = chance_level(rec)
    return float(max(acc.get(r, chance) for r in eval_rounds(rounds, every)))


def bits_down_per_round(rec: dict) -> float:
    """Downlink bits per round (summed over the devices that receive the broadcast), as counted from the
    packed payloads."""
    return float(rec["final"]["bits_down_per_round"])


METRICS = {
    "final_accuracy": (final_accuracy, "final test accuracy", "points", 100.0),
    "tail_accuracy": (tail_accuracy, "mean test accuracy over the last 10% of rounds", "points", 100.0),
    "mean_accuracy": (mean_accuracy, "mean test accuracy over the evaluated rounds (area under the curve)",
                      "points", 100.0),
    "bits_down_per_round": (bits_down_per_round, "downlink bits per round", "x", 1.0),
    "early_accuracy": (early_accuracy, "mean test accuracy over the first 10% of rounds", "points", 100.0),
    "best_accuracy": (best_accuracy, "best test accuracy over the evaluated rounds (selected on the test set)",
                      "points", 100.0),
}

#: a metric that stands in for another is shown next to it: the claim's own metric stays visible
COMPANIONS = {"tail_accuracy": "final_accuracy"}

#: which claim metric a measured metric may stand for (``CpuScale.metrics``): the same quantity, less noise
STANDS_FOR = {"tail_accuracy": "final_accuracy"}


def _check_window(settings: dict, where: str, metric: str, rounds_in, which: str) -> None:
    """Raise unless every setting evaluates at least ``MIN_TAIL_EVALS`` times in the rounds ``metric`` reads,
    ``rounds_in(rounds, eval_every)``: its ``which`` 10% of rounds."""
    for name, f in settings.items():
        n = len(rounds_in(int(f["rounds"]), int(f.get("eval_every") or 1)))
        if n < MIN_TAIL_EVALS:
            raise ValueError(f"{where}: setting {name!r} evaluates {n} time(s) in its {which} 10% of rounds "
                             f"({f['rounds']} rounds, eval_every {f.get('eval_every', 1)}); {metric} needs at "
                             f"least {MIN_TAIL_EVALS}: lower eval_every")


def check_early(settings: dict, where: str) -> None:
    """Raise unless every setting evaluates at least ``MIN_TAIL_EVALS`` times in its first 10% of rounds."""
    _check_window(settings, where, "early_accuracy", early_rounds, "first")


def check_tail(settings: dict, where: str) -> None:
    """Raise unless every setting evaluates at least ``MIN_TAIL_EVALS`` times in its last 10% of rounds."""
    _check_window(settings, where, "tail_accuracy", tail_rounds, "last")


#: the rounds each metric reads from a run's history, (rounds, eval_every) -> rounds (issue 45): the claims evaluate
#: the test set only there (``Experiment.eval_rounds``; ``rounds_read``)
READS = {"final_accuracy": lambda rounds, every: [rounds], "tail_accuracy": tail_rounds,
         "mean_accuracy": eval_rounds, "bits_down_per_round": lambda rounds, every: [],
         "early_accuracy": early_rounds, "best_accuracy": eval_rounds}


def rounds_read(metrics, rounds: int, every: int) -> tuple | None:
    """The rounds whose test evaluation ``metrics`` read (the last round always: a record's final accuracy), or
    None where that is every evaluated round (a run's default: its config and hash stay as they were)."""
    read = {rounds}.union(*(READS[m](rounds, every) for m in metrics))
    return None if read >= set(eval_rounds(rounds, every)) else tuple(sorted(read))

