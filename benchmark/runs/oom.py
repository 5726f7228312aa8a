"""Out of memory is a size problem: how the runner tells a memory failure, and how much memory it wanted.

A batched job (``benchmark.runs.plan``) that fails for memory is split in halves and retried, down to runs alone
(``benchmark.campaign.backends.run_job``); a run alone that still fails is recorded ``failed`` with the reason and,
where known, the memory it needed. Memory failures: ``MemoryError`` (Python's and numpy's allocators), torch's
``OutOfMemoryError`` (CUDA), the ``RuntimeError`` of torch's CPU allocator (``DefaultCPUAllocator: can't
allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate memory)``, what torch 2.14
raises on a CPU under an address-space cap or an overcommit limit), and a process worker killed by SIGKILL
(the kernel's out-of-memory killer), which the process backend retries alone before recording it
(:class:`WorkerKilled`).
"""
from __future__ import annotations

import errno
import gc
import re
import signal
from pathlib import Path

import torch


class WorkerKilled(RuntimeError):
    """A process worker died while it ran a cell alone (killed by a signal: the out-of-memory killer sends
    SIGKILL)."""


_CUDA_ASK = re.compile(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)")
_CPU_ASK = re.compile(r"you tried to allocate (\d+) bytes")
# what torch's CPU allocator (c10 alloc_cpu.cpp) and the C library say when an allocation fails (ENOMEM)
_CPU_OOM = ("defaultcpuallocator: can't allocate memory", "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """``error`` says the job did not fit in memory."""
    if isinstance(error, (MemoryError, WorkerKilled)):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENOMEM:  # an mmap or a fork refused
        return True
    try:
        if isinstance(error, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):  # pragma: no cover - older torch
        pass
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or any(s in text for s in _CPU_OOM))


def memory_needed(error: BaseException) -> str | None:
    """What the failing allocation asked for, where the error says (CUDA: "Tried to allocate 2.00 GiB"; the
    CPU allocator: "you tried to allocate 524288000 bytes"; a killed worker: the peak resident memory it had
    reached), else None."""
    m = _CUDA_ASK.search(str(error))
    if m:
        return f"one allocation of {m.group(1)} failed"
    m = _CPU_ASK.search(str(error))
    if m:
        return f"one allocation of {human_bytes(int(m.group(1)))} failed"
    return getattr(error, "memory_needed", None)


def killed_by(exitcode: int | None) -> str:
    """A worker's exit code in words (negative: the signal that ended it)."""
    if exitcode is None:
        return "an unknown cause"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def peak_rss(pid: int) -> int | None:
    """The peak resident memory of process ``pid`` in bytes so far (Linux ``VmHWM``), None where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def free_memory() -> None:
    """Give back what a failed job held (its tensors, CUDA's cached blocks) before it is retried smaller."""
    gc.collect()
    torch.cuda.empty_cache()  # a no-op where CUDA was never used
