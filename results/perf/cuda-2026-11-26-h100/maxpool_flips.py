"""Why `fedrepro validate --device cuda` (2026-11-26, H100) found batched runs of the validation CNN off the CPU
reference: reproduced on a CPU, without CUDA and without batching.

FedAvg on validate's images/fedbat_cnn problem (3 rounds), the sequential executor on the CPU at 1 thread (the
reference) against the same executor at 3, 4, 8 and 16 threads: only float rounding differs (another
reduction order in the kernels). Printed: the relative test-loss difference per round. With the model's
2x2 max-pooling, some seeds jump by 1e-5 to 1e-2, the same discrete value at several thread counts; with the
max-pooling replaced by average pooling (``avg``), every difference stays at float rounding (<= 1e-7). A
max-pool window whose two largest values lie within rounding of each other can take the other argmax,
which routes that sample's gradient elsewhere: a discrete event, as FedBAT's sign flips are.

Run from the repository root: ``PYTHONPATH=. python results/perf/cuda-2026-11-26-h100/maxpool_flips.py``
(about 5 minutes on a 2-core CPU).
"""
import dataclasses
import types

import torch

import benchmark.models.fedbat as fedbat_models
from benchmark import numerics
from benchmark.experiment import Experiment
from benchmark.plan import run
from benchmark.validate import problems

POOL_NN = fedbat_models.nn


def rel(a, b):
    return " ".join(f"{abs(x['test_loss'] - y['test_loss']) / abs(x['test_loss']):.1e}"
                    for x, y in zip(a.history, b.history))


def with_pool(pool):
    if pool == "max":
        fedbat_models.nn = POOL_NN
    else:
        ns = types.SimpleNamespace(**{k: getattr(torch.nn, k) for k in dir(torch.nn) if not k.startswith("__")})
        ns.MaxPool2d = torch.nn.AvgPool2d
        fedbat_models.nn = ns


kw = problems(3)["images/fedbat_cnn"]
print("| pooling | seed | clients/round | 3 threads | 4 threads | 8 threads | 16 threads |")
print("|---|---|---|---|---|---|---|")
with numerics.using(numerics.Numerics()):
    for pool in ("max", "avg"):
        with_pool(pool)
        for seed in (0, 1):
            for cpr in (3, 1):
                exp = Experiment(algorithm="fedavg", **{**kw, "clients_per_round": cpr, "seed": seed})
                torch.set_num_threads(1)
                ref = run(dataclasses.replace(exp, device="cpu", executor="sequential"))
                cols = []
                for t in (3, 4, 8, 16):
                    torch.set_num_threads(t)
                    cols.append(rel(ref, run(dataclasses.replace(exp, device="cpu", executor="sequential"))))
                print(f"| {pool} | {seed} | {cpr} | " + " | ".join(cols) + " |", flush=True)
with_pool("max")
