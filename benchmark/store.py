"""Results store: one JSON record per run, written atomically (temp file + os.replace).

A reader never sees a partial file: the record is written to a unique temporary file in the same
folder, flushed and fsynced, then renamed over its final name. Concurrent writers (process pools,
Ray workers, pytest-xdist) use distinct temporary names, so none can lose or mix another's record.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterator


def write_json_atomic(path: str | os.PathLike, obj, indent: int | None = 1) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=indent, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def record_path(folder: str | os.PathLike, record: dict) -> Path:
    return Path(folder) / f"{record['config_hash']}.json"


def write_record(folder: str | os.PathLike, record: dict) -> Path:
    """Write one run record as ``<folder>/<config_hash>.json``."""
    return write_json_atomic(record_path(folder, record), record)


def read_records(folder: str | os.PathLike) -> Iterator[dict]:
    """Every complete record in ``folder`` (temporary files are ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for p in sorted(folder.glob("*.json")):
        if p.name.startswith("."):
            continue
        with open(p) as f:
            yield json.load(f)


def clean_stale_temps(folder: str | os.PathLike) -> int:
    """Remove temporary files left by writers that were killed (their process no longer exists).

    A temporary file's name carries its writer's pid, so live writers' files are never touched.
    """
    removed = 0
    for p in Path(folder).glob(".*.tmp"):
        parts = p.name.split(".")  # "", <name parts...>, <pid>, <random>, "tmp"
        pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
        if pid is not None and _alive(pid):
            continue
        try:
            p.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
