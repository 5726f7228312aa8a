"""CIFAR-10 and CIFAR-100, read by torchvision's ``CIFAR10`` / ``CIFAR100``.

Expected layouts (torchvision's own): ``<root>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}``
and ``<root>/cifar-100-python/{train,test,meta}``.
"""
from __future__ import annotations

import numpy as np
import torch

from .images import _missing, _wrap_torchvision_error, image_dataset
from .registry import _IMAGE_OPTIONS, _register

CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
                 "batches.meta")
CIFAR100_FILES = ("train", "test", "meta")


def _load_cifar(name: str, cls, files, num_classes: int, root, download, cache, normalize):
    folder = root / cls.base_folder
    if not all((folder / f).is_file() for f in files):
        if not download:
            raise _missing(name, files, [folder],
                           f"Get them with `--download` (load(..., download=True)), which fetches {cls.url} "
                           f"into {root} and extracts it.")
        cls(root=str(root), train=True, download=True)

    def build():
        try:
            tr = cls(root=str(root), train=True, download=False)
            te = cls(root=str(root), train=False, download=False)
        except RuntimeError as e:
            raise _wrap_torchvision_error(name, folder, e) from e
        def conv(a):  # torchvision's CIFAR data are NHWC uint8
            return torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).contiguous()
        return {"x_train": conv(tr.data), "y_train": torch.as_tensor(tr.targets, dtype=torch.long),
                "x_test": conv(te.data), "y_test": torch.as_tensor(te.targets, dtype=torch.long),
                "classes": list(tr.classes)}

    return image_dataset(root, name, [folder / f for f in files], build, cache, normalize, num_classes, str(folder))


@_register("cifar10", "CIFAR-10: 50k/10k 32x32 color images, 10 classes (torchvision CIFAR10); "
                      "options normalize, cache", _IMAGE_OPTIONS)
def _cifar10(root, download, seed, normalize, cache):
    from torchvision.datasets import CIFAR10  # lazy: torchvision.datasets adds 1.6 s CPU to every start (measured on torch's 2.4 s); only reading files needs it
    return _load_cifar("cifar10", CIFAR10, CIFAR10_FILES, 10, root, download, cache, normalize)


@_register("cifar100", "CIFAR-100: 50k/10k 32x32 color images, 100 fine classes (torchvision CIFAR100); "
                       "options normalize, cache", _IMAGE_OPTIONS)
def _cifar100(root, download, seed, normalize, cache):
    from torchvision.datasets import CIFAR100
    return _load_cifar("cifar100", CIFAR100, CIFAR100_FILES, 100, root, download, cache, normalize)
