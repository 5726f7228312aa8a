"""Empirical claims as statements a run can test: arms (methods), metrics, comparisons with a margin and a
direction, and claims that combine comparisons (DESIGN.md, "Empirical claims").

A ``Comparison`` tests, on paired runs (same seed, hence the same partition, initial model, client sampling
and minibatch order), the mean over seeds of a per-seed value x_s against a boundary b:

* ``"superior"``: x_s = metric(A) - metric(B), claim E[x] > margin ("A beats B by more than margin");
* ``"noninferior"``: x_s = metric(A) - metric(B), claim E[x] >= -margin ("A is at most margin worse than B");
* ``"ratio"``: x_s = metric(B) / metric(A), claim E[x] >= margin ("A needs margin times less than B").

A ``Claim`` holds when all its comparisons hold (an intersection: "FedBAT beats every binarized baseline").
Accuracy metrics are fractions in [0, 1]; margins of accuracy comparisons are given in the same unit
(0.01 = one percentage point) and reported in points.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# the metrics live in ``metrics``; re-exported here for the callers of ``claim``
from .metrics import (METRICS, bits_down_per_round, chance_level, final_accuracy,  # noqa: F401
                      mean_accuracy, tail_accuracy)

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "SUPPORTED", "CONTRADICTED", "INCONCLUSIVE"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
TESTS = ("superior", "noninferior", "ratio")


@dataclass(frozen=True)
class Arm:
    """A method as it enters a comparison: a registered algorithm with fixed hyperparameters (the paper's
    defaults unless given). ``name`` labels it in claims and reports."""

    name: str
    algorithm: str
    args: dict = field(default_factory=dict)

    def __hash__(self):
        return hash((self.name, self.algorithm, tuple(sorted(self.args.items()))))


def arm(algorithm: str, name: str | None = None, **args) -> Arm:
    return Arm(name or algorithm, algorithm, dict(args))


@dataclass(frozen=True)
class Comparison:
    a: str  # arm name
    b: str  # arm name
    test: str  # one of TESTS
    margin: float  # in the metric's unit (accuracy: a fraction; ratio: a factor)
    setting: str  # the scale's setting both arms run in

    def __post_init__(self):
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {self.test!r}")
        if self.margin < 0 or (self.test == "ratio" and self.margin <= 0):
            raise ValueError(f"margin must be >= 0 (> 0 for a ratio), got {self.margin}")

    @property
    def boundary(self) -> float:
        """b: the claim is E[x] > b (superior) or E[x] >= b (noninferior, ratio)."""
        return {"superior": self.margin, "noninferior": -self.margin, "ratio": self.margin}[self.test]

    def values(self, metric: str, rec_a: dict, rec_b: dict) -> float:
        f = METRICS[metric][0]
        va, vb = f(rec_a), f(rec_b)
        if self.test == "ratio":
            return vb / va if va else float("inf")
        return va - vb

    def describe(self, metric: str) -> str:
        unit, k = METRICS[metric][2], METRICS[metric][3]
        if self.test == "ratio":
            return f"{self.b} / {self.a} >= {self.margin:g}{unit}"
        m = f"{k * self.margin:g} {unit}"
        if self.test == "superior":
            return f"{self.a} - {self.b} > {m}"
        return f"{self.a} - {self.b} >= -{m}"


@dataclass(frozen=True)
class Claim:
    """A paper's empirical claim as a testable statement (see the module docstring)."""

    id: str  # "<paper>.<source>.<name>"
    paper: str
    source: str  # the table, figure or sentence it comes from
    quote: str  # the paper's words or numbers
    statement: str  # what is tested
    metric: str
    comparisons: tuple

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"{self.id}: unknown metric {self.metric!r}; known: {sorted(METRICS)}")
        if not self.comparisons:
            raise ValueError(f"{self.id}: a claim needs at least one comparison")

    @property
    def arms(self) -> set[str]:
        return {c.a for c in self.comparisons} | {c.b for c in self.comparisons}

    @property
    def direction(self) -> str:
        tests = sorted({c.test for c in self.comparisons})
        return "/".join(tests)
