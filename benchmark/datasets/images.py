"""What the image loaders share: the uint8 conversion cache, normalization and file errors.

Conversion cache: the decoded images are stored once as **uint8** tensors in
``<root>/fedrepro_cache/<name>-<fingerprint>.pt`` (atomic write: temp file + ``os.replace``); the fingerprint
covers the source files' paths, sizes and mtimes, so replacing the files invalidates it. Normalization is
applied on every load (a few hundred ms for CIFAR) rather than cached as float32, because a float32 cache is
4x larger (Tiny-ImageNet: 4.9 GB instead of 1.2 GB) and would need one file per normalization.
``cache=False`` skips the cache.

Normalization (``normalize=True``, the default), ``x = (pixel/255 - mean) / std`` per channel:

============  ========================  ========================  ============================================
dataset       mean                      std                       source
============  ========================  ========================  ============================================
mnist         0.1307                    0.3081                    GradMA code (standard MNIST statistics)
fmnist        0.2860                    0.3530                    FedBAT code (train statistics)
svhn          0.4496 (all 3 channels)   0.1995 (all 3 channels)   FedBAT code (train statistics, one scalar)
cifar10       (0.4914, 0.4822, 0.4465)  (0.2023, 0.1994, 0.2010)  FedSWA and GradMA code
cifar100      (0.5071, 0.4865, 0.4409)  (0.2673, 0.2564, 0.2762)  FedBAT code; GradMA "standard statistics"
tinyimagenet  (0.4802, 0.4481, 0.3975)  (0.2302, 0.2265, 0.2262)  no paper states one; assumption: the
                                                                  dataset's usual per-channel statistics
digits        train-split scalar mean   train-split scalar std    pixels/16, then standardized
synthetic     --                        --                        raw features, as in FedProx
============  ========================  ========================  ============================================

Other values of ``normalize``:

* ``False`` or ``"none"``: raw pixels in [0, 1] (BHerd's MNIST SVM uses pixels/255).
* ``"imagenet"``: ImageNet statistics (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225) for 3-channel data.
* ``"fedbat"``: exactly FedBAT's code, which normalizes the *test* split with test-split statistics:
  fmnist train (0.2860, 0.3530), test (0.2868, 0.3524); svhn train (0.4496, 0.1995), test (0.4560, 0.2244);
  cifar10 ImageNet statistics; cifar100 as the default.
* ``(mean, std)``: explicit values (scalars or one per channel).
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import memo
from .federated_dataset import FederatedDataset

log = logging.getLogger(__name__)

CACHE_VERSION = 1
CACHE_DIRNAME = "fedrepro_cache"

IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

#: default normalization per dataset: (mean, std); see the module docstring for sources.
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fmnist": ((0.2860,), (0.3530,)),
    "svhn": ((0.4496, 0.4496, 0.4496), (0.1995, 0.1995, 0.1995)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "tinyimagenet": ((0.4802, 0.4481, 0.3975), (0.2302, 0.2265, 0.2262)),
}

#: FedBAT's code: (train (mean, std), test (mean, std)).
FEDBAT_NORMALIZATION = {
    "fmnist": (((0.2860,), (0.3530,)), ((0.2868,), (0.3524,))),
    "svhn": (((0.4496,) * 3, (0.1995,) * 3), ((0.4560,) * 3, (0.2244,) * 3)),
    "cifar10": (IMAGENET_STATS, IMAGENET_STATS),
    "cifar100": (NORMALIZATION["cifar100"], NORMALIZATION["cifar100"]),
}


class DataFileError(ValueError, RuntimeError):
    """A dataset file is present but cannot be parsed (corrupted, truncated, a partial download).

    Its message names the file and what to do. A ValueError (the CLI's clear-error path) and, as before, a
    RuntimeError."""


def _missing(dataset: str, files, looked_in, how: str) -> FileNotFoundError:
    places = "\n".join(f"  - {p}" for p in looked_in)
    return FileNotFoundError(
        f"{dataset} not found: expected the files {', '.join(files)}; looked in:\n{places}\n{how}")


def _fingerprint(paths) -> str:
    h = hashlib.sha256(f"v{CACHE_VERSION}".encode())
    for p in paths:
        p = Path(p)
        try:
            st = p.stat()
            h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{p}|missing\n".encode())
    return h.hexdigest()[:16]


def _cache_path(root: Path, name: str, sources) -> Path:
    return root / CACHE_DIRNAME / f"{name}-{_fingerprint(sources)}.pt"


def _cache_read(path: Path):
    if not path.is_file():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if blob.get("version") == CACHE_VERSION:
            return blob
    except Exception as e:  # a truncated or foreign file: rebuild it
        warnings.warn(f"ignoring unreadable dataset cache {path}: {e}", stacklevel=2)
    return None


def _cache_write(path: Path, blob: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(blob, f)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the cache the usual permissions
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        warnings.warn(f"could not write dataset cache {path}: {e}", stacklevel=2)


def _cached_uint8(root: Path, name: str, sources, build: Callable[[], dict], cache: bool) -> dict:
    """uint8 NCHW tensors + labels + classes, from the cache or ``build()``."""
    path = _cache_path(root, name, sources)
    if cache:
        blob = _cache_read(path)
        if blob is not None:
            blob["cache_path"] = str(path)
            return blob
    log.info("converting %s to tensors (cache %s)", name, path if cache else "off")
    blob = build()
    blob["version"] = CACHE_VERSION
    for k in ("x_train", "x_test"):
        t = blob[k]
        if t.dtype != torch.uint8 or t.dim() != 4:
            raise AssertionError(f"internal: {k} must be uint8 NCHW, got {t.dtype} {tuple(t.shape)}")
    if cache:
        _cache_write(path, blob)
        blob["cache_path"] = str(path)
    return blob


def _norm_off(normalize) -> bool:
    if isinstance(normalize, str):
        return normalize.lower() == "none"
    return normalize is False or normalize is None


def _norm_default(normalize) -> bool:
    return normalize is True or (isinstance(normalize, str) and normalize.lower() == "default")


def _stats_for(name: str, normalize, channels: int):
    """Return (train_stats, test_stats, label), each stats (mean, std) or None for [0, 1]."""
    if _norm_off(normalize):
        return None, None, "none"
    if _norm_default(normalize):
        s = NORMALIZATION[name]
        return s, s, "default"
    if isinstance(normalize, str):
        key = normalize.lower()
        if key == "imagenet":
            if channels != 3:
                raise ValueError(f"normalize='imagenet' needs 3-channel images; {name} has {channels}")
            return IMAGENET_STATS, IMAGENET_STATS, "imagenet"
        if key == "fedbat":
            if name not in FEDBAT_NORMALIZATION:
                raise ValueError(f"normalize='fedbat' is defined for {sorted(FEDBAT_NORMALIZATION)}, "
                                 f"not {name}")
            tr, te = FEDBAT_NORMALIZATION[name]
            return tr, te, "fedbat"
        raise ValueError(f"normalize must be True, False, 'none', 'default', 'imagenet', 'fedbat' or "
                         f"(mean, std); got {normalize!r}")
    try:
        mean, std = normalize
        mean = tuple(float(m) for m in np.atleast_1d(mean))
        std = tuple(float(s) for s in np.atleast_1d(std))
    except (TypeError, ValueError):
        raise ValueError(f"normalize=(mean, std) expected, got {normalize!r}") from None
    if len(mean) not in (1, channels) or len(std) not in (1, channels) or min(std) <= 0:
        raise ValueError(f"normalize=(mean, std) needs 1 or {channels} values each and std > 0; "
                         f"got {normalize!r}")
    return (mean, std), (mean, std), "custom"


def _to_float(x: torch.Tensor, stats) -> torch.Tensor:
    out = x.to(torch.float32).div_(255.0)
    if stats is not None:
        c = out.shape[1]
        mean = torch.tensor(stats[0], dtype=torch.float32).expand(c) if len(stats[0]) == 1 else \
            torch.tensor(stats[0], dtype=torch.float32)
        std = torch.tensor(stats[1], dtype=torch.float32).expand(c) if len(stats[1]) == 1 else \
            torch.tensor(stats[1], dtype=torch.float32)
        out.sub_(mean.view(1, c, 1, 1)).div_(std.view(1, c, 1, 1))
    return out


def image_dataset(root: Path, name: str, sources, build: Callable[[], dict], cache: bool, normalize,
                  num_classes: int, source: str) -> FederatedDataset:
    """The float32 dataset from the uint8 conversion cache (or ``build()``), normalized; remembered for the rest
    of the process (``benchmark.datasets.memo``) under the cache's fingerprint of the sources and the
    normalization, while the cache file is the one it was built with."""
    path = _cache_path(root, name, sources)

    def stamp():
        try:
            st = path.stat()
            return st.st_size, st.st_mtime_ns, st.st_ino
        except OSError:
            return None
    return memo.loaded((str(path), repr(normalize), bool(cache), num_classes, source),
                       lambda: _image_dataset(name, _cached_uint8(root, name, sources, build, cache), normalize,
                                              num_classes, source), stamp if cache else (lambda: None))


def _image_dataset(name: str, blob: dict, normalize, num_classes: int, source: str) -> FederatedDataset:
    channels = blob["x_train"].shape[1]
    tr, te, label = _stats_for(name, normalize, channels)
    meta = {
        "source": source,
        "classes": list(blob.get("classes", [])),
        "normalization": label,
        "mean": None if tr is None else list(tr[0]),
        "std": None if tr is None else list(tr[1]),
        "cache_path": blob.get("cache_path"),
    }
    if te is not tr and te is not None:
        meta["test_mean"], meta["test_std"] = list(te[0]), list(te[1])
    return FederatedDataset(name, _to_float(blob["x_train"], tr), blob["y_train"].long(),
                            _to_float(blob["x_test"], te), blob["y_test"].long(),
                            task="classification", num_classes=num_classes, meta=meta)


def _wrap_torchvision_error(dataset: str, where: Path, err: Exception) -> DataFileError:
    return DataFileError(f"{dataset}: the files in {where} are present but torchvision rejected them ({err}). "
                        "They are probably corrupted or a partial download (torchvision checks their md5); "
                        "delete them and load again with `--download`.")
