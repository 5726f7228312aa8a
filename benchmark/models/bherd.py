"""BHerd's models (Luo et al., arXiv 2403.16557v1, Sec. 1.2): its CNN and the squared-hinge SVM's
linear score."""
from __future__ import annotations

import torch
from torch import nn

from .blocks import _features, _Flatten, _image, _relu
from .registry import SPECS, _register


_BHERD = "BHerd (Luo et al., arXiv 2403.16557v1)"


@_register("bherd_cnn", paper=_BHERD, source="Sec. 1.2",
           summary="conv5x5 32-ReLU-pool-conv5x5 32-ReLU-pool (same padding), FC 1568x256-ReLU-"
                   "FC 256x10",
           default_input=(1, 28, 28), default_classes=10,
           expects="(C, H, W) with H, W >= 4 (paper: (1, 28, 28) MNIST; (3, 32, 32) CIFAR-10 gives "
                   "FC 2048x256)")
def _bherd_cnn(name, shape, num_classes):
    """BHerd's CNN: "two 5x5x32 convolution layers, two 2x2 MaxPool layers, a 1568x256 fully
    connected layer, a 256x10 fully connected layer, and a softmax output layer with 10 units".

    Readings: 1568 = 32*7*7 needs "same" padding (2) on MNIST; ReLU after each conv and after the
    FC-256 layer (the text names no activation; ref. [40]'s code uses ReLU). [40]'s code also has
    parameter-free LRN layers, which the paper does not mention and are omitted. On CIFAR-10 the FC
    input is 32*8*8 = 2048 (as in [40]'s CIFAR model).
    """
    c, h, w = _image(name, shape, 4, SPECS[name].expects)
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2), _relu(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 5, padding=2), _relu(), nn.MaxPool2d(2),
        _Flatten(), nn.Linear(32 * (h // 4) * (w // 4), 256), _relu(), nn.Linear(256, num_classes))


@_register("bherd_svm", paper=_BHERD, source="Sec. 1.2 (loss as in ref. [40])",
           summary="linear score w^T x (784 weights, no bias, zero init) for the squared-hinge SVM on "
                   "even/odd MNIST",
           default_input=(1, 28, 28), default_classes=1,
           expects="any shape (flattened; paper: (1, 28, 28) MNIST)", options={"bias": False})
def _bherd_svm(name, shape, num_classes, bias):
    """BHerd's "squared-SVM": a single linear score ``s = w^T x`` of the flattened image.

    Output: shape (B, 1), one score per sample (``num_classes`` must be 1, or 2 meaning "the binary
    even/odd task": it still gives one score). The loss is NOT part of the model; it is the smooth
    SVM of BHerd's ref. [40] (``ModelSVMSmooth``):

        y = +1 for an even digit, -1 for an odd digit
        loss(w) = 0.5 * mean_j max(0, 1 - y_j * s_j)^2  +  0.5 * lam * ||w||^2,   lam = 0.1

    and the prediction is sign(s). That objective is lam-strongly convex and smooth. ([40] also uses
    pixels/255 inputs, no bias and zero initialisation, followed here; ``bias=True`` adds a bias.)
    A cross-entropy criterion on this (B, 1) output would be meaningless (one class), so the module
    carries ``fedrepro_loss = "squared_hinge"`` for the engine to dispatch on (class labels 0/1 of
    an even/odd dataset map to y = +1/-1 with y = 1 - 2 * label if 0 = even).
    """
    if num_classes not in (1, 2):
        raise ValueError(f"{name} outputs one score (binary task): num_classes must be 1 or 2, "
                         f"got {num_classes}")
    lin = nn.Linear(_features(shape), 1, bias=bias)
    with torch.no_grad():
        lin.weight.zero_()
        if bias:
            lin.bias.zero_()
    model = nn.Sequential(_Flatten(), lin)
    model.fedrepro_loss = "squared_hinge"
    return model
