"""The memory a batched group takes, measured (issue 24, item 3): the peak resident memory of one round of R
runs x K clients, against the budget of ``benchmark.runs.batched.run_bytes`` (what ``default_group_runs`` divides
the free device memory by).

A round is measured in a fresh child process (nothing of an earlier round cached), on the CPU, with glibc
told to map every allocation of 64 KiB or more on its own (``MALLOC_MMAP_THRESHOLD_``), so that a freed
tensor leaves the resident set at once and the resident set follows the live tensors. The child builds the
group (``workloads.FederatedRound`` of ``plan.group_job``, synthetic data, one local step), runs one round
to warm up (library code and caches that a first round touches stay resident and are not the group's),
reads its resident memory (``VmRSS``), resets the kernel's high-water mark (``/proc/self/clear_refs``), runs the round's local
training and aggregation and reads the high-water mark (``VmHWM``): peak = VmHWM - VmRSS before. Linux only.
The CPU peak stands in for the GPU's: the same tensors are allocated (the CUDA caching allocator rounds them
up and keeps freed blocks, so a GPU's ``max_memory_allocated`` may differ somewhat).
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import torch

from benchmark import models
from benchmark.perf import step_counts as perf
from benchmark.perf.workloads import FederatedRound
from benchmark.runs import batched, cost, plan
from benchmark.runs.experiment import Experiment

_MMAP_THRESHOLD = str(64 * 1024)


def model_budget(model: str, shape: tuple[int, ...], classes: int, clients: int, batch: int) -> float:
    """``batched.run_bytes`` of one run (what the memory model budgets per run of a group)."""
    with torch.device("meta"):
        module = models.build(model, tuple(shape), classes)
    return batched.run_bytes(cost.activation_bytes_per_sample(module, tuple(shape)),
                             sum(p.numel() for p in module.parameters()), clients, batch)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}: the peak is measured on Linux only")


def _child(spec: dict) -> dict:
    """In the child process: one round of ``spec['runs']`` runs (module docstring)."""
    torch.set_num_threads(1)
    b, padded = spec["batch"], spec["padded"]  # padded: a full and a half batch (the weighted BatchNorm)
    s = perf.Setting("memory", spec["model"], tuple(spec["shape"]), spec["classes"], spec["clients"], b,
                     (b + b // 2 if padded else b,) * spec["clients"], 1 if padded else None, None if padded else 1)
    data = perf._data(s)
    exps = [Experiment(algorithm=spec["algorithm"], dataset=data, model=s.model, num_clients=None,
                       clients_per_round=s.clients, rounds=1, batch_size=s.batch_size, lr=0.01 * (1 + i), seed=0,
                       local_epochs=s.epochs, local_steps=s.steps, eval_train_samples=None, divergence_factor=None, executor="vectorized",
                       device="cpu") for i in range(spec["runs"])]
    round_ = FederatedRound(plan.group_job(exps) if len(exps) > 1 else plan.plan_one(exps[0]))  # training + aggregation
    round_()  # warm: the library code and caches a first round touches stay resident, outside the peak
    gc.collect()
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    round_()
    hwm = _status("VmHWM")
    return {"rss_before": before, "hwm": hwm, "peak": hwm - before}


def measure_peak(model: str = "fedbat_cnn", shape: tuple[int, ...] = (1, 28, 28), classes: int = 10,
                 clients: int = 10, batch: int = 64, runs: int = 1, algorithm: str = "fedavg",
                 padded: bool = False, timeout: float = 600) -> dict:
    """The peak memory (bytes above the resident set before it) of one round of a batched group of ``runs``
    runs x ``clients`` clients x ``batch`` samples, measured in a child process (module docstring), with the
    memory model's budget for it (``budget``: ``runs x batched.run_bytes``). One local step of full batches;
    ``padded``: 1.5 batches per client, one local epoch (a full step, then a half-padded one: the weighted
    BatchNorm, which keeps more for backward)."""
    spec = dict(model=model, shape=list(shape), classes=classes, clients=clients, batch=batch, runs=runs,
                algorithm=algorithm, padded=padded)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": _MMAP_THRESHOLD,
           "PYTHONPATH": os.pathsep.join(p for p in (_root(), os.environ.get("PYTHONPATH")) if p)}
    code = "import json, sys; from benchmark.perf.memory import _child; print(json.dumps(_child(json.loads(sys.argv[1]))))"
    done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the peak failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {**spec, **out, "budget": runs * model_budget(model, shape, classes, clients, batch)}


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def calibration(cases: list[dict], log=None) -> dict:
    """:func:`measure_peak` of each case (keyword arguments), in turn, with the memory model's constants."""
    rows = []
    for case in cases:
        if log:
            log(f"measuring {case}")
        rows.append(measure_peak(**case))
    return {"activation_copies": batched.ACTIVATION_COPIES, "param_vectors": batched.PARAM_VECTORS,
            "load": list(os.getloadavg()), "rows": rows}


def markdown(result: dict) -> str:
    lines = [f"Memory model: per (run, client) pair, batch x activations x {result['activation_copies']} + "
             f"{result['param_vectors']} parameter vectors (`batched.run_bytes`). Load average "
             f"{', '.join(f'{v:.1f}' for v in result['load'])} after measuring.", "",
             "| model | algorithm | clients x batch | step | runs | measured peak | budget | budget / peak |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['model']} | {r['algorithm']} | {r['clients']} x {r['batch']} "
                     f"| {'padded' if r['padded'] else 'clean'} | {r['runs']} | {r['peak'] / 1e6:.0f} MB "
                     f"| {r['budget'] / 1e6:.0f} MB | {r['budget'] / r['peak']:.2f} |")
    return "\n".join(lines) + "\n"


#: what results/perf/bytes-2026-11-26-cpu.md measured (``python -m benchmark.perf.memory``)
TABLE1_CASES = [dict(algorithm=a, padded=p) for a in ("fedavg", "fedbat", "gradma") for p in (False, True)] + [
    dict(algorithm="fedavg", runs=2), dict(algorithm="fedavg", batch=32), dict(algorithm="fedavg", clients=5),
    dict(algorithm="fedbat", clients=2, batch=32, padded=True)]

if __name__ == "__main__":
    out = calibration(TABLE1_CASES, log=lambda m: print(m, file=sys.stderr, flush=True))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)
    print(markdown(out))
