"""Seconds per round of FedBAT Table 1 cells (FMNIST, N = 30) on this device, at the paper's setting but
for the number of rounds: a batched group of the 5 seeds and one run alone, 2 rounds each (the second
round timed: the first holds the set-up). Prints one JSON line per measurement."""
import dataclasses
import json
import os
import sys
import time

from benchmark import suite
from benchmark.plan import run, run_group

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
for alg, part in [("fedbat", "iid"), ("fedavg", "iid"), ("fedbat", "dirichlet:0.3")]:
    s = suite.select_cells(suite.load_suite("fedbat_table1"),
                           ["dataset=fmnist", "num_clients=30", f"algorithm={alg}", f"partition={part}"])
    exps = [dataclasses.replace(c.experiment, rounds=rounds, data_root=".data", device=dev,
                                **({"local_epochs": None, "local_steps": 1} if os.environ.get("PROBE_TEST") else {})) for c in s.cells]
    for label, go in [("group of 5", lambda: run_group(exps)), ("alone", lambda: [run(exps[0])])]:
        t0 = time.perf_counter()
        res = go()
        wall = time.perf_counter() - t0
        h = res[0].history
        walls = [e.get("wall_time") for e in h]
        print(json.dumps({"algorithm": alg, "partition": part, "how": label, "runs": len(res), "rounds": rounds,
                          "wall_s": round(wall, 2), "history_wall_time": walls,
                          "executor": res[0].config.get("executor_used"),
                          "acc": [e.get("test_accuracy") for e in h]}), flush=True)
