"""``fedrepro list``: algorithms (with their hyperparameters), datasets, partitions, suites (with estimated cost)
and models."""
from __future__ import annotations

import dataclasses
import sys

from . import plugins


def add_parser(sub) -> None:
    lst = sub.add_parser("list", help="list algorithms, datasets, partitions and models")
    lst.add_argument("what", nargs="?", choices=["algorithms", "hyperparameters", "datasets", "partitions",
                                                 "models", "suites"],
                     help="hyperparameters: every algorithm's hyperparameters with their constraints")
    lst.set_defaults(func=cmd_list)


def cmd_list(a) -> int:
    from tabulate import tabulate

    import algorithms

    from benchmark import datasets, models
    from benchmark.datasets import partition

    what = a.what
    if what in (None, "algorithms"):
        rows = []
        for name in [n for n in algorithms.names() if not plugins.is_plugin(n)]:
            cls = algorithms.get_class(name)
            hp = cls.Hyper()
            args = ", ".join(f"{f.name}={getattr(hp, f.name)}" for f in dataclasses.fields(hp))
            doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
            rows.append([name, args or "-", doc])
        print("Algorithms\n" + tabulate(rows, headers=["name", "hyperparameters (paper defaults)", "about"],
                                        tablefmt="github") + "\n" + plugins.table())
    if what == "hyperparameters":
        from algorithms.core import hyper

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
        from benchmark.runs import cost, plan
        from benchmark.campaign import suite

        dev = plan.device_type(getattr(a, "device", None))
        bench = cost.latest_bench(dev)
        tp = cost.cost_model_from_bench(bench) if bench else None
        rows = []
        for n in suite.suite_names():
            try:
                st = suite.load_suite(n)
                est = plan.estimate_cells([c.experiment for c in st.cells], dev, tp)
                rows.append([n, len(st.cells), cost.human_count(est["sample_gradients"]),
                             cost.human_seconds(est["seconds"]), st.requires,
                             " ".join(st.description.split())[:90]])
            except ValueError as e:  # a SuiteError or a cost-model error: shown, not raised
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
