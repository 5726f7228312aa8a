"""benchmark.runs.malloc: with glibc set by ``keep_freed_blocks``, a loop that makes and frees model-sized tensors
stops faulting fresh pages in (the planted defect: the same loop without it, FEDREPRO_MALLOC=0, faults them in
every time), and a run's numbers do not depend on it."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="glibc's mallopt only")

LOOP = """
import resource, torch
from benchmark.runs import malloc
torch.set_num_threads(1)  # one thread, as the claims runs: no thread pool made inside the loop
on = malloc.keep_freed_blocks()
n = 2_000_000  # 8 MB, as FedSWA's stacked parameters
blocks = [torch.ones(n) for _ in range(3)]; del blocks  # the heap grows once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for it in range(1, 41):  # each step's blocks a little larger than the last's, so glibc's own rule (its threshold
    blocks = [torch.ones(n + it * 16_384) for _ in range(3)]  # rises to the largest block freed) maps every one
    del blocks  # afresh; a step's blocks all freed at its end
print(on, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env_value: str, **more) -> tuple[str, int]:
    env = {**os.environ, "FEDREPRO_MALLOC": env_value, **more}
    out = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, env=env, timeout=120,
                         cwd=ROOT, check=True)
    on, faults = out.stdout.split()
    return on, int(faults)


@glibc
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    on, kept = _faults("1")
    off, fresh = _faults("0")
    assert (on, off) == ("True", "False")
    assert fresh > 40 * 3 * 1900, fresh  # ~2,000 fresh 4 KiB pages per 8 MB block: 273,840 in 40 steps here
    assert kept < fresh / 5, (kept, fresh)  # 3,873-16,168 here (the heap grows with the blocks)


@glibc
def test_the_environments_own_malloc_settings_win():
    """tests/memory_cap.py starts its child with MALLOC_MMAP_THRESHOLD_ so that freed tensors give back their
    address space: that setting must stay."""
    on, faults = _faults("1", MALLOC_MMAP_THRESHOLD_="131072")
    assert on == "False" and faults > 40 * 3 * 1900, faults


def test_a_run_is_the_same_with_and_without_it():
    code = ("import json; from benchmark import Experiment; from benchmark.runs import plan; "
            "exp = Experiment(algorithm='fedavg', dataset='synthetic', num_clients=4, rounds=2, local_steps=3, "
            "batch_size=8, model='logreg', seed=1, eval_every=1); "
            "print(json.dumps([h.get('train_loss') for h in plan.run(exp).history]))")
    runs = {}
    for value in ("0", "1"):
        env = {**os.environ, "FEDREPRO_MALLOC": value}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                             cwd=ROOT, check=True)
        runs[value] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["0"] == runs["1"] and len(runs["1"]) == 2
