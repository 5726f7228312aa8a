"""What a leaderboard's rows and columns are: rows are methods (an algorithm and its arguments), columns the
config fields that vary across a suite's runs; the seeds of a cell are averaged. Shared by the leaderboard
(``benchmark.reports.leaderboard``) and its plots (``benchmark.reports.plots``)."""
from __future__ import annotations

import json

# Config fields that make a leaderboard column, in label order; any other varying field (lr, optimizer,
# rounds, ...) joins them only when it separates runs these do not (see ``column_keys``).
COLUMN_KEYS = ("dataset", "model", "partition", "num_clients", "clients_per_round", "dataset_args", "model_args")
NOT_COLUMN_KEYS = {"algorithm", "algorithm_args", "algorithm_source", "seed", "executor", "executor_used", "device", "data_root",
                   "download"}


def column_keys(records: list[dict]) -> tuple[str, ...]:
    """The config fields that tell the leaderboard's columns apart: rows are methods and the seeds of a
    cell are averaged, so every other field that varies must be a column, or different experiments
    (two models, two learning rates) would be averaged together. A field enters only if it splits
    runs that the fields before it do not (a learning rate set per model adds no column)."""
    extra = sorted({k for r in records for k in r["config"]} - set(COLUMN_KEYS) - NOT_COLUMN_KEYS)
    chosen: list[str] = []
    seen = 1
    for k in (*COLUMN_KEYS, *extra):
        n = len({json.dumps([r["config"].get(c) for c in (*chosen, k)], sort_keys=True) for r in records})
        if n > seen:
            chosen.append(k)
            seen = n
    return tuple(chosen) or ("dataset",)


def method_label(cfg: dict) -> str:
    """A leaderboard row: the algorithm, with its arguments when it has any (``fedprox(mu=0.1)``)."""
    args = cfg.get("algorithm_args") or {}
    if not args:
        return cfg["algorithm"]
    return cfg["algorithm"] + "(" + ", ".join(f"{k}={v}" for k, v in sorted(args.items())) + ")"


def column_of(cfg: dict, names: tuple) -> tuple:
    """A record's column key (hashable: dict fields as sorted JSON)."""
    return tuple(json.dumps(v, sort_keys=True) if isinstance(v := cfg.get(k), dict) else v for k in names)


def column_sort_key(col: tuple) -> str:
    return json.dumps(col)


def column_label(key: tuple, names: tuple) -> str:
    """A column's header: ``digits / dirichlet:0.3 / N=10``."""
    short = {"num_clients": "N", "clients_per_round": "S"}

    def one(n, v):
        if n in short:
            return f"{short[n]}={v}"
        if n in ("dataset", "model", "partition"):
            return str(v)
        if n in ("dataset_args", "model_args", "algorithm_args") and isinstance(v, str):
            v = json.loads(v)
            return ", ".join(f"{a}={b}" for a, b in sorted(v.items())) or f"{n} default"
        return f"{n}={v}"
    return " / ".join(one(n, v) for n, v in zip(names, key))
