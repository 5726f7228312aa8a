"""Both executors give the same history, for every registered algorithm (new ones included)."""
import pytest

import algorithms
from benchmark.contract import checks as contract
from tests.helpers import assert_same_history, run_tiny, tiny_bn_model


@pytest.mark.parametrize("name", algorithms.names())
def test_sequential_equals_vectorized(name):
    try:
        contract.executors_agree(name)  # the contract check a plugin gets too (pytest --fedrepro-plugin)
    except contract.NotApplicable as e:
        pytest.skip(str(e))


def test_equivalence_with_batchnorm_and_partial_batches():
    # clients of 20, 27, 34, 41 samples with batch 8: partial last batches and unequal step counts
    a = run_tiny("fedavg", "sequential", model=tiny_bn_model, rounds=3)
    b = run_tiny("fedavg", "vectorized", model=tiny_bn_model, rounds=3)
    assert_same_history(a, b)


def _dropout_model(input_shape, num_classes):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(16, num_classes))


def test_equivalence_with_dropout():
    # dropout masks come from the per-client counter RNG, so both executors draw the same masks
    a = run_tiny("fedavg", "sequential", model=_dropout_model, rounds=3)
    b = run_tiny("fedavg", "vectorized", model=_dropout_model, rounds=3)
    assert_same_history(a, b)
    c = run_tiny("fedavg", "sequential", model=_dropout_model, rounds=3, seed=1)
    assert c.history[-1]["test_loss"] != a.history[-1]["test_loss"]
