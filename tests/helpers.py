"""Small shared fixtures for tests: a tiny offline federated problem and a one-call runner."""
from __future__ import annotations

import torch

from benchmark import Experiment, FederatedDataset, run


def tiny_dataset(num_clients: int = 4, d: int = 6, classes: int = 3, seed: int = 0,
                 uneven: bool = True) -> FederatedDataset:
    """Gaussian blobs split into clients of different sizes (so local step counts differ)."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g) * 2
    clients = []
    for i in range(num_clients):
        n = 20 + (7 * i if uneven else 0)
        y = torch.randint(0, classes, (n,), generator=g)
        x = centers[y] + torch.randn(n, d, generator=g)
        clients.append((x, y))
    yt = torch.randint(0, classes, (60,), generator=g)
    xt = centers[yt] + torch.randn(60, d, generator=g)
    return FederatedDataset.from_tensors(clients, (xt, yt), name=f"tiny{seed}", num_classes=classes)


def tiny_model(input_shape, num_classes):
    d = input_shape[0]
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(), torch.nn.Linear(8, num_classes))


def tiny_bn_model(input_shape, num_classes):
    d = input_shape[0]
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, num_classes))


def run_tiny(algorithm: str = "fedavg", executor: str = "sequential", rounds: int = 3, seed: int = 0,
             model=tiny_model, data: FederatedDataset | None = None, **kw):
    """Run ``algorithm`` on the tiny problem; keyword arguments go to ``Experiment``."""
    kw.setdefault("batch_size", 8)
    kw.setdefault("lr", 0.05)
    kw.setdefault("clients_per_round", 3)
    kw.setdefault("eval_every", 1)
    exp = Experiment(algorithm=algorithm, dataset=data or tiny_dataset(), num_clients=None, model=model,
                     rounds=rounds, executor=executor, seed=seed, **kw)
    return run(exp)


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


def assert_same_history(a, b, rtol: float = 1e-4, atol: float = 1e-5, keys=("test_loss", "train_loss")):
    """Two runs agree round by round (float tolerance) on losses and bits."""
    assert len(a.history) == len(b.history)
    for ha, hb in zip(a.history, b.history):
        assert ha["bits_up"] == hb["bits_up"] and ha["bits_down"] == hb["bits_down"], (ha, hb)
        for k in keys:
            if ha[k] is None:
                assert hb[k] is None
                continue
            assert abs(ha[k] - hb[k]) <= atol + rtol * abs(hb[k]), (k, ha["round"], ha[k], hb[k])
