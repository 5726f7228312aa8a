"""Dataset loaders: every dataset comes back as a :class:`~benchmark.federated_dataset.FederatedDataset`.

``load(name, data_root=None, download=False, seed=0, **options)`` is the one entry point; ``names()`` lists
the datasets and ``info(name)`` describes one.

Real image datasets are read by torchvision's own dataset classes (``MNIST``, ``FashionMNIST``, ``SVHN``,
``CIFAR10``, ``CIFAR100``, and ``ImageFolder`` plus ``val_annotations.txt`` for Tiny-ImageNet), converted once
to tensors and held in memory: float32, NCHW, normalized as below. No DataLoader is involved.

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

Offline datasets (no files needed):

* ``digits``: scikit-learn's ``load_digits`` (1797 real 8x8 handwritten digits) as (N, 1, 8, 8) float32,
  pixels/16 then standardized with the training split's scalar mean/std. Fixed stratified split, 25% test
  (450 test, 1347 train), split seed ``DIGITS_SPLIT_SEED`` -- not the run seed, so the test set never changes.
* ``synthetic``: Synthetic(alpha, beta) of Li et al. 2020, "Federated Optimization in Heterogeneous Networks"
  (FedProx). d = 60, 10 classes, ``num_clients`` devices (default 30). Device k has n_k =
  floor(LogNormal(4, 2)) + 50 samples; u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k ~ N(u_k, 1) (60x10),
  b_k ~ N(u_k, 1); v_k ~ N(B_k, 1) per coordinate; x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2;
  y = argmax softmax(W_k^T x + b_k). The second argument of N(., .) is used as a standard deviation, as in
  the FedProx generator (``np.random.normal(0, alpha)``); for alpha, beta in {0, 0.5, 1} the two readings
  differ only at 0.5. ``iid=True`` (FedProx's Synthetic-IID): one shared W, b ~ N(0, 1) and v = 0 for every
  device (alpha and beta unused). Each device's samples are split 80/20 (``train_frac``) into train/test;
  ``clients`` holds each device's training indices, the test set is pooled and ``meta["test_clients"]``
  holds each device's test indices. ``normalize`` is accepted and ignored (features stay raw, as in FedProx).
  Seeded by ``seed`` (numpy ``default_rng``; the distribution is
  FedProx's, the random stream is not). Note: W_k and b_k are shifted by the same u_k in every entry, which
  adds the same amount to every logit, so alpha never changes a label (softmax is shift invariant); only beta
  (through v_k) and the per-device noise in W_k, b_k, v_k make devices differ. This is a property of FedProx's
  generator, kept as is. Names ``synthetic(0.5,0.5)`` and ``synthetic_iid``
  are accepted as shorthands.

Generic transforms, accepted by every dataset (listed by ``options(name)``; ``Experiment(dataset_args=...)``,
``--dataset-args``, a suite's ``dataset_args``), applied by ``load`` after the loader and the cache, so the
cache and the loaded tensors are unchanged when they keep their defaults (``transform``):

* ``labels``: ``"original"`` (default) or ``"parity"``: binary even/odd labels y -> y % 2 (even -> 0,
  odd -> 1) on train and test, ``num_classes`` 2. For digits (MNIST, SVHN, digits) this is BHerd's even/odd
  SVM task; for other datasets it is an arbitrary grouping of the class indices (e.g. Fashion-MNIST: even =
  T-shirt/top, pullover, coat, shirt, bag; odd = trouser, dress, sandal, sneaker, ankle boot).
  Partitions then see the binary labels (``labelcnt:1`` = every client all-even or all-odd).
* ``train_subset``: ``None`` (default) or n: a fixed subset of n training samples, stratified by the
  original labels, drawn with seed ``TRAIN_SUBSET_SEED`` (not the run seed, so every run shares it); the
  test set is kept whole. ValueError if n < number of classes or n > training-set size.
* ``validation``: ``None`` (default) or n: a validation split of n training samples (stratified, seed
  ``VALIDATION_SEED``) that the run evaluates on *instead of the test set* (the test set is not used at
  all); for hyperparameter selection (``benchmark.tuning``). With ``train_subset`` the n samples come from
  the training samples outside the subset, so a tuning run trains on exactly the subset a final run trains
  on; without it they are removed from the training data. See ``holdout_validation``.
"""
from __future__ import annotations

import difflib
import hashlib
import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .federated_dataset import FederatedDataset

log = logging.getLogger(__name__)

CACHE_VERSION = 1
CACHE_DIRNAME = "fedrepro_cache"
DIGITS_SPLIT_SEED = 20240601
DEBIAN_FMNIST_PACKAGE = "dataset-fashion-mnist"
DEBIAN_FMNIST_DIRS = ("/usr/share/datasets/fashion-mnist",)
TINYIMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"

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

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
                 "batches.meta")
CIFAR100_FILES = ("train", "test", "meta")
SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


# --------------------------------------------------------------------------------------------- registry

class _Spec:
    def __init__(self, name: str, description: str, loader: Callable, options: dict):
        self.name, self.description, self.loader, self.options = name, description, loader, options


_IMAGE_OPTIONS = {"normalize": True, "cache": True}
#: generic transforms accepted by every dataset, applied by ``load`` after the loader (see ``transform``)
TRANSFORM_OPTIONS = {"labels": "original", "train_subset": None, "validation": None}
LABEL_MAPS = ("original", "parity")
TRAIN_SUBSET_SEED = 20240917
VALIDATION_SEED = 20241103
_REGISTRY: dict[str, _Spec] = {}
_ALIASES = {
    "fashion-mnist": "fmnist", "fashion_mnist": "fmnist", "fashionmnist": "fmnist",
    "cifar-10": "cifar10", "cifar_10": "cifar10", "cifar-100": "cifar100", "cifar_100": "cifar100",
    "tiny-imagenet": "tinyimagenet", "tiny_imagenet": "tinyimagenet", "tiny-imagenet-200": "tinyimagenet",
    "tinyimagenet200": "tinyimagenet", "sklearn-digits": "digits",
}


def _register(name: str, description: str, options: dict):
    """Register a loader; every dataset also accepts the generic transforms (``TRANSFORM_OPTIONS``)."""
    def deco(fn):
        _REGISTRY[name] = _Spec(name, description, fn, {**options, **TRANSFORM_OPTIONS})
        return fn
    return deco


def names() -> list[str]:
    """Canonical dataset names accepted by :func:`load`."""
    return list(_REGISTRY)


def info(name: str) -> str:
    """A one-line description of a dataset."""
    canonical, _ = _resolve(name)
    return _REGISTRY[canonical].description + ("; transforms labels (original|parity), train_subset (n), "
                                                "validation (n)")


def default_data_root() -> Path:
    env = os.environ.get("FEDREPRO_DATA")
    return Path(env).expanduser() if env else Path("~/.cache/fedrepro/data").expanduser()


_SYNTH_RE = re.compile(r"^synthetic\s*[(_]\s*([-+0-9.eE]+)\s*[,_]\s*([-+0-9.eE]+)\s*\)?$")


def _resolve(name: str) -> tuple[str, dict]:
    """Canonical name and the options a spelled form implies (``synthetic(0.5,0.5)``, ``synthetic_iid``)."""
    if not isinstance(name, str):
        raise ValueError(f"dataset name must be a string, got {name!r}")
    key = name.strip().lower().replace(" ", "")
    key = _ALIASES.get(key, key)
    if key in _REGISTRY:
        return key, {}
    if key in ("synthetic_iid", "synthetic-iid", "syntheticiid"):
        return "synthetic", {"iid": True}
    m = _SYNTH_RE.match(key)
    if m:
        try:
            return "synthetic", {"alpha": float(m.group(1)), "beta": float(m.group(2))}
        except ValueError:
            pass
    known = names() + ["synthetic(alpha,beta)", "synthetic_iid"]
    hint = difflib.get_close_matches(key, list(_REGISTRY) + list(_ALIASES) + ["synthetic_iid"], n=1,
                                     cutoff=0.5)
    did = f" Did you mean {_ALIASES.get(hint[0], hint[0])!r}?" if hint else ""
    raise ValueError(f"unknown dataset {name!r}.{did} Known datasets: {', '.join(known)}")


def options(name: str) -> dict:
    """The options dataset ``name`` accepts, with their defaults."""
    return dict(_REGISTRY[_resolve(name)[0]].options)


def load(name: str, data_root=None, download: bool = False, seed: int = 0, **options) -> FederatedDataset:
    """Load dataset ``name`` as a :class:`FederatedDataset` (tensors on the CPU).

    ``seed`` only matters for generated data (``synthetic``); real datasets and ``digits`` have fixed splits.
    Options per dataset are listed by ``options`` and the module docstring; an unknown option raises ValueError.
    Every dataset also accepts the transforms ``labels`` and ``train_subset`` (``transform``), validated before
    any file is read.
    """
    canonical, implied = _resolve(name)
    spec = _REGISTRY[canonical]
    for k, v in implied.items():
        if k in options and options[k] != v:
            raise ValueError(f"dataset name {name!r} sets {k}={v!r} but the option {k}={options[k]!r} "
                             "contradicts it")
    opts = dict(spec.options)
    unknown = sorted(set(options) - set(opts))
    if unknown:
        raise ValueError(f"unknown option(s) for dataset {canonical!r}: {', '.join(unknown)} "
                         f"(accepted: {', '.join(sorted(opts)) or 'none'})")
    opts.update(implied)
    opts.update(options)
    generic = {k: opts.pop(k) for k in TRANSFORM_OPTIONS}
    validation = _check_validation(canonical, generic.pop("validation"))
    labels, train_subset = _check_transforms(canonical, **generic)  # before any file is read
    root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    data = spec.loader(root=root, download=bool(download), seed=int(seed), **opts)
    return transform(data, labels=labels, train_subset=train_subset, validation=validation)


# --------------------------------------------------------------------------------------------- transforms

def _check_transforms(name: str, labels="original", train_subset=None) -> tuple[str, int | None]:
    """Validated (labels, train_subset); ValueError naming the dataset for a bad value."""
    if not isinstance(labels, str) or labels.lower() not in LABEL_MAPS:
        raise ValueError(f"{name}: labels must be one of {LABEL_MAPS}, got {labels!r}")
    if isinstance(train_subset, str):
        t = train_subset.strip().lower()
        if t in ("none", "null", "all", ""):
            train_subset = None
        elif t.isdigit():
            train_subset = int(t)
    if train_subset is not None:
        if isinstance(train_subset, bool) or not isinstance(train_subset, (int, np.integer)):
            raise ValueError(f"{name}: train_subset must be a positive integer (a number of training samples) "
                             f"or None, got {train_subset!r}")
        train_subset = int(train_subset)
        if train_subset < 1:
            raise ValueError(f"{name}: train_subset must be >= 1, got {train_subset}")
    return labels.lower(), train_subset


def stratified_subset(y: np.ndarray, n: int, seed: int = TRAIN_SUBSET_SEED) -> np.ndarray:
    """Sorted indices of n samples, stratified by the labels ``y``, drawn with numpy's ``default_rng(seed)``.

    Class c gets its quota q_c = n |c| / N rounded by largest remainder (ties: the lower class), but at least
    1 and at most |c|; within a class the samples are a uniformly random subset.
    """
    y = np.asarray(y)
    classes, counts = np.unique(y, return_counts=True)
    if n < len(classes) or n > len(y):
        raise ValueError(f"need {len(classes)} <= n <= {len(y)}, got {n}")
    quota = n * counts / len(y)
    alloc = np.clip(np.floor(quota).astype(np.int64), 1, counts)
    while alloc.sum() != n:  # one sample at a time to the class furthest below (from the one furthest above) quota
        short = alloc.sum() < n
        cand = np.flatnonzero(alloc < counts if short else alloc > 1)
        gap = (quota - alloc)[cand]
        j = cand[np.argmax(gap) if short else np.argmin(gap)]
        alloc[j] += 1 if short else -1
    rng = np.random.default_rng(seed)
    picked = [np.flatnonzero(y == c)[rng.permutation(int(cnt))[:int(a)]]
              for c, cnt, a in zip(classes, counts, alloc)]
    return np.sort(np.concatenate(picked))


def _check_validation(name: str, validation=None) -> int | None:
    """The ``validation`` option: None or a positive number of held-out training samples."""
    if isinstance(validation, str):
        t = validation.strip().lower()
        validation = None if t in ("none", "null", "") else (int(t) if t.isdigit() else validation)
    if validation is None:
        return None
    if isinstance(validation, bool) or not isinstance(validation, (int, np.integer)) or validation < 1:
        raise ValueError(f"{name}: validation must be a positive integer (a number of training samples held "
                         f"out for hyperparameter selection) or None, got {validation!r}")
    return int(validation)


def holdout_validation(y_train: np.ndarray, n: int, subset: np.ndarray | None, name: str,
                       classification: bool = True) -> np.ndarray:
    """Sorted indices (into the training set) of an n-sample validation split, drawn with
    ``VALIDATION_SEED`` (stratified by label for classification, as ``stratified_subset``).

    With ``subset`` (the ``train_subset`` indices) the split is drawn from the training samples outside the
    subset; without it, from the whole training set (the caller then removes it from training). ValueError
    if there are too few samples to draw from.
    """
    pool = np.arange(len(y_train)) if subset is None else np.setdiff1d(np.arange(len(y_train)), subset)
    where = "outside train_subset" if subset is not None else "in the training set"
    need = len(np.unique(y_train[pool])) if classification and len(pool) else 1
    if not need <= n <= len(pool) - (0 if subset is not None else 1):
        raise ValueError(f"{name}: validation={n} needs between {need} and {len(pool)} samples {where} "
                         f"({len(pool)} available); choose a smaller validation split"
                         + (" or a smaller train_subset" if subset is not None else ""))
    if classification:
        picked = stratified_subset(y_train[pool], n, seed=VALIDATION_SEED)
    else:
        picked = np.random.default_rng(VALIDATION_SEED).permutation(len(pool))[:n]
    return np.sort(pool[picked])


def _keep_clients(clients, n_train: int, keep_t: torch.Tensor, name: str, what: str):
    """Natural clients after keeping only the training samples ``keep_t`` (renumbered); none may be empty."""
    if clients is None:
        return None
    new_pos = torch.full((n_train,), -1, dtype=torch.long, device=keep_t.device)
    new_pos[keep_t] = torch.arange(len(keep_t), device=keep_t.device)
    clients = [new_pos[c.to(keep_t.device)] for c in clients]
    clients = [c[c >= 0] for c in clients]
    empty = [i for i, c in enumerate(clients) if len(c) == 0]
    if empty:
        raise ValueError(f"{name}: {what} leaves client(s) {empty} with no training samples")
    return clients


def transform(data: FederatedDataset, labels: str = "original", train_subset: int | None = None,
              validation: int | None = None) -> FederatedDataset:
    """Apply the generic transforms of ``load`` to a loaded dataset (defaults: return ``data`` unchanged).

    ``train_subset=n``: a fixed subset of n training samples, stratified by the original labels
    (``stratified_subset`` with seed ``TRAIN_SUBSET_SEED``, not the run seed: every run and every algorithm
    sees the same n samples); the test set is kept whole. n must be at least the number of classes and at
    most the training-set size. Natural clients (``synthetic``) keep their samples that are in the subset
    (renumbered); a client left with none is an error.

    ``labels="parity"``: binary even/odd labels y -> y % 2 (even -> 0, odd -> 1) on train and test,
    ``num_classes`` 2 (BHerd's even/odd SVM task). The original labels stay in
    ``meta["original_y_train"]`` / ``meta["original_y_test"]``.

    ``validation=n``: the evaluation set becomes n held-out training samples (``holdout_validation``;
    from outside the subset when ``train_subset`` is set, else removed from training); the test set is
    dropped, so nothing computed from such a dataset can touch it. ``meta["evaluation"]`` says so and
    ``meta["validation_index"]`` holds the indices into the original training set.
    """
    labels, train_subset = _check_transforms(data.name, labels, train_subset)
    validation = _check_validation(data.name, validation)
    if labels == "original" and train_subset is None and validation is None:
        return data
    meta = dict(data.meta)
    x_tr, y_tr, y_te, clients = data.x_train, data.y_train, data.y_test, data.clients
    x_te = data.x_test
    num_classes, name = data.num_classes, data.name
    if validation is not None:
        keep_sub = None
        if train_subset is not None:  # the subset's draw is the one a run without validation makes
            _check_subset_size(name, data.task, train_subset, num_classes, len(y_tr))
            keep_sub = _subset_index(data.task, y_tr, train_subset)
        val = holdout_validation(y_tr.cpu().numpy(), validation, keep_sub, name, data.task == "classification")
        val_t = torch.from_numpy(val).to(y_tr.device)
        x_te, y_te = x_tr[val_t], y_tr[val_t]
        meta.pop("test_clients", None)
        meta.update(validation=validation, validation_seed=VALIDATION_SEED, validation_index=val_t.cpu(),
                    evaluation=f"validation split: {validation} training samples held out "
                               f"({'outside train_subset' if keep_sub is not None else 'removed from training'})"
                               f"; the test set is not used")
        if keep_sub is None:  # remove the split from training (train_subset below is then not set)
            n_train = len(y_tr)
            keep_t = torch.from_numpy(np.setdiff1d(np.arange(n_train), val)).to(y_tr.device)
            clients = _keep_clients(clients, n_train, keep_t, name, f"validation={validation}")
            x_tr, y_tr = x_tr[keep_t], y_tr[keep_t]
    if train_subset is not None:
        n_train = len(y_tr)
        _check_subset_size(name, data.task, train_subset, num_classes, n_train)
        keep = _subset_index(data.task, y_tr, train_subset)
        keep_t = torch.from_numpy(keep).to(y_tr.device)
        x_tr, y_tr = x_tr[keep_t], y_tr[keep_t]
        clients = _keep_clients(clients, n_train, keep_t, name,
                                f"train_subset={train_subset} (use a larger subset)")
        meta.update(train_subset=train_subset, train_subset_seed=TRAIN_SUBSET_SEED,
                    train_subset_index=keep_t.cpu())
        name = f"{name}[train_subset={train_subset}]"
    if validation is not None:
        name = f"{name}[validation={validation}]"
    if labels == "parity":
        if data.task != "classification":
            raise ValueError(f"{data.name}: labels='parity' needs a classification dataset, not {data.task}")
        meta.update(original_y_train=y_tr, original_y_test=y_te, original_classes=meta.get("classes"),
                    classes=["even", "odd"], labels="parity (y % 2: even -> 0, odd -> 1)")
        y_tr, y_te, num_classes = y_tr % 2, y_te % 2, 2
        name = f"{name}[parity]"
    return FederatedDataset(name, x_tr, y_tr, x_te, y_te, task=data.task, num_classes=num_classes,
                            clients=clients, meta=meta)


def _check_subset_size(name: str, task: str, train_subset: int, num_classes, n_train: int) -> None:
    if task == "classification":
        if train_subset < num_classes or train_subset > n_train:
            raise ValueError(f"{name}: train_subset must be between the number of classes ({num_classes}) "
                             f"and the training-set size ({n_train}), got {train_subset}")
    elif train_subset > n_train:
        raise ValueError(f"{name}: train_subset must be at most the training-set size ({n_train}), "
                         f"got {train_subset}")


def _subset_index(task: str, y_tr: torch.Tensor, train_subset: int) -> np.ndarray:
    """The sorted training indices ``train_subset`` keeps (stratified for classification)."""
    if task == "classification":
        return stratified_subset(y_tr.cpu().numpy(), train_subset)
    return np.sort(np.random.default_rng(TRAIN_SUBSET_SEED).permutation(len(y_tr))[:train_subset])


# --------------------------------------------------------------------------------------------- helpers

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


# --------------------------------------------------------------------------------------------- MNIST / FMNIST

def _debian_fmnist_dirs() -> list[Path]:
    """Where Debian's dataset-fashion-mnist keeps its files: the known dir, then whatever dpkg lists."""
    dirs = [Path(d) for d in DEBIAN_FMNIST_DIRS]
    dpkg = shutil.which("dpkg")
    if dpkg:
        try:
            out = subprocess.run([dpkg, "-L", DEBIAN_FMNIST_PACKAGE], capture_output=True, text=True,
                                 timeout=20, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            line = line.strip()
            if line.endswith("train-images-idx3-ubyte.gz") or line.endswith("train-images-idx3-ubyte"):
                d = Path(line).parent
                if d not in dirs:
                    dirs.append(d)
    return dirs


def _idx_source(d: Path) -> dict[str, Path] | None:
    """Map each idx file name to its decompressed or .gz path in ``d``, or None if one is missing."""
    found = {}
    for f in IDX_FILES:
        if (d / f).is_file():
            found[f] = d / f
        elif (d / (f + ".gz")).is_file():
            found[f] = d / (f + ".gz")
        else:
            return None
    return found


_IDX_MAGIC = {"images": (0x0803, 3), "labels": (0x0801, 1)}  # unsigned bytes, number of dimensions


def _open_maybe_gz(path: Path):
    import gzip

    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _idx_problem(path: Path, kind: str) -> tuple[str | None, int | None]:
    """Why ``path`` is not a well-formed IDX file of ``kind`` (images/labels), and its item count."""
    import gzip
    import zlib

    magic, ndim = _IDX_MAGIC[kind]
    try:
        with _open_maybe_gz(path) as f:
            head = f.read(4 + 4 * ndim)
            if len(head) < 4 + 4 * ndim:
                return f"{len(head)} bytes, shorter than an IDX header", None
            got = int.from_bytes(head[:4], "big")
            if got != magic:
                return f"magic number {got:#010x}, expected {magic:#010x} (IDX {kind})", None
            dims = [int.from_bytes(head[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
            want = math.prod(dims)
            size = 0
            while chunk := f.read(1 << 22):
                size += len(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        return f"its gzip stream is damaged ({e})", None
    if size != want:
        return f"its header announces {'x'.join(map(str, dims))} = {want} bytes of data, the file has {size}", None
    return None, dims[0]


def _check_idx_files(name: str, files: dict[str, Path]) -> None:
    """Raise a DataFileError naming the first IDX file that does not parse (or whose counts disagree)."""
    counts = {}
    for fname, path in files.items():
        why, n = _idx_problem(path, "images" if "images" in fname else "labels")
        if why:
            raise _corrupt(name, path, f"not a valid IDX file: {why}")
        counts[fname] = n
    for split in ("train", "t10k"):
        ni, nl = counts.get(f"{split}-images-idx3-ubyte"), counts.get(f"{split}-labels-idx1-ubyte")
        if ni is not None and nl is not None and ni != nl:
            raise _corrupt(name, files[f"{split}-labels-idx1-ubyte"],
                           f"{nl} labels for the {ni} images of {files[f'{split}-images-idx3-ubyte']}")


def _corrupt(dataset: str, path: Path, why: str) -> DataFileError:
    how = "delete it and load again with `--download` (load(..., download=True))"
    if dataset == "fmnist" and str(path).startswith(tuple(DEBIAN_FMNIST_DIRS)):
        how = f"reinstall Debian's package: `apt-get install --reinstall {DEBIAN_FMNIST_PACKAGE}`"
    return DataFileError(f"{dataset}: {path} is {why}. It is probably corrupted or a partial download: {how}.")


def _read_idx_with_torchvision(cls, files: dict[str, Path], root: Path) -> dict:
    """Stage ``files`` in torchvision's raw layout (<tmp>/<Class>/raw/) and read them with ``cls``.

    Decompressed files are symlinked; .gz files are decompressed by torchvision's own
    ``extract_archive`` (what its download step does) into the staging folder, which is deleted afterwards:
    only the uint8 tensors are kept (in the cache).
    """
    from torchvision.datasets.utils import extract_archive

    stage_parent = root / CACHE_DIRNAME
    try:
        stage_parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix="stage-", dir=stage_parent))
    except OSError:
        stage = Path(tempfile.mkdtemp(prefix="fedrepro-stage-"))
    try:
        raw = stage / cls.__name__ / "raw"
        raw.mkdir(parents=True)
        for fname, src in files.items():
            if src.suffix == ".gz":
                extract_archive(str(src), str(raw))
            else:
                os.symlink(src.resolve(), raw / fname)
        return _from_torchvision_idx(cls, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _from_torchvision_idx(cls, root) -> dict:
    tr = cls(root=str(root), train=True, download=False)
    te = cls(root=str(root), train=False, download=False)
    return {"x_train": tr.data.unsqueeze(1).contiguous(), "y_train": tr.targets.long(),
            "x_test": te.data.unsqueeze(1).contiguous(), "y_test": te.targets.long(),
            "classes": list(cls.classes)}


def _load_idx(name: str, cls, root: Path, download: bool, cache: bool, normalize, debian: bool):
    raw = root / cls.__name__ / "raw"
    candidates = [raw] + (_debian_fmnist_dirs() if debian else [])
    for d in candidates:
        files = _idx_source(d)
        if files is not None:
            break
    else:
        if download:
            cls(root=str(root), train=True, download=True)
            files = _idx_source(raw)
            d = raw
            if files is None:  # pragma: no cover - torchvision raised already
                raise RuntimeError(f"torchvision's {cls.__name__} download did not produce {raw}")
        else:
            how = f"Get them with `--download` (load(..., download=True)), which fetches them into {raw}"
            if debian:
                how += f", or install Debian's package: `apt-get install {DEBIAN_FMNIST_PACKAGE}`"
            how += "."
            raise _missing(name, [f + "[.gz]" for f in IDX_FILES], candidates, how)

    def build():
        _check_idx_files(name, files)
        try:
            if all(p.parent == raw and p.suffix != ".gz" for p in files.values()):
                return _from_torchvision_idx(cls, root)  # already torchvision's exact layout
            return _read_idx_with_torchvision(cls, files, root)
        except (AssertionError, RuntimeError, ValueError, OSError) as e:
            if isinstance(e, (DataFileError, FileNotFoundError)):
                raise
            raise _wrap_torchvision_error(name, d, e) from e

    blob = _cached_uint8(root, name, sorted(files.values()), build, cache)
    return _image_dataset(name, blob, normalize, 10, str(d))


@_register("mnist", "MNIST: 60k/10k 28x28 grayscale handwritten digits, 10 classes (torchvision MNIST); "
                    "options normalize, cache", _IMAGE_OPTIONS)
def _mnist(root, download, seed, normalize, cache):
    from torchvision.datasets import MNIST
    return _load_idx("mnist", MNIST, root, download, cache, normalize, debian=False)


@_register("fmnist", "Fashion-MNIST: 60k/10k 28x28 grayscale clothing images, 10 classes (torchvision "
                     "FashionMNIST; Debian's dataset-fashion-mnist found automatically); "
                     "options normalize, cache",
           _IMAGE_OPTIONS)
def _fmnist(root, download, seed, normalize, cache):
    from torchvision.datasets import FashionMNIST
    return _load_idx("fmnist", FashionMNIST, root, download, cache, normalize, debian=True)


# --------------------------------------------------------------------------------------------- CIFAR

def _wrap_torchvision_error(dataset: str, where: Path, err: Exception) -> DataFileError:
    return DataFileError(f"{dataset}: the files in {where} are present but torchvision rejected them ({err}). "
                        "They are probably corrupted or a partial download (torchvision checks their md5); "
                        "delete them and load again with `--download`.")


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

    blob = _cached_uint8(root, name, [folder / f for f in files], build, cache)
    return _image_dataset(name, blob, normalize, num_classes, str(folder))


@_register("cifar10", "CIFAR-10: 50k/10k 32x32 color images, 10 classes (torchvision CIFAR10); "
                      "options normalize, cache", _IMAGE_OPTIONS)
def _cifar10(root, download, seed, normalize, cache):
    from torchvision.datasets import CIFAR10
    return _load_cifar("cifar10", CIFAR10, CIFAR10_FILES, 10, root, download, cache, normalize)


@_register("cifar100", "CIFAR-100: 50k/10k 32x32 color images, 100 fine classes (torchvision CIFAR100); "
                       "options normalize, cache", _IMAGE_OPTIONS)
def _cifar100(root, download, seed, normalize, cache):
    from torchvision.datasets import CIFAR100
    return _load_cifar("cifar100", CIFAR100, CIFAR100_FILES, 100, root, download, cache, normalize)


# --------------------------------------------------------------------------------------------- SVHN

@_register("svhn", "SVHN: 73,257/26,032 32x32 color house-number digits, 10 classes, label 10 -> 0 "
                   "(torchvision SVHN, 'extra' not used); options normalize, cache", _IMAGE_OPTIONS)
def _svhn(root, download, seed, normalize, cache):
    from torchvision.datasets import SVHN
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

    blob = _cached_uint8(root, "svhn", [folder / f for f in SVHN_FILES], build, cache)
    return _image_dataset("svhn", blob, normalize, 10, str(folder))


# --------------------------------------------------------------------------------------------- Tiny-ImageNet

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
    from torchvision.datasets import ImageFolder

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

    blob = _cached_uint8(root, "tinyimagenet", sources, build, cache)
    return _image_dataset("tinyimagenet", blob, normalize, 200, str(base))


# --------------------------------------------------------------------------------------------- digits

@_register("digits", "scikit-learn digits: 1797 real 8x8 handwritten digits (1347 train / 450 test, fixed "
                     "stratified split), 10 classes, offline; option normalize", {"normalize": True})
def _digits(root, download, seed, normalize):
    from sklearn.datasets import load_digits
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


# --------------------------------------------------------------------------------------------- synthetic

SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10


def synthetic_arrays(alpha: float, beta: float, num_clients: int, seed: int, iid: bool = False):
    """Per-device (X_k, y_k) numpy arrays of FedProx's Synthetic(alpha, beta) (see the module docstring)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    rng = np.random.default_rng(seed)
    d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
    sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
    u = rng.normal(0.0, alpha, num_clients)       # mean of W_k and b_k
    big_b = rng.normal(0.0, beta, num_clients)    # mean of v_k
    sigma_sqrt = np.power(np.arange(1, d + 1, dtype=np.float64), -1.2) ** 0.5
    if iid:
        w_shared = rng.normal(0.0, 1.0, (d, c))
        b_shared = rng.normal(0.0, 1.0, c)
    out = []
    for k in range(num_clients):
        if iid:
            w, b, v = w_shared, b_shared, np.zeros(d)
        else:
            v = rng.normal(big_b[k], 1.0, d)
            w = rng.normal(u[k], 1.0, (d, c))
            b = rng.normal(u[k], 1.0, c)
        x = v + rng.standard_normal((int(sizes[k]), d)) * sigma_sqrt
        logits = x @ w + b          # argmax of softmax == argmax of the logits
        out.append((x.astype(np.float32), logits.argmax(axis=1).astype(np.int64)))
    return out


@_register("synthetic", "FedProx Synthetic(alpha, beta): 60-dim features, 10 classes, natural clients with "
                        "log-normal sizes, 80/20 per-client split; options alpha, beta, num_clients, iid, "
                        "train_frac; seeded by seed",
           {"alpha": 1.0, "beta": 1.0, "num_clients": 30, "iid": False, "train_frac": 0.8, "normalize": True})
def _synthetic(root, download, seed, alpha, beta, num_clients, iid, train_frac, normalize):
    if not 0.0 < float(train_frac) < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    alpha, beta, num_clients = float(alpha), float(beta), int(num_clients)
    parts = synthetic_arrays(alpha, beta, num_clients, seed, iid=bool(iid))
    xs_tr, ys_tr, xs_te, ys_te, clients, test_clients = [], [], [], [], [], []
    n_tr = n_te = 0
    for x, y in parts:
        k = int(math.floor(float(train_frac) * len(y)))
        xs_tr.append(x[:k])
        ys_tr.append(y[:k])
        xs_te.append(x[k:])
        ys_te.append(y[k:])
        clients.append(torch.arange(n_tr, n_tr + k))
        test_clients.append(torch.arange(n_te, n_te + len(y) - k))
        n_tr += k
        n_te += len(y) - k
    name = "synthetic_iid" if iid else f"synthetic({alpha:g},{beta:g})"
    meta = {"alpha": None if iid else alpha, "beta": None if iid else beta, "iid": bool(iid),
            "num_clients": num_clients, "seed": seed, "train_frac": float(train_frac),
            "client_sizes": [len(y) for _, y in parts], "test_clients": test_clients,
            "normalization": "none (raw features, as in FedProx)"}
    cat = lambda parts: torch.from_numpy(np.concatenate(parts))  # noqa: E731
    return FederatedDataset(name, cat(xs_tr), cat(ys_tr), cat(xs_te), cat(ys_te),
                            num_classes=SYNTHETIC_CLASSES, clients=clients, meta=meta)


__all__ = ["load", "names", "info", "options", "default_data_root", "synthetic_arrays", "transform",
           "stratified_subset", "NORMALIZATION", "FEDBAT_NORMALIZATION", "IMAGENET_STATS", "DIGITS_SPLIT_SEED",
           "TRAIN_SUBSET_SEED", "TRANSFORM_OPTIONS"]
