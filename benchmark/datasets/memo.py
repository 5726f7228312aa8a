"""Loaded datasets kept in memory for the rest of the process: a process that runs many cells on one dataset
(``fedrepro claims``, a suite, a tuning grid) reads, converts and normalizes it once instead of once per cell.

Two small least-recently-used memories:

* ``loaded``: what an image loader returns (float32, normalized), keyed by its conversion cache's path (which
  names the source files' paths, sizes and mtimes: replacing a file misses) and the normalization, and served
  while the conversion cache file is the one it was built with;
* ``derived``: what ``transform`` makes of a remembered dataset (a validation split, a training subset, parity
  labels), keyed by that dataset and the transform's arguments.

Each hit returns a new :class:`FederatedDataset` around the same tensors with its own ``meta`` dict and
clients list, so a caller that edits ``meta`` edits its copy only. The tensors are shared: nothing in fedrepro
writes into a dataset's tensors, and an entry whose tensors were written in place since it was stored (torch's
``_version`` counter moved) is dropped and built again, never served. Measured on ``fedrepro claims --quick``
(365 cells, 152 dataset loads of Fashion-MNIST): the loads were a quarter of its CPU time.

``FEDREPRO_DATASET_MEMO=0`` turns it off; ``clear()`` empties it.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Callable, Hashable

from .federated_dataset import FederatedDataset

#: entries per memory: one loaded dataset (a normalized CIFAR is 0.7 GB) and two derived ones
SIZES = {"loaded": 1, "derived": 2}
_MEMORY: dict[str, OrderedDict] = {kind: OrderedDict() for kind in SIZES}


def enabled() -> bool:
    return os.environ.get("FEDREPRO_DATASET_MEMO", "1").strip().lower() not in ("0", "false", "no", "off")


def clear() -> None:
    for m in _MEMORY.values():
        m.clear()


def _tensors(d: FederatedDataset) -> list:
    return [d.x_train, d.y_train, d.x_test, d.y_test] + list(d.clients or [])


def _versions(d: FederatedDataset) -> tuple:
    return tuple((id(t), t._version) for t in _tensors(d))


def _copy(d: FederatedDataset) -> FederatedDataset:
    return FederatedDataset(d.name, d.x_train, d.y_train, d.x_test, d.y_test, d.task, d.num_classes,
                            None if d.clients is None else list(d.clients), dict(d.meta))


def _remember(kind: str, key: Hashable, build: Callable[[], FederatedDataset], keep=(),
              stamp: Callable[[], Hashable] = lambda: None) -> FederatedDataset:
    if not enabled():
        return build()
    memory = _MEMORY[kind]
    hit = memory.get(key)
    if hit is not None:
        data, versions, kept, stamped = hit
        if _versions(data) == versions and all(_versions(k) == v for k, v in kept) and stamp() == stamped:
            memory.move_to_end(key)
            return _copy(data)
        del memory[key]  # written in place since, or its files changed: build it again
    data = build()
    memory[key] = (data, _versions(data), tuple((k, _versions(k)) for k in keep), stamp())
    while len(memory) > SIZES[kind]:
        memory.popitem(last=False)
    return _copy(data)


def loaded(key: Hashable, build: Callable[[], FederatedDataset],
           stamp: Callable[[], Hashable] = lambda: None) -> FederatedDataset:
    """``build()``'s dataset, remembered under ``key`` (a loader's own key: its sources' fingerprint and its
    options) while ``stamp()`` (e.g. its cache file's size and mtime) returns what it returned after the build."""
    return _remember("loaded", ("loaded", key), build, stamp=stamp)


def derived(base: FederatedDataset, key: Hashable, build: Callable[[], FederatedDataset]) -> FederatedDataset:
    """``build()`` (a transform of ``base``), remembered where ``base`` itself came from this memory (its tensors
    are then the remembered ones), else built each time."""
    source = next((entry[0] for entry in _MEMORY["loaded"].values() if entry[0].x_train is base.x_train
                   and entry[0].x_test is base.x_test), None)
    if source is None:
        return build()
    return _remember("derived", (id(source), key), build, keep=(source,))
