"""``fedrepro run``: single runs from the flags, a suite (``--suite``), or the offline default (the smoke suite)."""
from __future__ import annotations

import json
import sys
from concurrent.futures.process import BrokenProcessPool

from .. import cost, plan, report, runner, store
from ..plan import load_warning
from . import args


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="run experiments (no flags: the offline default)",
                       description="Run one experiment per seed from the flags, a suite (--suite), or, with no "
                                   "flags, the offline default (FedAvg on digits, under a minute on a CPU).")
    args.experiment_flags(r)
    r.add_argument("--suite", help="run a suite of benchmark/suites/NAME.toml (see `fedrepro list suites`)")
    r.add_argument("--backend", choices=["local", "process", "ray"], default="local", help="suite backend")
    r.add_argument("--jobs", type=args.jobs, default=None,
                   help="parallel workers for --backend process: an integer >= 1, or auto (default: one per free "
                        "core, at most one per CPU)")
    r.add_argument("--address", help="Ray cluster address for --backend ray (default: start a local Ray)")
    r.add_argument("--results", default="results", help="results root for suites (default ./results); checked "
                   "writable before any training")
    r.add_argument("--out", help="write each run record as OUT/<config_hash>.json (a folder, checked writable "
                   "before any training)")
    r.add_argument("--json", action="store_true", help="print the run records as JSON instead of a table")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--group-runs", type=int, default=None, metavar="N",
                   help="suites: batch up to N cells that differ only in seed, partition or numeric "
                        "hyperparameters into one vectorized job (default: chosen from the device, the model "
                        "and its memory; 1 disables it)")
    r.add_argument("--only", action="append", metavar="KEY=VALUE",
                   help="suites: only the cells with this value, repeatable (e.g. --only dataset=fmnist "
                        "--only num_clients=30); the records go to the suite's folder as usual")
    r.add_argument("--dry-run", action="store_true",
                   help="suites: show the cells to run, their batched jobs, sample-gradients and the estimated "
                        "time on this device, and run nothing")
    r.set_defaults(func=cmd_run)


def _row(res) -> list:
    c, f = res.config, res.final
    acc = f.get("test_accuracy")
    best = f.get("best_test_accuracy_selected_on_test")
    return [c["algorithm"], c["dataset"], c["partition"], c["num_clients"], c["seed"],
            "-" if acc is None else f"{100 * acc:.2f}", "-" if best is None else f"{100 * best:.2f}",
            f"{f['bits_up_per_round'] / 8 / 1024:.1f}", f"{f['wall_time']:.1f}", res.status]


HEADERS = ["algorithm", "dataset", "partition", "N", "seed", "final acc %", "best acc % (test-selected)",
           "up KiB/round", "time s", "status"]


def cmd_run(a) -> int:
    from tabulate import tabulate

    from ..plan import choose_threads, run

    if a.suite:
        if a.dry_run:
            return main_dry_run(a)
        return main_run_suite(a)
    exps, any_flag = args.experiments_from_args(a)
    if not any_flag:
        print("fedrepro run: no experiment flags, so the offline default: the smoke suite (scikit-learn digits, "
              "CPU, about a minute). `fedrepro run --help` shows how to run your own.", file=sys.stderr)
        a.suite = "smoke"
        return main_dry_run(a) if a.dry_run else main_run_suite(a)
    if a.dry_run:
        return _dry_run_experiments(exps, a.device)
    if a.out:
        try:
            store.check_writable_folder(a.out, "--out")  # before any training: no run is lost to a bad --out
        except store.StoreError as e:
            print(f"fedrepro: {e}", file=sys.stderr)
            return 2
    for exp in exps:  # every run is checked before the first one starts
        try:
            exp.validate()
        except ValueError as e:
            print(f"fedrepro: invalid experiment: {e}", file=sys.stderr)
            return 2
    warn_if_loaded()
    threads = choose_threads(1)
    rows, results = [], []
    try:
        for exp in exps:
            res = run(exp, progress=not a.no_progress, threads=threads)
            results.append(res)
            rows.append(_row(res))
            if a.out:
                path, why = res.save(a.out)
                if why:
                    print(f"fedrepro: could not write the record to {a.out} ({why}); it is saved in {path}",
                          file=sys.stderr)
                else:
                    print(f"wrote {path}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {len(results)} of {len(exps)} runs finished"
              + (f" (their records are in {a.out})" if a.out and results else ""), file=sys.stderr)
        if rows:
            print(tabulate(rows, headers=HEADERS, tablefmt="github"))
        return 130
    except (ValueError, FileNotFoundError) as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps([r.record() for r in results], indent=1, default=str))
    else:
        print(tabulate(rows, headers=HEADERS, tablefmt="github"))
    for r in results:
        if r.status != "ok":
            print(f"fedrepro: run {r.config_hash} (seed {r.config['seed']}) {r.status}: {r.message}", file=sys.stderr)
    return 0 if all(r.status == "ok" for r in results) else 1


def warn_if_loaded() -> None:
    """``fedrepro run`` warns, as ``bench`` does, when other processes already keep every core busy."""
    high_load = load_warning()
    if high_load:
        print(f"fedrepro: warning: {high_load}", file=sys.stderr)


def _dry_run_experiments(exps: list, device: str | None) -> int:
    """``fedrepro run <flags> --dry-run``: the runs' work and estimated time, nothing run."""
    from tabulate import tabulate

    try:
        jobs = plan.plan(exps, device=device, group_runs=1, threads=None)
        dev = plan.device_type(device)
    except ValueError as err:
        print(f"fedrepro: {err}", file=sys.stderr)
        return 2
    bench = cost.latest_bench(dev)
    model = cost.cost_model_from_bench(bench) if bench else None
    rows = []
    for e, job in zip(exps, jobs):
        try:
            e.validate()
            est = plan.estimate(job, model)
        except ValueError as err:
            print(f"fedrepro: invalid experiment: {err}", file=sys.stderr)
            return 2
        rows.append([e.algorithm, e.dataset, e.model, e.seed, est["executor"], cost.human_count(est["sample_gradients"]),
                     cost.human_seconds(est["seconds"])])
    print(tabulate(rows, headers=["algorithm", "dataset", "model", "seed", "executor", "sample-gradients",
                                  f"est. time ({dev})"], tablefmt="github"))
    print("(dry run: nothing is run)" + ("" if bench else f"; no `fedrepro bench` results for {dev}: no time estimate"))
    return 0


def main_run_suite(a) -> int:
    """``fedrepro run --suite NAME``."""
    try:
        suite = runner.select_cells(runner.load_suite(a.suite), getattr(a, "only", None))
    except runner.SuiteError as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    out_dir = runner.results_dir(a.results, suite.name)
    print(f"suite {suite.name}: {len(suite.cells)} cells -> {out_dir}", file=sys.stderr)
    warn_if_loaded()
    try:
        counts = runner.run_suite(suite, a.backend, a.jobs, a.results, a.address, progress=not a.no_progress,
                           device=a.device, executor=a.executor, group_runs=cli_group_runs(a))
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished cells are kept in {out_dir}; run the same command again to resume",
              file=sys.stderr)
        return 130
    except (runner.SuiteError, store.StoreError) as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    except BrokenProcessPool as e:
        print(f"fedrepro: a worker process died ({e}); was it killed, or out of memory? Finished cells are "
              f"kept in {out_dir}; run the same command again to resume", file=sys.stderr)
        return 1
    print(f"suite {suite.name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), file=sys.stderr)
    paths = report.write_report(suite, out_dir)
    print(paths["markdown"].read_text())
    return 0 if counts.get("failed", 0) == 0 else 1


def main_dry_run(a) -> int:
    """``fedrepro run --suite NAME --dry-run``: what would run, batched how, and how long."""
    from tabulate import tabulate


    try:
        suite = runner.select_cells(runner.load_suite(a.suite), getattr(a, "only", None))
        p = runner.plan_suite(suite, a.results, a.device, a.executor, cli_group_runs(a))
    except (runner.SuiteError, ValueError) as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    rows = [[alg, ds, model, r["cells"], r["groups"], ", ".join(sorted(r["executor"])),
             cost.human_count(r["sample_gradients"]), cost.human_seconds(r["seconds"]), "; ".join(sorted(r["reason"]))]
            for (alg, ds, model), r in sorted(p["rows"].items())]
    print(f"suite {p['suite']}: {p['cells']} cells, {p['done']} finished, {p['to_run']} to run as {p['jobs']} "
          f"job(s) -> {p['out_dir']} (dry run: nothing is run)")
    if rows:
        print(tabulate(rows, headers=["algorithm", "dataset", "model", "cells", "jobs", "executor",
                                      "sample-gradients", f"est. time ({p['device']})", "group size"],
                       tablefmt="github"))
    print(f"estimated time on {p['device']}: {cost.human_seconds(p['seconds'])} as planned, "
          f"{cost.human_seconds(p['seconds_alone'])} one cell after another"
          + (f" (cost model fitted to {p['bench']})" if p["bench"] else
             f" (no `fedrepro bench --device {p['device']} --out results/perf/...` results: no estimate)"))
    return 0


def cli_group_runs(a) -> int | None:
    """``--group-runs`` as given (unset: None, the planner's default, ``benchmark.plan``)."""
    n = getattr(a, "group_runs", None)
    if n is not None and n < 1:
        raise runner.SuiteError(f"--group-runs must be >= 1, got {n}")
    return n
