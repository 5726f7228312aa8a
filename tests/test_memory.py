"""The batched-group memory model (``benchmark.runs.batched.run_bytes``, used by ``default_group_runs``) against the
peak measured for one round (``benchmark.perf.memory``; issue 24, item 3)."""
import sys

import pytest

from benchmark.runs import batched
from benchmark.perf import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is read from /proc (Linux)")

#: the model may budget at most this much above the measured peak, and never below it
OVER = 1.5
# FedBAT (the most memory of the seed algorithms measured) on its CNN, 2 clients, batch 32, a padded step (the
# weighted BatchNorm keeps the most activations for backward): at Table 1's 10 x 64 the model's ratio to the
# peak is about the same (results/perf/vmap-layers-2026-11-26-cpu.md)
CASE = dict(model="fedbat_cnn", shape=(1, 28, 28), classes=10, clients=2, batch=32, algorithm="fedbat", padded=True)


def _ratio(peak: float) -> float:
    budget = memory.model_budget(CASE["model"], CASE["shape"], CASE["classes"], CASE["clients"], CASE["batch"])
    return budget / peak


@pytest.fixture(scope="module")
def peak():
    return memory.measure_peak(**CASE, runs=1)["peak"]


def test_budget_covers_the_measured_peak(peak):
    assert 1.0 <= _ratio(peak) <= OVER, (_ratio(peak), peak)


@pytest.mark.parametrize("constant,value", [("ACTIVATION_COPIES", 0.5), ("PARAM_VECTORS", 0),
                                            ("ACTIVATION_COPIES", 3)])
def test_a_wrong_constant_is_caught(peak, monkeypatch, constant, value):
    """Planted: an activation factor or parameter count that under-budgets (a group would not fit) or
    over-budgets by more than ``OVER`` (groups needlessly small): the check above fails."""
    monkeypatch.setattr(batched, constant, value)
    assert not 1.0 <= _ratio(peak) <= OVER, (constant, value, _ratio(peak))


def test_peak_grows_with_the_group():
    """Two runs take about twice one run's peak (the measurement sees the group's tensors, not noise)."""
    small = dict(CASE, algorithm="fedavg", padded=False, batch=16)
    one, two = (memory.measure_peak(**small, runs=r)["peak"] for r in (1, 2))
    assert 1.6 * one <= two <= 2.4 * one, (one, two)
