"""MNIST and Fashion-MNIST: IDX files read by torchvision's ``MNIST`` / ``FashionMNIST``.

Expected layout (torchvision's own): ``<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``,
``<root>/FashionMNIST/raw/...`` (same names); Fashion-MNIST is also found in Debian's
``dataset-fashion-mnist`` package (``/usr/share/datasets/fashion-mnist``, or wherever ``dpkg -L`` lists it). Every IDX file is checked
(magic number, dimensions, length, gzip stream) before torchvision reads it, so a corrupted or partial file is
named with what to do (``DataFileError``).
"""
from __future__ import annotations

import gzip
import math
import os
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path

from .images import (image_dataset, _missing, _wrap_torchvision_error, CACHE_DIRNAME,
                     DataFileError)
from .registry import _IMAGE_OPTIONS, _register

DEBIAN_FMNIST_PACKAGE = "dataset-fashion-mnist"
DEBIAN_FMNIST_DIRS = ("/usr/share/datasets/fashion-mnist",)
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


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
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _idx_problem(path: Path, kind: str) -> tuple[str | None, int | None]:
    """Why ``path`` is not a well-formed IDX file of ``kind`` (images/labels), and its item count."""
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
    from torchvision.datasets.utils import extract_archive  # lazy: torchvision.datasets adds 1.6 s CPU to every start (measured on torch's 2.4 s); only reading files needs it

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

    return image_dataset(root, name, sorted(files.values()), build, cache, normalize, 10, str(d))


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
