"""Empirical claims as statements a run can test: arms (methods), metrics, comparisons with a boundary and a
direction, claims that combine comparisons, each claim's smallest effect that matters (``Margin``) and each
paper's ``Budget`` (DESIGN.md, "Empirical claims").

A ``Comparison`` tests, on paired runs (same seed, hence the same partition, initial model, client sampling
and minibatch order), the mean over seeds of a per-seed value x_s against a boundary b:

* ``"superior"``: x_s = metric(A) - metric(B), claim E[x] > margin ("A beats B by more than margin");
* ``"noninferior"``: x_s = metric(A) - metric(B), claim E[x] >= -margin ("A is at most margin worse than B");
* ``"ratio"``: x_s = metric(B) / metric(A), claim E[x] >= margin ("A needs margin times less than B").

A ``Claim`` holds when all its comparisons hold (an intersection: "FedBAT beats every binarized baseline"); it is
contradicted, or negligible, when one of them is (theory/empirical/tracker.py).
Accuracy metrics are fractions in [0, 1]; boundaries and margins of accuracy comparisons are given in the same
unit (0.01 = one percentage point) and reported in points.

The smallest effect that matters (``Claim.margin``, a ``Margin`` with its reason) is fixed in the claim's code
before any run. For a superiority comparison it is the half-width delta of the NEGLIGIBLE region: a mean
difference shown to lie within (-delta, +delta) is NEGLIGIBLE, so the claim is not supported (its advantage,
if any, is smaller than what matters). Where the paper reports the difference g of a comparison
(``Comparison.paper_gap``), delta <= g / 2, checked here: a gain the paper reports cannot be called negligible
at more than half its size. A comparison may narrow its claim's margin (``Comparison.negligible``).
For a non-inferiority comparison ("A is at most m worse than B") the smallest effect that matters is m itself:
a shortfall within m is what the claim asserts, so showing |difference| < m supports it, and NEGLIGIBLE is
never a verdict of such a claim (the claim's margin must equal m). A ratio (a deterministic bit count) has no
NEGLIGIBLE verdict either.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from theory.stats.sequential import check_looks

# the metrics live in ``metrics``; re-exported here for the callers of ``claim``
from .metrics import (METRICS, best_accuracy, bits_down_per_round, chance_level,  # noqa: F401
                      early_accuracy, final_accuracy, mean_accuracy, tail_accuracy)

SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE = "SUPPORTED", "CONTRADICTED", "NEGLIGIBLE", "INCONCLUSIVE"
VERDICTS = (SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE)
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
class Margin:
    """A claim's smallest effect that matters, in the metric's unit (0.01 = one point of accuracy), and why."""

    value: float
    reason: str

    def __post_init__(self):
        if not self.value >= 0 or not self.reason:
            raise ValueError(f"a margin needs a value >= 0 and a reason, got {self.value!r}, {self.reason!r}")


@dataclass(frozen=True)
class Budget:
    """A paper's declared budget for its final runs: the looks (cumulative paired seeds per comparison; a claim
    may stop earlier with ``Claim.max_seeds``) and the CPU minutes its cells may take in all (tuning included,
    summed as recorded, a batched run counting its share of the batch), with the reason for both."""

    looks: tuple
    cpu_minutes: float
    reason: str

    def __post_init__(self):
        looks = check_looks(self.looks, "a Budget's looks")
        if not self.cpu_minutes > 0 or not self.reason:
            raise ValueError("a budget needs cpu_minutes > 0 and a reason")
        object.__setattr__(self, "looks", looks)


@dataclass(frozen=True)
class Comparison:
    a: str  # arm name
    b: str  # arm name
    test: str  # one of TESTS
    margin: float  # the claim's boundary, in the metric's unit (accuracy: a fraction; ratio: a factor)
    setting: str  # the scale's setting both arms run in
    negligible: float | None = None  # this comparison's smallest effect that matters (default: the claim's)
    paper_gap: float | None = None  # the difference A - B the paper reports, in the metric's unit

    def __post_init__(self):
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {self.test!r}")
        if self.margin < 0 or (self.test == "ratio" and self.margin <= 0):
            raise ValueError(f"margin must be >= 0 (> 0 for a ratio), got {self.margin}")
        if self.negligible is not None and self.test != "superior":
            raise ValueError("only a superiority comparison has a negligible margin of its own")

    @property
    def boundary(self) -> float:
        """b: the claim is E[x] > b (superior) or E[x] >= b (noninferior, ratio)."""
        return {"superior": self.margin, "noninferior": -self.margin, "ratio": self.margin}[self.test]

    def delta(self, claim: "Claim") -> float:
        """The half-width of this comparison's NEGLIGIBLE region (0: no NEGLIGIBLE verdict)."""
        if self.test != "superior":
            return 0.0
        return self.negligible if self.negligible is not None else (claim.margin.value if claim.margin else 0.0)

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
    """A paper's empirical claim as a testable statement (see the module docstring). ``margin``: its smallest
    effect that matters (required unless every comparison is a ratio); ``max_seeds``: a lower seed maximum
    than its paper's budget.

    Declared with it, and rendered in the report (claims 0.4.0): ``paper_metric``, what the paper itself reports
    for the claim (its headline metric, in words); ``beside``, metrics shown beside the deciding one on the same
    paired seeds (the paper's own headline metric where it has one, e.g. GradMA's top test accuracy), never
    deciding; ``metric_reason``, why the deciding metric can show the claimed effect; ``objection``, the strongest
    objection an author could raise against the test and what the protocol does about it."""

    id: str  # "<paper>.<source>.<name>"
    paper: str
    source: str  # the table, figure or sentence it comes from
    quote: str  # the paper's words or numbers
    statement: str  # what is tested
    metric: str
    comparisons: tuple
    margin: Margin | None = None
    max_seeds: int | None = None
    paper_metric: str = ""
    beside: tuple = ()
    metric_reason: str = ""
    objection: str = ""

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"{self.id}: unknown metric {self.metric!r}; known: {sorted(METRICS)}")
        object.__setattr__(self, "beside", tuple(self.beside))
        unknown = [m for m in self.beside if m not in METRICS]
        if unknown:
            raise ValueError(f"{self.id}: unknown metric(s) beside it {unknown}; known: {sorted(METRICS)}")
        if not self.comparisons:
            raise ValueError(f"{self.id}: a claim needs at least one comparison")
        if self.margin is None and any(c.test != "ratio" for c in self.comparisons):
            raise ValueError(f"{self.id}: declare the smallest effect that matters (margin=Margin(value, reason))")
        for c in self.comparisons:
            why = margin_problem(self, c)
            if why:
                raise ValueError(f"{self.id}: {c.a} vs {c.b}: {why}")

    @property
    def arms(self) -> set[str]:
        return {c.a for c in self.comparisons} | {c.b for c in self.comparisons}

    @property
    def direction(self) -> str:
        tests = sorted({c.test for c in self.comparisons})
        return "/".join(tests)


def margin_problem(claim: Claim, c: Comparison) -> str:
    """Why a comparison's margin breaks the rules of the module docstring, or ''."""
    if c.test == "noninferior" and claim.margin is not None and abs(claim.margin.value - c.margin) > 1e-12:
        return (f"a non-inferiority claim's smallest effect that matters is its margin {c.margin:g}, "
                f"not {claim.margin.value:g}")
    d = c.delta(claim)
    if c.test == "superior" and d and d <= c.boundary:
        return f"the negligible margin {d:g} must exceed the claim's boundary {c.boundary:g}"
    if c.test == "superior" and c.paper_gap is not None and d > abs(c.paper_gap) / 2 + 1e-12:
        return (f"the negligible margin {d:g} exceeds half the difference the paper reports ({c.paper_gap:g}): "
                "a reported gain cannot be called negligible at more than half its size")
    return ""
