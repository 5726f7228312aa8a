"""The dataset registry: ``load(name, data_root=None, download=False, seed=0, **options)`` is the one entry
point; ``names()`` lists the datasets, ``info(name)`` describes one and ``options(name)`` lists what it
accepts.

A loader registers itself with ``@_register(name, description, options)`` in its family's module
(``benchmark/datasets/<family>.py``); ``load`` validates the options and the generic transforms
(``benchmark.datasets.transforms``) before any file is read, calls the loader, then applies the transforms.
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Callable

from . import memo
from .federated_dataset import FederatedDataset
from .transforms import TRANSFORM_OPTIONS, _check_transforms, _check_validation, changes, transform


class _Spec:
    def __init__(self, name: str, description: str, loader: Callable, options: dict):
        self.name, self.description, self.loader, self.options = name, description, loader, options


_IMAGE_OPTIONS = {"normalize": True, "cache": True}
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
    canonical, _ = resolve_name(name)
    return _REGISTRY[canonical].description + ("; transforms labels (original|parity), train_subset (n), "
                                                "validation (n)")


def default_data_root() -> Path:
    env = os.environ.get("FEDREPRO_DATA")
    return Path(env).expanduser() if env else Path("~/.cache/fedrepro/data").expanduser()


_SYNTH_RE = re.compile(r"^synthetic\s*[(_]\s*([-+0-9.eE]+)\s*[,_]\s*([-+0-9.eE]+)\s*\)?$")


def resolve_name(name: str) -> tuple[str, dict]:
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
    return dict(_REGISTRY[resolve_name(name)[0]].options)


def load(name: str, data_root=None, download: bool = False, seed: int = 0, **options) -> FederatedDataset:
    """Load dataset ``name`` as a :class:`FederatedDataset` (tensors on the CPU).

    ``seed`` only matters for generated data (``synthetic``); real datasets and ``digits`` have fixed splits.
    Options per dataset are listed by ``options`` and the loaders' module docstrings; an unknown option raises ValueError.
    Every dataset also accepts the transforms ``labels`` and ``train_subset`` (``transform``), validated before
    any file is read.
    """
    canonical, implied = resolve_name(name)
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
    if not changes(labels, train_subset, validation):
        return data
    return memo.derived(data, (labels, train_subset, validation),
                        lambda: transform(data, labels=labels, train_subset=train_subset, validation=validation))
