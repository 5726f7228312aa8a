"""``--compile`` (Experiment.compile): the vectorized local update through torch.compile (issue 24)."""
import dataclasses

import pytest

from benchmark.experiment import Experiment
from benchmark.plan import run

BASE = dict(dataset="digits", partition="dirichlet:0.5", num_clients=4, rounds=2, local_epochs=1, batch_size=64,
            lr=0.05, eval_train_samples=100, executor="vectorized", device="cpu", model="logreg")


def test_compile_is_hash_neutral_by_default():
    e = Experiment(**BASE)
    assert e.config_hash() == dataclasses.replace(e, compile=False).config_hash()
    assert e.config_hash() != dataclasses.replace(e, compile=True).config_hash()  # equal to tolerance only


@pytest.mark.slow
def test_compiled_step_equals_the_uncompiled_one():
    """Partial batches and unequal step counts (padding rows, masked steps), two rounds: one compiled
    shape reused in round 2 (the learning rate and downlink are arguments, not constants)."""
    from torch._dynamo.utils import counters

    a = run(Experiment(**BASE))
    graphs = counters["stats"]["unique_graphs"]
    b = run(Experiment(**BASE, compile=True))
    assert counters["stats"]["unique_graphs"] - graphs == 1  # compiled once, not once per round
    assert b.execution["compile_seconds"] > 0 and "compile_seconds" not in a.execution
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("local_loss", "train_loss", "test_loss"):
            assert hb[k] == pytest.approx(ha[k], rel=1e-5, abs=1e-6), (k, ha["round"])
