"""Results store: one JSON record per run, written atomically, sealed with a checksum, healed when damaged.

Writing: a record is written to a unique temporary file in the same folder, flushed and fsynced, then
renamed over its final name ``<config_hash>.json``, so a reader never sees a partial file and concurrent
writers (process pools, Ray, pytest-xdist) never lose or mix each other's records. Every record carries
``checksum``: the SHA-256 of its content (canonical JSON of the record without that key), so a file
truncated by a full disk or edited by hand is found.

Reading: a record that does not parse, fails its schema (:data:`REQUIRED`, a known status, a file name
equal to its config hash) or its checksum is *unreadable*. ``read_records`` skips unreadable records
with one :class:`CorruptRecordWarning` naming them; with ``quarantine=True`` (the runner, before it
resumes a suite) each is renamed ``<name>.corrupt-<time>`` beside itself, so its cell runs again and
the damaged bytes are kept for inspection. Nothing else in the folder is touched. Records written
before checksums existed (fedrepro < 0.2) have no ``checksum`` and are checked by their schema only.

When a record cannot be written where it belongs (a read-only or full disk after a long run),
:func:`write_record_or_rescue` writes it to a fallback folder and says where: a finished run is never lost.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CHECKSUM_KEY = "checksum"
STATUSES = ("ok", "diverged", "failed")
FINISHED = ("ok", "diverged")  # statuses that are not run again; "failed" cells are retried
# the keys every run record has, with their types
REQUIRED = {"config": dict, "config_hash": str, "status": str, "history": list, "final": dict}
RESCUE_ENV = "FEDREPRO_RESCUE_DIR"  # where records go when their folder cannot be written


class CorruptRecordWarning(UserWarning):
    """Some run records in a results folder are unreadable (truncated, edited, not a run record)."""


class StoreError(OSError):
    """A results folder that cannot be used (not a folder, not writable)."""


@dataclass
class Unreadable:
    path: Path
    reason: str
    moved_to: Path | None = None


# --------------------------------------------------------------------------------------------------
# Checksums


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True).encode()


def checksum(record: dict) -> str:
    """SHA-256 of the record's content without its ``checksum`` key (canonical JSON)."""
    body = {k: v for k, v in record.items() if k != CHECKSUM_KEY}
    return "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()


def seal(record: dict) -> dict:
    """The record as it will read back from JSON, with its checksum added."""
    body = json.loads(json.dumps({k: v for k, v in record.items() if k != CHECKSUM_KEY}, default=str))
    return {**body, CHECKSUM_KEY: checksum(body)}


def problem(record, name: str | None = None) -> str | None:
    """Why ``record`` (read from the file ``name``) is not a valid run record, or None if it is."""
    if not isinstance(record, dict):
        return f"not a run record (a JSON {type(record).__name__}, expected an object)"
    for key, kind in REQUIRED.items():
        if key not in record:
            return f"not a run record: no {key!r}"
        if not isinstance(record[key], kind):
            return f"not a run record: {key!r} is a {type(record[key]).__name__}, expected a {kind.__name__}"
    if record["status"] not in STATUSES:
        return f"unknown status {record['status']!r} (expected one of {', '.join(STATUSES)})"
    if name is not None and Path(name).stem != record["config_hash"]:
        return f"its config_hash {record['config_hash']!r} does not match the file name"
    if CHECKSUM_KEY in record and record[CHECKSUM_KEY] != checksum(record):
        return "checksum mismatch: the file was changed or damaged after it was written"
    return None


# --------------------------------------------------------------------------------------------------
# Writing


def write_json_atomic(path: str | os.PathLike, obj, indent: int | None = 1,
                      keep: Callable[[Path], bool] | None = None) -> Path | None:
    """Write ``obj`` as JSON to ``path`` atomically (a temporary file renamed over it). With ``keep``, a file
    already at ``path`` for which ``keep(path)`` holds is left as it is and None is returned (no file is
    ever replaced by a concurrent writer that checked before it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600; a record gets the usual permissions
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=indent, default=str)
            f.flush()
            os.fsync(f.fileno())
        if keep is not None:
            try:
                os.link(tmp, path)  # only where no file is: atomic, and fails if one appeared
                os.unlink(tmp)
                return path
            except FileExistsError:
                if keep(path):
                    os.unlink(tmp)
                    return None
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def record_path(folder: str | os.PathLike, record: dict) -> Path:
    return Path(folder) / f"{record['config_hash']}.json"


def write_record(folder: str | os.PathLike, record: dict, keep_finished: bool = False) -> Path | None:
    """Write one run record, sealed with its checksum, as ``<folder>/<config_hash>.json``. With
    ``keep_finished``, a finished record already there (another runner's, ``benchmark.campaign.cell_claims``) is kept
    and None returned: a result is never written twice."""
    return write_json_atomic(record_path(folder, record), seal(record), keep=_finished if keep_finished else None)


def _finished(path: Path) -> bool:
    try:
        return load_record(path)["status"] in FINISHED
    except (OSError, ValueError):
        return False


def is_disk_full(error: BaseException) -> bool:
    """``error`` says the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def rescue_dir() -> Path:
    return Path(os.environ.get(RESCUE_ENV) or Path(tempfile.gettempdir()) / "fedrepro-rescued")


def write_record_or_rescue(folder: str | os.PathLike, record: dict, keep_finished: bool = False,
                           errors: list | None = None) -> tuple[Path | None, str | None]:
    """Write the record to ``folder``; if that fails, to :func:`rescue_dir` (then the working folder).

    Returns the path written (None: ``keep_finished`` kept another runner's finished record) and, when it is
    a fallback, why the intended folder failed; the OSError itself is appended to ``errors`` if given.
    Raises only when no place at all can be written.
    """
    try:
        return write_record(folder, record, keep_finished), None
    except OSError as e:
        why = f"{type(e).__name__}: {e}"
        if errors is not None:
            errors.append(e)
    tried = []
    for fallback in (rescue_dir(), Path.cwd() / "fedrepro-rescued"):
        try:
            return write_record(fallback, record), why
        except OSError as e:
            tried.append(f"{fallback}: {e}")
    raise StoreError(f"could not write run record {record.get('config_hash')} to {folder} ({why}) nor to "
                     f"any fallback ({'; '.join(tried)})")


def check_writable_folder(folder: str | os.PathLike, what: str = "results folder") -> Path:
    """Create ``folder`` if missing and prove it is a writable folder, before any work is done.

    Raises :class:`StoreError` naming ``what`` and the path, and saying what to do.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise StoreError(f"{what} {folder} exists and is not a folder: give a folder (records are written "
                         f"as <folder>/<config_hash>.json)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".write-check.{os.getpid()}.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise StoreError(f"{what} {folder} is not writable ({e.strerror or e}): choose another folder or "
                         f"fix its permissions") from None
    return folder


# --------------------------------------------------------------------------------------------------
# Reading


def load_record(path: str | os.PathLike, any_name: bool = False) -> dict:
    """One record; raises ``ValueError`` saying what is wrong with the file (``any_name``: its name may differ from
    its config hash)."""
    path = Path(path)
    try:
        with open(path) as f:
            rec = json.load(f)
    except UnicodeDecodeError as e:
        raise ValueError(f"not text: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e}); truncated?") from None
    why = problem(rec, None if any_name else path.name)
    if why:
        raise ValueError(why)
    return rec


def _record_files(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")]


def quarantine(path: Path) -> Path:
    """Rename ``path`` to ``<name>.corrupt-<time>`` beside it (never over an existing file)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.replace(path, target)
    return target


def scan(folder: str | os.PathLike, quarantine_bad: bool = False,
         any_name: bool = False) -> tuple[list[dict], list[Unreadable]]:
    """The valid records in ``folder`` and the unreadable files (moved aside if ``quarantine_bad``). ``any_name``:
    a record whose file is not named by its config hash counts too (one saved by hand from the Python API,
    ``open("run.json", "w").write(res.to_json())``); a results folder's runner keeps the strict rule, since it
    finds a cell's record by that name."""
    folder = Path(folder)
    if not folder.is_dir():
        return [], []
    good, bad = [], []
    for p in _record_files(folder):
        try:
            good.append(load_record(p, any_name))
        except FileNotFoundError:  # removed meanwhile (another process moved it aside)
            continue
        except (OSError, ValueError) as e:
            u = Unreadable(p, str(e))
            if quarantine_bad:
                try:
                    u.moved_to = quarantine(p)
                except OSError as err:
                    u.reason += f"; could not move it aside: {err}"
            bad.append(u)
    return good, bad


def describe_unreadable(folder, bad: list[Unreadable]) -> str:
    moved = any(u.moved_to for u in bad)
    shown = 10
    items = "; ".join(f"{u.path.name} ({u.reason})" + (f" -> moved to {u.moved_to.name}" if u.moved_to else "")
                      for u in bad[:shown])
    if len(bad) > shown:
        items += f"; and {len(bad) - shown} more"
    what = "moved aside, and their cells will run again" if moved else \
        "skipped (running the suite again moves them aside and runs their cells again)"
    return f"{len(bad)} unreadable run record(s) in {folder} {what}: {items}"


#: folders a walk for run records does not enter: they hold reports of their own (the claims' run records are
#: thousands, read by ``fedrepro claims``), and hidden folders (cell claims, checkpoints) are a folder's own
NOT_WALKED = ("claims", "theory", "papers")


def record_folders(root: str | os.PathLike, depth: int = 3, also: tuple = ()) -> list[Path]:
    """``root`` and the folders below it, up to ``depth`` levels down, that hold run records (``*.json`` not
    hidden) or one of the hidden folders ``also`` (a runner's cell claims, checkpoints): a suite's
    ``<root>/<suite>/<version>/``, a ``--out`` folder, or ``root`` itself. Raises ``FileNotFoundError`` when
    ``root`` is not a folder."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no run records in {root}: " + ("it is a file, not a folder: give the folder that "
                                                                 "holds the records" if root.exists() else
                                                                 "no such folder"))
    out: list[Path] = []

    def walk(d: Path, level: int) -> None:
        try:
            entries = sorted(d.iterdir())
        except OSError:
            return
        if any(p.suffix == ".json" and not p.name.startswith(".") and p.is_file() for p in entries) \
                or any(p.name in also and p.is_dir() for p in entries):
            out.append(d)
        for p in entries if level < depth else ():
            if p.is_dir() and not p.name.startswith(".") and p.name not in NOT_WALKED:
                walk(p, level + 1)

    walk(root, 0)
    return out


def holds_a_record(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds at least one valid run record (under any name): its ``*.json`` files may all be
    something else (bench results, asv), which a walk for records passes by."""
    for p in _record_files(Path(folder)):
        try:
            load_record(p, any_name=True)
            return True
        except (OSError, ValueError):
            continue
    return False


def read_records(folder: str | os.PathLike, quarantine: bool = False, any_name: bool = False) -> list[dict]:
    """Every valid record in ``folder``; unreadable ones are skipped with one warning naming them.

    ``quarantine=True`` also moves each unreadable file aside (``<name>.corrupt-<time>``). ``any_name``: records
    under any file name count (``scan``), each config hash once (the same run saved twice is one run).
    """
    good, bad = scan(folder, quarantine, any_name)
    if bad:
        warnings.warn(describe_unreadable(folder, bad), CorruptRecordWarning, stacklevel=2)
    if any_name:
        seen: dict[str, dict] = {}
        for r in good:  # the same run saved twice (by the runner and by hand) counts once
            seen.setdefault(r["config_hash"], r)
        good = list(seen.values())
    return good


def clean_stale_temps(folder: str | os.PathLike) -> int:
    """Remove temporary files left by writers that were killed (their process no longer exists).

    A temporary file's name carries its writer's pid, so live writers' files are never touched.
    """
    removed = 0
    for p in Path(folder).glob(".*.tmp"):
        parts = p.name.split(".")  # "", <name parts...>, <pid>, <random>, "tmp"
        pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
        if pid is not None and process_running(pid):
            continue
        try:
            p.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def process_running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (exited, not yet reaped: it will never write, claim or watch again).
    The one liveness rule: a writer's temporary files (:func:`clean_stale_temps`), a runner's claims
    (``benchmark.campaign.cell_claims``) and a worker's parent (``benchmark.campaign.lifeline``). Stdlib only
    (the lifeline imports it before torch)."""
    if pid == os.getpid():
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
