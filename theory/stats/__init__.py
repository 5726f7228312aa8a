"""Calibrated statistical tests behind the theory checks (HOLDS / VIOLATED / INCONCLUSIVE).

Every test takes a false-alarm rate ``alpha`` (default ``1e-3``): the probability that it reports a
violation (``passed=False``) when the claim is true. For each test the docstring states the null
hypothesis, the statistic, and whether ``alpha`` is guaranteed exactly, conservatively (the true
false-alarm rate is at most ``alpha``) or asymptotically (as the number of samples grows).

Every test returns a frozen :class:`TestResult`. ``passed`` means "the data do not reject the claim at
level ``alpha``"; it is not evidence that the claim holds unless the test also had power. Power is
made visible in ``details``: the one-sided tests report ``confirmed`` (the confidence bound on the
other side also satisfies the claim), the mean tests report the bias they could detect with 99%
probability. A claim module typically maps ``not passed`` -> VIOLATED, ``passed and confirmed`` (or
enough power) -> HOLDS, anything else -> INCONCLUSIVE.

Inputs may be numpy arrays, torch tensors or nested lists; they are converted to float64. NaN or
infinite inputs raise ``ValueError``.

Modules: ``core`` (the result type, input checks, Student t and Hall's skewness correction), ``means``
(:func:`mean_zero`, :func:`mean_equals`), ``bounds`` (:func:`upper_bound` and the planning helpers), ``rates``
(:func:`slope`, :func:`contraction` and their one-sided forms) and ``sequential`` (the group-sequential design
of the empirical claims: repeated confidence intervals and p-values under optional stopping).

Conventions:

- ``interval`` is a confidence interval for ``estimate``; its level is stated per test.
- ``to_dict()`` is JSON-serialisable with ``json.dumps(..., allow_nan=False)``: numpy values become
  plain floats/ints/lists, NaN becomes ``None`` and +-inf become the strings ``"inf"`` / ``"-inf"``.
- Per-coordinate multiplicity in :func:`mean_zero` / :func:`mean_equals` is controlled with Holm's
  step-down procedure (family-wise error rate). Note that the pass/fail decision of Holm is the same as
  Bonferroni's (some coordinate is rejected iff the smallest p-value is <= level/d); Holm only rejects
  more coordinates once one is rejected, so ``details["rejected_coordinates"]`` is Holm's list.
"""
from .bounds import bernoulli_rate_interval, samples_needed_for_bias, upper_bound
from .core import DEFAULT_ALPHA, ZERO_TOL, TestResult
from .means import mean_equals, mean_zero
from .rates import contraction, contraction_at_most, slope, slope_at_most

__all__ = [
    "DEFAULT_ALPHA",
    "ZERO_TOL",
    "TestResult",
    "mean_zero",
    "mean_equals",
    "upper_bound",
    "slope",
    "slope_at_most",
    "contraction",
    "contraction_at_most",
    "bernoulli_rate_interval",
    "samples_needed_for_bias",
]
