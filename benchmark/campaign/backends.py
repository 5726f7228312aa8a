"""The process and Ray backends of ``benchmark.campaign.runner``: cells alone run in workers, as this runner claims them.

Both keep at most one job per worker in flight, taking each from a ``benchmark.campaign.cell_claims.JobQueue`` (so
runners sharing a results folder divide its cells as they go) and handing each finished record to
``save`` in this process: records are written by the runner only, so nothing is written once it is gone.
A job runs as :func:`compute_job`: a cell alone as :func:`compute_cell`, which returns its record (a failure is a
``failed`` record, :func:`failed_record`), a batched job (several runs: the runs of a look that differ only in their
seeds) as :func:`run_job` runs it, its records returned together.

Process backend: workers end when this process ends, by any signal (``benchmark.campaign.lifeline``). A worker that
dies (killed by SIGKILL, as the kernel's out-of-memory killer does) breaks the pool: the cells that were in
flight run again one at a time, each alone in a fresh worker, and one whose worker dies again is recorded
``failed`` with the signal and the peak memory its worker had reached (``benchmark.runs.oom``); the suite goes on.
Ray backend: a local Ray or a cluster; a task whose node dies is retried (:data:`RAY_TASK_RETRIES`).
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from concurrent.futures.process import BrokenProcessPool

from benchmark.campaign import cell_claims, lifeline
from benchmark.campaign.suite import SuiteError
from benchmark.runs import oom, plan
from benchmark.runs.experiment import config_hash
from benchmark.runs.plan import usable_cpus
from benchmark.runs.record import code_version

RAY_TASK_RETRIES = 3  # a task whose worker or node dies runs again on another node, up to this many times
POLL_SECONDS = 0.5  # how often a waiting runner looks again (Ctrl-C is only raised between waits)


def _pump(queue, width: int, submit, wait, out_dir: str, done, save) -> None:
    """Keep up to ``width`` jobs in flight: ``submit(job) -> handle``; ``wait(handles)`` returns the finished
    ``(handle, record or list of records)`` pairs within a short timeout."""
    inflight: dict = {}
    while True:
        while len(inflight) < width:
            job = queue.take(block=not inflight)
            if job is None:
                break
            inflight[submit(job)] = job
        if not inflight:
            return
        for handle, got in wait(inflight):
            job = inflight.pop(handle)
            for rec in got if isinstance(got, list) else [got]:
                done(save(out_dir, rec))  # the runner writes: no record once it is gone
            queue.release(job)


def compute_cell(job) -> dict:
    """Run a job of one cell (in a worker, a Ray task or here) and return its record; a failure is recorded,
    never raised."""
    exp = job.experiments[0]
    t0 = time.perf_counter()
    try:
        [(_, res)] = list(plan.execute(job))
        rec = json.loads(res.to_json(indent=None))
    except Exception as e:  # noqa: BLE001 - a failing cell is a result, and the suite goes on
        rec = failed_record(exp, e, time.perf_counter() - t0)
    assert rec["config_hash"] == exp.config_hash(), "config hash changed while running"
    return rec


def compute_job(job) -> dict | list[dict]:
    """A job's records, computed in a worker: a cell alone's (:func:`compute_cell`), or a batched job's, one per run,
    with :func:`run_job`'s fallbacks (halves after an out-of-memory error, else its runs one by one)."""
    if len(job) == 1:
        return compute_cell(job)
    return list(run_job(job, "", lambda _folder, rec: rec))


def run_job(job, out_dir: str, save):
    """Run a job, handing each run's record to ``save(out_dir, rec)`` as soon as that run finishes (the runner writes
    it: ``runner.save_cell``; a worker returns it); yield what ``save`` returns. A batched job that fails for memory
    is split in halves and retried, down to runs alone (``benchmark.runs.oom``); one that fails otherwise runs its
    unfinished cells one by one (each failure recorded)."""
    if len(job) == 1:
        yield save(out_dir, compute_cell(job))
        return
    finished, runs = set(), plan.execute(job)
    while True:
        try:
            i, res = next(runs)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - retried smaller, or the cells one by one, which record their failures
            why, memory = f"{type(e).__name__}: {e}", oom.is_out_of_memory(e)
            break
        rec = json.loads(res.to_json(indent=None))
        assert rec["config_hash"] == job.experiments[i].config_hash(), "config hash changed while running"
        finished.add(i)
        yield save(out_dir, rec)  # a full disk (DiskFull) stops the suite: not a failure of the job
    del runs
    rest = [i for i in range(len(job)) if i not in finished]
    if memory:
        oom.free_memory()
        parts = [rest[:len(rest) // 2], rest[len(rest) // 2:]]
        print(f"fedrepro: a batched job of {len(job)} {job.experiments[0].algorithm} cells ran out of memory "
              f"({why}); retrying its {len(rest)} unfinished cells as jobs of {len(parts[0])} and {len(parts[1])}",
              file=sys.stderr)
    else:
        parts = [[i] for i in rest]
        print(f"fedrepro: a batched job of {len(job)} {job.experiments[0].algorithm} cells failed ({why}); running "
              "its unfinished cells one by one", file=sys.stderr)
    for part in parts:
        yield from run_job(cell_claims.part_of(job, part), out_dir, save)


def failed_record(exp, error: BaseException, wall: float) -> dict:
    """The record of a cell that failed (it is run again on resume); a memory failure says so, with the memory
    it needed where known (``benchmark.runs.oom``)."""
    cfg = exp.config()
    rec = {"schema": 1, "config": cfg, "config_hash": config_hash(cfg), "code_version": code_version(),
           "environment": {}, "partition": {}, "history": [], "final": {"wall_time": wall},
           "status": "failed", "message": f"{type(error).__name__}: {error}",
           "traceback": "".join(traceback.format_exception(error, limit=20))}
    if oom.is_out_of_memory(error):
        needed = oom.memory_needed(error)
        rec["message"] = "out of memory, even alone: " + rec["message"] + (f" ({needed})" if needed else "")
        rec["memory_needed"] = needed
    return rec


# --------------------------------------------------------------------------------------------------
# Processes


def _new_pool(workers: int) -> cf.ProcessPoolExecutor:
    # spawn: a worker starts light (benchmark.campaign.lifeline arms its death signal), then imports torch
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                  initializer=lifeline.die_with_parent, initargs=(os.getpid(),))


def stop_workers(pool) -> None:
    """End a pool's workers now (Ctrl-C or an error in the parent): running cells are abandoned."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()


class _Pool:
    """A process pool that survives a dead worker: the cells in flight then run again alone (module docstring)."""

    def __init__(self, workers: int, compute, failed_record):
        self.workers, self.compute, self.failed_record = workers, compute, failed_record
        self.pool = _new_pool(workers)
        self.procs: dict = {}  # the workers ever started (the pool forgets them when one dies: their exit codes)

    def submit(self, job):
        try:
            f = self.pool.submit(self.compute, job)
        except BrokenProcessPool:  # a worker died since the last wait: this cell joins those run again alone
            f = cf.Future()
            f.set_exception(BrokenProcessPool("a worker died before this cell started"))
        self.procs.update(self.pool._processes or {})
        return f

    def wait(self, inflight: dict) -> list:
        finished, _ = cf.wait(list(inflight), timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED)
        out, broken = [], False
        for f in finished:
            try:
                out.append((f, f.result()))
            except BrokenProcessPool:
                broken = True
        if not broken:
            return out
        done = {f for f, _ in out}
        suspects = [f for f in inflight if f not in done]
        self.procs.update(self.pool._processes or {})
        stop_workers(self.pool)
        codes = _death(self.procs.values())
        self.procs = {}
        print(f"fedrepro: a worker process died ({codes}; out of memory?); running "
              f"the {len(suspects)} cell(s) it may have been running again, one at a time", file=sys.stderr)
        out += [(f, self._alone(inflight[f])) for f in suspects]
        self.pool = _new_pool(self.workers)
        return out

    def _alone(self, job) -> dict | list[dict]:
        """Run ``job`` alone in a fresh worker; its record, or a failed one if that worker dies too (a batched job:
        each of its runs so, one after another)."""
        if len(job) > 1:
            return [self._alone(one) for one in plan.split(job)]
        pool, peak, t0 = _new_pool(1), 0, time.perf_counter()
        try:
            f = pool.submit(self.compute, job)
            procs = dict(pool._processes or {})
            while True:
                try:
                    return f.result(timeout=POLL_SECONDS)
                except cf.TimeoutError:
                    for pid in list(pool._processes or {}):
                        peak = max(peak, oom.peak_rss(pid) or 0)
                except BrokenProcessPool:
                    for p in procs.values():
                        p.join(timeout=5)
                    err = oom.WorkerKilled(f"its worker process died ({_death(procs.values())}) twice, the second time "
                                           "running this cell alone; out of memory? (the kernel's out-of-memory killer "
                                           "sends SIGKILL)")
                    err.memory_needed = f"its worker had reached {oom.human_bytes(peak)} resident" if peak else None
                    return self.failed_record(job.experiments[0], err, time.perf_counter() - t0)
        finally:
            stop_workers(pool)


def _death(procs) -> str:
    """How the dead among ``procs`` ended (those the pool itself then stopped with SIGTERM left out)."""
    procs = list(procs)
    for p in procs:  # the dead are reaped (an exit code, not None) before they are read
        p.join(timeout=2)
    # The pool's own thread may reap a dead worker at the same moment: our waitpid then fails (ECHILD) and the exit
    # code reads None until that thread has stored it, a few milliseconds later (seen in about 1 run in 15 of
    # tests/test_shared_runs.py's killed workers, which then said "cause unknown" or only SIGTERM).
    deadline = time.monotonic() + 2.0
    while any(p.exitcode is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    codes = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
    first = [c for c in codes if c != -15] or codes
    return ", ".join(sorted({oom.killed_by(c) for c in first})) or "cause unknown"


def run_process(queue, out_dir: str, workers: int, done, save) -> None:
    """The process backend (module docstring) with ``workers`` workers (``runner.process_plan``)."""
    pool = _Pool(workers, compute_job, failed_record)
    try:
        _pump(queue, workers, pool.submit, pool.wait, out_dir, done, save)
    except BaseException:
        stop_workers(pool.pool)
        raise
    finally:
        pool.pool.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------------------------------
# Ray


def run_ray(queue, out_dir: str, address: str | None, done, save) -> None:
    """The Ray backend (module docstring): tasks on a local Ray of our own, or the cluster at ``address``."""
    try:
        import ray  # lazy: an optional dependency (pip install 'fedrepro[ray]')
    except ImportError:
        raise SuiteError("--backend ray needs Ray: pip install 'fedrepro[ray]'") from None
    started_here = False
    if not ray.is_initialized():
        # no address: a new local Ray of our own ("local"), never a cluster that happens to run on this machine
        # (ray.init() without an address joins the newest one started with `ray start`)
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": usable_cpus()}))
        started_here = True
    inflight: dict = {}
    try:
        res = ray.cluster_resources()
        # several cells share a GPU: each asks for a fraction
        task = ray.remote(num_cpus=1, num_gpus=0.25 if res.get("GPU", 0) else 0,
                          max_retries=RAY_TASK_RETRIES)(compute_job)

        def submit(job):
            ref = task.remote(job)
            inflight[ref] = job
            return ref

        def wait(refs):
            # a short timeout: Ctrl-C is only raised between calls, and a blocking wait returns only when
            # a cell ends (minutes for a long cell)
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_SECONDS)
            out = []
            for ref in ready:
                try:
                    out.append((ref, ray.get(ref)))
                except ray.exceptions.RayError as e:  # lost beyond its retries (nodes gone): failed cells
                    lost = [failed_record(x, e, 0.0) for x in inflight[ref].experiments]
                    out.append((ref, lost if len(lost) > 1 else lost[0]))
                inflight.pop(ref)
            return out

        try:
            _pump(queue, max(1, int(res.get("CPU", 1))), submit, wait, out_dir, done, save)
        except BaseException:  # Ctrl-C or an error: cancel what is queued or running
            for ref in inflight:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished meanwhile
                    pass
            raise
    finally:
        if started_here:
            ray.shutdown()
