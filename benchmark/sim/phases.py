"""Where a run's CPU time goes, by phase (issue 45; ``fedrepro bench --profile-claims``,
``benchmark.perf.claims_profile``).

The engine, the executors and ``benchmark.runs.plan.execute`` mark their phases with ``with phase(name):``. Nothing is
measured unless a :class:`Clock` is active (:func:`measuring`); then each phase's CPU time
(``time.process_time``: every thread of the process, which on a shared machine does not grow with the load as
wall time does) is summed *exclusively*: time spent in a phase nested inside another (a batch gather inside a
local update) counts for the inner phase only, so the phases add up to the whole.

The phases, and what they stand for in the profile:

* ``job``: per job: loading the data, the partition, building the model and the algorithm, the record;
* ``round``: per round: client sampling, the round's bookkeeping, its history entry, observers;
* ``client``: per client: building each client's share and context (sequential), or stacking the clients'
  inputs and splitting the outputs (vectorized);
* ``data``: data movement: the clients' minibatch schedules, their padding and copies to the device, and the
  batch gathers of every local step;
* ``local``: the local steps themselves (the algorithm's local update: forward, backward, its own arithmetic);
* ``server``: the server: broadcast and aggregation (GradMA's memory and QP_g);
* ``evaluate``: the test set and the training objective at the evaluated rounds.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict

PHASES = ("local", "evaluate", "server", "data", "client", "round", "job")

_NULL = contextlib.nullcontext()
_ACTIVE: "Clock | None" = None


class Clock:
    """Exclusive CPU seconds and calls per phase (module docstring)."""

    def __init__(self, timer=time.process_time):
        self.timer = timer
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self._stack: list[list] = []  # [name, start of its current stretch]

    @contextlib.contextmanager
    def phase(self, name: str):
        now = self.timer()
        if self._stack:  # the enclosing phase pauses
            outer = self._stack[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._stack.append([name, now])
        self.calls[name] += 1
        try:
            yield
        finally:
            now = self.timer()
            n, t0 = self._stack.pop()
            self.seconds[n] += now - t0
            if self._stack:
                self._stack[-1][1] = now

    def total(self) -> float:
        return float(sum(self.seconds.values()))


def phase(name: str):
    """``with phase(name):`` marks a phase of the active clock (a no-op when none is active)."""
    return _NULL if _ACTIVE is None else _ACTIVE.phase(name)


@contextlib.contextmanager
def measuring(clock: Clock | None = None):
    """Activate ``clock`` (a new one by default) for the block; yields it."""
    global _ACTIVE
    clock = clock or Clock()
    before, _ACTIVE = _ACTIVE, clock
    try:
        yield clock
    finally:
        _ACTIVE = before
