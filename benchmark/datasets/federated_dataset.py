"""The in-memory dataset type every loader returns: tensors, a task, and optional natural clients."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

TASKS = ("classification", "regression")


@dataclass
class FederatedDataset:
    """Train/test tensors held on one device; batches are index gathers.

    ``clients`` is None when the data must be partitioned (``benchmark.datasets.partition.split``), or a list of
    index tensors into the training set when the dataset has natural clients (Synthetic(alpha, beta),
    ``from_tensors``).
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    task: str = "classification"
    num_classes: int | None = None
    clients: list[torch.Tensor] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError("x and y must have the same number of samples")
        _check_tensors(self)
        if self.task == "classification":
            self.y_train = self.y_train.long()
            self.y_test = self.y_test.long()
            if self.num_classes is None:
                self.num_classes = int(torch.cat([self.y_train, self.y_test]).max().item()) + 1
        else:
            self.y_train = self.y_train.float()
            self.y_test = self.y_test.float()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def output_dim(self) -> int:
        if self.task == "classification":
            return int(self.num_classes)
        return 1 if self.y_train.dim() == 1 else int(self.y_train.shape[1])

    @property
    def natural_clients(self) -> bool:
        return self.clients is not None

    def to(self, device) -> "FederatedDataset":
        mv = lambda t: t.to(device)  # noqa: E731
        return FederatedDataset(self.name, mv(self.x_train), mv(self.y_train), mv(self.x_test),
                                mv(self.y_test), self.task, self.num_classes,
                                None if self.clients is None else [c.to(device) for c in self.clients],
                                dict(self.meta))

    @classmethod
    def from_tensors(cls, clients: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     test: tuple[torch.Tensor, torch.Tensor], task: str = "classification",
                     name: str = "custom", num_classes: int | None = None,
                     dtype: torch.dtype = torch.float32) -> "FederatedDataset":
        """Bring your own data: one (X_i, y_i) pair per client and a test set.

        Regression uses ``torch.nn.functional.mse_loss`` (mean); classification cross-entropy. Inputs are held
        as ``dtype`` (float32; ``fedrepro validate``'s float64 problem passes float64).
        """
        if not clients:
            raise ValueError("from_tensors needs at least one client")
        xs = [torch.as_tensor(c[0]) for c in clients]
        ys = [torch.as_tensor(c[1]) for c in clients]
        for i, (x, y) in enumerate(zip(xs, ys)):
            if len(x) != len(y):
                raise ValueError(f"client {i}: {len(x)} inputs but {len(y)} targets")
            if len(x) == 0:
                raise ValueError(f"client {i} has no samples")
            if x.shape[1:] != xs[0].shape[1:]:
                raise ValueError(f"client {i}: inputs of shape {tuple(x.shape[1:])}, but client 0's are "
                                 f"{tuple(xs[0].shape[1:])}: every client's X_i must have the same features")
        sizes = [len(x) for x in xs]
        offsets = torch.cumsum(torch.tensor([0] + sizes), 0)
        idx = [torch.arange(int(offsets[i]), int(offsets[i + 1])) for i in range(len(sizes))]
        return cls(name, torch.cat(xs).to(dtype), torch.cat(ys), torch.as_tensor(test[0]).to(dtype),
                   torch.as_tensor(test[1]), task=task, num_classes=num_classes, clients=idx)


def _check_tensors(d: FederatedDataset) -> None:
    """What the training loop would otherwise fail on inside torch, or get quietly wrong, named here: an empty test
    set (accuracy and loss 0.0), test inputs of another width than the training inputs, and classification labels
    that are not integers (0.7 would become class 0)."""
    if len(d.x_test) == 0:
        raise ValueError(f"dataset {d.name!r}: the test set is empty: give at least one test sample (its accuracy "
                         "and loss would read 0.0)")
    if d.x_test.shape[1:] != d.x_train.shape[1:]:
        raise ValueError(f"dataset {d.name!r}: test inputs have shape {tuple(d.x_test.shape[1:])} per sample, the "
                         f"training inputs {tuple(d.x_train.shape[1:])}: they must have the same features")
    if d.task == "classification":
        for what, y in (("training", d.y_train), ("test", d.y_test)):
            if y.is_floating_point() and not bool(torch.all(y == torch.round(y))):
                raise ValueError(f"dataset {d.name!r}: classification labels must be integers (class indices), "
                                 f"but the {what} labels hold fractions (e.g. {y[y != torch.round(y)][0].item():g}); "
                                 "for real-valued targets give task=\"regression\"")
            if len(y) and (y.dim() != 1 or bool((y < 0).any())):
                raise ValueError(f"dataset {d.name!r}: classification labels must be one class index >= 0 per "
                                 f"sample (a 1-D tensor), got the {what} labels' shape {tuple(y.shape)}"
                                 + (" with negative values" if bool((y < 0).any()) else ""))
