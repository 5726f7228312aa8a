"""Cell claims: several runners (processes, terminals, machines on a shared filesystem) divide one results folder.

Before it computes a cell (or a batched group, cell by cell), a runner *claims* it: it creates
``<results folder>/.claims/<config_hash>.claim``, a small JSON file naming the runner (id, host, boot id,
pid and the pid's start time), by ``os.link`` of a complete temporary file, so the claim appears whole or
not at all and only one runner can create it. While it works, a heartbeat thread touches the files of its
claims every ``ttl / 4`` seconds; it removes a claim once the cell's record is written.

Another runner skips a cell claimed by a live runner and waits for it: the cell is *settled* when its
record appears. A claim is *expired*, and is taken over, when its runner is gone: on the same machine (same
boot id) its pid no longer runs (or runs another program: the start time differs), anywhere its
heartbeat is older than ``ttl`` seconds (``FEDREPRO_CLAIM_TTL``, default :data:`DEFAULT_TTL`). A takeover
replaces the claim atomically under a short ``.takeover`` lock, so two runners never both take over a claim.

Duplicated work is bounded by a race (a runner frozen longer than ``ttl`` loses its claims and finishes
its cell anyway), and never written twice: a finished record is not replaced
(``benchmark.runs.store.write_record_or_rescue(keep_finished=True)``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmark.runs import plan
from benchmark.runs.store import clean_stale_temps, process_running

CLAIMS_DIR = ".claims"
TTL_ENV = "FEDREPRO_CLAIM_TTL"
DEFAULT_TTL = 60.0  # seconds without a heartbeat after which another machine's claim expires
TAKEOVER_LOCK_TTL = 10.0  # a takeover lock older than this was left by a runner killed while taking over


def claim_ttl() -> float:
    """The claim expiry in seconds (``FEDREPRO_CLAIM_TTL``, else :data:`DEFAULT_TTL`)."""
    v = os.environ.get(TTL_ENV)
    try:
        ttl = float(v) if v else DEFAULT_TTL
    except ValueError:
        raise ValueError(f"{TTL_ENV} must be a number of seconds, got {v!r}") from None
    if not ttl > 0:
        raise ValueError(f"{TTL_ENV} must be > 0 seconds, got {v!r}")
    return ttl


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _pid_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, Linux), to tell a reused pid; None where unknown or gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_runs(pid: int, start: str | None) -> bool:
    if not process_running(pid):
        return False
    return start is None or _pid_start(pid) in (None, start)


def claims_dir(folder: str | os.PathLike) -> Path:
    return Path(folder) / CLAIMS_DIR


@dataclass(frozen=True)
class Claim:
    """One claim file: which runner holds the cell ``key`` and its last heartbeat (the file's mtime)."""

    key: str
    runner: str
    host: str
    boot_id: str | None
    pid: int
    pid_start: str | None
    started: float
    heartbeat: float
    path: Path

    def expired(self, ttl: float, now: float | None = None) -> str | None:
        """Why the runner holding this claim counts as gone (None: it is alive)."""
        now = time.time() if now is None else now
        if self.boot_id and self.boot_id == _boot_id() and not _pid_runs(self.pid, self.pid_start):
            return f"runner {self.runner} (pid {self.pid} on this machine) is gone"
        if now - self.heartbeat > ttl:
            return f"runner {self.runner} on {self.host} sent no heartbeat for {now - self.heartbeat:.0f} s (> {ttl:g} s)"
        return None


def read_claim(path: Path) -> Claim | None:
    """The claim in ``path``; None if there is none (released meanwhile). An unreadable file is a claim by an
    unknown runner with its mtime as heartbeat (it expires like any other)."""
    try:
        st = path.stat()
        d = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        d = {}
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
    return Claim(path.name.split(".")[0], str(d.get("runner", "?")), str(d.get("host", "?")), d.get("boot_id"),
                 int(d.get("pid", -1)), d.get("pid_start"), float(d.get("started", st.st_mtime)), st.st_mtime, path)


def read_claims(folder: str | os.PathLike) -> list[Claim]:
    """Every claim in the results folder ``folder``."""
    d = claims_dir(folder)
    found = [read_claim(p) for p in sorted(d.glob("*.claim"))] if d.is_dir() else []
    return [c for c in found if c is not None]


class Claims:
    """This runner's claims in one results folder, kept alive by a heartbeat thread while it is started
    (``with Claims(folder) as claims: ...``)."""

    def __init__(self, folder: str | os.PathLike, runner: str | None = None, ttl: float | None = None,
                 log: Callable[[str], None] | None = None):
        self.dir = claims_dir(folder)
        self.ttl = claim_ttl() if ttl is None else ttl
        self.host = socket.gethostname()
        self.runner = runner or f"{self.host}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.pid = os.getpid()
        self.held: set[str] = set()
        self.lost: list[str] = []  # claims another runner took over while this one held them (it was frozen)
        self.taken_over: list[str] = []  # messages: claims this runner took over
        self.log = log or (lambda msg: None)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life
    def __enter__(self) -> "Claims":
        self.dir.mkdir(parents=True, exist_ok=True)
        clean_stale_temps(self.dir)  # left by runners killed while claiming
        self._thread = threading.Thread(target=self._beat, name="claims-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for key in list(self.held):
            self.release(key)
        try:
            self.dir.rmdir()  # the folder is left as one runner leaves it (another runner's claims keep it)
        except OSError:
            pass

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            self.heartbeat()

    def heartbeat(self) -> None:
        """Touch every claim this runner holds (a claim another runner took over is given up)."""
        with self._lock:
            keys = list(self.held)
        for key in keys:
            c = read_claim(self._path(key))
            if c is None or c.runner != self.runner:
                with self._lock:
                    self.held.discard(key)
                self.lost.append(key)
                continue
            try:
                os.utime(c.path)
            except FileNotFoundError:
                pass

    # ---- claiming
    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.claim"

    def _temp(self, key: str) -> str:
        body = {"runner": self.runner, "host": self.host, "boot_id": _boot_id(), "pid": self.pid,
                "pid_start": _pid_start(self.pid), "started": time.time(), "cell": key}
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.{self.pid}.", suffix=".tmp", dir=self.dir)
        except FileNotFoundError:  # another runner, finishing, removed the empty folder
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.{self.pid}.", suffix=".tmp", dir=self.dir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
        except BaseException:  # a full disk: no partial claim file is left
            os.unlink(tmp)
            raise
        return tmp

    def try_claim(self, key: str) -> bool:
        """Claim cell ``key`` for this runner: True if it holds it now (new, already its own, or taken over
        from a runner that is gone), False if a live runner holds it."""
        path = self._path(key)
        held = read_claim(path)  # a look first: a waiting runner polls many claims, most of them live
        if held is not None and (held.runner == self.runner or held.expired(self.ttl) is None):
            return held.runner == self.runner
        tmp = self._temp(key)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                c = read_claim(path)
                if c is not None and c.runner == self.runner:
                    return True
                why = None if c is None else c.expired(self.ttl)
                if c is not None and why is None:
                    return False
                if not self._take_over(key, path, tmp):
                    return False
                if why:
                    self.taken_over.append(f"took over cell {key}: {why}")
                    self.log(self.taken_over[-1])
            with self._lock:
                self.held.add(key)
            return True
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def _take_over(self, key: str, path: Path, tmp: str) -> bool:
        """Replace an expired claim by this runner's, under a short lock (only one runner takes over)."""
        lock = path.with_name(f"{key}.takeover")
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime > TAKEOVER_LOCK_TTL:  # its taker was killed meanwhile
                    os.unlink(lock)
            except FileNotFoundError:
                pass
            return False
        os.close(fd)
        try:
            c = read_claim(path)  # again, under the lock: still expired (or released)?
            if c is not None and c.runner != self.runner and c.expired(self.ttl) is None:
                return False
            os.replace(tmp, path)
            return True
        finally:
            os.unlink(lock)

    def release(self, key: str) -> None:
        """Remove this runner's claim on ``key`` (its record is written, or it gives the cell up)."""
        with self._lock:
            self.held.discard(key)
        c = read_claim(self._path(key))
        if c is not None and c.runner == self.runner:
            try:
                os.unlink(c.path)
            except FileNotFoundError:
                pass


# --------------------------------------------------------------------------------------------------
# Handing out jobs


class JobQueue:
    """The jobs of one runner on a shared folder, handed out as it claims their cells.

    ``settled(key)``: cell ``key`` needs no more work (its record appeared). ``part(job, positions)``: the
    job of only those runs of ``job`` (the others are settled or claimed by another runner).
    """

    def __init__(self, jobs: list, claims: Claims, settled: Callable[[str], bool],
                 part: Callable[[object, list[int]], object], poll: float = 1.0):
        self.waiting = list(jobs)
        self.claims, self.settled, self.part, self.poll = claims, settled, part, poll
        self.keys: dict[int, list[str]] = {}  # id(handed-out job) -> the keys it holds
        self.handed: set[str] = set()  # the cells handed out (never twice)

    def take(self, block: bool = True):
        """The next job whose cells this runner could claim (only those cells); None when every waiting cell
        is settled, or (``block=False``) when the rest are held by live runners. Blocks while they are."""
        while self.waiting:
            for job in list(self.waiting):
                keys = [e.config_hash() for e in job.experiments]
                open_ = [i for i, k in enumerate(keys) if k not in self.handed and not self.settled(k)]
                mine = [i for i in open_ if self.claims.try_claim(keys[i])]
                late = [i for i in mine if self.settled(keys[i])]  # finished just before it was claimed
                for i in late:
                    self.claims.release(keys[i])
                mine = [i for i in mine if i not in late]
                if len(mine) == len(open_):
                    self.waiting.remove(job)
                if mine:
                    out = self.part(job, mine)
                    self.keys[id(out)] = [keys[i] for i in mine]
                    self.handed.update(self.keys[id(out)])
                    return out
            if not block or not self.waiting:
                return None
            time.sleep(self.poll)
        return None

    def release(self, job) -> None:
        """``job`` is done (its records written): give up its claims."""
        for key in self.keys.pop(id(job), []):
            self.claims.release(key)


def part_of(job, positions: list[int]):
    """The runs at ``positions`` of a ``benchmark.runs.plan.Job`` as one job (a run alone is planned alone)."""
    if len(positions) == len(job):
        return job
    if len(positions) == 1:
        return plan.split(job)[positions[0]]
    return dataclasses.replace(job, experiments=tuple(job.experiments[i] for i in positions),
                               indices=tuple(job.indices[i] for i in positions))
