"""FedSWA / FedMoSWA's models (Liu et al., ICML 2025, Sec. 6.1): ResNet-18 (GroupNorm), LeNet-5, VGG-11."""
from __future__ import annotations

from torch import nn

from .blocks import CifarResNet, _Flatten, _image, _relu, _vgg11_features
from .registry import SPECS, _register


_FEDSWA = "FedSWA (Liu et al., ICML 2025)"


@_register("fedswa_resnet18_gn", paper=_FEDSWA, source="Sec. 6.1 'ResNet-18' (public code resnet18, GN)",
           summary="CIFAR ResNet-18: conv3x3 64 stem (stride 1, no max-pool), BasicBlock x [2,2,2,2] "
                   "64/128/256/512, GroupNorm(2 groups) everywhere, global avg-pool, Linear 512 (bias)",
           default_input=(3, 32, 32), default_classes=100,
           expects="(C, H, W) with H, W >= 8 (paper: (3, 32, 32) CIFAR-10/100)")
def _fedswa_resnet18_gn(name, shape, num_classes):
    """FedSWA's ResNet-18 (He et al. 2016). The paper does not give the normalisation; the code
    closest to the paper (``main.py``, 2025-05, ``--CNN resnet18``) uses GroupNorm with 2 groups in
    every normalisation layer (stem, blocks, projection shortcuts), a CIFAR stem (3x3, stride 1,
    no max-pool), no conv biases, adaptive average pooling and a linear layer with bias.
    """
    c, _, _ = _image(name, shape, 8, SPECS[name].expects)
    return CifarResNet(c, (64, 128, 256, 512), (2, 2, 2, 2), (1, 2, 2, 2), num_classes,
                       lambda ch: nn.GroupNorm(2, ch), fc_bias=True)


@_register("fedswa_lenet5", paper=_FEDSWA, source="Sec. 6.1 'LeNet-5' (public code Lenet5_10/100)",
           summary="conv5x5 64-ReLU-pool-conv5x5 64-ReLU-pool, FC 1600x384-ReLU-FC 384x192-ReLU-FC 192",
           default_input=(3, 32, 32), default_classes=10,
           expects="(C, H, W) with H, W >= 16 (paper: (3, 32, 32) CIFAR-10/100)")
def _fedswa_lenet5(name, shape, num_classes):
    """FedSWA's "LeNet-5 (LeCun et al., 2015)" as in its public code (the TF-tutorial CIFAR net):
    valid 5x5 convs with 64 channels, 2x2 max-pools (32 -> 28 -> 14 -> 10 -> 5), FC 384 and 192
    with ReLU, no normalisation, no dropout. Differs from ``gradma_lenet5``.
    """
    c, h, w = _image(name, shape, 16, SPECS[name].expects)
    h, w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 64, 5), _relu(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 5), _relu(), nn.MaxPool2d(2), _Flatten(),
        nn.Linear(64 * h * w, 384), _relu(), nn.Linear(384, 192), _relu(), nn.Linear(192, num_classes))


@_register("fedswa_vgg11", paper=_FEDSWA, source="Sec. 6.1 'VGG-11' (public code VGG11_10/100)",
           summary="VGG-11 convs (config A, conv+ReLU, no BN), FC 512xh-ReLU-FC hxclasses with h = 100 "
                   "(10 classes) or 256 (otherwise)",
           default_input=(3, 32, 32), default_classes=100,
           expects="(C, H, W) with H, W >= 32 (paper: (3, 32, 32) CIFAR-10/100)", options={"hidden": None})
def _fedswa_vgg11(name, shape, num_classes, hidden):
    """FedSWA's "VGG-11 (Simonyan & Zisserman, 2015)" as in its public code: the eight 3x3 convs of
    configuration A with bias and ReLU, no BatchNorm, five max-pools (32 -> 1), then
    Linear(512, h)-ReLU-Linear(h, classes); the code uses h = 100 for CIFAR-10 and h = 256 for
    CIFAR-100 (``hidden=None`` picks that way: 100 when num_classes <= 10, else 256). Differs from
    ``gradma_vgg11`` (no BN, no dropout, other head).
    """
    c, h, w = _image(name, shape, 32, SPECS[name].expects)
    if hidden is None:
        hidden = 100 if num_classes <= 10 else 256
    flat = 512 * (h // 32) * (w // 32)
    return nn.Sequential(*_vgg11_features(c, batch_norm=False), _Flatten(), nn.Linear(flat, hidden),
                         _relu(), nn.Linear(hidden, num_classes))
