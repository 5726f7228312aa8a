"""SVHN, read by torchvision's ``SVHN`` (the ``extra`` split is not used; label 10 -> 0).

Expected layout: ``<root>/SVHN/{train,test}_32x32.mat`` (``<root>/svhn`` and ``<root>`` are also searched).
"""
from __future__ import annotations

import numpy as np
import torch

from .images import _missing, _wrap_torchvision_error, image_dataset
from .registry import _IMAGE_OPTIONS, _register

SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


@_register("svhn", "SVHN: 73,257/26,032 32x32 color house-number digits, 10 classes, label 10 -> 0 "
                   "(torchvision SVHN, 'extra' not used); options normalize, cache", _IMAGE_OPTIONS)
def _svhn(root, download, seed, normalize, cache):
    from torchvision.datasets import SVHN  # lazy: torchvision.datasets adds 1.6 s CPU to every start (measured on torch's 2.4 s); only reading files needs it
    candidates = [root / "SVHN", root / "svhn", root]
    folder = next((d for d in candidates if all((d / f).is_file() for f in SVHN_FILES)), None)
    if folder is None:
        if not download:
            raise _missing("svhn", SVHN_FILES, candidates,
                           "Get them with `--download` (load(..., download=True)), which fetches "
                           f"{SVHN.split_list['train'][0]} and {SVHN.split_list['test'][0]} "
                           f"into {root / 'SVHN'}.")
        folder = root / "SVHN"
        for split in ("train", "test"):
            SVHN(root=str(folder), split=split, download=True)

    def build():
        try:
            tr = SVHN(root=str(folder), split="train", download=False)
            te = SVHN(root=str(folder), split="test", download=False)
        except RuntimeError as e:
            raise _wrap_torchvision_error("svhn", folder, e) from e
        def conv(a):  # torchvision's SVHN data are already NCHW uint8
            return torch.from_numpy(np.ascontiguousarray(a))
        return {"x_train": conv(tr.data), "y_train": torch.as_tensor(tr.labels, dtype=torch.long),
                "x_test": conv(te.data), "y_test": torch.as_tensor(te.labels, dtype=torch.long),
                "classes": [str(i) for i in range(10)]}

    return image_dataset(root, "svhn", [folder / f for f in SVHN_FILES], build, cache, normalize, 10, str(folder))
