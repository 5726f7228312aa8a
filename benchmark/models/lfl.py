"""LFL's models (Amiri et al., arXiv 2006.10672v2, Sec. 4 Table 1): the MNIST and CIFAR-10 CNNs."""
from __future__ import annotations

from torch import nn

from .blocks import _dropout, _Flatten, _image, _relu, _widths
from .registry import SPECS, _register


_LFL = "LFL (Amiri et al., arXiv 2006.10672v2)"


def _lfl_stage(c_in: int, c_out: int, convs: int) -> list[nn.Module]:
    out = []
    for _ in range(convs):
        out += [nn.Conv2d(c_in, c_out, 3, padding=1), _relu()]
        c_in = c_out
    return out + [nn.MaxPool2d(2)]


@_register("lfl_cnn_mnist", paper=_LFL, source="Sec. 4 Table 1 (MNIST column)",
           summary="conv3x3 32-pool-conv3x3 64-pool-conv3x3 64-pool (same padding, ReLU), FC 128-ReLU-"
                   "dropout 0.4-FC 10",
           default_input=(1, 28, 28), default_classes=10,
           expects="(C, H, W) with H, W >= 8 (paper: (1, 28, 28) MNIST)",
           options={"dropout": True, "width": 1.0})
def _lfl_cnn_mnist(name, shape, num_classes, dropout, width):
    """LFL's MNIST CNN (Table 1, left column).

    Reading of the flattened two-column table: single-line cells are the MNIST column, rows printed
    once (pools, FC 128, dropout 0.4, softmax 10) are shared. So: conv32-pool-conv64-pool-conv64-pool-
    FC128-dropout0.4-softmax10, all convs 3x3 "same" with ReLU, floor pooling (28-14-7-3) and a
    flatten (576) before FC 128. Whether dropout 0.4 belongs to MNIST is ambiguous (kept: shared row).
    Derived d = 130,890 (not printed in the paper). ``width`` multiplies the conv channels and the
    FC width (default 1: the paper's model), as fedbat_cnn's.
    """
    c, h, w = _image(name, shape, 8, SPECS[name].expects)
    c1, c2, c3, fc = _widths(name, width, (32, 64, 64, 128))
    layers = _lfl_stage(c, c1, 1) + _lfl_stage(c1, c2, 1) + _lfl_stage(c2, c3, 1)
    h, w = h // 8, w // 8
    return nn.Sequential(*layers, _Flatten(), nn.Linear(c3 * h * w, fc), _relu(),
                         *_dropout(0.4, dropout), nn.Linear(fc, num_classes))


@_register("lfl_cnn_cifar10", paper=_LFL, source="Sec. 4 Table 1 (CIFAR-10 column)",
           summary="[conv3x3 32]x2-pool-drop0.2-[conv3x3 64]x2-pool-drop0.3-[conv3x3 128]x2-pool "
                   "(same padding, ReLU), FC 128-ReLU-drop0.4-FC 10",
           default_input=(3, 32, 32), default_classes=10,
           expects="(C, H, W) with H, W >= 8 (paper: (3, 32, 32) CIFAR-10)", options={"dropout": True})
def _lfl_cnn_cifar10(name, shape, num_classes, dropout):
    """LFL's CIFAR-10 CNN (Table 1, right column): a VGG-style net, two 3x3 "same" convs per stage
    (32, 64, 128 channels), 2x2 max-pool after each stage, dropout 0.2/0.3 after the first two
    pools, FC 128 + ReLU, dropout 0.4, softmax 10. Flatten 128*4*4 = 2048. Derived d = 550,570.
    """
    c, h, w = _image(name, shape, 8, SPECS[name].expects)
    layers = (_lfl_stage(c, 32, 2) + _dropout(0.2, dropout) + _lfl_stage(32, 64, 2)
              + _dropout(0.3, dropout) + _lfl_stage(64, 128, 2))
    h, w = h // 8, w // 8
    return nn.Sequential(*layers, _Flatten(), nn.Linear(128 * h * w, 128), _relu(),
                         *_dropout(0.4, dropout), nn.Linear(128, num_classes))
