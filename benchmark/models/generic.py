"""Generic models: multinomial logistic regression, linear regression, a one-hidden-layer MLP."""
from __future__ import annotations

from torch import nn

from .blocks import _features, _Flatten, _relu
from .registry import _register


@_register("logreg", paper="generic", source="centralized logistic-regression baseline",
           summary="flatten + Linear(d, classes) (multinomial logistic regression with cross-entropy)",
           default_input=(1, 8, 8), default_classes=10,
           expects="any shape (flattened; default: (1, 8, 8) scikit-learn digits)")
def _logreg(name, shape, num_classes):
    return nn.Sequential(_Flatten(), nn.Linear(_features(shape), num_classes))


@_register("linear", paper="generic", source="linear regression (mse loss)",
           summary="flatten + Linear(d, num_classes) (num_classes = output dimension)",
           default_input=(60,), default_classes=1,
           expects="any shape (flattened)", options={"bias": True})
def _linear(name, shape, num_classes, bias):
    return nn.Sequential(_Flatten(), nn.Linear(_features(shape), num_classes, bias=bias))


@_register("mlp", paper="generic", source="one-hidden-layer MLP",
           summary="flatten + Linear(d, hidden=200)-ReLU-Linear(hidden, classes)",
           default_input=(1, 8, 8), default_classes=10,
           expects="any shape (flattened; default: (1, 8, 8) scikit-learn digits)", options={"hidden": 200})
def _mlp(name, shape, num_classes, hidden):
    if int(hidden) != hidden or hidden < 1:
        raise ValueError(f"{name}: hidden must be a positive integer, got {hidden!r}")
    return nn.Sequential(_Flatten(), nn.Linear(_features(shape), int(hidden)), _relu(),
                         nn.Linear(int(hidden), num_classes))
