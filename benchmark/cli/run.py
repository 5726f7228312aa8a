"""``fedrepro run``: single runs from the flags, a suite (``--suite``), or the offline default (the smoke suite)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path

from benchmark.runs import cost, plan, store
from benchmark.sim import numerics
from benchmark.reports import leaderboard as report
from benchmark.campaign import runner, status, suite
from benchmark.runs.plan import load_warning
from . import args
from .errors import resume_hint

DEFAULT_SUITE = "smoke"
SINGLE = status.SINGLE_RUNS  # where single runs write their records without --out: RESULTS/single/<version>/


def add_parser(sub) -> None:
    r = sub.add_parser(
        "run", help="run experiments (no flags: the smoke suite, offline, about a minute on a CPU)",
        description=f"Plain `fedrepro run`, with no experiment flag, runs the {DEFAULT_SUITE} suite: 27 cells (9 "
                    "algorithms x 3 partitions of scikit-learn's digits, 1 seed, 30 rounds, logistic regression), "
                    "offline on the CPU in about a minute, and prints its leaderboard; its records, leaderboard, "
                    f"runs.csv and plots go to ./{args.RUNS_DIR}/{DEFAULT_SUITE}/<version>/. With experiment flags it "
                    f"runs one experiment per seed, a record each in ./{args.RUNS_DIR}/{SINGLE}/<version>/ (--out DIR: "
                    "in DIR); with --suite, a suite (--out DIR: its records and report in DIR itself).")
    args.experiment_flags(r)
    r.add_argument("--suite", help="a shipped suite by name (see `fedrepro list suites`), or the path of a suite file "
                                   "(e.g. my_suites/grid.toml; format: benchmark/suites/FORMAT.md)")
    r.add_argument("--backend", choices=["local", "process", "ray"], default="local", help="suite backend")
    r.add_argument("--jobs", type=args.jobs, default=None,
                   help="parallel workers for --backend process: an integer >= 1, or auto (default: one per free "
                        "core, at most one per CPU)")
    r.add_argument("--address", help="Ray cluster address for --backend ray (default: start a local Ray)")
    args.results_flags(r, f"a suite's records and reports go to DIR/<suite>/<version>/, single runs' records to "
                          f"DIR/{SINGLE}/<version>/")
    r.add_argument("--out", help="single runs: write each run record as OUT/<config_hash>.json; a suite (and plain "
                   "`fedrepro run`): its records, leaderboard, runs.csv and plots go to OUT itself instead of "
                   "RESULTS/<suite>/<version>/ (rerun with the same --out to resume). A folder, checked writable "
                   "before any training")
    r.add_argument("--json", action="store_true", help="print the run records as JSON instead of a table")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--group-runs", type=int, default=None, metavar="N",
                   help="suites: batch up to N cells that differ only in seed, partition or numeric "
                        "hyperparameters into one vectorized job (default: chosen from the device, the model "
                        "and its memory; 1 disables it)")
    r.add_argument("--only", action="append", metavar="KEY=VALUE",
                   help="suites: only the cells with this value, repeatable (e.g. --only dataset=fmnist "
                        "--only num_clients=30); the records go to the suite's folder as usual")
    r.add_argument("--deterministic", action="store_true",
                   help="CUDA: deterministic algorithms (torch.use_deterministic_algorithms, cuDNN deterministic), so "
                        "the same seed gives the same history on a GPU too (slower; on a CPU runs are deterministic "
                        "anyway). Every record states the setting (environment.numerics)")
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
    if a.suite:
        return main_dry_run(a) if a.dry_run else main_run_suite(a)
    exps, any_flag = args.experiments_from_args(a)
    if not any_flag:
        print(f"fedrepro run: no experiment flags, so the offline default: the {DEFAULT_SUITE} suite (scikit-learn "
              "digits, CPU, about a minute). `fedrepro run --help` shows how to run your own.", file=sys.stderr)
        a.suite = DEFAULT_SUITE
        return main_dry_run(a) if a.dry_run else main_run_suite(a)
    if a.dry_run:
        return _dry_run_experiments(exps, a.device)
    p = policy(a)
    with numerics.using(p) if p is not None else contextlib.nullcontext():
        return _checked_run(a, exps)


def policy(a) -> numerics.Numerics | None:
    """The numerics policy the flags ask for (None: the process's default)."""
    return numerics.Numerics(deterministic=True) if getattr(a, "deterministic", False) else None


def single_folder(a) -> Path:
    """Where ``fedrepro run``'s single runs write their records: ``--out DIR``, else ``<results>/single/<version>/``
    (./runs by default, as every command's results: a record for every run)."""
    if a.out:
        if a.results or a.publish:
            raise ValueError(f"--out {a.out} holds the records itself, while --results/--publish put them in "
                             f"RESULTS/{SINGLE}/<version>/: give one of them, not both")
        return Path(a.out)
    if a.publish:
        raise ValueError("--publish regenerates a committed report; single runs are not committed: give --out DIR "
                         "or --results DIR for their records")
    return runner.results_dir(args.results_root(a), SINGLE)


def _checked_run(a, exps: list) -> int:
    what = "--out" if a.out else "results folder"
    a.out = str(single_folder(a))
    store.check_writable_folder(a.out, what)  # before any training: no run is lost to a bad folder
    for exp in exps:  # every run is checked before the first one starts
        try:
            exp.validate()
        except ValueError as e:
            raise ValueError(f"invalid experiment: {e}") from None
    return _run_experiments(a, exps)


def _run_experiments(a, exps: list) -> int:
    from tabulate import tabulate

    from benchmark.runs.plan import choose_threads, run

    warn_if_loaded()
    threads = choose_threads(1)
    rows, results = [], []

    def interrupted() -> str:
        if rows:
            print(tabulate(rows, headers=HEADERS, tablefmt="github"))
        return f"{len(results)} of {len(exps)} runs finished" + (f" (their records are in {a.out})" if results else "")

    resume_hint(a, interrupted)
    for exp in exps:
        res = run(exp, progress=not a.no_progress, threads=threads)
        results.append(res)
        rows.append(_row(res))
        path, why = res.save(a.out)
        if why:
            print(f"fedrepro: could not write the record to {a.out} ({why}); it is saved in {path}", file=sys.stderr)
        else:
            print(f"wrote {path}", file=sys.stderr)
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

    jobs = plan.plan(exps, device=device, group_runs=1, threads=None)  # a ValueError: cli.errors reports it
    dev = plan.device_type(device)
    bench = cost.latest_bench(dev)
    model = cost.cost_model_from_bench(bench) if bench else None
    rows = []
    for e, job in zip(exps, jobs):
        try:
            e.validate()
        except ValueError as err:
            raise ValueError(f"invalid experiment: {err}") from None
        est = plan.estimate(job, model)
        rows.append([e.algorithm, e.dataset, e.model, e.seed, est["executor"], cost.human_count(est["sample_gradients"]),
                     cost.human_seconds(est["seconds"])])
    print(tabulate(rows, headers=["algorithm", "dataset", "model", "seed", "executor", "sample-gradients",
                                  f"est. time ({dev})"], tablefmt="github"))
    print("(dry run: nothing is run)" + ("" if bench else f"; no `fedrepro bench` results for {dev}: no time estimate"))
    return 0


def suite_folder(a, suite_name: str):
    """Where a suite's records and report go: ``--out DIR`` itself, else ``<results>/<suite>/<version>/``."""
    if not getattr(a, "out", None):
        return runner.results_dir(args.results_root(a), suite_name)
    if a.results or getattr(a, "publish", False):
        raise ValueError(f"--out {a.out} holds the suite's records and report itself, while --results/--publish "
                         f"put them in RESULTS/{suite_name}/<version>/: give one of them, not both")
    return Path(a.out)


#: experiment flags that say how a suite's cells run, not what they compute (left out of the cells' hashes)
SUITE_HOW_FLAGS = ("data_root", "download")  # applied to every cell here; --device, --executor: by the planner


def selected_suite(a) -> suite.Suite:
    """The suite of ``--suite``, restricted by ``--only``, with ``--data-root``/``--download`` applied to every
    cell. A flag that would change what a cell computes (``--rounds``, ``--lr``, ``--seed``...) is refused: a
    suite's cells are its file's, and such a flag was once ignored without a word."""
    from benchmark.runs.experiment import Experiment

    what = [f for f in (x.name for x in dataclasses.fields(Experiment))
            if getattr(a, f, None) is not None and f not in SUITE_HOW_FLAGS + ("device", "executor")]
    what += ["seeds"] if getattr(a, "seeds", None) is not None else []
    if what:
        flags = ", ".join("--" + f.replace("_", "-") for f in sorted(what))
        raise suite.SuiteError(f"{flags} cannot be combined with --suite: a suite's cells are fixed by its file. "
                               "Select cells with --only KEY=VALUE (e.g. --only seed=0), or copy the suite file "
                               "and change it (format: benchmark/suites/FORMAT.md)")
    s = suite.select_cells(suite.load_suite(a.suite), getattr(a, "only", None))
    how = {f: getattr(a, f) for f in SUITE_HOW_FLAGS if getattr(a, f, None) is not None}
    if not how:
        return s
    cells = [dataclasses.replace(c, experiment=dataclasses.replace(c.experiment, **how)) for c in s.cells]
    return dataclasses.replace(s, cells=cells)


def main_run_suite(a) -> int:
    """``fedrepro run --suite NAME``."""
    s = selected_suite(a)
    out_dir = suite_folder(a, s.name)
    suite.bind_folder(out_dir, s, write=False)  # another suite's folder is refused before anything is printed
    print(f"suite {s.name}: {len(s.cells)} cells -> {out_dir}", file=sys.stderr)
    warn_if_loaded()
    resume_hint(a, f"finished cells are kept in {out_dir}, and unfinished runs continue from their last "
                   "checkpoint (saved at most a minute before); run the same command again to resume")
    counts = runner.run_suite(s, a.backend, a.jobs, progress=not a.no_progress, device=a.device, address=a.address,
                              executor=a.executor, group_runs=cli_group_runs(a), out_dir=out_dir,
                              numerics_policy=policy(a))
    print(f"suite {s.name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), file=sys.stderr)
    paths = report.write_report(s, out_dir)
    print(paths["markdown"].read_text())
    print(f"wrote {paths['markdown']}, {paths['csv']}" + "".join(f", {p}" for p in paths["plots"]), file=sys.stderr)
    return 0 if counts.get("failed", 0) == 0 else 1


def main_dry_run(a) -> int:
    """``fedrepro run --suite NAME --dry-run``: what would run, batched how, and how long."""
    from tabulate import tabulate

    s = selected_suite(a)
    suite.bind_folder(suite_folder(a, s.name), s, write=False)
    p = runner.plan_suite(s, device=a.device, executor=a.executor, group_runs=cli_group_runs(a), backend=a.backend,
                          out_dir=suite_folder(a, s.name))
    rows = [[alg, ds, model, r["cells"], r["groups"], ", ".join(sorted(r["executor"])),
             cost.human_count(r["sample_gradients"]), cost.human_seconds(r["seconds"]), "; ".join(sorted(r["reason"]))]
            for (alg, ds, model), r in sorted(p["rows"].items())]
    print(f"suite {p['suite']}: {p['cells']} cells, {p['done']} finished, {p['to_run']} to run as {p['jobs']} "
          f"job(s) -> {p['out_dir']} (dry run: nothing is run)")
    if rows:
        print(tabulate(rows, headers=["algorithm", "dataset", "model", "cells", "jobs", "executor",
                                      "sample-gradients", f"est. time ({p['device']})", "group size"],
                       tablefmt="github"))
    for what in ("device", "executor"):
        for why, n in sorted(p["reasons"][what].items()):
            print(f"{what} ({n} job{'s' if n > 1 else ''}): {why}")
    print(f"estimated time on {p['device']}: {cost.human_seconds(p['seconds'])} as planned, "
          f"{cost.human_seconds(p['seconds_alone'])} one cell after another"
          + (f" (cost model fitted to {p['bench']})" if p["bench"] else
             f" (no `fedrepro bench --device {p['device']} --out results/perf/...` results: no estimate)"))
    for line in fit_lines(s, p["device"]):
        print(line)
    return 0


def fit_lines(s: suite.Suite, device: str) -> list[str]:
    """What a dry run must say before its estimate is read as a plan: a suite meant for a GPU planned on a CPU,
    and the datasets of its cells that have no data here (a real run would stop at the first such cell)."""
    out = []
    if s.requires != "cpu" and device == "cpu":
        out.append(f"note: {s.name} is meant for a {s.requires} (requires = \"{s.requires}\" in {s.path.name}): the "
                   "estimate above is this CPU's; run it on a CUDA machine with --device cuda "
                   "(`fedrepro run --suite ... --device cuda --dry-run` there gives its time)")
    missing: dict[str, list] = {}
    for c in s.cells:
        e = c.experiment
        key = (e.dataset, e.data_root)
        if isinstance(e.dataset, str) and key not in missing:
            missing[key] = [_data_missing(e.dataset, e.data_root), 0]
        if key in missing:
            missing[key][1] += 1
    for (name, _root), (why, n) in missing.items():
        if why:
            out.append(f"note: no data here for the {n} {name} cell(s) of {len(s.cells)}: {why}")
    return out


def _data_missing(name: str, data_root: str | None) -> str | None:
    """Why dataset ``name`` cannot be loaded here without a download (its loader's own message), or None."""
    from .. import datasets

    try:
        datasets.load(name, data_root=data_root, download=False)
    except (FileNotFoundError, datasets.images.DataFileError) as e:
        what = " ".join(str(e).split()).split("; looked in")[0]
        return (f"{what} (under {data_root or datasets.registry.default_data_root()}): give --data-root DIR where "
                "they are, or add --download where there is a network")
    return None


def cli_group_runs(a) -> int | None:
    """``--group-runs`` as given (unset: None, the planner's default, ``benchmark.runs.plan``)."""
    n = getattr(a, "group_runs", None)
    if n is not None and n < 1:
        raise suite.SuiteError(f"--group-runs must be >= 1, got {n}")
    return n
