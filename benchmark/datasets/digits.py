"""scikit-learn's digits, offline (no files needed).

* ``digits``: scikit-learn's ``load_digits`` (1797 real 8x8 handwritten digits) as (N, 1, 8, 8) float32,
  pixels/16 then standardized with the training split's scalar mean/std. Fixed stratified split, 25% test
  (450 test, 1347 train), split seed ``DIGITS_SPLIT_SEED`` -- not the run seed, so the test set never changes.
"""
from __future__ import annotations

import numpy as np
import torch

from .federated_dataset import FederatedDataset
from .images import _norm_default, _norm_off
from .registry import _register

DIGITS_SPLIT_SEED = 20240601


@_register("digits", "scikit-learn digits: 1797 real 8x8 handwritten digits (1347 train / 450 test, fixed "
                     "stratified split), 10 classes, offline; option normalize", {"normalize": True})
def _digits(root, download, seed, normalize):
    from sklearn.datasets import load_digits  # lazy: sklearn adds 1.0 s CPU to every start (measured)
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = d.target.astype(np.int64)
    idx_tr, idx_te = train_test_split(np.arange(len(y)), test_size=0.25, stratify=y,
                                      random_state=DIGITS_SPLIT_SEED)
    idx_tr, idx_te = np.sort(idx_tr), np.sort(idx_te)
    x_tr, x_te = torch.from_numpy(x[idx_tr]), torch.from_numpy(x[idx_te])
    if _norm_off(normalize):
        mean = std = None
    elif _norm_default(normalize):
        mean, std = float(x_tr.mean()), float(x_tr.std())
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    else:
        raise ValueError(f"digits: normalize must be True or False, got {normalize!r}")
    meta = {"source": "sklearn.datasets.load_digits", "classes": [str(i) for i in range(10)],
            "normalization": "none" if mean is None else "standardized",
            "mean": None if mean is None else [mean], "std": None if std is None else [std],
            "split_seed": DIGITS_SPLIT_SEED, "train_index": torch.from_numpy(idx_tr),
            "test_index": torch.from_numpy(idx_te)}
    return FederatedDataset("digits", x_tr.contiguous(), torch.from_numpy(y[idx_tr]), x_te.contiguous(),
                            torch.from_numpy(y[idx_te]), num_classes=10, meta=meta)
