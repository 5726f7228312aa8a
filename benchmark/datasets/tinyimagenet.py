"""Tiny-ImageNet (cs231n ``tiny-imagenet-200``): torchvision's ``ImageFolder`` plus ``val_annotations.txt``.

Expected layout: ``<root>/tiny-imagenet-200/{wnids.txt,train/<wnid>/images/*.JPEG,val/images/*.JPEG,
val/val_annotations.txt}``; the labelled ``val`` split is the test set. ``download=True`` uses torchvision's
``download_and_extract_archive`` on the cs231n zip.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .images import DataFileError, _missing, image_dataset
from .registry import _IMAGE_OPTIONS, _register

TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


def _load_images(paths, loader) -> torch.Tensor:
    """Decode images with torchvision's ``loader`` (PIL, RGB) in threads; uint8 NCHW."""
    def one(p):
        try:
            return np.asarray(loader(p), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError) as e:  # PIL: UnidentifiedImageError, truncated files
            raise DataFileError(f"tinyimagenet: {p} cannot be decoded as an image ({e}). It is probably "
                                "corrupted or a partial download: delete it (or the whole tiny-imagenet-200 "
                                "folder) and load again with `--download`.") from None

    workers = max(1, min(16, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as ex:
        arrays = list(ex.map(one, paths, chunksize=256))
    if not arrays:
        raise ValueError("no images")
    shape = arrays[0].shape
    for p, a in zip(paths, arrays):
        if a.shape != shape:
            raise ValueError(f"Tiny-ImageNet images must all have the same size; {p} is {a.shape[:2]} "
                             f"but the first image is {shape[:2]}")
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


@_register("tinyimagenet", "Tiny-ImageNet (cs231n tiny-imagenet-200): 100k train / 10k labelled val (used as "
                           "test) 64x64 color images, 200 classes (torchvision ImageFolder); "
                           "options normalize, cache", _IMAGE_OPTIONS)
def _tinyimagenet(root, download, seed, normalize, cache):
    from torchvision.datasets import ImageFolder  # lazy: torchvision.datasets adds 1.6 s CPU to every start (measured on torch's 2.4 s); only reading files needs it

    base = root / "tiny-imagenet-200"
    needed = [base / "wnids.txt", base / "train", base / "val" / "images",
              base / "val" / "val_annotations.txt"]
    if not all(p.exists() for p in needed):
        if not download:
            raise _missing("tinyimagenet", ["wnids.txt", "train/<wnid>/images/*.JPEG", "val/images/*.JPEG",
                                            "val/val_annotations.txt"], [base],
                           f"Get it with `--download` (load(..., download=True)), or download "
                           f"{TINYIMAGENET_URL} and unzip it into {root}.")
        from torchvision.datasets.utils import download_and_extract_archive
        download_and_extract_archive(TINYIMAGENET_URL, download_root=str(root))
        if not all(p.exists() for p in needed):
            raise RuntimeError(f"the downloaded archive did not produce {base} with {needed}")

    train_dir = base / "train"
    sources = [base / "wnids.txt", base / "val" / "val_annotations.txt"] + \
        sorted(p for p in train_dir.iterdir() if p.is_dir())

    def build():
        wnids = [w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip()]
        train = ImageFolder(str(train_dir))
        if sorted(wnids) != train.classes:
            raise ValueError(f"{base}: class folders under train/ do not match wnids.txt "
                             f"({len(train.classes)} folders, {len(wnids)} wnids)")
        x_train = _load_images([p for p, _ in train.samples], train.loader)
        y_train = torch.tensor([t for _, t in train.samples], dtype=torch.long)
        val_paths, val_labels = [], []
        for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) < 2:
                continue
            if parts[1] not in train.class_to_idx:
                raise ValueError(f"{base}/val/val_annotations.txt: unknown wnid {parts[1]!r} for {parts[0]}")
            val_paths.append(str(base / "val" / "images" / parts[0]))
            val_labels.append(train.class_to_idx[parts[1]])
        missing = [p for p in val_paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"tinyimagenet: {len(missing)} images listed in val_annotations.txt are "
                                    f"missing, e.g. {missing[0]}")
        return {"x_train": x_train, "y_train": y_train, "x_test": _load_images(val_paths, train.loader),
                "y_test": torch.tensor(val_labels, dtype=torch.long), "classes": list(train.classes)}

    return image_dataset(root, "tinyimagenet", sources, build, cache, normalize, 200, str(base))
