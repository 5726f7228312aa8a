"""What several papers' models share: shape checks, small layers, He et al.'s residual network for small
images (``BasicBlock``, ``CifarResNet``, cut into stages by ``fedrepro_stages``) and VGG-11's convolutions."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

import torch.nn.functional as F
from torch import nn


def _image(name: str, shape: tuple[int, ...], min_hw: int, expects: str) -> tuple[int, int, int]:
    if len(shape) != 3 or shape[1] < min_hw or shape[2] < min_hw:
        raise ValueError(f"{name} expects input_shape {expects}; got {shape}")
    return shape  # type: ignore[return-value]


def _features(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class _Flatten(nn.Module):
    """Flattens everything after the batch axis (a view; works under vmap)."""

    def forward(self, x):
        return x.flatten(1)


def _relu():
    return nn.ReLU(inplace=False)


def _widths(name: str, width, base) -> tuple[int, ...]:
    """Channel counts ``base`` scaled by the ``width`` option (rounded, at least 1)."""
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 0 < width <= 16:
        raise ValueError(f"{name}: width must be a number in (0, 16] (1 = the paper's model), got {width!r}")
    return tuple(max(1, int(round(c * width))) for c in base)


def _dropout(p: float, on: bool) -> list[nn.Module]:
    return [nn.Dropout(p, inplace=False)] if on and p > 0 else []


class BasicBlock(nn.Module):
    """He et al. 2016 basic residual block: conv3x3-norm-ReLU-conv3x3-norm, + shortcut, ReLU.

    Shortcut when the shape changes: ``"B"`` a 1x1 strided conv + norm (projection), ``"A"`` the
    parameter-free option of He et al. Sec. 4.2 (stride-2 subsampling, zero-padded channels).
    """

    def __init__(self, c_in: int, c_out: int, stride: int, norm: Callable[[int], nn.Module],
                 shortcut: str = "B"):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.bn2 = norm(c_out)
        self.kind = "identity"
        self.stride = stride
        self.pad = 0
        if stride != 1 or c_in != c_out:
            if shortcut == "B":
                self.kind = "projection"
                self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                              norm(c_out))
            elif shortcut == "A":
                if c_out < c_in or (c_out - c_in) % 2:
                    raise ValueError("option-A shortcut needs an even channel increase")
                self.kind = "pad"
                self.pad = (c_out - c_in) // 2
            else:
                raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.kind == "projection":
            short = self.shortcut(x)
        elif self.kind == "pad":
            short = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))
        else:
            short = x
        return F.relu(out + short)


class CifarResNet(nn.Module):
    """ResNet for small images: conv3x3 stem (stride 1, no max-pool), stages of basic blocks,
    global average pooling, linear classifier.

    ``widths``/``blocks``/``strides`` give the stages; ``norm`` builds a normalisation layer for a
    channel count. Global average pooling equals FedBAT's ``avg_pool2d(4)`` on 32x32 inputs and
    makes the net usable on 64x64 Tiny-ImageNet (GradMA's ResNet20).
    """

    def __init__(self, in_channels: int, widths, blocks, strides, num_classes: int,
                 norm: Callable[[int], nn.Module], fc_bias: bool, shortcut: str = "B"):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = norm(widths[0])
        stages, c = [], widths[0]
        for w, n, s in zip(widths, blocks, strides):
            layer = []
            for i in range(n):
                layer.append(BasicBlock(c, w, s if i == 0 else 1, norm, shortcut))
                c = w
            stages.append(nn.Sequential(*layer))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(c, num_classes, bias=fc_bias)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = out.mean(dim=(2, 3))
        return self.fc(out)

    def fedrepro_stages(self) -> list[nn.Module]:
        """Stem, each residual stage (the last with the global pooling), classifier."""
        n = len(self.layers)
        return ([_ResNetStem(self)] + [_ResNetStage(self, i, i == n - 1) for i in range(n)]
                + [_ResNetHead(self)])


class _ResNetStem(nn.Module):
    def __init__(self, net: "CifarResNet"):
        super().__init__()
        self.conv1, self.bn1 = net.conv1, net.bn1

    def forward(self, x):
        return F.relu(self.bn1(self.conv1(x)))


class _ResNetStage(nn.Module):
    def __init__(self, net: "CifarResNet", i: int, pool: bool):
        super().__init__()
        self.layers = nn.Sequential(OrderedDict([(str(i), net.layers[i])]))
        self.pool = pool

    def forward(self, x):
        out = self.layers(x)
        return out.mean(dim=(2, 3)) if self.pool else out


class _ResNetHead(nn.Module):
    def __init__(self, net: "CifarResNet"):
        super().__init__()
        self.fc = net.fc

    def forward(self, x):
        return self.fc(x)


def _bn2d(c: int) -> nn.Module:
    return nn.BatchNorm2d(c)


_VGG11_BLOCKS = ((64, 1), (128, 1), (256, 2), (512, 2), (512, 2))  # Simonyan & Zisserman config "A"


def _vgg11_features(c: int, batch_norm: bool) -> list[nn.Module]:
    layers, c_in = [], c
    for c_out, n in _VGG11_BLOCKS:
        for _ in range(n):
            layers.append(nn.Conv2d(c_in, c_out, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(c_out))
            layers.append(_relu())
            c_in = c_out
        layers.append(nn.MaxPool2d(2))
    return layers
