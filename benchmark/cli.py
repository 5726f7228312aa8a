"""The ``fedrepro`` command."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings

def _parse_kv(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        for part in item.split(","):
            if not part:
                continue
            if "=" not in part:
                print(f"fedrepro: {flag} expects KEY=VALUE, got {part!r}", file=sys.stderr)
                raise SystemExit(2)
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = json.loads(v)
            except json.JSONDecodeError:
                out[k.strip()] = v
    return out


def _int_or_none(s: str):
    if s.lower() in ("none", "all", "full"):
        return None
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {s!r}") from None


def _jobs(s: str):
    """``--jobs``: an integer >= 1 or "auto"."""
    if s.lower() == "auto":
        return "auto"
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or 'auto', got {s!r}")
    return n


def _factor_or_none(s: str):
    if s.lower() in ("none", "off"):
        return "none"  # not None: None means "flag not given"
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {s!r}") from None


def _experiment_flags(p: argparse.ArgumentParser) -> None:
    from .experiment import Experiment

    d = Experiment()
    g = p.add_argument_group("experiment (every Experiment field; unset flags keep the defaults)")
    g.add_argument("--algorithm", help=f"registered algorithm (default {d.algorithm}); see `fedrepro list`")
    g.add_argument("--dataset", help=f"dataset name (default {d.dataset})")
    g.add_argument("--partition", help="auto | natural | iid | dirichlet:<beta> | labelcnt:<k> | shards:<s> | "
                                       "quantity:<beta> | gradma_dirichlet:<omega> (default auto: the dataset's "
                                       "natural clients if it has them, else iid)")
    g.add_argument("--num-clients", type=_int_or_none, help=f"number of clients N (default {d.num_clients})")
    g.add_argument("--clients-per-round", type=_int_or_none,
                   help="clients sampled per round (default: all)")
    g.add_argument("--rounds", type=int, help=f"communication rounds (default {d.rounds})")
    g.add_argument("--local-epochs", type=int, help=f"local epochs (default {d.local_epochs})")
    g.add_argument("--local-steps", type=int, help="local steps (replaces --local-epochs)")
    g.add_argument("--batch-size", type=_int_or_none, help=f"local batch size, or 'full' (default {d.batch_size})")
    g.add_argument("--lr", type=float, help=f"local learning rate (default {d.lr})")
    g.add_argument("--momentum", type=float, help="local SGD momentum (default 0)")
    g.add_argument("--weight-decay", type=float, help="local weight decay (default 0)")
    g.add_argument("--optimizer", choices=["sgd", "adam"], help="local optimizer (default sgd)")
    g.add_argument("--lr-decay", type=float, help="multiplicative learning-rate decay per round (default 1)")
    g.add_argument("--seed", type=int, help="seed (default 0); several runs: --seeds")
    g.add_argument("--seeds", type=int, nargs="+", help="run once per seed")
    g.add_argument("--model", help=f"model name (default {d.model}); see `fedrepro list`")
    g.add_argument("--algorithm-args", "--arg", dest="algorithm_args", action="append", metavar="K=V",
                   help="algorithm hyperparameter, repeatable (e.g. --arg mu=0.01)")
    g.add_argument("--dataset-args", action="append", metavar="K=V", help="dataset option, repeatable")
    g.add_argument("--model-args", action="append", metavar="K=V", help="model option, repeatable")
    g.add_argument("--eval-every", type=int, help="evaluate every k rounds (default 1)")
    g.add_argument("--eval-train-samples", type=_int_or_none,
                   help="training samples used for the training objective (default 10000; 'all')")
    g.add_argument("--divergence-factor", type=_factor_or_none,
                   help=f"record a run as diverged when its training loss exceeds this factor times the initial "
                        f"model's (default {d.divergence_factor:g}; 'none': only NaN/inf)")
    g.add_argument("--executor", choices=["auto", "sequential", "vectorized"],
                   help="how local updates run (default auto: the faster one for this model, batch and device, "
                        "by the rule of benchmark/cost.py; the run record says which and why)")
    g.add_argument("--device", help="auto | cpu | cuda (default auto)")
    g.add_argument("--data-root", help="folder with real datasets (default $FEDREPRO_DATA or ~/.cache/fedrepro/data)")
    g.add_argument("--download", action="store_true", default=None, help="download real datasets if missing")


def _experiments_from_args(a) -> tuple[list, bool]:
    """Experiments the flags ask for, and whether any experiment flag was given at all."""
    from .experiment import DICT_FIELDS, Experiment

    fields = {f.name for f in dataclasses.fields(Experiment)}
    given = {}
    for name in fields:
        v = getattr(a, name, None)
        if v is None:
            continue
        if name in DICT_FIELDS:
            v = _parse_kv(v, "--" + name.replace("_", "-"))
        given[name] = v
    if a.local_steps is not None:
        given["local_epochs"] = None
    if given.get("divergence_factor") == "none":
        given["divergence_factor"] = None
    seeds = a.seeds or [given.pop("seed", 0)]
    given.pop("seed", None)
    # flags that say how to run (not what) do not turn the offline default into a single run
    any_flag = bool(set(given) - {"device", "executor", "data_root", "download"}) or a.seeds is not None \
        or a.seed is not None
    return [Experiment(seed=s, **given) for s in seeds], any_flag


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

    from . import store
    from .experiment import choose_threads, run

    if a.suite:
        from . import runner

        if a.dry_run:
            return runner.main_dry_run(a)
        return runner.main_run_suite(a)
    exps, any_flag = _experiments_from_args(a)
    if not any_flag:
        from . import runner

        print("fedrepro run: no experiment flags, so the offline default: the smoke suite (scikit-learn digits, "
              "CPU, about a minute). `fedrepro run --help` shows how to run your own.", file=sys.stderr)
        a.suite = "smoke"
        return runner.main_dry_run(a) if a.dry_run else runner.main_run_suite(a)
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
    from .experiment import load_warning

    high_load = load_warning()
    if high_load:
        print(f"fedrepro: warning: {high_load}", file=sys.stderr)


def _dry_run_experiments(exps: list, device: str | None) -> int:
    """``fedrepro run <flags> --dry-run``: the runs' work and estimated time, nothing run."""
    from tabulate import tabulate

    import algorithms

    from . import cost

    dev = cost.device_type_of(device)
    bench = cost.latest_bench(dev)
    model = cost.cost_model_from_bench(bench) if bench else None
    rows = []
    for e in exps:
        try:
            e.validate()
            est = cost.estimate_cell(e, dev, model, algorithms.get_class(e.algorithm).vectorizable)
        except ValueError as err:
            print(f"fedrepro: invalid experiment: {err}", file=sys.stderr)
            return 2
        rows.append([e.algorithm, e.dataset, e.model, e.seed, est["executor"], cost.human_count(est["sample_gradients"]),
                     cost.human_seconds(est["seconds"])])
    print(tabulate(rows, headers=["algorithm", "dataset", "model", "seed", "executor", "sample-gradients",
                                  f"est. time ({dev})"], tablefmt="github"))
    print("(dry run: nothing is run)" + ("" if bench else f"; no `fedrepro bench` results for {dev}: no time estimate"))
    return 0


def cmd_list(a) -> int:
    from tabulate import tabulate

    import algorithms

    from . import datasets, models, partition

    what = a.what
    if what in (None, "algorithms"):
        rows = []
        for name in algorithms.names():
            cls = algorithms.get_class(name)
            hp = cls.Hyper()
            args = ", ".join(f"{f.name}={getattr(hp, f.name)}" for f in dataclasses.fields(hp))
            doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
            rows.append([name, args or "-", doc])
        print("Algorithms\n" + tabulate(rows, headers=["name", "hyperparameters (paper defaults)", "about"],
                                        tablefmt="github") + "\n")
    if what == "hyperparameters":
        from algorithms import hyper

        rows = [[name, field, default, constraint] for name in algorithms.names()
                for field, default, constraint in hyper.describe(algorithms.get_class(name).Hyper)]
        print("Hyperparameters (--arg NAME=VALUE)\n" + tabulate(
            rows, headers=["algorithm", "hyperparameter", "default", "must be"], tablefmt="github",
            disable_numparse=True, missingval="None") + "\n")
    if what in (None, "datasets"):
        print("Datasets\n" + tabulate([[n, datasets.info(n)] for n in datasets.names()],
                                      headers=["name", "about"], tablefmt="github") + "\n")
    if what in (None, "partitions"):
        print("Partitions\n" + tabulate(list(partition.describe().items()), headers=["spec", "about"], tablefmt="github") + "\n")
    if what in (None, "suites"):
        from . import runner

        from . import cost

        dev = cost.device_type_of(getattr(a, "device", None))
        bench = cost.latest_bench(dev)
        tp = cost.cost_model_from_bench(bench) if bench else None
        rows = []
        for n in runner.suite_names():
            try:
                st = runner.load_suite(n)
                est = cost.estimate_suite(st, dev, tp)
                rows.append([n, len(st.cells), cost.human_count(est["sample_gradients"]),
                             cost.human_seconds(est["seconds"]), st.requires,
                             " ".join(st.description.split())[:90]])
            except (runner.SuiteError, ValueError) as e:
                rows.append([n, "-", "-", "-", "-", f"INVALID: {e}"])
        src = (f"from {bench['_path']} ({bench.get('device_name', dev)}, {bench.get('date', '?')[:10]})"
               if bench else f"none: no `fedrepro bench` results for {dev} in results/perf/")
        print("Suites\n" + tabulate(rows, headers=["name", "cells", "sample-gradients", f"est. time ({dev})",
                                                   "needs", "about"], tablefmt="github")
              + f"\nsample-gradients: the training work of all cells; est. time: one cell after another on this "
                f"device with executor auto, evaluation included; throughput {src}.\n")
    if what in (None, "models"):
        print("Models\n" + tabulate([[n, models.describe(n)] for n in models.names()],
                                    headers=["name", "about"], tablefmt="github") + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedrepro", description="A reproducibility benchmark for federated-learning "
                                "algorithms, with theory checks.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="run experiments (no flags: the offline default)",
                       description="Run one experiment per seed from the flags, a suite (--suite), or, with no "
                                   "flags, the offline default (FedAvg on digits, under a minute on a CPU).")
    _experiment_flags(r)
    r.add_argument("--suite", help="run a suite of benchmark/suites/NAME.toml (see `fedrepro list suites`)")
    r.add_argument("--backend", choices=["local", "process", "ray"], default="local", help="suite backend")
    r.add_argument("--jobs", type=_jobs, default=None,
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

    lst = sub.add_parser("list", help="list algorithms, datasets, partitions and models")
    lst.add_argument("what", nargs="?", choices=["algorithms", "hyperparameters", "datasets", "partitions",
                                                 "models", "suites"],
                     help="hyperparameters: every algorithm's hyperparameters with their constraints")
    lst.set_defaults(func=cmd_list)

    import importlib
    import importlib.util

    for mod_name in ("theory_cli", "bench", "report", "validate", "tune_cli", "claims_cli"):  # subcommands in their own modules
        if importlib.util.find_spec(f"benchmark.{mod_name}") is not None:
            importlib.import_module(f"benchmark.{mod_name}").add_parser(sub)
    return p


def _format_warning(message, category, filename, lineno, line=None) -> str:
    from .store import CorruptRecordWarning

    if issubclass(category, CorruptRecordWarning):
        return f"fedrepro: warning: {message}\n"
    return _default_format_warning(message, category, filename, lineno, line)


_default_format_warning = warnings.formatwarning


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _format_warning
    p = build_parser()
    a = p.parse_args(argv)
    if not getattr(a, "command", None):
        p.print_help()
        return 0
    try:
        return a.func(a)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
