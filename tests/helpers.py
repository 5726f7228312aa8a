"""Small shared fixtures for tests: a tiny offline federated problem and a one-call runner."""
from __future__ import annotations

import torch

# the tiny problem, the one-call runner and the history comparison are the contract checks' own
from benchmark.contract.checks import assert_same_history, run_tiny, tiny_dataset, tiny_model  # noqa: F401


def tiny_bn_model(input_shape, num_classes):
    d = input_shape[0]
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, num_classes))


class MaskedLoopCtx:
    """Base of hand-computation LocalContexts: ``loop`` runs ``batches[s]`` for s < ``num_steps`` and
    masks steps s >= ``steps`` (they change nothing), as the vectorized executor does."""

    batches: list
    num_steps: int
    steps: torch.Tensor

    def loop(self, step, carry):
        from algorithms.core import tree_map

        for s in range(self.num_steps):
            new = step(carry, self.batches[s], s)
            active = torch.tensor(s) < self.steps
            carry = tree_map(lambda n, o, a=active: torch.where(a, n, o), new, carry)
        return carry


def trajectory(result, key: str = "test_loss") -> list[float]:
    return [h[key] for h in result.history]
