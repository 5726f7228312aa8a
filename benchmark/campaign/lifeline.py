"""Lifeline of process workers: a worker ends when the process that runs the suite ends, by any signal.

Kept free of heavy imports (stdlib only, and ``benchmark/__init__`` is lazy; the liveness rule,
``benchmark.runs.store.process_running``, is stdlib only too), so a spawned worker arms its
death signal a fraction of a second after it starts, before it imports torch for its first cell.
On Linux the kernel sends SIGKILL to the worker when its parent dies (``prctl(PR_SET_PDEATHSIG)``, kept
across exec); on every OS a daemon thread also polls the parent. Ctrl-C is left to the suite's process,
which stops its workers itself.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

from benchmark.runs.store import process_running

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_SECONDS = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Process-pool initializer: tie this worker's life to ``parent_pid`` (the suite's process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the watchdog below suffices
            pass
    if os.getppid() != parent_pid or not process_running(parent_pid):  # it died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid,), name="lifeline", daemon=True).start()


def _watch(parent_pid: int) -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if os.getppid() != parent_pid or not process_running(parent_pid):  # re-parented: the parent is gone
            os._exit(1)
