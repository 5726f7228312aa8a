"""A batched group under a real address-space cap (``RLIMIT_AS``), run as a child process by
tests/test_real_faults.py: ``python -m tests.memory_cap OUT RUNS``.

The child warms up (one run alone: torch's lazy state, its thread pool), measures its address space, runs
the group of ``RUNS`` uncapped into ``OUT/uncapped`` (the kernel's ``VmPeak`` gives what the group needed),
then caps its address space at the baseline plus 3/8 of that need (a quarter of the group fits, half does not)
and runs the same group again into ``OUT/capped``. It writes ``OUT/cap.json``: the sizes of the jobs tried
under the cap, and the numbers of the calibration. Started with ``MALLOC_MMAP_THRESHOLD_`` fixed, so freed
tensors give their address space back at once (glibc's heap would otherwise keep it, and the address space
would not follow what is alive).
"""
from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import torch

from benchmark import Experiment
from benchmark.runs import plan
from benchmark.campaign import runner
from benchmark.contract.checks import tiny_dataset

WIDTH = 1024  # hidden units: about 25 MiB of address space per run in a batched group


def wide_mlp(input_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], WIDTH), torch.nn.Tanh(),
                               torch.nn.Linear(WIDTH, num_classes))


def group(runs: int) -> list[Experiment]:
    data = tiny_dataset(d=256)
    return [Experiment(algorithm="fedavg", dataset=data, num_clients=None, model=wide_mlp, rounds=2,
                       executor="vectorized", seed=s, batch_size=64, lr=0.05, clients_per_round=3, device="cpu")
            for s in range(runs)]


def vm(key: str) -> int:
    """``VmSize`` (address space now) or ``VmPeak`` (its maximum so far) of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def main(out: Path, runs: int) -> None:
    exps = group(runs)
    runner.run_experiments(group(1), out / "warmup", progress=False)
    base = vm("VmSize")
    runner.run_experiments(exps, out / "uncapped", group_runs=runs, progress=False)
    need = vm("VmPeak") - base
    cap = base + need * 3 // 8
    sizes, real = [], plan.execute

    def execute(job, **kw):  # a spy: the sizes of the jobs tried, nothing injected
        sizes.append(len(job))
        yield from real(job, **kw)

    plan.execute = execute
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
    counts = runner.run_experiments(exps, out / "capped", group_runs=runs, progress=False)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    (out / "cap.json").write_text(json.dumps({"sizes": sizes, "counts": counts, "base": base, "need": need,
                                              "cap": cap}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
