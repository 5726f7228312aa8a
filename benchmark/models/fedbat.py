"""FedBAT's models (Li et al., ICML 2024, Sec. 5.1 and App. A Table 4): its CNN and ResNet-10."""
from __future__ import annotations

from torch import nn

from .blocks import CifarResNet, _bn2d, _Flatten, _image, _relu, _widths
from .registry import SPECS, _register


_FEDBAT = "FedBAT (Li et al., ICML 2024)"


@_register("fedbat_cnn", paper=_FEDBAT, source="Sec. 5.1 and App. A Table 4",
           summary="4x[conv3x3(pad 1, no bias)-BN-ReLU-maxpool2] with 32/64/128/256 channels, "
                   "then Linear(no bias); FMNIST 1x28x28 -> Linear(256), SVHN 3x32x32 -> Linear(1024)",
           default_input=(1, 28, 28), default_classes=10,
           expects="(C, H, W) with H, W >= 16 (paper: (1, 28, 28) FMNIST, (3, 32, 32) SVHN)",
           options={"width": 1.0})
def _fedbat_cnn(name, shape, num_classes, width):
    """FedBAT's CNN (Table 4: Conv2d(C,32,3), Conv2d(32,64,3), Conv2d(64,128,3), Conv2d(128,256,3),
    Linear(256 | 1024, 10)).

    Reading: Table 4 lists only the conv/linear layers; Sec. 5.1 adds "BatchNorm ... with ReLU".
    Linear(256) for FMNIST and Linear(1024) for SVHN force padding 1 and a 2x2 max-pool after each
    conv (28 -> 14 -> 7 -> 3 -> 1, 32 -> 16 -> 8 -> 4 -> 2); the public code confirms this order
    (conv-BN-ReLU-pool) and has no biases in conv/linear layers, which is followed here.

    ``width`` (default 1: the paper's model) multiplies every channel count (``_widths``): a narrower
    member of the same family for CPU-sized runs (e.g. 0.25: 8/16/32/64 channels, about 1/16 of the
    multiply-adds); a run that uses it states the reduction.
    """
    c, h, w = _image(name, shape, 16, SPECS[name].expects)
    layers, c_in = [], c
    widths = _widths(name, width, (32, 64, 128, 256))
    for c_out in widths:
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), _relu(),
                   nn.MaxPool2d(2)]
        c_in = c_out
    for _ in range(4):
        h, w = h // 2, w // 2
    return nn.Sequential(*layers, _Flatten(), nn.Linear(widths[-1] * h * w, num_classes, bias=False))


@_register("fedbat_resnet10", paper=_FEDBAT, source="App. A Table 4 (wide=True: public code)",
           summary="conv3x3(3,32)-BN-ReLU, BasicBlock x [1,1,1,1] with widths 32/64/128/256, strides "
                   "1/2/2/2, global avg-pool, Linear(256, no bias); wide=True: widths 64/128/256/512",
           default_input=(3, 32, 32), default_classes=10,
           expects="(C, H, W) with H, W >= 8 (paper: (3, 32, 32) CIFAR-10/100)",
           options={"wide": False})
def _fedbat_resnet10(name, shape, num_classes, wide):
    """FedBAT's ResNet-10 (Table 4: Conv2d(3,32,3), BasicBlock(32), BasicBlock(64), BasicBlock(128),
    BasicBlock(256), Linear(256, classes)); BasicBlock "as in He et al. 2016".

    Readings (from the public code, the paper does not say): strides 1/2/2/2, projection (1x1 conv +
    BN) shortcuts when the shape changes, no conv/linear biases, 4x4 average pooling (= global on
    32x32). ``wide=True`` is the public code's ResNet-10, 64/128/256/512 (twice the widths, about 4x
    the parameters), which is *not* Table 4.
    """
    c, _, _ = _image(name, shape, 8, SPECS[name].expects)
    widths = (64, 128, 256, 512) if wide else (32, 64, 128, 256)
    return CifarResNet(c, widths, (1, 1, 1, 1), (1, 2, 2, 2), num_classes, _bn2d, fc_bias=False)
