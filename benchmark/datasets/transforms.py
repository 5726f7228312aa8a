"""The generic dataset transforms, applied by ``load`` after the loader and the cache.

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
  all); for hyperparameter selection (``benchmark.campaign.tuning``). With ``train_subset`` the n samples come from
  the training samples outside the subset, so a tuning run trains on exactly the subset a final run trains
  on; without it they are removed from the training data. See ``holdout_validation``.
"""
from __future__ import annotations

import numpy as np
import torch

from .federated_dataset import FederatedDataset

#: generic transforms accepted by every dataset, applied by ``load`` after the loader (see ``transform``)
TRANSFORM_OPTIONS = {"labels": "original", "train_subset": None, "validation": None}
LABEL_MAPS = ("original", "parity")
TRAIN_SUBSET_SEED = 20240917
VALIDATION_SEED = 20241103


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


def changes(labels: str = "original", train_subset: int | None = None, validation: int | None = None) -> bool:
    """Whether ``transform`` with these (checked) arguments changes a dataset at all."""
    return not (labels == "original" and train_subset is None and validation is None)


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
    if not changes(labels, train_subset, validation):
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
