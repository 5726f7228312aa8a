"""benchmark.datasets.memo: a dataset loaded twice in one process is read once, its copies are independent where a
caller may write (meta, the clients list), and a memory whose tensors were written in place is never served."""
from __future__ import annotations

import pytest
import torch

from benchmark import datasets as D
from benchmark.datasets import memo
from tests.test_datasets import make_idx


@pytest.fixture(autouse=True)
def empty_memory(monkeypatch):
    monkeypatch.delenv("FEDREPRO_DATASET_MEMO", raising=False)
    memo.clear()
    yield
    memo.clear()


def reads(monkeypatch) -> list:
    """Count the conversions from the uint8 blob (what the memory saves)."""
    from benchmark.datasets import images
    calls, real = [], images._image_dataset

    def counting(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)
    monkeypatch.setattr(images, "_image_dataset", counting)
    return calls


def test_a_second_load_shares_the_tensors_and_copies_meta(tmp_path, monkeypatch):
    make_idx(tmp_path / "MNIST" / "raw", n_train=20, n_test=6)
    calls = reads(monkeypatch)
    a = D.load("mnist", data_root=tmp_path)
    b = D.load("mnist", data_root=tmp_path)
    assert calls == ["mnist"]
    assert b.x_train is a.x_train and b.y_test is a.y_test
    b.meta["mine"] = 1
    assert "mine" not in a.meta and "mine" not in D.load("mnist", data_root=tmp_path).meta
    # another normalization is another dataset
    c = D.load("mnist", data_root=tmp_path, normalize=False)
    assert calls == ["mnist", "mnist"] and not torch.equal(c.x_train, a.x_train)


def test_transforms_are_remembered_on_a_remembered_dataset(tmp_path, monkeypatch):
    make_idx(tmp_path / "MNIST" / "raw", n_train=40, n_test=6)
    from benchmark.datasets import registry
    made, real = [], registry.transform

    def counting(data, **kw):
        made.append(kw)
        return real(data, **kw)
    monkeypatch.setattr(registry, "transform", counting)
    v1 = D.load("mnist", data_root=tmp_path, validation=10)
    v2 = D.load("mnist", data_root=tmp_path, validation=10)
    assert len(made) == 1 and v2.x_train is v1.x_train and v2.name == v1.name == "mnist[validation=10]"
    torch.testing.assert_close(v2.meta["validation_index"], v1.meta["validation_index"])
    D.load("mnist", data_root=tmp_path, labels="parity")
    assert len(made) == 2
    # a dataset that is not remembered (generated) is transformed anew each time
    D.load("digits", train_subset=100)
    D.load("digits", train_subset=100)
    assert len(made) == 4


def test_a_memory_written_in_place_is_built_again(tmp_path, monkeypatch):
    """The planted defect: a caller writes into the shared tensors. The next load must not see the write."""
    make_idx(tmp_path / "MNIST" / "raw", n_train=20, n_test=6)
    calls = reads(monkeypatch)
    a = D.load("mnist", data_root=tmp_path)
    clean = a.x_train.clone()
    a.x_train.add_(1.0)
    b = D.load("mnist", data_root=tmp_path)
    assert calls == ["mnist", "mnist"] and b.x_train is not a.x_train
    assert torch.equal(b.x_train, clean)
    v = D.load("mnist", data_root=tmp_path, validation=10)
    v.x_test.mul_(0.0)  # a derived dataset's own tensor
    w = D.load("mnist", data_root=tmp_path, validation=10)
    assert w.x_test is not v.x_test and torch.equal(w.x_test, clean[w.meta["validation_index"]])


def test_replaced_source_files_are_read_again(tmp_path, monkeypatch):
    make_idx(tmp_path / "MNIST" / "raw", n_train=20, n_test=6)
    a = D.load("mnist", data_root=tmp_path)
    make_idx(tmp_path / "MNIST" / "raw", n_train=24, n_test=6)  # other files: sizes differ
    b = D.load("mnist", data_root=tmp_path)
    assert len(b.y_train) == 24 and len(a.y_train) == 20


def test_off_by_environment_and_bounded(tmp_path, monkeypatch):
    make_idx(tmp_path / "MNIST" / "raw", n_train=20, n_test=6)
    calls = reads(monkeypatch)
    monkeypatch.setenv("FEDREPRO_DATASET_MEMO", "0")
    D.load("mnist", data_root=tmp_path)
    D.load("mnist", data_root=tmp_path)
    assert calls == ["mnist", "mnist"]
    monkeypatch.delenv("FEDREPRO_DATASET_MEMO")
    for norm in (True, False, True):  # one loaded dataset at a time: the third load reads again
        D.load("mnist", data_root=tmp_path, normalize=norm)
    assert len(calls) == 5
    assert all(len(m) <= memo.SIZES[k] for k, m in memo._MEMORY.items())


def test_the_runs_are_the_same_with_and_without_it(tmp_path, monkeypatch):
    """One small run twice in a process (the second from the memory) and once with it off: equal histories."""
    from benchmark import Experiment, run
    make_idx(tmp_path / "MNIST" / "raw", n_train=60, n_test=20)
    exp = Experiment(dataset="mnist", data_root=str(tmp_path), dataset_args={"validation": 10}, model="logreg",
                     algorithm="fedavg", num_clients=3, rounds=2, local_steps=2, batch_size=8, lr=0.1,
                     seed=3)
    first, second = run(exp), run(exp)
    monkeypatch.setenv("FEDREPRO_DATASET_MEMO", "0")
    off = run(exp)
    def numbers(r):
        return [{k: v for k, v in h.items() if k != "wall_time"} for h in r.history]
    assert numbers(first) == numbers(second) == numbers(off)
