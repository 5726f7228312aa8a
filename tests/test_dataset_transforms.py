"""The generic dataset transforms of benchmark.datasets (``labels``, ``train_subset``): accepted by every
dataset, applied after loading, fixed across run seeds, clear errors; tiny data only."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark import Experiment, run
from benchmark import datasets as D
from benchmark.datasets.federated_dataset import FederatedDataset
from tests.test_datasets import make_idx


def toy(n_train=40, n_test=12, classes=4, clients=None) -> FederatedDataset:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n_train) % classes
    return FederatedDataset("toy", torch.randn(n_train, 3, generator=g), y, torch.randn(n_test, 3, generator=g),
                            torch.arange(n_test) % classes, num_classes=classes, clients=clients,
                            meta={"classes": [f"c{i}" for i in range(classes)]})


def test_every_dataset_lists_the_transforms_with_their_defaults():
    for name in D.names():
        opts = D.options(name)
        assert opts["labels"] == "original" and opts["train_subset"] is None, name
    assert "train_subset" in D.info("mnist")


def test_defaults_change_nothing():
    a = D.load("digits")
    b = D.load("digits", labels="original", train_subset=None)
    assert a.name == b.name == "digits" and a.num_classes == b.num_classes == 10
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.equal(a.y_test, b.y_test)
    ds = toy()
    assert D.transform(ds) is ds
    # an experiment that sets no dataset option hashes its (empty) dataset_args as before
    assert Experiment().config()["dataset_args"] == {}


def test_parity_labels():
    ds = D.transform(toy(), labels="parity")
    assert ds.num_classes == 2 and ds.name == "toy[parity]" and ds.meta["classes"] == ["even", "odd"]
    assert torch.equal(ds.y_train, (torch.arange(40) % 4) % 2)  # even -> 0, odd -> 1
    assert torch.equal(ds.y_test, (torch.arange(12) % 4) % 2)
    assert torch.equal(ds.meta["original_y_train"], torch.arange(40) % 4)
    assert torch.equal(ds.x_train, toy().x_train)
    digits = D.load("digits", labels="parity")
    full = D.load("digits")
    assert digits.num_classes == 2 and torch.equal(digits.y_test, full.y_test % 2)
    assert set(digits.y_train.tolist()) == {0, 1}


def test_train_subset_is_stratified_fixed_and_independent_of_the_run_seed():
    full = D.load("digits")
    a = D.load("digits", train_subset=100, seed=0)
    b = D.load("digits", train_subset=100, seed=7)
    assert len(a.y_train) == 100 and torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.equal(a.x_test, full.x_test)  # the test set is kept whole
    idx = a.meta["train_subset_index"]
    assert torch.equal(a.x_train, full.x_train[idx]) and torch.equal(a.y_train, full.y_train[idx])
    quota = 100 * torch.bincount(full.y_train).float() / len(full.y_train)
    assert torch.all((torch.bincount(a.y_train, minlength=10).float() - quota).abs() < 1.0)
    # composes with parity (stratified by the original digits, then relabelled)
    c = D.load("digits", train_subset=100, labels="parity")
    assert torch.equal(c.x_train, a.x_train) and torch.equal(c.y_train, a.y_train % 2) and c.num_classes == 2
    assert len(D.load("digits", train_subset=len(full.y_train)).y_train) == len(full.y_train)


def test_stratified_subset_allocation():
    y = np.array([0] * 3 + [1] * 97)
    idx = D.stratified_subset(y, 10)
    assert np.bincount(y[idx]).tolist() == [1, 9]  # quota 0.3 -> at least one sample of every class
    assert np.array_equal(idx, np.sort(idx)) and np.array_equal(idx, D.stratified_subset(y, 10))
    y = np.repeat(np.arange(4), [10, 20, 30, 40])
    assert np.bincount(y[D.stratified_subset(y, 7)]).tolist() == [1, 1, 2, 3]  # 0.7, 1.4, 2.1, 2.8
    with pytest.raises(ValueError):
        D.stratified_subset(y, 3)


def test_train_subset_keeps_natural_clients():
    clients = [torch.arange(0, 10), torch.arange(10, 25), torch.arange(25, 40)]
    ds = D.transform(toy(clients=clients), train_subset=20)
    keep = ds.meta["train_subset_index"]
    assert sum(len(c) for c in ds.clients) == 20
    for old, new in zip(clients, ds.clients):  # each client keeps its samples that are in the subset
        assert torch.equal(keep[new], old[torch.isin(old, keep)])
    with pytest.raises(ValueError, match="no training samples"):
        D.transform(toy(clients=[torch.arange(0, 1), torch.arange(1, 40)]), train_subset=4)
    s = D.load("synthetic", num_clients=5, train_subset=300)
    assert len(s.clients) == 5 and sum(len(c) for c in s.clients) == 300


def test_image_dataset_transforms_leave_the_cache_alone(tmp_path):
    make_idx(tmp_path / "MNIST" / "raw", n_train=20, n_test=6, gz=True)
    full = D.load("mnist", data_root=tmp_path)
    caches = sorted((tmp_path / "fedrepro_cache").glob("*.pt"))
    sub = D.load("mnist", data_root=tmp_path, labels="parity", train_subset=10)
    assert sorted((tmp_path / "fedrepro_cache").glob("*.pt")) == caches  # the same single cache file
    assert sub.meta["cache_path"] == full.meta["cache_path"]
    assert len(sub.y_train) == 10 and torch.bincount(sub.y_train).tolist() == [5, 5]
    assert torch.equal(sub.y_test, full.y_test % 2)


@pytest.mark.parametrize("opts,msg", [
    ({"labels": "binary"}, "labels must be one of"), ({"labels": 2}, "labels must be one of"),
    ({"train_subset": 5}, "between the number of classes"), ({"train_subset": 10 ** 6}, "training-set size"),
    ({"train_subset": 0}, ">= 1"), ({"train_subset": -3}, ">= 1"), ({"train_subset": 2.5}, "positive integer"),
    ({"train_subset": True}, "positive integer"), ({"train_subset": "many"}, "positive integer"),
    ({"train_labels": "parity"}, "unknown option"),
])
def test_invalid_values(opts, msg):
    with pytest.raises(ValueError, match=msg):
        D.load("digits", **opts)


def test_invalid_values_fail_before_reading_files(tmp_path):
    # no MNIST files under tmp_path: the bad option is reported, not the missing files
    with pytest.raises(ValueError, match="labels must be one of"):
        D.load("mnist", data_root=tmp_path, labels="odd")


def test_cli_style_strings_are_accepted():
    a = D.load("digits", train_subset="100")  # --dataset-args train_subset=100 (JSON) gives an int; strings too
    assert len(a.y_train) == 100
    assert len(D.load("digits", train_subset="none").y_train) == 1347


def test_experiment_runs_the_squared_hinge_svm_on_parity_digits():
    kw = dict(algorithm="fedavg", dataset="digits", model="bherd_svm", num_clients=2, rounds=2, batch_size=50,
              lr=0.05, dataset_args={"normalize": False}, eval_every=1)
    with pytest.raises(ValueError, match="1 or 2|2 classes"):  # a 10-class dataset is refused
        run(Experiment(**kw))
    kw["dataset_args"] = {"normalize": False, "labels": "parity", "train_subset": 200}
    res = run(Experiment(**kw))
    assert res.status == "ok" and res.history[-1]["test_accuracy"] > 0.6
    assert len(res.config["dataset_args"]) == 3
    with pytest.raises(ValueError, match="unknown option"):
        run(Experiment(**{**kw, "dataset_args": {"parity": True}}))
