"""NIID-Bench's model (Li, Diao, Chen & He, ICDE 2022, "Federated Learning on Non-IID Data Silos: An
Experimental Study"): the simple CNN."""
from __future__ import annotations

from torch import nn

from .blocks import _Flatten, _image, _relu
from .registry import SPECS, _register


_NIID = "NIID-Bench (Li et al., ICDE 2022)"


@_register("niid_simple_cnn", paper=_NIID, source="experimental setup, 'simple CNN' (public code model.py "
           "SimpleCNNMNIST / SimpleCNN)", summary="conv5x5 6-ReLU-pool-conv5x5 16-ReLU-pool (no padding), "
           "FC 256x120-ReLU-FC 120x84-ReLU-FC 84x10", default_input=(1, 28, 28), default_classes=10,
           expects="(C, H, W) with H, W >= 16 (paper: (1, 28, 28) MNIST/FMNIST; (3, 32, 32) CIFAR-10/SVHN "
                   "gives FC 400x120)")
def _niid_simple_cnn(name, shape, num_classes):
    """NIID-Bench's "simple CNN" for its image datasets (``--model simple-cnn``): two 5x5 convolutions with 6
    and 16 channels, each followed by ReLU and 2x2 max pooling, then fully connected layers of 120 and 84
    units with ReLU and the output layer, as its code defines it: ``SimpleCNNMNIST(input_dim=16*4*4,
    hidden_dims=[120, 84])`` on 1x28x28 inputs (``SimpleCNN``, 16*5*5, on 3x32x32: the same layers on another
    input). Valid convolutions: 28 -> 24 -> 12 -> 8 -> 4. PyTorch's default initialisation, as the code's.
    """
    c, h, w = _image(name, shape, 16, SPECS[name].expects)
    h, w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 6, 5), _relu(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), _relu(), nn.MaxPool2d(2),
        _Flatten(), nn.Linear(16 * h * w, 120), _relu(), nn.Linear(120, 84), _relu(), nn.Linear(84, num_classes))
