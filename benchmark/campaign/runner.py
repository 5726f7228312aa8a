"""Suites: run their cells (parsed by ``benchmark.campaign.suite``), resume, never lose a run.

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

import dataclasses
import json
import os
import sys
from collections import Counter
from pathlib import Path

from tqdm.auto import tqdm

import algorithms

from benchmark.campaign import backends, cell_claims
from benchmark.campaign.backends import run_job
from benchmark.campaign.suite import Suite, SuiteError, bind_folder
from benchmark.runs import batched, checkpoint, cost, plan, store
from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import BACKENDS, Job, Threads, choose_threads, usable_cpus
from benchmark.runs.record import code_version

FINISHED = store.FINISHED  # statuses that are not run again; "failed" cells are retried


class DiskFull(store.StoreError):
    """A record (or a cell's claim) could not be written for lack of space: the suite stops (the record is rescued
    elsewhere)."""


# --------------------------------------------------------------------------------------------------
# Running cells


def results_dir(results_root: str | os.PathLike, suite: str, version: str | None = None) -> Path:
    return Path(results_root) / suite / (version or code_version()["package"])


def save_cell(out_dir: str | os.PathLike, rec: dict, keep_finished: bool = False) -> dict:
    """Write a cell's record (to a printed fallback folder if ``out_dir`` fails); return its summary.
    ``keep_finished``: another runner's finished record is kept (``written`` False). A full disk raises
    :class:`DiskFull` once the record is rescued (or printed on stderr where nothing can be written)."""
    errors: list = []
    try:
        path, why = store.write_record_or_rescue(out_dir, rec, keep_finished, errors)
    except store.StoreError as e:
        if not any(store.is_disk_full(x) for x in errors):
            raise
        print(json.dumps(store.seal(rec), default=str), file=sys.stderr)
        raise DiskFull(f"disk full: {e}; the record is printed on stderr above; the suite stops: free some space "
                       "and run the same command again to resume") from None
    summary = {"config_hash": rec["config_hash"], "status": rec["status"], "message": rec.get("message", ""),
               "metric": rec["final"].get("test_accuracy"), "path": str(path), "rescued": why,
               "written": path is not None}
    if any(store.is_disk_full(x) for x in errors):
        raise DiskFull(f"disk full: could not write cell {rec['config_hash']}'s record to {out_dir} ({why}); it is "
                       f"saved in {path}; the suite stops: free some space and run the same command again to resume")
    return summary


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
              executor: str | None = None, group_runs: int | None = None,
              out_dir: str | os.PathLike | None = None, numerics_policy=None) -> dict:
    """Run every unfinished cell of ``suite``; return counts by status (``run_experiments``). The records go to
    ``out_dir``, by default ``results_dir(results_root, suite.name)``."""
    folder = results_dir(results_root, suite.name) if out_dir is None else out_dir
    bind_folder(folder, suite)  # one folder holds one suite: another suite's folder is refused, before any work
    return run_experiments([c.experiment for c in suite.cells], folder, backend, jobs, address, progress,
                           f"suite {suite.name}", group_runs=group_runs, device=device, executor=executor,
                           numerics_policy=numerics_policy)


def run_experiments(exps: list[Experiment], out_dir: str | os.PathLike, backend: str = "local",
                    jobs: int | str | None = None, address: str | None = None, progress: bool = True,
                    desc: str = "cells", group_runs: int | None = None, device: str | None = None,
                    executor: str | None = None, checkpoint_every_s: float | None = None,
                    numerics_policy=None) -> dict:
    """Run every experiment in ``exps`` that has no finished record in ``out_dir`` (resumable); return counts
    by status ("skipped" = already finished; "duplicate" = computed here, but another runner's record was
    written first). Suites, ``fedrepro tune`` and the empirical claims all run their cells through here, as
    ``benchmark.runs.plan`` plans them: ``device``/``executor`` override the experiments' own, ``group_runs``
    bounds the batched jobs (None: the planner's default; 1: every cell alone). The results folder is checked
    writable and the plan made before any work (``store.StoreError``, ``SuiteError``); unreadable records are
    moved aside (their cells run again). Runners sharing ``out_dir`` divide its cells (``benchmark.campaign.cell_claims``):
    a job runs once this runner claims its cells; one claimed by a live runner is waited for, taken over if
    that runner dies. Every job runs where ``backend`` runs jobs (local: here; a batched job's records come
    back together from a worker). A full disk stops
    the suite (:class:`DiskFull`) once the record is rescued, or when a cell cannot even be claimed. Runs save
    checkpoints in ``out_dir/.checkpoints`` (``benchmark.runs.checkpoint``, at most every ``checkpoint_every_s``,
    default a minute): a stopped suite resumes each unfinished run at the round it had reached.
    ``numerics_policy`` (a ``benchmark.sim.numerics.Numerics``): the policy every job runs under, in workers too
    (default: the process's)."""
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
    planned = as_run_here(planned, out_dir, checkpoint_every_s, numerics_policy)
    for note in grouping_notes(exps) if any(len(j) > 1 for j in planned) else []:
        print(f"fedrepro: {note}", file=sys.stderr)
    counts = {"skipped": skipped, "ok": 0, "diverged": 0, "failed": 0, "duplicate": 0}
    bar = None
    if progress:
        bar = tqdm(total=len(exps) + skipped, initial=skipped, desc=desc, unit="cell")

    def done(summary):
        counts[summary["status"] if summary["written"] else "duplicate"] += 1
        if summary["status"] == "failed" and summary["written"]:
            print(f"cell {summary['config_hash']} failed: {summary['message']}", file=sys.stderr)
        if summary.get("rescued"):
            print(f"fedrepro: could not write cell {summary['config_hash']}'s record to {out_dir} "
                  f"({summary['rescued']}); it is saved in {summary['path']}", file=sys.stderr)
        if bar is not None:
            bar.update(1)

    def log(msg):
        print(f"fedrepro: {msg}", file=sys.stderr)

    try:
        with cell_claims.Claims(out_dir, log=log) as claims:
            queue = cell_claims.JobQueue(planned, claims, _settled(out_dir, exps), cell_claims.part_of)
            if backend == "local":
                while (job := queue.take()) is not None:
                    for summary in run_job(job, str(out_dir), save_and_forget):
                        done(summary)
                    queue.release(job)
            else:
                if backend == "process":
                    n, _, note = process_plan(jobs, len(exps))
                    if note:
                        log(note)
                    backends.run_process(queue, str(out_dir), n, done, save_and_forget)
                else:
                    backends.run_ray(queue, str(out_dir), address, done, save_and_forget)
    except OSError as e:
        if isinstance(e, DiskFull) or not store.is_disk_full(e):
            raise
        raise DiskFull(f"disk full: could not claim a cell in {out_dir} ({e.strerror}); no record was lost; the "
                       "suite stops: free some space and run the same command again to resume") from None
    finally:
        if bar is not None:
            bar.close()
    return counts


def as_run_here(jobs: list[Job], out_dir: Path, every_s: float | None = None, policy=None) -> list[Job]:
    """The jobs saving checkpoints in ``out_dir/.checkpoints`` (an absolute path: workers may start elsewhere),
    under the numerics ``policy`` if one is given (it travels with each job to workers)."""
    how = {"checkpoints": str((out_dir / checkpoint.FOLDER).resolve())}
    how |= {} if every_s is None else {"checkpoint_every_s": float(every_s)}
    how |= {} if policy is None else {"numerics": policy}
    return [dataclasses.replace(j, **how) for j in jobs]


def save_and_forget(folder: str | os.PathLike, rec: dict) -> dict:
    """``save_cell`` keeping another runner's finished record; then the run's checkpoint goes (a failed cell
    keeps it: it runs again from there)."""
    summary = save_cell(folder, rec, keep_finished=True)
    if rec["status"] != "failed":
        checkpoint.remove(Path(folder) / checkpoint.FOLDER, rec["config_hash"])
    return summary


def _settled(out_dir: Path, exps: list[Experiment]):
    """``settled(config_hash)``: a record of that cell appeared (or changed) since now, so it needs no more work
    from this runner (another runner wrote it); a failed record already here now is retried."""
    def signature(h):
        try:
            st = (out_dir / f"{h}.json").stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    before = {e.config_hash(): signature(e.config_hash()) for e in exps}

    def settled(h: str) -> bool:
        now = signature(h)
        return now is not None and now != before.get(h)
    return settled


# --------------------------------------------------------------------------------------------------
# The dry run


def plan_suite(suite: Suite, results_root: str = "results", device: str | None = None,
               executor: str | None = None, group_runs: int | None = None, backend: str = "local",
               out_dir: str | os.PathLike | None = None) -> dict:
    """What ``run_suite`` would do (``benchmark.runs.plan``): the unfinished cells, their jobs, work and estimated time.
    ``out_dir`` as ``run_suite``'s."""
    out_dir = results_dir(results_root, suite.name) if out_dir is None else Path(out_dir)
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
                notes.append(f"{name}: {f} cannot be a batched tensor (the probe of benchmark.runs.batched failed: "
                             "Python control flow or a value derived from it), so cells that differ in it run in "
                             "separate jobs")
        if "lr" not in free and len({e.lr for e in es}) > 1:
            notes.append(f"{name}: the learning rate cannot be a batched tensor, so cells that differ in it run "
                         "in separate jobs")
    return notes
