"""Suites: run their cells (parsed by ``benchmark.suite``), resume, never lose a run.

A cell is named by its config hash. Its record is written atomically to
``<results>/<suite>/<package version>/<config_hash>.json`` when it finishes (ok, diverged or failed),
so a suite killed at any moment (SIGKILL too) and run again skips what is done and completes with the
same results as an uninterrupted run. Backends: ``local`` (in-process, one cell after another),
``process`` (a process pool), ``ray`` (Ray tasks on a local Ray or a cluster, fractional GPUs).

Reliability: records are written only by the process that runs the suite (workers and Ray tasks return
them), so nothing is written once it is gone; process workers end when it ends (any signal, kill -9
too); Ray tasks are cancelled on Ctrl-C and retried when a node dies; an unreadable record is moved
aside and its cell runs again (``store``); torch threads fit the free cores (``choose_threads``).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

from . import cost, lifeline, plan, store
from .experiment import Experiment, code_version, config_hash
from .plan import BACKENDS, Job, Threads, choose_threads, usable_cpus
# suite files are parsed in benchmark.suite; these names stay importable from here for callers not yet moved
from .suite import (Cell, Reference, Suite, SuiteError, load_suite, select_cells,  # noqa: F401
                    suite_names, suite_path)
from .suite import matches as _matches  # noqa: F401

FINISHED = ("ok", "diverged")  # statuses that are not run again; "failed" cells are retried


# --------------------------------------------------------------------------------------------------
# Running cells


def results_dir(results_root: str | os.PathLike, suite: str, version: str | None = None) -> Path:
    return Path(results_root) / suite / (version or code_version()["package"])


def compute_cell(job: Job) -> dict:
    """Run a job of one cell and return its record; a failure is recorded, never raised."""
    exp = job.experiments[0]
    t0 = time.perf_counter()
    try:
        [(_, res)] = list(plan.execute(job))
        rec = json.loads(res.to_json(indent=None))
    except Exception as e:  # noqa: BLE001 - a failing cell is a result, and the suite goes on
        rec = failed_record(exp, e, time.perf_counter() - t0)
    assert rec["config_hash"] == exp.config_hash(), "config hash changed while running"
    return rec


def failed_record(exp: Experiment, error: BaseException, wall: float) -> dict:
    """The record of a cell that failed (it is run again on resume)."""
    cfg = exp.config()
    return {"schema": 1, "config": cfg, "config_hash": config_hash(cfg), "code_version": code_version(),
            "environment": {}, "partition": {}, "history": [], "final": {"wall_time": wall},
            "status": "failed", "message": f"{type(error).__name__}: {error}",
            "traceback": "".join(traceback.format_exception(error, limit=20))}


def save_cell(out_dir: str | os.PathLike, rec: dict) -> dict:
    """Write a cell's record (to a printed fallback folder if ``out_dir`` fails); return its summary."""
    path, why = store.write_record_or_rescue(out_dir, rec)
    return {"config_hash": rec["config_hash"], "status": rec["status"], "message": rec.get("message", ""),
            "metric": rec["final"].get("test_accuracy"), "path": str(path), "rescued": why}


def run_job(job: Job, out_dir: str):
    """Run a job, writing each run's record as soon as that run finishes; yield each summary. A batched job
    that fails as a whole runs its unfinished cells one by one (each failure recorded)."""
    if len(job) == 1:
        yield save_cell(out_dir, compute_cell(job))
        return
    finished = set()
    try:
        for i, res in plan.execute(job):
            rec = json.loads(res.to_json(indent=None))
            assert rec["config_hash"] == job.experiments[i].config_hash(), "config hash changed while running"
            finished.add(i)
            yield save_cell(out_dir, rec)
    except Exception as e:  # noqa: BLE001 - fall back to the cells one by one, which record their failures
        print(f"fedrepro: a batched job of {len(job)} {job.experiments[0].algorithm} cells failed "
              f"({type(e).__name__}: {e}); running its unfinished cells one by one", file=sys.stderr)
        for i, single in enumerate(plan.split(job)):
            if i not in finished:
                yield save_cell(out_dir, compute_cell(single))


def pending(exps: list[Experiment], out_dir: Path) -> tuple[list[Experiment], int]:
    """The experiments without a finished record in ``out_dir`` (each config once), and how many have one;
    unreadable records are moved aside first (their cells run again)."""
    done = {rec["config_hash"]: rec["status"] for rec in store.read_records(out_dir, quarantine=True)}
    todo, seen = [], set()
    for e in exps:
        h = e.config_hash()
        if done.get(h) not in FINISHED and h not in seen:
            todo.append(e)
        seen.add(h)
    return todo, len(seen) - len(todo)


def check_jobs(jobs) -> int | None:
    """``jobs`` as a number of workers (None = auto); raises SuiteError for anything but >= 1 or "auto"."""
    if jobs is None or jobs == "auto":
        return None
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SuiteError(f"jobs must be an integer >= 1 or 'auto', got {jobs!r}")
    return jobs


def process_plan(jobs: int | str | None, cells: int) -> tuple[int, Threads, str | None]:
    """Workers and threads per worker for the process backend, and a note when ``jobs`` was cut.

    auto = one worker per free core; never more workers than CPUs (more only compete for the cores), nor
    than cells; each worker gets its share of the free cores (one thread when every core has a worker).
    """
    jobs = check_jobs(jobs)
    cpus = usable_cpus()
    note = None
    if jobs is None:
        workers = choose_threads(1, cpus).n
    elif jobs > cpus:
        workers = cpus
        note = f"--jobs {jobs} is more than the {cpus} CPUs: using {cpus} workers (more would only compete " \
               f"for the cores)"
    else:
        workers = jobs
    workers = max(1, min(workers, cells))
    return workers, choose_threads(workers, cpus), note


def run_suite(suite: Suite, backend: str = "local", jobs: int | str | None = None, results_root: str = "results",
              address: str | None = None, progress: bool = True, device: str | None = None,
              executor: str | None = None, group_runs: int | None = None) -> dict:
    """Run every unfinished cell of ``suite``; return counts by status (``run_experiments``)."""
    return run_experiments([c.experiment for c in suite.cells], results_dir(results_root, suite.name), backend,
                           jobs, address, progress, f"suite {suite.name}", group_runs=group_runs, device=device,
                           executor=executor)


def run_experiments(exps: list[Experiment], out_dir: str | os.PathLike, backend: str = "local",
                    jobs: int | str | None = None, address: str | None = None, progress: bool = True,
                    desc: str = "cells", group_runs: int | None = None, device: str | None = None,
                    executor: str | None = None) -> dict:
    """Run every experiment in ``exps`` that has no finished record in ``out_dir`` (resumable); return counts
    by status ("skipped" = already finished). Suites, ``fedrepro tune`` and the empirical claims all run their
    cells through here, as ``benchmark.plan`` plans them: ``device``/``executor`` override the experiments'
    own, ``group_runs`` bounds the batched jobs (None: the planner's default; 1: every cell alone). The
    results folder is checked writable and the plan made before any work (``store.StoreError``,
    ``SuiteError``); unreadable records are moved aside (their cells run again). Batched jobs run in this
    process, the cells alone go to ``backend``."""
    if backend not in BACKENDS:
        raise SuiteError(f"unknown backend {backend!r}; choose local, process or ray")
    check_jobs(jobs)
    out_dir = Path(out_dir)
    store.check_writable_folder(out_dir, "results folder")
    store.clean_stale_temps(out_dir)
    exps, skipped = pending(exps, out_dir)
    workers = process_plan(jobs, len(exps))[0] if backend == "process" else 1
    try:
        planned = plan.plan(exps, device=device, executor=executor, group_runs=group_runs, backend=backend,
                            workers=workers)
    except ValueError as e:
        raise SuiteError(str(e)) from None
    for note in grouping_notes(exps) if any(len(j) > 1 for j in planned) else []:
        print(f"fedrepro: {note}", file=sys.stderr)
    counts = {"skipped": skipped, "ok": 0, "diverged": 0, "failed": 0}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(exps) + skipped, initial=skipped, desc=desc, unit="cell")

    def done(summary):
        counts[summary["status"]] = counts.get(summary["status"], 0) + 1
        if summary["status"] == "failed":
            print(f"cell {summary['config_hash']} failed: {summary['message']}", file=sys.stderr)
        if summary.get("rescued"):
            print(f"fedrepro: could not write cell {summary['config_hash']}'s record to {out_dir} "
                  f"({summary['rescued']}); it is saved in {summary['path']}", file=sys.stderr)
        if bar is not None:
            bar.update(1)

    try:
        alone = [j for j in planned if len(j) == 1]
        for job in planned if backend == "local" else [j for j in planned if len(j) > 1]:
            for summary in run_job(job, str(out_dir)):
                done(summary)
        if alone and backend == "process":
            _run_process(alone, str(out_dir), jobs, done)
        elif alone and backend == "ray":
            _run_ray(alone, str(out_dir), address, done)
    finally:
        if bar is not None:
            bar.close()
    return counts


# --------------------------------------------------------------------------------------------------
# The process backend: records are written by the parent only, and workers end when it ends (lifeline)


def _stop_workers(pool) -> None:
    """End a pool's workers now (Ctrl-C or an error in the parent): running cells are abandoned."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()


def _run_process(planned: list[Job], out_dir: str, jobs: int | str | None, done) -> None:
    import concurrent.futures as cf
    import multiprocessing as mp

    workers, _, note = process_plan(jobs, len(planned))
    if note:
        print(f"fedrepro: {note}", file=sys.stderr)
    # spawn: a worker starts light (benchmark.lifeline arms its death signal), then imports torch
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                  initializer=lifeline.die_with_parent, initargs=(os.getpid(),))
    try:
        futures = [pool.submit(compute_cell, j) for j in planned]
        for f in cf.as_completed(futures):
            done(save_cell(out_dir, f.result()))  # the parent writes: no record once it is gone
    except BaseException:
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------------------------------
# The Ray backend: a local Ray or a cluster; node losses are retried, the driver writes the records


RAY_TASK_RETRIES = 3  # a task whose worker or node dies runs again on another node, up to this many times


def _run_ray(planned: list[Job], out_dir: str, address: str | None, done) -> None:
    try:
        import ray
    except ImportError:
        raise SuiteError("--backend ray needs Ray: pip install 'fedrepro[ray]'") from None
    started_here = False
    if not ray.is_initialized():
        # no address: a new local Ray of our own ("local"), never a cluster that happens to run on this machine
        # (ray.init() without an address joins the newest one started with `ray start`)
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": usable_cpus()}))
        started_here = True
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        # several cells share a GPU: each asks for a fraction
        task = ray.remote(num_cpus=1, num_gpus=0.25 if gpus else 0, max_retries=RAY_TASK_RETRIES)(compute_cell)
        cells = {task.remote(j): j.experiments[0] for j in planned}
        pending = list(cells)
        try:
            while pending:
                # a short timeout: Ctrl-C is only raised between calls, and a blocking wait returns only when
                # a cell ends (minutes for a long cell)
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                if not ready:
                    continue
                try:
                    rec = ray.get(ready[0])
                except ray.exceptions.RayError as e:  # lost beyond its retries (nodes gone): a failed cell
                    rec = failed_record(cells[ready[0]], e, 0.0)
                done(save_cell(out_dir, rec))  # the driver writes each record once
        except BaseException:  # Ctrl-C or an error: cancel what is queued or running
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished meanwhile
                    pass
            raise
    finally:
        if started_here:
            ray.shutdown()


# --------------------------------------------------------------------------------------------------
# The dry run


def plan_suite(suite: Suite, results_root: str = "results", device: str | None = None,
               executor: str | None = None, group_runs: int | None = None, backend: str = "local") -> dict:
    """What ``run_suite`` would do (``benchmark.plan``): the unfinished cells, their jobs, work and estimated time."""
    out_dir = results_dir(results_root, suite.name)
    exps, done = pending([c.experiment for c in suite.cells], out_dir)
    try:
        jobs = plan.plan(exps, device=device, executor=executor, group_runs=group_runs, backend=backend,
                         threads=None)
        dev_type = plan.device_type(device)
    except ValueError as e:
        raise SuiteError(str(e)) from None
    bench = cost.latest_bench(dev_type)
    model = cost.cost_model_from_bench(bench) if bench else None
    rows: dict[tuple, dict] = {}
    reasons: dict[str, Counter] = {"device": Counter(), "executor": Counter()}  # why, and in how many jobs
    for job in jobs:
        est = plan.estimate(job, model)
        e = job.experiments[0]
        key = (e.algorithm, e.dataset if isinstance(e.dataset, str) else "custom",
               e.model if isinstance(e.model, str) else "custom")
        r = rows.setdefault(key, {"cells": 0, "groups": 0, "sample_gradients": 0.0, "seconds": 0.0,
                                  "executor": set(), "reason": set()})
        r["cells"] += len(job)
        r["groups"] += 1
        r["sample_gradients"] += est["sample_gradients"]
        r["executor"].add(est["executor"])
        r["reason"].add(job.reasons["group"])
        for what in ("device", "executor"):
            reasons[what][f"{getattr(job, what)}: {job.reasons[what]}"] += 1
        r["seconds"] = None if r["seconds"] is None or est["seconds"] is None else r["seconds"] + est["seconds"]
    total = [r["seconds"] for r in rows.values()]
    return {"suite": suite.name, "out_dir": str(out_dir), "cells": len(suite.cells), "done": done,
            "to_run": len(exps), "jobs": len(jobs), "device": dev_type, "rows": rows, "reasons": reasons,
            "seconds": None if any(t is None for t in total) else sum(total),
            "seconds_alone": plan.estimate_cells(exps, device, model, executor)["seconds"] if exps else 0.0,
            "bench": bench.get("_path") if bench else None}


def grouping_notes(exps: list[Experiment]) -> list[str]:
    """Why some cells cannot share a batched job, once per algorithm (and hyperparameter)."""
    import algorithms

    from . import batched

    notes, by_alg = [], {}
    for e in exps:
        by_alg.setdefault(e.algorithm, []).append(e)
    for name, es in sorted(by_alg.items()):
        cls = algorithms.get_class(name)
        if not cls.vectorizable:
            notes.append(f"{name} is not vectorizable: its {len(es)} cell(s) run one by one, not batched")
            continue
        free = batched.tensor_fields(name)
        hps = [algorithms.core.make_hyper(cls, e.algorithm_args) for e in es]
        for f in batched._float_fields(cls):
            if f not in free and len({repr(getattr(h, f)) for h in hps}) > 1:
                notes.append(f"{name}: {f} cannot be a batched tensor (the probe of benchmark.batched failed: "
                             "Python control flow or a value derived from it), so cells that differ in it run in "
                             "separate jobs")
        if "lr" not in free and len({e.lr for e in es}) > 1:
            notes.append(f"{name}: the learning rate cannot be a batched tensor, so cells that differ in it run "
                         "in separate jobs")
    return notes
