"""Does validating the CNN problem in float64 remove the max-pool flips that made `fedrepro validate --device cuda`
fail on 2026-11-26 (H100)? The experiment of ``../cuda-2026-11-26-h100/maxpool_flips.py`` (FedAvg on validate's
images/fedbat_cnn problem, 3 rounds; the sequential executor at 1 thread, the reference, against itself at 8 and
16 threads: only the kernels' reduction order differs), once in float32 as then and once in float64 as
``benchmark.validate`` now runs that problem (float64 data and model; ``validate._default_dtype``). Printed: the
relative test-loss difference in rounds 1, 2, 3.

Run from the repository root: ``PYTHONPATH=. python results/perf/cpu-2026-11-26-float64/maxpool_flips_float64.py``
(about 3 minutes on a 2-core CPU).
"""
import dataclasses

import torch

from benchmark import numerics
from benchmark.experiment import Experiment
from benchmark.plan import run
from benchmark.validate import _default_dtype, problems


def rel(a, b):
    return " ".join(f"{abs(x['test_loss'] - y['test_loss']) / abs(x['test_loss']):.1e}"
                    for x, y in zip(a.history, b.history))


print("| dtype | seed | clients/round | 8 threads | 16 threads |")
print("|---|---|---|---|---|")
with numerics.using(numerics.Numerics()):
    for dtype in ("float32", "float64"):
        kw = problems(3, cnn_dtype=dtype)["images/fedbat_cnn"]
        with _default_dtype(dtype):
            for seed in (0, 1):
                for cpr in (3, 1):
                    exp = Experiment(algorithm="fedavg", **{**kw, "clients_per_round": cpr, "seed": seed})
                    torch.set_num_threads(1)
                    ref = run(dataclasses.replace(exp, device="cpu", executor="sequential"))
                    cols = []
                    for t in (8, 16):
                        torch.set_num_threads(t)
                        cols.append(rel(ref, run(dataclasses.replace(exp, device="cpu", executor="sequential"))))
                    print(f"| {dtype} | {seed} | {cpr} | " + " | ".join(cols) + " |", flush=True)
