"""glibc's malloc set, once per process, to keep the memory a run frees for its next temporaries (issue 45).

Every tensor torch makes on a CPU comes from malloc. glibc gives a block above its mmap threshold (128 KiB at
start, raised as such blocks are freed, at most 32 MiB) fresh pages from the kernel and unmaps them at its
free, and gives back the heap's free top above its trim threshold. A vectorized local step makes and frees
model-sized temporaries every step (FedSWA's MLP, 10 clients x 199,210 float32: 8 MB each), so each step
faulted thousands of fresh pages in: ~31,000 page faults per round of FedSWA's claims cell, about 13% of its CPU
time per round (code 026cb1b, one thread). With the threshold at glibc's maximum and the top trimmed only above
1 GiB, the freed blocks serve the next step and the faults go (the process keeps its peak heap until it ends).

Exact: where memory comes from changes no arithmetic. Left as it is: with ``FEDREPRO_MALLOC=0``; where the
environment sets glibc's malloc itself (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``MALLOC_MMAP_MAX_``, a ``glibc.malloc`` tunable): its settings win; under an address-space cap (``RLIMIT_AS``),
where a heap that keeps what was freed would hold address space that a batched group halved after a
``MemoryError`` needs again (``benchmark.runs.oom``; tests/memory_cap.py); with a C library other than glibc.
"""
from __future__ import annotations

import ctypes
import os
import platform
import resource

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's largest mmap threshold on a 64-bit system (mallopt refuses more)
_GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_done: bool | None = None


def enabled() -> bool:
    """Whether ``keep_freed_blocks`` may set malloc: not turned off, not set by the environment, no address-space
    cap (module docstring)."""
    if os.environ.get("FEDREPRO_MALLOC", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if any(k in os.environ for k in _GLIBC_ENV) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY


def keep_freed_blocks() -> bool:
    """Raise glibc's mmap threshold to its maximum and its trim threshold to 1 GiB, once per process; whether malloc is
    set so (False: not ``enabled``, another C library, or mallopt refused)."""
    global _done
    if _done is None:
        _done = False
        if enabled() and platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL(None)
                _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(
                    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
            except (OSError, AttributeError):
                _done = False
    return _done
