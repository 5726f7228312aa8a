"""The contract checks of ``benchmark.contract.checks`` that no older generic test covers, on every built-in algorithm
(the others run in tests/test_hyper.py, test_executor_equivalence.py and test_batched.py; a plugin gets all of
them from ``pytest --fedrepro-plugin``, and tests/test_plugins.py shows each failing a planted defect)."""
import pytest

import algorithms
from benchmark.contract import checks as contract


@pytest.mark.parametrize("name", algorithms.names())
@pytest.mark.parametrize("check", ["deterministic", "record_round_trip", "resumes"])
def test_every_builtin_algorithm_passes(check, name):
    try:
        contract.CHECKS[check](name)
    except contract.NotApplicable as e:
        pytest.skip(str(e))
