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
  convergence-speed metric).
* ``bits_down_per_round``: downlink bits per round, counted from the packed payloads.

Accuracies are fractions in [0, 1]; a run that diverged counts at chance level (1 / number of classes) from
its divergence on.
"""
from __future__ import annotations

import math

TAIL_FRACTION = 0.1
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
}

#: a metric that stands in for another is shown next to it: the claim's own metric stays visible
COMPANIONS = {"tail_accuracy": "final_accuracy"}

#: which claim metric a measured metric may stand for (``CpuScale.metrics``): the same quantity, less noise
STANDS_FOR = {"tail_accuracy": "final_accuracy"}


def check_tail(settings: dict, where: str) -> None:
    """Raise unless every setting evaluates at least ``MIN_TAIL_EVALS`` times in its last 10% of rounds."""
    for name, f in settings.items():
        n = len(tail_rounds(int(f["rounds"]), int(f.get("eval_every") or 1)))
        if n < MIN_TAIL_EVALS:
            raise ValueError(f"{where}: setting {name!r} evaluates {n} time(s) in its last 10% of rounds "
                             f"({f['rounds']} rounds, eval_every {f.get('eval_every', 1)}); tail_accuracy needs at "
                             f"least {MIN_TAIL_EVALS}: lower eval_every")
