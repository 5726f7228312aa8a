"""Golden histories (tests/golden.py): the code's histories equal, bit for bit, those generated at aa98dfe (before
issue 45's changes, all declared exact) for every algorithm on both executors, a batched group, padded batches
and the CNNs with BatchNorm and max-pooling. A change that moves a number must say so and regenerate the file."""
from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from tests.golden import cases, histories

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "golden_histories_aa98dfe.json").read_text())
CASES = cases()


def test_every_case_has_a_golden_history():
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_history_unchanged(name):
    assert histories(*CASES[name]) == GOLDEN[name]


def test_a_planted_change_is_caught():
    """The comparison can fail: FedAvg with a learning rate 0.2% higher differs from its golden history."""
    [exp], executor = CASES["digits/fedavg/vectorized"]
    assert histories([dataclasses.replace(exp, lr=exp.lr * 1.002)], executor) != GOLDEN["digits/fedavg/vectorized"]
