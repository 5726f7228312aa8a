"""benchmark.datasets: the real torchvision loaders run on tiny files written in each dataset's own format.

Every test writes under pytest's tmp_path (used as data_root, so the conversion cache goes there too); nothing
is written into the repository or the user's cache. torchvision checks md5s for CIFAR and SVHN: the tests
compute the md5 of the tiny files they write and monkeypatch the class's md5 lists (``train_list``,
``test_list``, ``meta`` for CIFAR, ``split_list`` for SVHN), so torchvision's own integrity check runs and
passes on them.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark import datasets as D
from benchmark.datasets.federated_dataset import FederatedDataset

RNG = np.random.default_rng(1234)


def md5(path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------- registry / API

def test_names_and_info():
    n = D.names()
    for name in ("mnist", "fmnist", "svhn", "cifar10", "cifar100", "tinyimagenet", "digits", "synthetic"):
        assert name in n
        line = D.info(name)
        assert isinstance(line, str) and line and "\n" not in line
    assert D.info("Fashion-MNIST") == D.info("fmnist")


def test_unknown_name_lists_names_with_hint():
    with pytest.raises(ValueError) as e:
        D.load("cifar")
    msg = str(e.value)
    assert "cifar10" in msg and "Did you mean" in msg and "mnist" in msg and "synthetic" in msg
    with pytest.raises(ValueError, match="Known datasets"):
        D.info("nonsense_dataset")


def test_unknown_option_and_contradiction():
    with pytest.raises(ValueError, match="unknown option"):
        D.load("digits", foo=1)
    with pytest.raises(ValueError, match="contradicts"):
        D.load("synthetic(0.5,0.5)", alpha=1.0)


def test_default_data_root(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDREPRO_DATA", str(tmp_path / "x"))
    assert D.default_data_root() == tmp_path / "x"
    monkeypatch.delenv("FEDREPRO_DATA")
    assert D.default_data_root() == Path("~/.cache/fedrepro/data").expanduser()


# --------------------------------------------------------------------------------------------- MNIST / FMNIST

def write_idx_images(path: Path, imgs: np.ndarray, gz: bool):
    n, h, w = imgs.shape
    data = struct.pack(">IIII", 0x00000803, n, h, w) + imgs.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb").write(data)


def write_idx_labels(path: Path, labels: np.ndarray, gz: bool):
    data = struct.pack(">II", 0x00000801, len(labels)) + labels.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb").write(data)


def make_idx(raw: Path, n_train=12, n_test=5, gz=False):
    raw.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        imgs = RNG.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = np.arange(n) % 10
        write_idx_images(raw / f"{split}-images-idx3-ubyte", imgs, gz)
        write_idx_labels(raw / f"{split}-labels-idx1-ubyte", labels, gz)
        arrays[split] = (imgs, labels)
    return arrays


def test_mnist_gz_in_torchvision_layout(tmp_path):
    arrays = make_idx(tmp_path / "MNIST" / "raw", gz=True)
    ds = D.load("mnist", data_root=tmp_path)
    assert isinstance(ds, FederatedDataset) and ds.name == "mnist"
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_test.shape == (5, 1, 28, 28)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.num_classes == 10 and ds.clients is None
    assert torch.equal(ds.y_train, torch.arange(12) % 10)
    expect = (torch.from_numpy(arrays["train"][0]).float() / 255 - 0.1307) / 0.3081
    torch.testing.assert_close(ds.x_train[:, 0], expect)
    # staging .gz files leaves no decompressed copies behind and writes nothing next to the user's files
    assert sorted(os.listdir(tmp_path / "MNIST" / "raw")) == sorted(
        f + ".gz" for f in D.IDX_FILES)
    assert [p.name for p in (tmp_path / "fedrepro_cache").iterdir() if p.suffix != ".pt"] == []
    raw = D.load("mnist", data_root=tmp_path, normalize=False)
    torch.testing.assert_close(raw.x_test[:, 0], torch.from_numpy(arrays["t10k"][0]).float() / 255)
    assert raw.x_train.min() >= 0 and raw.x_train.max() <= 1 and raw.meta["normalization"] == "none"


def test_fmnist_from_data_root_decompressed(tmp_path, monkeypatch):
    monkeypatch.setattr(D.mnist, "_debian_fmnist_dirs", lambda: [tmp_path / "no-debian"])
    arrays = make_idx(tmp_path / "FashionMNIST" / "raw", n_train=10, n_test=4, gz=False)
    ds = D.load("fashion-mnist", data_root=tmp_path)
    assert ds.name == "fmnist" and ds.x_train.shape == (10, 1, 28, 28) and ds.x_test.shape == (4, 1, 28, 28)
    expect = (torch.from_numpy(arrays["t10k"][0]).float() / 255 - 0.2860) / 0.3530
    torch.testing.assert_close(ds.x_test[:, 0], expect)
    assert ds.meta["classes"][0] == "T-shirt/top"
    fb = D.load("fmnist", data_root=tmp_path, normalize="fedbat")   # FedBAT: test split with test stats
    torch.testing.assert_close(fb.x_test[:, 0], (torch.from_numpy(arrays["t10k"][0]).float() / 255 - 0.2868)
                               / 0.3524)
    torch.testing.assert_close(fb.x_train, ds.x_train)


def test_fmnist_found_in_a_debian_style_dir(tmp_path, monkeypatch):
    deb = tmp_path / "usr" / "share" / "datasets" / "fashion-mnist"
    arrays = make_idx(deb, n_train=7, n_test=3, gz=True)
    monkeypatch.setattr(D.mnist, "_debian_fmnist_dirs", lambda: [tmp_path / "elsewhere", deb])
    ds = D.load("fmnist", data_root=tmp_path / "root", normalize=False)
    assert ds.meta["source"] == str(deb)
    torch.testing.assert_close(ds.x_train[:, 0], torch.from_numpy(arrays["train"][0]).float() / 255)
    assert sorted(os.listdir(deb)) == sorted(f + ".gz" for f in D.IDX_FILES)   # source dir untouched


def test_idx_missing_files_message(tmp_path, monkeypatch):
    monkeypatch.setattr(D.mnist, "_debian_fmnist_dirs", lambda: [tmp_path / "deb"])
    with pytest.raises(FileNotFoundError) as e:
        D.load("fmnist", data_root=tmp_path)
    msg = str(e.value)
    assert "train-images-idx3-ubyte" in msg and "t10k-labels-idx1-ubyte" in msg
    assert str(tmp_path / "FashionMNIST" / "raw") in msg and str(tmp_path / "deb") in msg
    assert "--download" in msg and "apt-get install dataset-fashion-mnist" in msg
    # one file missing is still "not found"
    make_idx(tmp_path / "MNIST" / "raw")
    os.remove(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte") as e:
        D.load("mnist", data_root=tmp_path)
    assert "apt-get" not in str(e.value)


def test_download_is_passed_to_torchvision_only_when_asked(tmp_path, monkeypatch):
    from torchvision.datasets import MNIST
    calls = []

    def fake_download(self):   # stands in for the network: writes what torchvision's download would
        calls.append(self.raw_folder)
        make_idx(Path(self.raw_folder), n_train=4, n_test=2)
    monkeypatch.setattr(MNIST, "download", fake_download)
    with pytest.raises(FileNotFoundError):
        D.load("mnist", data_root=tmp_path)
    assert calls == []
    ds = D.load("mnist", data_root=tmp_path, download=True)
    assert calls == [str(tmp_path / "MNIST" / "raw")] and len(ds.x_train) == 4
    D.load("mnist", data_root=tmp_path, download=True)   # files present: no second download
    assert len(calls) == 1


def test_debian_dirs_include_known_path():
    assert Path("/usr/share/datasets/fashion-mnist") in D._debian_fmnist_dirs()


DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not (DEBIAN_FMNIST / "train-images-idx3-ubyte.gz").is_file(),
                    reason="Debian package dataset-fashion-mnist is not installed")
def test_real_debian_fashion_mnist(tmp_path):
    ds = D.load("fmnist", data_root=tmp_path)
    assert len(ds.x_train) == 60000 and len(ds.x_test) == 10000
    assert ds.input_shape == (1, 28, 28) and ds.num_classes == 10
    assert torch.equal(torch.bincount(ds.y_train), torch.full((10,), 6000))
    assert abs(float(ds.x_train.mean())) < 0.01 and abs(float(ds.x_train.std()) - 1) < 0.01
    again = D.load("fmnist", data_root=tmp_path)   # from the cache
    assert again.meta["cache_path"] == ds.meta["cache_path"] and torch.equal(again.y_test, ds.y_test)


# --------------------------------------------------------------------------------------------- CIFAR

def _pickle(path: Path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def make_cifar10(root: Path, monkeypatch, per_batch=3, n_test=4):
    from torchvision.datasets import CIFAR10
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    train = []
    for i in range(1, 6):
        data = RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [(i + j) % 10 for j in range(per_batch)]
        _pickle(folder / f"data_batch_{i}", {"data": data, "labels": labels, "batch_label": f"b{i}"})
        train.append((data, labels))
    test_data = RNG.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    _pickle(folder / "test_batch", {"data": test_data, "labels": list(range(n_test))})
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    _pickle(folder / "batches.meta", {"label_names": names})
    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5(folder / f"data_batch_{i}")]
                                                for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5(folder / "test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {"filename": "batches.meta", "key": "label_names",
                                          "md5": md5(folder / "batches.meta")})
    return train, test_data


def test_cifar10(tmp_path, monkeypatch):
    train, test_data = make_cifar10(tmp_path, monkeypatch)
    ds = D.load("cifar10", data_root=tmp_path)
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    assert ds.x_train.dtype == torch.float32 and ds.num_classes == 10
    assert ds.y_train.tolist() == sum((lab for _, lab in train), [])
    assert ds.meta["classes"][0] == "airplane"
    # CIFAR's row layout is channel-major (1024 R, 1024 G, 1024 B): NCHW is a plain reshape
    raw0 = torch.from_numpy(train[0][0][0]).float().view(3, 32, 32) / 255
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2023, 0.1994, 0.2010]).view(3, 1, 1)
    torch.testing.assert_close(ds.x_train[0], (raw0 - mean) / std)
    imnet = D.load("cifar10", data_root=tmp_path, normalize="imagenet")
    m2 = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    s2 = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    torch.testing.assert_close(imnet.x_train[0], (raw0 - m2) / s2)
    custom = D.load("cifar10", data_root=tmp_path, normalize=(0.5, 0.25))
    torch.testing.assert_close(custom.x_train[0], (raw0 - 0.5) / 0.25)
    plain = D.load("cifar10", data_root=tmp_path, normalize=False)
    torch.testing.assert_close(plain.x_test[1], torch.from_numpy(test_data[1]).float().view(3, 32, 32) / 255)


def test_cifar10_corrupt_file_is_reported(tmp_path, monkeypatch):
    make_cifar10(tmp_path, monkeypatch)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_3", "ab") as f:
        f.write(b"junk")  # md5 no longer matches: torchvision's integrity check must reject it
    with pytest.raises(RuntimeError, match="md5"):
        D.load("cifar10", data_root=tmp_path, cache=False)


def test_cifar100(tmp_path, monkeypatch):
    from torchvision.datasets import CIFAR100
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    tr = RNG.integers(0, 256, (6, 3072), dtype=np.uint8)
    te = RNG.integers(0, 256, (2, 3072), dtype=np.uint8)
    _pickle(folder / "train", {"data": tr, "fine_labels": [0, 99, 5, 42, 7, 99], "coarse_labels": [0] * 6})
    _pickle(folder / "test", {"data": te, "fine_labels": [3, 98], "coarse_labels": [0, 1]})
    _pickle(folder / "meta", {"fine_label_names": [f"c{i}" for i in range(100)],
                              "coarse_label_names": [f"s{i}" for i in range(20)]})
    monkeypatch.setattr(CIFAR100, "train_list", [["train", md5(folder / "train")]])
    monkeypatch.setattr(CIFAR100, "test_list", [["test", md5(folder / "test")]])
    monkeypatch.setattr(CIFAR100, "meta", {"filename": "meta", "key": "fine_label_names",
                                           "md5": md5(folder / "meta")})
    ds = D.load("cifar-100", data_root=tmp_path)
    assert ds.name == "cifar100" and ds.num_classes == 100 and ds.output_dim == 100
    assert ds.x_train.shape == (6, 3, 32, 32) and ds.y_train.tolist() == [0, 99, 5, 42, 7, 99]
    assert ds.y_test.tolist() == [3, 98]
    mean = torch.tensor([0.5071, 0.4865, 0.4409]).view(3, 1, 1)
    std = torch.tensor([0.2673, 0.2564, 0.2762]).view(3, 1, 1)
    raw1 = torch.from_numpy(te[1]).float().view(3, 32, 32) / 255
    torch.testing.assert_close(ds.x_test[1], (raw1 - mean) / std)


def test_cifar_missing_files_message(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        D.load("cifar10", data_root=tmp_path)
    msg = str(e.value)
    assert "data_batch_1" in msg and "test_batch" in msg and "batches.meta" in msg
    assert str(tmp_path / "cifar-10-batches-py") in msg and "--download" in msg
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        D.load("cifar100", data_root=tmp_path)


# --------------------------------------------------------------------------------------------- SVHN

def test_svhn(tmp_path, monkeypatch):
    import scipy.io
    from torchvision.datasets import SVHN
    folder = tmp_path / "SVHN"
    folder.mkdir()
    imgs = {}
    for split, labels in (("train", [10, 1, 2, 9, 10]), ("test", [3, 10])):
        x = RNG.integers(0, 256, (32, 32, 3, len(labels)), dtype=np.uint8)   # SVHN's HWCN layout
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": np.array(labels, np.uint8)[:, None]})
        imgs[split] = x
        url = SVHN.split_list[split][0]
        fname = f"{split}_32x32.mat"
        monkeypatch.setitem(SVHN.split_list, split, [url, fname, md5(folder / fname)])
    ds = D.load("svhn", data_root=tmp_path)
    assert ds.x_train.shape == (5, 3, 32, 32) and ds.x_test.shape == (2, 3, 32, 32)
    assert ds.y_train.tolist() == [0, 1, 2, 9, 0] and ds.y_test.tolist() == [3, 0]   # label 10 -> digit 0
    raw = torch.from_numpy(imgs["train"][..., 3]).permute(2, 0, 1).float() / 255      # HWC -> CHW
    torch.testing.assert_close(ds.x_train[3], (raw - 0.4496) / 0.1995)
    fb = D.load("svhn", data_root=tmp_path, normalize="fedbat")
    raw_te = torch.from_numpy(imgs["test"][..., 0]).permute(2, 0, 1).float() / 255
    torch.testing.assert_close(fb.x_test[0], (raw_te - 0.4560) / 0.2244)


def test_svhn_missing_files_message(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        D.load("svhn", data_root=tmp_path)
    msg = str(e.value)
    assert "train_32x32.mat" in msg and "test_32x32.mat" in msg and str(tmp_path / "SVHN") in msg
    assert "--download" in msg


# --------------------------------------------------------------------------------------------- Tiny-ImageNet

# wnids.txt is not sorted; labels follow ImageFolder (sorted folder names)
WNIDS = ["n09999999", "n01443537", "n02000000"]
COLORS = {"n01443537": (200, 30, 30), "n02000000": (30, 200, 30), "n09999999": (30, 30, 200)}


def make_tinyimagenet(root: Path, size=8, gray_one=True):
    from PIL import Image
    base = root / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for w in WNIDS:
        d = base / "train" / w / "images"
        d.mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (size, size), COLORS[w]).save(d / f"{w}_{i}.JPEG", quality=95)
        (base / "train" / w / f"{w}_boxes.txt").write_text(f"{w}_0.JPEG\t0\t0\t7\t7\n")
    if gray_one:
        Image.new("L", (size, size), 128).save(base / "train" / WNIDS[0] / "images" / "gray.JPEG", quality=95)
    lines = []
    for i, w in enumerate(["n02000000", "n09999999", "n01443537", "n02000000"]):
        Image.new("RGB", (size, size), COLORS[w]).save(base / "val" / "images" / f"val_{i}.JPEG", quality=95)
        lines.append(f"val_{i}.JPEG\t{w}\t0\t0\t{size - 1}\t{size - 1}")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return base


def test_tinyimagenet(tmp_path):
    make_tinyimagenet(tmp_path)
    ds = D.load("tiny-imagenet", data_root=tmp_path, normalize=False)
    assert ds.name == "tinyimagenet" and ds.num_classes == 200
    assert ds.x_train.shape == (7, 3, 8, 8) and ds.x_test.shape == (4, 3, 8, 8)
    assert ds.meta["classes"] == sorted(WNIDS)
    assert ds.y_test.tolist() == [1, 2, 0, 1]
    assert sorted(ds.y_train.tolist()) == [0, 0, 1, 1, 2, 2, 2]
    # each class's colour survives (JPEG is lossy: tolerance), and val labels agree with train labels
    for x, y in zip(torch.cat([ds.x_train, ds.x_test]), torch.cat([ds.y_train, ds.y_test])):
        rgb = x.mean(dim=(1, 2))
        if torch.allclose(rgb, torch.full((3,), 128 / 255), atol=0.03):
            assert int(y) == 2   # the grayscale image, converted to RGB by torchvision's loader
            continue
        torch.testing.assert_close(rgb, torch.tensor(COLORS[sorted(WNIDS)[int(y)]]) / 255, atol=0.04, rtol=0)
    norm = D.load("tinyimagenet", data_root=tmp_path)
    mean = torch.tensor([0.4802, 0.4481, 0.3975]).view(3, 1, 1)
    std = torch.tensor([0.2302, 0.2265, 0.2262]).view(3, 1, 1)
    torch.testing.assert_close(norm.x_train, (ds.x_train - mean) / std)


def test_tinyimagenet_missing_and_bad_annotations(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        D.load("tinyimagenet", data_root=tmp_path)
    msg = str(e.value)
    assert "wnids.txt" in msg and "val_annotations.txt" in msg and "tiny-imagenet-200.zip" in msg
    assert str(tmp_path / "tiny-imagenet-200") in msg
    base = make_tinyimagenet(tmp_path, gray_one=False)
    with open(base / "val" / "val_annotations.txt", "a") as f:
        f.write("val_9.JPEG\tn07777777\t0\t0\t1\t1\n")
    with pytest.raises(ValueError, match="n07777777"):
        D.load("tinyimagenet", data_root=tmp_path, cache=False)


# --------------------------------------------------------------------------------------------- cache

def test_cache_is_used_and_invalidated(tmp_path, monkeypatch):
    from torchvision.datasets import MNIST
    make_idx(tmp_path / "MNIST" / "raw")
    first = D.load("mnist", data_root=tmp_path)
    cache = Path(first.meta["cache_path"])
    assert cache.parent == tmp_path / "fedrepro_cache" and cache.suffix == ".pt"
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]   # no temp files left behind

    def boom(*a, **k):
        raise AssertionError("torchvision was called although the cache is valid")
    monkeypatch.setattr(MNIST, "__init__", boom)
    second = D.load("mnist", data_root=tmp_path)
    assert torch.equal(second.x_train, first.x_train) and torch.equal(second.y_test, first.y_test)
    raw = D.load("mnist", data_root=tmp_path, normalize=False)   # same cache file, other normalization
    torch.testing.assert_close(raw.x_train * 255, torch.round(raw.x_train * 255))
    monkeypatch.undo()

    # rewriting a source file changes the fingerprint: rebuilt from the new data
    arrays = make_idx(tmp_path / "MNIST" / "raw")
    st = os.stat(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte")
    os.utime(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte",
             ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    third = D.load("mnist", data_root=tmp_path, normalize=False)
    torch.testing.assert_close(third.x_train[:, 0], torch.from_numpy(arrays["train"][0]).float() / 255)
    assert third.meta["cache_path"] != first.meta["cache_path"]


def test_corrupt_cache_is_rebuilt(tmp_path):
    make_idx(tmp_path / "MNIST" / "raw")
    first = D.load("mnist", data_root=tmp_path)
    Path(first.meta["cache_path"]).write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="unreadable dataset cache"):
        again = D.load("mnist", data_root=tmp_path)
    assert torch.equal(again.x_train, first.x_train)
    assert torch.equal(D.load("mnist", data_root=tmp_path).x_test, first.x_test)   # rewritten, readable


def test_cache_false_writes_nothing(tmp_path):
    make_idx(tmp_path / "MNIST" / "raw")
    ds = D.load("mnist", data_root=tmp_path, cache=False)
    assert ds.meta["cache_path"] is None and not (tmp_path / "fedrepro_cache").exists()


def test_bad_normalize_values(tmp_path):
    make_idx(tmp_path / "MNIST" / "raw")
    with pytest.raises(ValueError, match="3-channel"):
        D.load("mnist", data_root=tmp_path, normalize="imagenet")
    with pytest.raises(ValueError, match="fedbat"):
        D.load("mnist", data_root=tmp_path, normalize="fedbat")
    with pytest.raises(ValueError):
        D.load("mnist", data_root=tmp_path, normalize="zscore")


# --------------------------------------------------------------------------------------------- digits

def test_digits_split_and_normalization():
    ds = D.load("digits")
    assert ds.x_train.shape == (1347, 1, 8, 8) and ds.x_test.shape == (450, 1, 8, 8)
    assert ds.x_train.dtype == torch.float32 and ds.num_classes == 10 and ds.clients is None
    assert abs(float(ds.x_train.mean())) < 1e-4 and abs(float(ds.x_train.std()) - 1) < 1e-3
    # stratified: every class has ~25% of its samples in the test set
    tot = torch.bincount(torch.cat([ds.y_train, ds.y_test]), minlength=10).float()
    te = torch.bincount(ds.y_test, minlength=10).float()
    assert torch.all((te - 0.25 * tot).abs() <= 1.0)
    # the train and test sets partition the 1797 images
    idx = torch.cat([ds.meta["train_index"], ds.meta["test_index"]])
    assert torch.equal(torch.sort(idx).values, torch.arange(1797))


def test_digits_deterministic_and_independent_of_run_seed():
    a, b = D.load("digits", seed=0), D.load("digits", seed=123)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    assert torch.equal(a.x_train, b.x_train)
    raw = D.load("digits", normalize=False)
    assert float(raw.x_train.min()) == 0.0 and float(raw.x_train.max()) == 1.0
    assert torch.equal(raw.y_test, a.y_test)
    from sklearn.datasets import load_digits
    imgs = load_digits().images
    expect = torch.from_numpy(imgs[raw.meta["test_index"].numpy()]).float() / 16
    torch.testing.assert_close(raw.x_test[:, 0], expect)


# --------------------------------------------------------------------------------------------- synthetic

def label_skew(ds) -> float:
    """Mean total-variation distance between each client's label histogram and the pooled one."""
    pooled = torch.bincount(ds.y_train, minlength=10).float()
    pooled /= pooled.sum()
    tv = []
    for c in ds.clients:
        h = torch.bincount(ds.y_train[c], minlength=10).float()
        tv.append(0.5 * (h / h.sum() - pooled).abs().sum())
    return float(torch.stack(tv).mean())


def test_synthetic_shapes_and_clients():
    ds = D.load("synthetic", alpha=0.5, beta=0.5, num_clients=30, seed=1)
    assert ds.name == "synthetic(0.5,0.5)" and ds.natural_clients and len(ds.clients) == 30
    assert ds.input_shape == (60,) and ds.num_classes == 10 and ds.x_train.dtype == torch.float32
    sizes = ds.meta["client_sizes"]
    assert len(sizes) == 30 and min(sizes) >= 50
    assert len(ds.x_train) + len(ds.x_test) == sum(sizes)
    for c, tc, n in zip(ds.clients, ds.meta["test_clients"], sizes):
        assert len(c) == int(0.8 * n) and len(tc) == n - len(c)
    allidx = torch.cat(ds.clients)
    assert torch.equal(allidx, torch.arange(len(ds.x_train)))          # disjoint, covering
    assert torch.equal(torch.cat(ds.meta["test_clients"]), torch.arange(len(ds.x_test)))
    # per-device sizes are log-normal: heavy-tailed
    assert max(sizes) > 2 * float(np.median(sizes))


def test_synthetic_determinism_and_seeds():
    a = D.load("synthetic", alpha=1, beta=1, seed=3)
    b = D.load("synthetic", alpha=1, beta=1, seed=3)
    c = D.load("synthetic", alpha=1, beta=1, seed=4)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.meta["client_sizes"] == b.meta["client_sizes"]
    assert a.meta["client_sizes"] != c.meta["client_sizes"]
    assert not torch.equal(a.x_train[:100], c.x_train[:100])


def test_synthetic_spelled_names():
    a = D.load("synthetic(0.5,0.5)", seed=2)
    b = D.load("synthetic", alpha=0.5, beta=0.5, seed=2)
    assert torch.equal(a.x_train, b.x_train) and a.name == b.name
    c = D.load("synthetic_iid", seed=2)
    assert c.meta["iid"] and c.name == "synthetic_iid"
    d = D.load("synthetic", iid=True, seed=2)
    assert torch.equal(c.y_train, d.y_train)
    assert D.load("synthetic", num_clients=5, seed=0).meta["num_clients"] == 5


def test_synthetic_heterogeneity():
    iid = [label_skew(D.load("synthetic_iid", seed=s)) for s in range(3)]
    s00 = [label_skew(D.load("synthetic", alpha=0, beta=0, seed=s)) for s in range(3)]
    s11 = [label_skew(D.load("synthetic", alpha=1, beta=1, seed=s)) for s in range(3)]
    assert max(iid) < 0.25 and min(s00) > 2 * max(iid) and min(s11) > 2 * max(iid)
    # beta moves the feature means v_k, which changes the label distributions
    a, b = D.load("synthetic", alpha=0, beta=0, seed=0), D.load("synthetic", alpha=1, beta=1, seed=0)
    assert not torch.equal(a.y_train, b.y_train)


def test_synthetic_alpha_does_not_change_labels():
    """u_k shifts every logit equally (softmax shift invariance): a property of FedProx's generator."""
    a = D.load("synthetic", alpha=0, beta=1, seed=5)
    b = D.load("synthetic", alpha=1, beta=1, seed=5)
    assert torch.equal(a.x_train, b.x_train)
    assert float((a.y_train == b.y_train).float().mean()) > 0.999


def test_synthetic_arrays_generator_matches_definition():
    parts = D.synthetic_arrays(1.0, 1.0, 4, seed=0)
    assert len(parts) == 4
    x = np.concatenate([p[0] for p in parts])
    assert x.shape[1] == 60
    # per-coordinate spread within a device follows Sigma_jj = j^-1.2 (x ~ N(v_k, Sigma))
    big = max(parts, key=lambda p: len(p[1]))[0]
    var = big.var(axis=0)
    expect = np.arange(1, 61) ** -1.2
    assert np.allclose(var[:5], expect[:5], rtol=0.5)
    with pytest.raises(ValueError):
        D.synthetic_arrays(-1.0, 1.0, 4, seed=0)
    with pytest.raises(ValueError):
        D.load("synthetic", train_frac=1.5)
