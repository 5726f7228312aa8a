"""``fedrepro validate``: does this machine reproduce the CPU reference numbers (``benchmark.perf.validate``)?"""
from __future__ import annotations

import json
import os
import sys

from benchmark.perf.validate import ALGORITHMS, ATOL, RTOL, table, validate


def cmd_validate(a) -> int:
    log = None if a.json else (lambda m: print(m, file=sys.stderr, flush=True))
    algs = tuple(x.strip() for x in a.algorithms.split(",") if x.strip())
    import algorithms as registry

    for name in algs:
        registry.get_class(name)
    if a.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    if a.threads is not None and a.threads < 1:
        raise ValueError("--threads must be >= 1")
    result = validate(a.device, algs, a.rounds, a.tf32, log, threads=a.threads)
    if a.out:  # nothing is written unless asked: a check of the machine leaves no file behind
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
        print(f"wrote {a.out}", file=sys.stderr)
    print(json.dumps(result, indent=1, default=str) if a.json else table(result))
    return 0 if result["ok"] else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "validate", help="check that this machine (CPU or GPU) reproduces the CPU reference numbers",
        description="Runs " + ", ".join(ALGORITHMS) + " on two small problems through the sequential and "
                    "vectorized executors and a batched group of runs on the chosen device, compares each "
                    "history with the CPU sequential reference (losses within "
                    f"{RTOL:g} relative + {ATOL:g} absolute, bits equal), and runs the same seed twice. "
                    "Prints a table (or JSON with --json) and writes nothing unless --out is given. About a minute on a "
                    "2-core CPU.")
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default auto: CUDA when present)")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per run (default 3)")
    p.add_argument("--tf32", action="store_true", help="leave TF32 on (CUDA; off by default while validating)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: small problems)")
    p.add_argument("--out", help="also write the result as JSON to this file (default: no file)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p.set_defaults(func=cmd_validate)

