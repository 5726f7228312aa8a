"""How every ``fedrepro`` command ends when something goes wrong: one wrapper, ``run_command``, used by ``main``
for every subcommand, so that a command only parses its flags and calls the library.

* A bad input (an unknown name, a bad value, a file that is missing or not writable: ``ValueError``, which
  covers the suite, bench, dataset and hyperparameter errors, ``FileNotFoundError``, ``store.StoreError``)
  prints ``fedrepro <command>: <message>`` on stderr and exits 2, with no traceback.
* Ctrl-C exits 130 and says what is kept and how to go on: the command states it beforehand with
  ``resume_hint(a, text)`` (a string, or a function returning one, e.g. to print the runs finished so far).
* SIGTERM (``kill``, ``timeout``, a cluster scheduler's stop) and SIGHUP (a closed terminal) end a command the
  same way, exiting 128 + the signal's number (143, 129): process workers are stopped, finished records kept,
  the hint printed. A signal the command was started to ignore stays ignored (``nohup`` keeps SIGHUP ignored),
  and a second one of the same kind ends the process at once.
* A worker process that died (killed, out of memory) exits 1, with the same hint.
* A full disk (``runner.DiskFull``: the record was rescued elsewhere, the suite stopped; or any other write, e.g.
  a report's plot after every record was kept: ``OSError`` ENOSPC/EDQUOT) exits 1, in one line.

A programming error still shows its traceback (it is a bug to report, not an input to fix). Set
``FEDREPRO_TRACEBACK=1`` to see the traceback of an input error too.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures.process import BrokenProcessPool

from benchmark.campaign.runner import DiskFull
from benchmark.runs.store import StoreError

USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, StoreError)
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class Stopped(KeyboardInterrupt):
    """A stop signal (``STOP_SIGNALS``) turned into an interrupt, so every ``except KeyboardInterrupt`` and
    ``finally`` on the way out (the process backend's ``stop_workers``, Ray's cancel) runs as for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def _stop(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once (cleanup that hangs)
    raise Stopped(signum)


@contextmanager
def stop_signals_as_interrupt() -> Iterator[None]:
    """Within this block, a stop signal whose handler is the default raises ``Stopped`` (module docstring);
    ignored or custom handlers are left alone, and every handler is restored after the block. Only the main
    thread may set handlers: elsewhere the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = {s: signal.getsignal(s) for s in STOP_SIGNALS if signal.getsignal(s) is signal.SIG_DFL}
    for s in armed:
        signal.signal(s, _stop)
    try:
        yield
    finally:
        for s, old in armed.items():
            signal.signal(s, old)


def resume_hint(a, hint: str | Callable[[], str | None] | None) -> None:
    """What to print if this command is interrupted (or loses a worker) from now on: what is kept, how to
    resume. A function is called then (it may print partial results itself and return the hint)."""
    a._resume_hint = hint


def _hint(a) -> str | None:
    hint = getattr(a, "_resume_hint", None)
    return hint() if callable(hint) else hint


def fail(a, message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print ``fedrepro <command>: message`` on stderr and return ``code`` (for checks a command makes itself)."""
    print(f"fedrepro {getattr(a, 'command', None) or ''}".rstrip() + f": {message}", file=sys.stderr)
    return code


def run_command(a) -> int:
    """Run the parsed command ``a.func(a)`` and turn the ways it can end into one message and exit code."""
    try:
        with stop_signals_as_interrupt():
            return a.func(a)
    except KeyboardInterrupt as e:
        hint = _hint(a)
        said = f"stopped by {e.name}" if isinstance(e, Stopped) else "interrupted"
        print(f"\n{said}{': ' + hint if hint else ''}", file=sys.stderr)
        return 128 + e.signum if isinstance(e, Stopped) else EXIT_INTERRUPTED
    except BrokenProcessPool as e:
        hint = _hint(a)
        return fail(a, f"a worker process died ({e}); was it killed, or out of memory?" + (f" {hint}" if hint else ""),
                    EXIT_FAILED)
    except DiskFull as e:
        return fail(a, str(e), EXIT_FAILED)
    except USER_ERRORS as e:
        if os.environ.get("FEDREPRO_TRACEBACK"):
            raise
        return fail(a, str(e))
    except OSError as e:  # after USER_ERRORS: FileNotFoundError and NotADirectoryError are OSErrors too
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) or os.environ.get("FEDREPRO_TRACEBACK"):
            raise
        hint = _hint(a)  # e.g. a report or plot written after every record was kept
        return fail(a, f"disk full: {e.strerror} ({e.filename or 'a file being written'}); free space and run the "
                    "same command again" + (f" ({hint})" if hint else ""), EXIT_FAILED)
