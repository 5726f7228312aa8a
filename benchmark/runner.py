"""Suites: load and validate ``benchmark/suites/*.toml``, run their cells, resume, never lose a run.

A cell is named by its config hash. Its record is written atomically to
``<results>/<suite>/<package version>/<config_hash>.json`` when it finishes (ok, diverged or failed),
so a suite killed at any moment (SIGKILL too) and run again skips what is done and completes with the
same results as an uninterrupted run. Backends: ``local`` (in-process, one cell after another),
``process`` (a process pool), ``ray`` (Ray tasks on a local Ray or a cluster, fractional GPUs).
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from . import store
from .experiment import DICT_FIELDS as _DICT_FIELDS
from .experiment import Experiment, code_version, config_hash

SUITES_DIR = Path(__file__).parent / "suites"
_TOP_KEYS = {"name", "description", "paper", "requires", "metric", "defaults", "matrix", "override", "reference",
             "notes", "scale"}
SCALES = ("paper", "reduced")  # "paper": the paper's own setting, its numbers are comparable; else orientation only
_FIELDS = {f.name for f in dataclasses.fields(Experiment)}
FINISHED = ("ok", "diverged")  # statuses that are not run again; "failed" cells are retried


class SuiteError(ValueError):
    pass


@dataclass
class Reference:
    match: dict
    value: float
    std: float | None = None
    source: str = ""


@dataclass
class Cell:
    experiment: Experiment
    config_hash: str
    references: list[Reference] = field(default_factory=list)


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    cells: list[Cell]
    references: list[Reference]
    metric: str = "test_accuracy"
    paper: str | None = None
    requires: str = "cpu"
    notes: dict = field(default_factory=dict)
    scale: str = "reduced"


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def suite_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    cand = SUITES_DIR / f"{name_or_path}.toml"
    if cand.exists():
        return cand
    import difflib

    close = difflib.get_close_matches(name_or_path, suite_names(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise SuiteError(f"unknown suite {name_or_path!r}.{hint} Known: {', '.join(suite_names())}")


def _check_fields(d: dict, where: str) -> None:
    for k, v in d.items():
        if k not in _FIELDS:
            raise SuiteError(f"{where}: unknown key {k!r} (valid: Experiment fields such as algorithm, dataset, "
                             f"partition, num_clients, rounds, lr, seed, algorithm_args)")
        if k in _DICT_FIELDS and not isinstance(v, dict):
            raise SuiteError(f"{where}: {k} must be a table (e.g. {{ mu = 0.01 }}), got {v!r}")


def _matches(match: dict, cfg: dict) -> bool:
    for k, v in match.items():
        if k in _DICT_FIELDS:
            if any(cfg.get(k, {}).get(kk) != vv for kk, vv in v.items()):
                return False
        elif cfg.get(k) != v:
            return False
    return True


def _apply(cfg: dict, update: dict) -> dict:
    out = copy.deepcopy(cfg)
    for k, v in update.items():
        if k in _DICT_FIELDS:
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


def load_suite(name_or_path: str) -> Suite:
    """Parse and validate a suite; errors name the file and the key."""
    path = suite_path(name_or_path)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"{path}: invalid TOML: {e}") from None
    where = str(path)
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise SuiteError(f"{where}: unknown top-level key(s) {sorted(unknown)}; valid: {sorted(_TOP_KEYS)}")
    if raw.get("name", path.stem) != path.stem:
        raise SuiteError(f"{where}: name {raw.get('name')!r} must equal the file name {path.stem!r}")
    if raw.get("scale", "reduced") not in SCALES:
        raise SuiteError(f"{where}: scale must be one of {SCALES} (\"paper\": the paper's own setting, so its "
                         f"references are comparable), got {raw.get('scale')!r}")
    defaults = raw.get("defaults", {})
    _check_fields(defaults, f"{where} [defaults]")
    matrix = raw.get("matrix", {})
    _check_fields(matrix, f"{where} [matrix]")
    for k, v in matrix.items():
        if not isinstance(v, list) or not v:
            raise SuiteError(f"{where} [matrix]: {k} must be a non-empty list, got {v!r}")
    overrides = raw.get("override", [])
    for i, o in enumerate(overrides):
        extra = set(o) - {"match", "set"}
        if extra:
            raise SuiteError(f"{where} [[override]] #{i + 1}: unknown key(s) {sorted(extra)}; use match and set")
        _check_fields(o.get("match", {}), f"{where} [[override]] #{i + 1} match")
        _check_fields(o.get("set", {}), f"{where} [[override]] #{i + 1} set")
    refs = []
    for i, r in enumerate(raw.get("reference", [])):
        extra = set(r) - {"match", "value", "std", "source"}
        if extra or "value" not in r:
            raise SuiteError(f"{where} [[reference]] #{i + 1}: needs match and value (std, source optional); "
                             f"unknown: {sorted(extra)}")
        _check_fields(r.get("match", {}), f"{where} [[reference]] #{i + 1} match")
        refs.append(Reference(r.get("match", {}), float(r["value"]), r.get("std"), r.get("source", "")))

    if "*" in matrix.get("algorithm", []):  # "*" stands for every registered algorithm
        import algorithms

        rest = [a for a in matrix["algorithm"] if a != "*"]
        matrix = {**matrix, "algorithm": rest + [a for a in algorithms.names() if a not in rest]}
    keys = list(matrix)
    cells, seen = [], set()
    for combo in itertools.product(*(matrix[k] for k in keys)):
        cfg = _apply(defaults, dict(zip(keys, combo)))
        for o in overrides:
            if _matches(o.get("match", {}), cfg):
                cfg = _apply(cfg, o.get("set", {}))
        try:
            exp = Experiment(**cfg)
            exp.validate()
        except (TypeError, ValueError) as e:
            raise SuiteError(f"{where}: invalid cell {cfg}: {e}") from None
        h = exp.config_hash()
        if h in seen:
            continue
        seen.add(h)
        cells.append(Cell(exp, h, [r for r in refs if _matches(r.match, cfg)]))
    if not cells:
        raise SuiteError(f"{where}: the suite has no cells ([matrix] is empty)")
    return Suite(path.stem, path, raw.get("description", ""), cells, refs, raw.get("metric", "test_accuracy"),
                 raw.get("paper"), raw.get("requires", "cpu"), raw.get("notes", {}), raw.get("scale", "reduced"))


# --------------------------------------------------------------------------------------------------
# Running cells


def results_dir(results_root: str | os.PathLike, suite: str, version: str | None = None) -> Path:
    return Path(results_root) / suite / (version or code_version()["package"])


def run_cell(exp: Experiment, out_dir: str, threads: int | None = None) -> dict:
    """Run one cell and write its record; a failure is recorded, never raised. Returns a summary."""
    import torch

    from .experiment import run

    if threads:
        torch.set_num_threads(threads)
    h = exp.config_hash()
    t0 = time.perf_counter()
    try:
        rec = run(exp).record()
    except Exception as e:  # noqa: BLE001 - a failing cell is a result, and the suite goes on
        cfg = exp.config()
        rec = {"schema": 1, "config": cfg, "config_hash": config_hash(cfg), "code_version": code_version(),
               "environment": {}, "partition": {}, "history": [], "final": {"wall_time": time.perf_counter() - t0},
               "status": "failed", "message": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc(limit=20)}
    assert rec["config_hash"] == h, "config hash changed while running"
    store.write_record(out_dir, rec)
    return {"config_hash": h, "status": rec["status"], "message": rec.get("message", ""),
            "metric": rec["final"].get("test_accuracy")}


def pending_cells(suite: Suite, out_dir: Path) -> tuple[list[Cell], int]:
    done = {}
    for rec in store.read_records(out_dir):
        done[rec["config_hash"]] = rec["status"]
    todo = [c for c in suite.cells if done.get(c.config_hash) not in FINISHED]
    return todo, len(suite.cells) - len(todo)


def run_suite(suite: Suite, backend: str = "local", jobs: int | None = None, results_root: str = "results",
              address: str | None = None, progress: bool = True, device: str | None = None,
              executor: str | None = None) -> dict:
    """Run every unfinished cell of ``suite``; return counts by status."""
    out_dir = results_dir(results_root, suite.name)
    exps = []
    for c in suite.cells:
        e = c.experiment
        if device:
            e = dataclasses.replace(e, device=device)
        if executor:
            e = dataclasses.replace(e, executor=executor)
        exps.append(e)
    return run_experiments(exps, out_dir, backend, jobs, address, progress, f"suite {suite.name}")


def run_experiments(exps: list[Experiment], out_dir: str | os.PathLike, backend: str = "local",
                    jobs: int | None = None, address: str | None = None, progress: bool = True,
                    desc: str = "cells") -> dict:
    """Run every experiment in ``exps`` that has no finished record in ``out_dir`` (resumable, as a suite);
    return counts by status ("skipped" = already finished). Suites, ``fedrepro tune`` and the empirical
    claims all run their cells through here."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    store.clean_stale_temps(out_dir)
    done_status = {rec["config_hash"]: rec["status"] for rec in store.read_records(out_dir)}
    todo, seen = [], set()
    for e in exps:
        h = e.config_hash()
        if done_status.get(h) not in FINISHED and h not in seen:
            todo.append(e)
        seen.add(h)
    skipped = len(seen) - len(todo)
    exps = todo
    counts = {"skipped": skipped, "ok": 0, "diverged": 0, "failed": 0}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(seen), initial=skipped, desc=desc, unit="cell")

    def done(summary):
        counts[summary["status"]] = counts.get(summary["status"], 0) + 1
        if summary["status"] == "failed":
            print(f"cell {summary['config_hash']} failed: {summary['message']}", file=sys.stderr)
        if bar is not None:
            bar.update(1)

    try:
        if backend == "local":
            for e in exps:
                done(run_cell(e, str(out_dir)))
        elif backend == "process":
            _run_process(exps, str(out_dir), jobs, done)
        elif backend == "ray":
            _run_ray(exps, str(out_dir), address, done)
        else:
            raise SuiteError(f"unknown backend {backend!r}; choose local, process or ray")
    finally:
        if bar is not None:
            bar.close()
    return counts


def _run_process(exps: list[Experiment], out_dir: str, jobs: int | None, done) -> None:
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = jobs or max(1, (os.cpu_count() or 1))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(run_cell, e, out_dir, threads) for e in exps]
        try:
            for f in cf.as_completed(futures):
                done(f.result())
        except KeyboardInterrupt:
            for f in futures:
                f.cancel()
            raise


def _run_ray(exps: list[Experiment], out_dir: str, address: str | None, done) -> None:
    try:
        import ray
    except ImportError:
        raise SuiteError("--backend ray needs Ray: pip install 'fedrepro[ray]'") from None
    started_here = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": os.cpu_count() or 1}))
        started_here = True
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        # several cells share a GPU: each asks for a fraction
        opts = {"num_cpus": 1, "num_gpus": 0.25 if gpus else 0}
        task = ray.remote(**opts)(run_cell)
        refs = [task.remote(e, out_dir, 1) for e in exps]
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done(ray.get(ready[0]))
    finally:
        if started_here:
            ray.shutdown()


def main_run_suite(a) -> int:
    """``fedrepro run --suite NAME``."""
    try:
        suite = load_suite(a.suite)
    except SuiteError as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    out_dir = results_dir(a.results, suite.name)
    print(f"suite {suite.name}: {len(suite.cells)} cells -> {out_dir}", file=sys.stderr)
    try:
        counts = run_suite(suite, a.backend, a.jobs, a.results, a.address, progress=not a.no_progress,
                           device=a.device, executor=a.executor)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished cells are kept in {out_dir}; run the same command again to resume",
              file=sys.stderr)
        return 130
    except SuiteError as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    print(f"suite {suite.name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), file=sys.stderr)
    from . import report

    paths = report.write_report(suite, out_dir)
    print(paths["markdown"].read_text())
    return 0 if counts.get("failed", 0) == 0 else 1
