"""The papers' architectures, by name (DESIGN.md, layout: ``benchmark/models.py``).

``build(name, input_shape, num_classes, **options)`` returns a freshly initialised ``nn.Module``;
``names()`` lists the registry and ``describe(name)`` gives one line per model (paper, where the
architecture is specified, parameter count on the paper's input).

Registry names are the paper's prefix plus the paper's model name:

=====================  ===========================================================  ================
name                   source                                                       paper input
=====================  ===========================================================  ================
fedbat_cnn             FedBAT, Sec. 5.1 / App. A Table 4, "CNN (FMNIST|SVHN)"       1x28x28, 3x32x32
fedbat_resnet10        FedBAT, Table 4 "ResNet-10" (``wide=True``: public code)     3x32x32
lfl_cnn_mnist          LFL, Sec. 4 Table 1, MNIST column                            1x28x28
lfl_cnn_cifar10        LFL, Sec. 4 Table 1, CIFAR-10 column                         3x32x32
bherd_cnn              BHerd, Sec. 1.2 (CNN)                                        1x28x28
bherd_svm              BHerd, Sec. 1.2 (squared-hinge SVM, even/odd MNIST)          1x28x28
gradma_mlp             GradMA, Sec. 5.1 "NN" (public code ``TinyNN``)               1x28x28
gradma_lenet5          GradMA, Sec. 5.1 "Lenet-5" (public code ``Lenet_5``)         3x32x32
gradma_vgg11           GradMA, Sec. 5.1 "VGG-11" (public code ``VGGNet``)           3x32x32
gradma_resnet20        GradMA, Sec. 5.1 "Resnet20" = He et al. 2016, Sec. 4.2       3x64x64
fedswa_resnet18_gn     FedSWA, Sec. 6.1 "ResNet-18" (public code: GroupNorm(2, .))  3x32x32
fedswa_lenet5          FedSWA, Sec. 6.1 "LeNet-5" (public code ``Lenet5_*``)        3x32x32
fedswa_vgg11           FedSWA, Sec. 6.1 "VGG-11" (public code ``VGG11_*``)          3x32x32
niid_simple_cnn        NIID-Bench "simple CNN" (public code ``SimpleCNNMNIST``)     1x28x28, 3x32x32
logreg, linear, mlp    generic: multinomial logistic regression, linear regression,
                       one-hidden-layer MLP
=====================  ===========================================================  ================

Readings of ambiguous text (each model's docstring says more):

* Where a paper names an architecture but does not specify it (GradMA, FedSWA), the public code's
  definition is used and marked ``[code]``; FedSWA's LeNet-5/VGG-11 differ from GradMA's, so they are
  separate entries, not aliases.
* Conv/pool sizes: "same" padding and floor pooling (28 -> 14 -> 7 -> 3). First linear layers take
  their input size from ``input_shape`` (that is how FedBAT's Linear(256) vs Linear(1024) arise).
* Outputs are logits (the papers' "softmax output layer" is folded into the cross-entropy loss).
* Initialisation: PyTorch's defaults (deterministic under ``torch.manual_seed``), except
  ``bherd_svm`` (zeros, as the code of BHerd's ref. [40]). No paper states an initialisation;
  FedBAT's code uses N(0, 0.01) weights, which is not reproduced here.

functorch: every forward is a pure function of (parameters, buffers, input): no in-place ops, no
``.item()``, no data-dependent Python branches, ``inplace=False`` activations. So
``torch.func.functional_call`` + ``vmap`` + ``grad`` work. Two things an executor must know:

* BatchNorm (fedbat_*, gradma_mlp/lenet5/vgg11/resnet20) updates running statistics in training
  mode; under ``vmap`` pass per-client (stacked) buffers, or thread them explicitly.
* Dropout (lfl_cnn_*, gradma_lenet5, gradma_vgg11, on by default as in the papers/code) draws random
  masks: ``vmap`` needs ``randomness="different"`` (or ``"same"``) in training mode, and then the
  vectorized and sequential executors do not draw the same masks. ``dropout=False`` removes the
  dropout layers (parameter count unchanged) for bitwise executor-equivalence tests.

Stages (``stages(module)``): algorithms that need intermediate representations (MOON's features,
FedMLB's hybrid paths) see a model as a chain of stages whose composition is the forward. A
``nn.Sequential`` is cut before each weight layer (Conv/Linear) that follows a stage already holding a
weight layer and either a pooling layer or when the new layer is Linear; so a conv stage ends with its
pooling, and every Linear starts a stage (GradMA's MLP: 3 stages; FedBAT's CNN: 5). ``CifarResNet``:
the stem, each residual stage (the last one with the global pooling), the classifier. Each stage is a
module whose parameter names are the full model's, so a stage runs with ``functional_call`` on a
subset of the model's parameter dict.
"""
from __future__ import annotations

import difflib
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["build", "names", "describe", "param_count", "stages", "ModelSpec", "SPECS"]


# --------------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: how to build the model, and where the paper specifies it."""

    name: str
    builder: Callable[..., nn.Module]
    paper: str
    source: str
    summary: str
    default_input: tuple[int, ...]
    default_classes: int
    expects: str
    options: dict = field(default_factory=dict)  # option name -> default


SPECS: dict[str, ModelSpec] = {}


def _register(name: str, *, paper: str, source: str, summary: str, default_input: tuple[int, ...],
              default_classes: int, expects: str, options: dict | None = None):
    def deco(builder):
        SPECS[name] = ModelSpec(name, builder, paper, source, summary, tuple(default_input),
                                default_classes, expects, dict(options or {}))
        return builder
    return deco


def names() -> list[str]:
    """All registry names, sorted."""
    return sorted(SPECS)


def _spec(name: str) -> ModelSpec:
    if not isinstance(name, str) or name not in SPECS:
        close = difflib.get_close_matches(str(name).lower(), names(), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown model {name!r}{hint} Known models: {', '.join(names())}")
    return SPECS[name]


def build(name: str, input_shape, num_classes: int, **options) -> nn.Module:
    """A new model ``name`` for inputs of shape ``input_shape`` (no batch axis) and ``num_classes``
    outputs. ``options`` are model-specific (see ``SPECS[name].options``)."""
    spec = _spec(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        accepted = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "none"
        raise ValueError(f"{name}: unknown option(s) {', '.join(unknown)}; accepted: {accepted}")
    try:
        shape = tuple(int(s) for s in input_shape)
    except TypeError:
        raise ValueError(f"{name} expects input_shape {spec.expects}; got {input_shape!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{name} expects input_shape {spec.expects}; got {shape}")
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"{name}: num_classes must be a positive integer, got {num_classes!r}")
    kwargs = {**spec.options, **options}
    return spec.builder(name, shape, int(num_classes), **kwargs)


def param_count(module: nn.Module) -> int:
    """Number of trainable scalars (what travels in the flat parameter vector)."""
    return sum(p.numel() for p in module.parameters())


_COUNTS: dict[str, int] = {}


def describe(name: str) -> str:
    """One line: name, paper, where the paper specifies it, and its parameter count on the paper's
    input (``default_input`` -> ``default_classes``)."""
    spec = _spec(name)
    if name not in _COUNTS:
        with torch.device("meta"):
            _COUNTS[name] = param_count(build(name, spec.default_input, spec.default_classes))
    shape = "x".join(str(s) for s in spec.default_input)
    return (f"{name}: {spec.paper}, {spec.source}: {spec.summary}; "
            f"{_COUNTS[name]:,} parameters for input {shape} -> {spec.default_classes} "
            f"output{'s' if spec.default_classes != 1 else ''}")


_WEIGHT_LAYERS = (nn.Linear, nn.modules.conv._ConvNd)
_POOLS = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
          nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)


def stages(module: nn.Module) -> list[nn.Module]:
    """The model as a chain of stages (module docstring, "Stages"): ``x -> s_1 -> ... -> s_B``.

    Works on any copy of a registry model, including one whose layers an executor replaced.
    A model that is neither an ``nn.Sequential`` nor defines ``fedrepro_stages()`` raises ValueError.
    """
    if hasattr(module, "fedrepro_stages"):
        return list(module.fedrepro_stages())
    if not isinstance(module, nn.Sequential):
        raise ValueError(f"{type(module).__name__} has no stages: it is not an nn.Sequential and does not "
                         "define fedrepro_stages()")
    groups: list[list[tuple[str, nn.Module]]] = [[]]
    for name, child in module.named_children():
        cur = groups[-1]
        has_weight = any(isinstance(c, _WEIGHT_LAYERS) for _, c in cur)
        has_pool = any(isinstance(c, _POOLS) for _, c in cur)
        if isinstance(child, _WEIGHT_LAYERS) and has_weight and (has_pool or isinstance(child, nn.Linear)):
            groups.append([])
        groups[-1].append((name, child))
    return [nn.Sequential(OrderedDict(g)) for g in groups]


# --------------------------------------------------------------------------------------------------
# Shape helpers


def _image(name: str, shape: tuple[int, ...], min_hw: int, expects: str) -> tuple[int, int, int]:
    if len(shape) != 3 or shape[1] < min_hw or shape[2] < min_hw:
        raise ValueError(f"{name} expects input_shape {expects}; got {shape}")
    return shape  # type: ignore[return-value]


def _features(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


# --------------------------------------------------------------------------------------------------
# Building blocks


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


# --------------------------------------------------------------------------------------------------
# FedBAT (Li et al., ICML 2024)

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


# --------------------------------------------------------------------------------------------------
# LFL (Amiri et al., arXiv 2006.10672v2)

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


# --------------------------------------------------------------------------------------------------
# BHerd (Luo et al., arXiv 2403.16557v1)

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


# --------------------------------------------------------------------------------------------------
# GradMA (Luo et al., CVPR 2023)

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


# --------------------------------------------------------------------------------------------------
# FedSWA / FedMoSWA (Liu et al., ICML 2025)

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


# --------------------------------------------------------------------------------------------------
# NIID-Bench (Li, Diao, Chen & He, ICDE 2022, "Federated Learning on Non-IID Data Silos: An Experimental Study")

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


# --------------------------------------------------------------------------------------------------
# Generic models


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
