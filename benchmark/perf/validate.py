"""``fedrepro validate``: does this machine (CPU or GPU) give the reference numbers?

On the chosen device it runs FedAvg, SCAFFOLD, FedBAT and GradMA on two small problems (a dense model
on the offline digits with partial batches and unequal local step counts; FedBAT's CNN, with
BatchNorm, on random 1x28x28 data) through every execution path: the sequential and the vectorized
executor, and a batched group of runs (``benchmark.runs.batched``). Each history is compared with the
reference: the same experiment on the CPU with the sequential executor. Then the same seed is run
twice on the device: the two histories must be identical; if they are not (cuDNN picks
non-deterministic kernels), the difference is measured and the run is repeated with
``torch.use_deterministic_algorithms(True)`` to show the setting that removes it.

Tolerance (stated; the executors' own equivalence tests use the float32 one): every evaluated loss within
``RTOL`` relative + ``ATOL`` absolute of the reference in every round, and bits equal. Runs with
quantized messages (FedBAT's 1-bit uplink) are held to it in their first round only: a latent value
within float rounding of 0 can take the other sign on another path or device, and the runs then differ
by chance (on this CPU, FedBAT on the CNN: 7 of 4,899 sign bytes of one client flip in round 1, the
losses differ by 4e-4 after 3 rounds); the table shows the difference over all rounds anyway.

The CNN problem runs in float64 (data, model and the computation; each message as its algorithm encodes it,
float32 where it casts) and is held to ``RTOL64`` + ``ATOL64`` in every round, quantized or not. In float32 its
max-pooling made the check a false alarm on a device that rounds differently: in some 2x2 windows the two
largest values lie within float32 rounding of each other, reordered arithmetic (a batched group's grouped
convolutions on an H100; 8 threads instead of 1 on a CPU) makes the other one the argmax, and the runs
then differ by 1e-4 to 5e-3 after 3 rounds, more than a planted 1% learning-rate defect moves them in
some runs (results/perf/README.md, "Issue 25"). In float64 such a swap needs two values within 1e-16 of
each other: the paths agree to 1e-16 (1e-8 where a float32 message rounds one value the other way), and
the planted defect moves the loss by 5e-3. (SCAFFOLD's batched group: 1.1e-8 on this CPU, because its control
variate divides by K * lr, which the other paths round to float32 (K takes the float32 message's dtype) and a
batched group, whose learning rates are a tensor of the default dtype, does not.) What float64 does not check is a device's float32 convolution
kernels; the float32 dense problem still runs every path in float32 (its TF32 setting included).
The numerics policy (``benchmark.sim.numerics``: TF32 off, deterministic algorithms off by default) is set
by the same function the runs apply (``numerics.using``: every run started inside applies it, as
``fedrepro run`` does) and stated in the result; pass ``--tf32`` to validate the policy with TF32 on. Torch
runs one CPU thread (``--threads``). On a 2-core CPU the whole run takes about a minute.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import time

import torch
from tabulate import tabulate

from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import resolve_device, run, run_group
from benchmark.runs.record import code_version, environment
from benchmark.sim import numerics

RTOL, ATOL = 1e-4, 1e-5  # float32 problems
RTOL64, ATOL64 = 1e-6, 1e-9  # float64 problems (see the module docstring)
ALGORITHMS = ("fedavg", "scaffold", "fedbat", "gradma")
PATHS = ("sequential", "vectorized", "batched")
LOSS_KEYS = ("test_loss", "train_loss", "local_loss")


DTYPES = {"digits/mlp": "float32", "images/fedbat_cnn": "float64"}  # each problem's computation


def problems(rounds: int, cnn_dtype: str | None = None) -> dict:
    """name -> Experiment keyword arguments (without algorithm, executor, device). The CNN problem's data are
    ``DTYPES``' float64 unless ``cnn_dtype`` says otherwise (the scripts of results/perf ran it in float32)."""
    g = torch.Generator().manual_seed(0)
    clients = [(torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g))
               for _ in range(4)]
    test = (torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g))
    images = FederatedDataset.from_tensors(clients, test, name="validate-images", num_classes=10,
                                           dtype=getattr(torch, cnn_dtype or DTYPES["images/fedbat_cnn"]))
    return {
        "digits/mlp": dict(dataset="digits", model="mlp", partition="dirichlet:0.5", num_clients=6,
                           clients_per_round=4, rounds=rounds, local_epochs=1, batch_size=32, lr=0.1,
                           eval_every=1),
        "images/fedbat_cnn": dict(dataset=images, model="fedbat_cnn", num_clients=None, clients_per_round=3,
                                  rounds=rounds, local_epochs=1, batch_size=16, lr=0.05, eval_every=1,
                                  eval_train_samples=64),
    }


def quantized(res) -> bool:
    """Whether a run's messages are quantized (fewer than 32 bits per parameter per client on a link)."""
    d = res.final.get("num_params") or 0
    k = res.config.get("clients_per_round") or 1
    h = res.history[0] if res.history else {}
    return bool(d) and (h.get("bits_up", 32 * d * k) < 32 * d * k or h.get("bits_down", 32 * d * k) < 32 * d * k)


def tolerance(dtype: str) -> dict:
    """The tolerance of a problem computed in ``dtype``: rtol, atol, and whether quantized runs are judged on
    their first round only (float32) or on every round (float64: a latent value within 1e-16 of a threshold)."""
    if dtype == "float64":
        return {"rtol": RTOL64, "atol": ATOL64, "quantized_first_round": False}
    return {"rtol": RTOL, "atol": ATOL, "quantized_first_round": True}


def compare(a, b, rtol: float = RTOL, atol: float = ATOL, quantized_first_round: bool = True) -> dict:
    """Largest differences between two runs' histories (``a`` the reference) and final parameters.

    The verdict (``ok``) needs equal bits and every loss within the tolerance, over every round; for a
    run with quantized messages over the first round only (``verdict_rounds``; unless
    ``quantized_first_round`` is False): a sign or a level of a value that sits within float rounding of a
    threshold can flip, after which the runs differ by chance (measured: ``max_rel_loss_diff`` still covers
    every round)."""
    rounds = 1 if quantized_first_round and quantized(a) else len(a.history)
    worst_rel, worst_abs, acc, bits_equal = 0.0, 0.0, 0.0, len(a.history) == len(b.history)
    ok = bits_equal and a.status == b.status
    for i, (ha, hb) in enumerate(zip(a.history, b.history)):
        bits_equal &= ha["bits_up"] == hb["bits_up"] and ha["bits_down"] == hb["bits_down"]
        for k in LOSS_KEYS:
            va, vb = ha.get(k), hb.get(k)
            if va is None or vb is None:
                ok &= va is None and vb is None
                continue
            d = abs(va - vb)
            worst_abs = max(worst_abs, d)
            worst_rel = max(worst_rel, d / max(abs(va), 1e-12))
            if i < rounds:
                ok &= d <= atol + rtol * abs(va)
        if ha.get("test_accuracy") is not None and hb.get("test_accuracy") is not None:
            acc = max(acc, abs(ha["test_accuracy"] - hb["test_accuracy"]))
    pa = torch.nn.utils.parameters_to_vector(a.model.parameters()).detach().cpu()
    pb = torch.nn.utils.parameters_to_vector(b.model.parameters()).detach().cpu()
    param = float((pa - pb).abs().max() / pa.abs().max().clamp(min=1e-12))
    return {"max_rel_loss_diff": worst_rel, "max_abs_loss_diff": worst_abs, "max_accuracy_diff": acc,
            "param_rel_diff": param, "bits_equal": bool(bits_equal), "verdict_rounds": rounds,
            "ok": bool(ok and bits_equal)}


def identical(a, b) -> bool:
    strip = lambda h: [{k: v for k, v in e.items() if k != "wall_time"} for e in h]  # noqa: E731

    pa = torch.nn.utils.parameters_to_vector(a.model.parameters()).detach().cpu()
    pb = torch.nn.utils.parameters_to_vector(b.model.parameters()).detach().cpu()
    return strip(a.history) == strip(b.history) and torch.equal(pa, pb)


def run_paths(exp, paths: tuple[str, ...], device: str) -> dict:
    """path -> RunResult of ``exp`` on ``device`` (the batched path: a group of this run and the same
    cell at another seed and learning rate, of which this run's result is taken)."""
    out = {}
    for p in paths:
        if p == "batched":
            group = [exp, dataclasses.replace(exp, seed=exp.seed + 1, lr=exp.lr * 0.5),
                     dataclasses.replace(exp, seed=exp.seed + 2)]
            out[p] = run_group([dataclasses.replace(e, device=device, executor="vectorized") for e in group])[0]
        else:
            out[p] = run(dataclasses.replace(exp, device=device, executor=p))
    return out


@contextlib.contextmanager
def _default_dtype(name: str):
    """Models built inside take ``name`` (their parameters and buffers; the data carry their own dtype)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, name))
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def validate(device: str | None = None, algorithms=ALGORITHMS, rounds: int = 3, tf32: bool = False,
             log=None, problem_names=None, threads: int | None = 1) -> dict:
    """``threads``: torch CPU threads while validating (default 1: the problems are small, and on a shared
    machine more threads only make the runs slower; the numbers do not depend on it beyond rounding)."""
    dev = resolve_device(device)[0]
    t0 = time.perf_counter()
    rows, twice = [], []
    policy = numerics.Numerics(tf32=bool(tf32))
    with numerics.using(policy), _threads(threads):
        for pname, kw in problems(rounds).items():
            if problem_names is not None and pname not in problem_names:
                continue
            dtype, tol = DTYPES[pname], tolerance(DTYPES[pname])
            for alg in algorithms:
                exp = Experiment(algorithm=alg, seed=0, **kw)
                if log:
                    log(f"{alg} on {pname} ({dtype}): reference (cpu, sequential), then {', '.join(PATHS)} on {dev}")
                with _default_dtype(dtype):
                    twice.append(_paths_and_twice(exp, alg, pname, dtype, tol, dev, policy, rows))
    ok = all(r["ok"] for r in rows) and all(t["identical"] or t.get("identical_with_deterministic_algorithms")
                                            for t in twice)
    return {"schema": 2, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": str(dev), "environment": environment(dev), "code_version": code_version(),
            "tolerance": {"float32": {"rtol": RTOL, "atol": ATOL, "rounds": "all; the first for runs with quantized "
                                      "messages"},
                          "float64": {"rtol": RTOL64, "atol": ATOL64, "rounds": "all"},
                          "on": list(LOSS_KEYS), "bits": "equal", "problems": dict(DTYPES)},
            "tf32": bool(tf32) if dev.type == "cuda" else None, "numerics": dataclasses.asdict(policy),
            "numerics_in_runs": sorted({json.dumps(r["numerics"], sort_keys=True) for r in rows}), "rounds": rounds,
            "reference": "cpu, sequential executor", "comparisons": rows, "same_seed_twice": twice,
            "deterministic_algorithms_default": torch.are_deterministic_algorithms_enabled(),
            "wall_seconds": time.perf_counter() - t0, "ok": ok}


def _paths_and_twice(exp, alg: str, pname: str, dtype: str, tol: dict, dev, policy, rows: list) -> dict:
    """Every path of ``exp`` on ``dev`` against the CPU reference (appended to ``rows``), then the same seed
    twice on the device: its entry of ``same_seed_twice``."""
    ref = run(dataclasses.replace(exp, device="cpu", executor="sequential"))
    got = run_paths(exp, PATHS, str(dev))
    for path, res in got.items():
        rows.append({"algorithm": alg, "problem": pname, "dtype": dtype, "path": path, "device": str(dev),
                     "numerics": res.environment["numerics"]["policy"],
                     "executor_used": res.config.get("executor_used"), **compare(ref, res, **tol)})
    # the same seed twice on the device, fast path
    again = run(dataclasses.replace(exp, device=str(dev), executor="vectorized"))
    same = identical(got["vectorized"], again)
    entry = {"algorithm": alg, "problem": pname, "dtype": dtype, "device": str(dev), "identical": same,
             "difference": None if same else compare(got["vectorized"], again, **tol)}
    if not same:
        try:
            with numerics.using(dataclasses.replace(policy, deterministic=True)):
                d1 = run(dataclasses.replace(exp, device=str(dev), executor="vectorized"))
                d2 = run(dataclasses.replace(exp, device=str(dev), executor="vectorized"))
            entry["identical_with_deterministic_algorithms"] = identical(d1, d2)
        except RuntimeError as e:  # an operation without a deterministic implementation
            entry["identical_with_deterministic_algorithms"] = False
            entry["deterministic_error"] = str(e).splitlines()[0]
    return entry


def table(result: dict) -> str:
    rows = [[r["algorithm"], r["problem"], r.get("dtype", "float32"), r["path"], r["executor_used"],
             f"{r['max_rel_loss_diff']:.1e}",
             f"{r['max_accuracy_diff']:.3f}", f"{r['param_rel_diff']:.1e}", "yes" if r["bits_equal"] else "NO",
             ("ok" if r["ok"] else "DIFFERS") + ("" if r["verdict_rounds"] == result["rounds"] else
                                                 " (round 1: quantized)")] for r in result["comparisons"]]
    twice = [[t["algorithm"], t["problem"], "identical" if t["identical"] else
              f"differ by {t['difference']['max_rel_loss_diff']:.1e} (rel. loss); with "
              f"torch.use_deterministic_algorithms(True): "
              f"{'identical' if t.get('identical_with_deterministic_algorithms') else 'still differ'}"]
             for t in result["same_seed_twice"]]
    return "\n".join([
        f"fedrepro validate on {result['device']} ({result['environment'].get('gpu') or result['environment'].get('cpu')}"
        f", torch {result['environment']['torch']}), reference: {result['reference']}, {result['rounds']} rounds"
        + ("" if result["tf32"] is None else f", TF32 {'on' if result['tf32'] else 'off'}"),
        tabulate(rows, headers=["algorithm", "problem", "dtype", "path", "executor", "max rel. loss diff",
                                "max acc. diff", "max rel. param diff", "bits equal", "verdict"],
                 tablefmt="github"),
        "", "Same seed twice on the device (vectorized executor):",
        tabulate(twice, headers=["algorithm", "problem", "histories"], tablefmt="github"),
        "", f"{'PASS' if result['ok'] else 'FAIL'}: every path within tolerance (float32 problems: losses "
            f"{RTOL:g} relative + {ATOL:g} absolute in every round, the first round for quantized messages; "
            f"float64 problems: {RTOL64:g} + {ATOL64:g} in every round; bits equal) and the same seed "
            f"reproducible; {result['wall_seconds']:.0f} s."])


__all__ = ["validate", "compare", "identical", "table"]
