"""fedrepro against pfl-research (PyPI ``pfl``) on the small-model FedAvg work of issue 45, side by side.

The work, the same on both sides: FedAvg on scikit-learn's digits (1,347 training images), an MLP 64-128-10, 20
clients of an IID split, 10 sampled per round, 1 local epoch of batch 16, plain SGD at lr 0.1, 50 rounds, one
torch thread; no evaluation during training (fedrepro evaluates once, after the last round). Each side runs in
its own process: one warm-up run, then ``repeats`` timed runs (wall and CPU seconds of the whole run, set-up
included), and the two sides alternate ``rounds_of_processes`` times (A B A B); each side's best run is compared.

pfl runs from its own virtual environment outside the repository (``$FEDREPRO_PFL_VENV``, default
``~/.cache/fedrepro/pfl-venv``), made and filled by :func:`ensure_venv` with ``pip install pfl[pytorch]
torch==<this torch> scikit-learn``; nothing of pfl is imported by fedrepro (its side is ``pfl_side.py``, run by
that venv's Python). Where the venv cannot be made, the comparison is skipped with the reason.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDE = Path(__file__).with_name("pfl_side.py")


def venv_dir() -> Path:
    return Path(os.environ.get("FEDREPRO_PFL_VENV") or Path.home() / ".cache" / "fedrepro" / "pfl-venv")


def ensure_venv(log=None) -> tuple[Path | None, str]:
    """pfl's venv's Python, made if missing; (None, why) when it cannot be."""
    import torch

    d = venv_dir()
    py = d / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import pfl.model.pytorch, sklearn"],
                                      capture_output=True).returncode == 0:
        return py, "ok"
    if log:
        log(f"making pfl's venv in {d} (pip install pfl[pytorch] torch=={torch.__version__.split('+')[0]})")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, capture_output=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "pfl[pytorch]",
                            f"torch=={torch.__version__.split('+')[0]}", "scikit-learn"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return None, f"could not make a venv in {d}: {e}"
    if r.returncode != 0:
        return None, f"pip could not install pfl in {d}: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    return py, "ok"


def fedrepro_side(repeats: int, rounds: int, threads: int) -> dict:
    """The fedrepro side, in this process: one warm-up, then ``repeats`` timed runs of the work."""
    import time

    import torch

    from benchmark.runs.experiment import Experiment
    from benchmark.runs.plan import run

    torch.set_num_threads(threads)
    exp = Experiment(algorithm="fedavg", dataset="digits", model="mlp", model_args={"hidden": 128}, num_clients=20,
                     clients_per_round=10, partition="iid", local_epochs=1, batch_size=16, lr=0.1, rounds=rounds,
                     eval_every=rounds, seed=0)
    first = run(exp, threads=threads)
    out = []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        run(exp, threads=threads)
        out.append({"wall": time.perf_counter() - t, "cpu": time.process_time() - c})
    return {"executor": first.execution.get("executor"), "threads": threads, "repeats": out,
            "final_test_accuracy": first.final["test_accuracy"]}


def _side(cmd: list[str], env: dict) -> dict:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT))
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(repeats: int = 3, rounds: int = 50, threads: int = 1, alternations: int = 2, log=None) -> dict:
    """Both sides, alternating (module docstring); ``{"skipped": why}`` where pfl cannot be installed."""
    py, why = ensure_venv(log)
    if py is None:
        return {"skipped": why}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    ours = [sys.executable, "-m", "benchmark.perf.pfl.compare", "--side", str(repeats), str(rounds), str(threads)]
    theirs = [str(py), str(SIDE), str(repeats), str(rounds), str(threads)]
    runs = {"fedrepro": [], "pfl": []}
    for k in range(alternations):
        for name, cmd in (("fedrepro", ours), ("pfl", theirs)) if k % 2 == 0 else (("pfl", theirs), ("fedrepro", ours)):
            if log:
                log(f"{name}: process {k + 1} of {alternations}")
            runs[name].append(_side(cmd, env))
    best = {n: {m: min(r[m] for p in v for r in p["repeats"]) for m in ("wall", "cpu")} for n, v in runs.items()}
    return {"work": "FedAvg, digits, MLP 64-128-10, 20 IID clients, 10 per round, 1 epoch of batch 16, "
                    f"{rounds} rounds, {threads} thread(s)", "runs": runs, "best": best,
            "fedrepro_over_pfl_wall": best["pfl"]["wall"] / best["fedrepro"]["wall"],
            "fedrepro_over_pfl_cpu": best["pfl"]["cpu"] / best["fedrepro"]["cpu"], "load": os.getloadavg()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--side"]:
        print(json.dumps(fedrepro_side(*(int(v) for v in sys.argv[2:5]))))
    else:
        print(json.dumps(compare(log=lambda m: print(m, file=sys.stderr)), indent=1))
