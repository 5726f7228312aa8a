"""GradMA's models (Luo et al., CVPR 2023, Sec. 5.1): NN, LeNet-5, VGG-11 and ResNet-20."""
from __future__ import annotations

from torch import nn

from .blocks import CifarResNet, _bn2d, _dropout, _features, _Flatten, _image, _relu, _vgg11_features
from .registry import SPECS, _register


_GRADMA = "GradMA (Luo et al., CVPR 2023)"


@_register("gradma_mlp", paper=_GRADMA, source="Sec. 5.1 'NN' (public code TinyNN)",
           summary="Linear 784x200-BN-ReLU-Linear 200x100-BN-ReLU-Linear 100x10",
           default_input=(1, 28, 28), default_classes=10,
           expects="any shape (flattened; paper: (1, 28, 28) MNIST)")
def _gradma_mlp(name, shape, num_classes):
    """GradMA's MNIST network: the paper says only "a neural network (NN) with three linear hidden
    layers". Reading: three Linear layers (two hidden, 200 and 100 units, each followed by
    BatchNorm1d and ReLU), as the public code's ``TinyNN`` (the literal "three hidden layers" would
    be four Linear layers, but no sizes are given for it).
    """
    return nn.Sequential(_Flatten(), nn.Linear(_features(shape), 200), nn.BatchNorm1d(200), _relu(),
                         nn.Linear(200, 100), nn.BatchNorm1d(100), _relu(), nn.Linear(100, num_classes))


@_register("gradma_lenet5", paper=_GRADMA, source="Sec. 5.1 'Lenet-5' (public code Lenet_5)",
           summary="conv5x5 32-BN-ReLU-pool-conv5x5 64-BN-ReLU-pool, FC 1600x512-BN-ReLU-drop0.5-"
                   "FC 512x128-BN-ReLU-drop0.5-FC 128x10",
           default_input=(3, 32, 32), default_classes=10,
           expects="(C, H, W) with H, W >= 16 (paper: (3, 32, 32) CIFAR-10)", options={"dropout": True})
def _gradma_lenet5(name, shape, num_classes, dropout):
    """GradMA's "Lenet-5 [16]" for CIFAR-10, as the public code defines it (a LeNet-5 *variant*, not
    LeCun's: 32/64 channels, BatchNorm, dropout 0.5, FC 512 and 128). Valid 5x5 convs and 2x2 pools:
    32 -> 28 -> 14 -> 10 -> 5, flatten 64*5*5 = 1600.
    """
    c, h, w = _image(name, shape, 16, SPECS[name].expects)
    h, w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 32, 5), nn.BatchNorm2d(32), _relu(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5), nn.BatchNorm2d(64), _relu(), nn.MaxPool2d(2), _Flatten(),
        nn.Linear(64 * h * w, 512), nn.BatchNorm1d(512), _relu(), *_dropout(0.5, dropout),
        nn.Linear(512, 128), nn.BatchNorm1d(128), _relu(), *_dropout(0.5, dropout),
        nn.Linear(128, num_classes))


@_register("gradma_vgg11", paper=_GRADMA, source="Sec. 5.1 'VGG-11' (public code VGGNet)",
           summary="VGG-11 convs (config A: 64-M-128-M-256x2-M-512x2-M-512x2-M, conv-BN-ReLU), "
                   "FC 512x128-ReLU-drop0.5-FC 128x100",
           default_input=(3, 32, 32), default_classes=100,
           expects="(C, H, W) with H, W >= 32 (paper: (3, 32, 32) CIFAR-100)", options={"dropout": True})
def _gradma_vgg11(name, shape, num_classes, dropout):
    """GradMA's "VGG-11 [31]" for CIFAR-100. The paper gives no details; the public code's
    ``VGGNet`` (commented "VGG-11 cifar-100", though unreachable from its model factory) is used:
    the eight 3x3 convs of Simonyan & Zisserman's configuration A, each conv (with bias) + BN + ReLU,
    five 2x2 max-pools (32 -> 1), then Linear(512, 128)-ReLU-Dropout(0.5)-Linear(128, classes).
    """
    c, h, w = _image(name, shape, 32, SPECS[name].expects)
    flat = 512 * (h // 32) * (w // 32)
    return nn.Sequential(*_vgg11_features(c, batch_norm=True), _Flatten(), nn.Linear(flat, 128),
                         _relu(), *_dropout(0.5, dropout), nn.Linear(128, num_classes))


@_register("gradma_resnet20", paper=_GRADMA, source="Sec. 5.1 'Resnet20' = He et al. 2016 Sec. 4.2",
           summary="He et al.'s CIFAR ResNet-20: conv3x3 16-BN-ReLU, 3 stages x 3 basic blocks (16/32/"
                   "64 channels), option-A shortcuts, global avg-pool, FC 64x200",
           default_input=(3, 64, 64), default_classes=200,
           expects="(C, H, W) with H, W >= 4 (paper: (3, 64, 64) Tiny-ImageNet)")
def _gradma_resnet20(name, shape, num_classes):
    """GradMA's "Resnet20 [6]" for Tiny-ImageNet: He et al.'s 6n+2 network with n = 3 (Sec. 4.2):
    16/32/64 filters, strides 1/2/2, BN, parameter-free option-A shortcuts (He et al. print 0.27M
    parameters for 10 classes; 269,722 exactly). The public code's ``ResNet_20`` entry is broken
    (it passes 3 stage sizes to a 4-stage ResNet-18-width class) and is not followed. On 64x64
    inputs the last stage is 16x16 before global average pooling.
    """
    c, _, _ = _image(name, shape, 4, SPECS[name].expects)
    return CifarResNet(c, (16, 32, 64), (3, 3, 3), (1, 2, 2), num_classes, _bn2d, fc_bias=True,
                       shortcut="A")
