"""The papers' architectures, by name (DESIGN.md, layout: ``benchmark/models/``).

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
  masks: the executors' training copies replace ``nn.Dropout`` by a dropout whose mask is the client's
  counter-based draw (``benchmark.sim.functional``), so both executors draw the same masks (plain ``vmap``
  would need ``randomness="different"`` and draw others). ``dropout=False`` removes the dropout layers
  (parameter count unchanged).
* BatchNorm and ``nn.MaxPool2d`` (stride = kernel, no padding) are swapped, in the executors' training
  copies, for layers whose vmap rule folds the clients into the channels (``benchmark.sim.vmap_layers``):
  the same kernels without vmap's layout copies; models are written with the ordinary ``nn`` layers.

Stages (``stages(module)``): algorithms that need intermediate representations (MOON's features,
FedMLB's hybrid paths) see a model as a chain of stages whose composition is the forward. A
``nn.Sequential`` is cut before each weight layer (Conv/Linear) that follows a stage already holding a
weight layer and either a pooling layer or when the new layer is Linear; so a conv stage ends with its
pooling, and every Linear starts a stage (GradMA's MLP: 3 stages; FedBAT's CNN: 5). ``CifarResNet``:
the stem, each residual stage (the last one with the global pooling), the classifier. Each stage is a
module whose parameter names are the full model's, so a stage runs with ``functional_call`` on a
subset of the model's parameter dict.

One module per paper (``fedbat``, ``lfl``, ``bherd``, ``gradma``, ``fedswa``, ``niid``; ``generic`` for the
others), each registering its models; ``registry`` holds ``build``, ``names``, ``describe``, ``param_count``,
``stages`` and ``SPECS``, and ``blocks`` the layers several papers share (``BasicBlock``, ``CifarResNet``,
VGG-11's convolutions). Every name is importable from ``benchmark.models`` itself.
"""
from __future__ import annotations

from . import fedbat, lfl, bherd, gradma, fedswa, niid, generic  # noqa: F401  (register, in this order)
from .blocks import BasicBlock, CifarResNet
from .registry import SPECS, ModelSpec, build, describe, names, param_count, stages

__all__ = ["build", "names", "describe", "param_count", "stages", "ModelSpec", "SPECS", "BasicBlock",
           "CifarResNet"]
