"""Dataset loaders: every dataset comes back as a :class:`~benchmark.datasets.federated_dataset.FederatedDataset`.

``load(name, data_root=None, download=False, seed=0, **options)`` is the one entry point; ``names()`` lists
the datasets and ``info(name)`` describes one.

Real image datasets are read by torchvision's own dataset classes (``MNIST``, ``FashionMNIST``, ``SVHN``,
``CIFAR10``, ``CIFAR100``, and ``ImageFolder`` plus ``val_annotations.txt`` for Tiny-ImageNet), converted once
to tensors and held in memory: float32, NCHW, normalized (``benchmark.datasets.images``). No DataLoader is
involved.

Data root: the ``data_root`` argument, else the environment variable ``FEDREPRO_DATA``, else
``~/.cache/fedrepro/data``. Expected layouts (torchvision's own):

============  =======================================================================================
mnist         ``<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``
fmnist        ``<root>/FashionMNIST/raw/...`` (same names), else Debian's ``dataset-fashion-mnist``
              package (``/usr/share/datasets/fashion-mnist``; found via ``dpkg -L`` too)
svhn          ``<root>/SVHN/{train,test}_32x32.mat`` (``<root>/svhn`` and ``<root>`` are also searched)
cifar10       ``<root>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}``
cifar100      ``<root>/cifar-100-python/{train,test,meta}``
tinyimagenet  ``<root>/tiny-imagenet-200/{wnids.txt,train/<wnid>/images/*.JPEG,val/images/*.JPEG,
              val/val_annotations.txt}``; the labelled ``val`` split is the test set
============  =======================================================================================

``download=True`` is passed to torchvision only when asked (Tiny-ImageNet: torchvision's
``download_and_extract_archive`` on the cs231n zip).

One module per family of sources, each registering its loaders by name:

================  ===========================================================================================
``registry``      ``load``, ``names``, ``info``, ``options``, the data root, names and their aliases
``transforms``    the generic transforms every dataset accepts (``labels``, ``train_subset``, ``validation``)
``images``        what the image loaders share: the uint8 conversion cache, normalization, file errors
``mnist``         MNIST and Fashion-MNIST (IDX files; Debian's ``dataset-fashion-mnist`` found automatically)
``cifar``         CIFAR-10 and CIFAR-100
``svhn``          SVHN
``tinyimagenet``  Tiny-ImageNet (``ImageFolder`` + ``val_annotations.txt``)
``digits``        scikit-learn's digits (offline)
``synthetic``     FedProx's Synthetic(alpha, beta) (offline, generated)
================  ===========================================================================================

Every name below is importable from ``benchmark.datasets`` itself, as from the one module this package was.
"""
from __future__ import annotations

# the loaders register in this order (``names()``): mnist, fmnist, cifar10, cifar100, svhn, tinyimagenet,
# digits, synthetic
from . import mnist, cifar, svhn, tinyimagenet, digits, synthetic  # noqa: F401  (in this order)
from . import images, registry, transforms  # noqa: F401
from .cifar import CIFAR10_FILES, CIFAR100_FILES
from .digits import DIGITS_SPLIT_SEED
from .images import (CACHE_DIRNAME, CACHE_VERSION, FEDBAT_NORMALIZATION, IMAGENET_STATS, NORMALIZATION,
                     DataFileError)
from .mnist import DEBIAN_FMNIST_DIRS, DEBIAN_FMNIST_PACKAGE, IDX_FILES
from .mnist import _debian_fmnist_dirs  # noqa: F401  (tests; patch it on benchmark.datasets.mnist)
from .registry import default_data_root, info, load, names, options, resolve_name
from .svhn import SVHN_FILES
from .synthetic import SYNTHETIC_CLASSES, SYNTHETIC_DIM, synthetic_arrays
from .tinyimagenet import TINYIMAGENET_URL
from .transforms import (LABEL_MAPS, TRAIN_SUBSET_SEED, TRANSFORM_OPTIONS, VALIDATION_SEED,
                         holdout_validation, stratified_subset, transform)

__all__ = ["load", "names", "info", "options", "resolve_name", "default_data_root", "synthetic_arrays", "transform",
           "stratified_subset", "holdout_validation", "DataFileError", "NORMALIZATION",
           "FEDBAT_NORMALIZATION", "IMAGENET_STATS", "DIGITS_SPLIT_SEED", "TRAIN_SUBSET_SEED",
           "VALIDATION_SEED", "TRANSFORM_OPTIONS", "LABEL_MAPS", "SYNTHETIC_DIM", "SYNTHETIC_CLASSES",
           "CACHE_DIRNAME", "CACHE_VERSION", "DEBIAN_FMNIST_DIRS", "DEBIAN_FMNIST_PACKAGE", "IDX_FILES",
           "CIFAR10_FILES", "CIFAR100_FILES", "SVHN_FILES", "TINYIMAGENET_URL"]
