"""Cost model: FLOPs per sample-gradient, the rule behind ``executor="auto"``, and suite cost estimates.

The executor rule (``executor_rule``, applied by ``benchmark.runs.plan.choose_executor`` only) is backed by ``fedrepro bench`` measurements (results/perf/README.md):
the vectorized executor pays the per-step Python/dispatch overhead once for all clients of a round, the
sequential one once per client, but on a CPU vmap makes the arithmetic itself slower (the stacked
activations of all clients leave the caches, and batched convolutions lose their best kernels). So
vectorizing pays while a client's step is small and stops paying once the arithmetic dominates. On the
2-core CPU of results/perf, vec/seq is 2.5-3.6x for the digits models (< 5e6 FLOPs per client step),
0.75-1.2x between 1e7 and 6e8 (MLPs and CNNs at batch 16; which side wins depends on threads and on the
other load), and 0.55-0.7x for the CNNs at batch 64 (>= 1.6e9). The rule: on a CPU, vectorize when a
client step (batch x forward+backward FLOPs per sample) is at most ``CPU_VECTORIZE_MAX_FLOPS`` (1e8, in
the middle of that mixed band, where either choice is within about 25% of the other); on CUDA always
vectorize (a GPU needs the batched work; the GPU issue measures it). The choice depends only on the
model, the batch and the device, never on timings, so the same experiment always takes the same path
(and the same seed gives bit-identical histories).

The compile rule (``choose_compile``, ``compiled_beats_sequential``; issue 24): a run that asks for
``compile`` under ``executor="auto"`` is compiled only where ``fedrepro bench --compile`` measured the
compiled vectorized round faster than the uncompiled one on that device type and model, with the compile
time paid back within the run's rounds (``COMPILE_MEASURED``); and it takes the vectorized executor against
the FLOPs rule only where the compiled round was also faster than the sequential one. A run that names
the vectorized executor is compiled as asked. Like the executor rule, the choice depends on the model,
the device and the rounds, never on timings taken at run time.

Suite estimates (``estimate_cell``, ``estimate_group``; ``benchmark.runs.plan.estimate``) count sample-gradients (the training work:
rounds x sampled clients x samples per local round) and evaluation forwards, and turn them into
seconds with a ``CostModel`` fitted to the newest ``fedrepro bench`` JSON for this device in
``results/perf/``: per-step overhead and seconds per FLOP of each executor, and the rest of a round.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from benchmark import datasets, models
from benchmark.datasets.federated_dataset import FederatedDataset

#: largest client step (batch x forward+backward FLOPs per sample) that the CPU vectorizes
CPU_VECTORIZE_MAX_FLOPS = 1e8
#: the same per device type (inf: always vectorize)
VECTORIZE_MAX_FLOPS = {"cpu": CPU_VECTORIZE_MAX_FLOPS, "cuda": math.inf}
#: an evaluation forward costs about a third of a forward+backward
FORWARD_FRACTION = 1.0 / 3.0

# train size, test size, input shape of the datasets that are files (no need to read them for an estimate)
KNOWN_SIZES = {
    "mnist": (60000, 10000, (1, 28, 28)),
    "fmnist": (60000, 10000, (1, 28, 28)),
    "svhn": (73257, 26032, (3, 32, 32)),
    "cifar10": (50000, 10000, (3, 32, 32)),
    "cifar100": (50000, 10000, (3, 32, 32)),
    "tinyimagenet": (100000, 10000, (3, 64, 64)),
    "digits": (1347, 450, (1, 8, 8)),
}
_NUM_CLASSES = {"cifar100": 100, "tinyimagenet": 200}


# --------------------------------------------------------------------------------------------------
# FLOPs


def flops_per_sample(module, input_shape: tuple[int, ...]) -> float:
    """Forward+backward FLOPs of one training sample (``torch.utils.flop_counter``, on the meta
    device: no memory, no arithmetic). 0 when the model cannot run on meta."""
    # lazy: it imports triton, 0.15 s CPU and 79 MiB at every fedrepro start (measured), for the planner only
    from torch.utils.flop_counter import FlopCounterMode

    n = 2  # BatchNorm needs more than one value per channel
    try:
        meta = copy.deepcopy(module).to("meta").train()
        x = torch.zeros(n, *input_shape, device="meta")
        with FlopCounterMode(display=False) as fc:
            out = meta(x)
            out.float().sum().backward()
        return fc.get_total_flops() / n
    except Exception:  # noqa: BLE001 - an exotic layer without meta support: no estimate
        return 0.0


@lru_cache(maxsize=256)
def model_flops(model: str, input_shape: tuple[int, ...], num_classes: int, model_args: str = "{}") -> float:
    """``flops_per_sample`` of a registered model, by name (cached)."""
    with torch.device("meta"):
        module = models.build(model, input_shape, num_classes, **json.loads(model_args))
    return flops_per_sample(module, tuple(input_shape))


# --------------------------------------------------------------------------------------------------
# The executor rule


@dataclass(frozen=True)
class ExecutorChoice:
    executor: str
    reason: str
    flops_per_sample: float
    flops_per_client_step: float

    def record(self) -> dict:
        return {"executor": self.executor, "reason": self.reason, "flops_per_sample": self.flops_per_sample,
                "flops_per_client_step": self.flops_per_client_step}


def executor_rule(requested: str, device_type: str, vectorizable: bool, flops_sample: float,
                  batch: float) -> ExecutorChoice:
    """The executor a run uses. ``requested``: auto | sequential | vectorized; ``batch``: the (mean)
    local batch size; ``flops_sample``: ``flops_per_sample`` of the model."""
    step = flops_sample * batch
    if requested != "auto":
        if requested == "vectorized" and not vectorizable:
            return ExecutorChoice("sequential", "asked for vectorized, but the algorithm is not vectorizable",
                                  flops_sample, step)
        return ExecutorChoice(requested, "asked for", flops_sample, step)
    if not vectorizable:
        return ExecutorChoice("sequential", "auto: the algorithm is not vectorizable", flops_sample, step)
    limit = VECTORIZE_MAX_FLOPS.get(device_type, math.inf)
    if math.isinf(limit):
        return ExecutorChoice("vectorized", f"auto: {device_type} always vectorizes", flops_sample, step)
    if step <= 0:
        return ExecutorChoice("vectorized", "auto: FLOPs unknown, vectorized", flops_sample, step)
    if step <= limit:
        return ExecutorChoice("vectorized", f"auto: {step:.3g} FLOPs per client step <= {limit:.3g} "
                              f"({device_type} rule, results/perf/README.md)", flops_sample, step)
    return ExecutorChoice("sequential", f"auto: {step:.3g} FLOPs per client step > {limit:.3g} "
                          f"({device_type} rule, results/perf/README.md)", flops_sample, step)


# --------------------------------------------------------------------------------------------------
# The compile rule

#: compiled vs uncompiled vectorized FedAvg rounds, measured in one process with ``fedrepro bench --compile``
#: (``benchmark.perf.compile_bench``; 10 clients x batch 64, 1 thread, a loaded 2-core CPU): (device type, model)
#: -> (compiled / uncompiled speed, compiled / sequential speed, rounds after which the compile time is paid
#: back (None: never)), the least favourable of the repeated measurements in ``COMPILE_SOURCE``. Only what
#: is listed was measured: nothing else is compiled by ``executor="auto"``. The graph-replayed step
#: (``compile="graph"``, issue 48) has rows of its own, keyed (device type, model, "graph"): none measured yet.
COMPILE_MEASURED: dict[tuple, tuple[float, float, float | None]] = {
    ("cpu", "logreg"): (2.90, 8.90, 2215.0),
    ("cpu", "mlp"): (3.11, 6.77, 1381.0),
    # after benchmark.sim.vmap_layers (the uncompiled step 1.4-1.9x faster): compiled 1.18x and 1.10x the
    # uncompiled speed, 1.13x and 1.02x the sequential one, break-even 157 rounds cold (24 from the cache)
    ("cpu", "fedbat_cnn"): (1.10, 1.02, 157.0),
}
COMPILE_SOURCE = "results/perf/compile-2026-11-26-cpu.md"


def _compile_measured(device_type: str, model, mode: bool | str = True) -> tuple[str, tuple | None]:
    """The model's name (a registered name, or a module's class name) and its ``COMPILE_MEASURED`` row for the
    compile ``mode`` (True, or "graph": the rows keyed with it)."""
    name = model if isinstance(model, str) else type(model).__name__
    return name, COMPILE_MEASURED.get((device_type, name) if mode is True else (device_type, name, mode))


def choose_compile(requested: bool | str, executor_requested: str, executor: str, device_type: str, model,
                   rounds: int) -> tuple[bool | str, str | None]:
    """Whether a run that asks for ``compile`` is compiled (False, or the mode asked for: True or "graph"), and
    why (None: not asked, nothing to say).

    ``executor``: the executor chosen (``executor_rule``), ``executor_requested``: the experiment's own.
    The sequential executor is never compiled. A run that names the vectorized executor is compiled as
    asked. Under ``executor="auto"`` compiling is one more choice of how to run, made like the executor's:
    only where ``COMPILE_MEASURED`` shows the compiled round faster on this device type and the compile
    time paid back within the run's rounds; otherwise the run goes uncompiled (its numbers are then the
    uncompiled ones, bit for bit) and the reason says so."""
    if not requested:
        return False, None
    name, measured = _compile_measured(device_type, model, requested)
    if requested is not True:
        name = f"{name} ({requested})"
    if executor != "vectorized":
        versus = "" if measured is None or executor_requested != "auto" else \
            f" (auto: compiled vectorized {name} runs {measured[1]:.2f}x the sequential speed on {device_type}, {COMPILE_SOURCE})"
        return False, f"{executor} executor: never compiled{versus}"
    if executor_requested != "auto":
        return requested, "asked for"
    if measured is None:
        return False, (f"auto: compiling {name} on {device_type} not measured to pay (fedrepro bench --compile; "
                       f"{COMPILE_SOURCE}): uncompiled")
    speed, _, break_even = measured
    if speed <= 1.0 or break_even is None:
        return False, f"auto: compiled {name} runs {speed:.2f}x the uncompiled speed on {device_type} ({COMPILE_SOURCE}): uncompiled"
    if break_even > rounds:
        return False, (f"auto: compiled {name} is {speed:.2f}x faster on {device_type} but pays its compile time back "
                       f"after {break_even:,.0f} rounds > {rounds} ({COMPILE_SOURCE}): uncompiled")
    return requested, (f"auto: compiled {name} is {speed:.2f}x faster on {device_type}, compile time paid back after "
                  f"{break_even:,.0f} <= {rounds} rounds ({COMPILE_SOURCE})")


def compiled_beats_sequential(device_type: str, model, rounds: int, mode: bool | str = True) -> str | None:
    """Why ``executor="auto"`` with ``compile`` takes the vectorized executor where the FLOPs rule takes the
    sequential one: ``COMPILE_MEASURED`` shows the compiled vectorized round (of ``mode``) faster than the
    sequential one, and the compile time paid back within ``rounds``; None where it does not."""
    name, measured = _compile_measured(device_type, model, mode)
    if measured is None or measured[1] <= 1.0 or measured[2] is None or measured[2] > rounds:
        return None
    return (f"auto with compile: compiled vectorized {name} runs {measured[1]:.2f}x the sequential speed on "
            f"{device_type} ({COMPILE_SOURCE})")


# --------------------------------------------------------------------------------------------------
# Bench results


def perf_dirs() -> list[Path]:
    """Where ``fedrepro bench`` results are looked for: ./results/perf, then the source tree's."""
    here = Path.cwd() / "results" / "perf"
    src = Path(__file__).resolve().parents[2] / "results" / "perf"
    return [here] if here.resolve() == src.resolve() else [here, src]


def latest_bench(device_type: str, dirs: list[Path] | None = None) -> dict | None:
    """The bench results of ``device_type``, newest first: each model's newest measurement across the
    JSON files (``fedrepro bench --out``), and the newest ``round_overhead_seconds``; None if none."""
    recs = []
    for d in dirs if dirs is not None else perf_dirs():
        for p in sorted(Path(d).glob("*.json")) if Path(d).is_dir() else []:
            try:
                rec = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if not isinstance(rec, dict) or "configs" not in rec or "device" not in rec:
                continue
            if str(rec["device"]).split(":")[0] != device_type:
                continue
            rec["_path"] = str(p)
            recs.append(rec)
    if not recs:
        return None
    recs.sort(key=lambda r: str(r.get("date", "")), reverse=True)
    configs, seen, files = [], set(), []
    for r in recs:
        new = [c for c in r["configs"] if c.get("model") not in seen]
        if new:
            files.append(r["_path"])
        configs += new
        seen |= {c.get("model") for c in new}
    overhead = next((r["round_overhead_seconds"] for r in recs if r.get("round_overhead_seconds") is not None),
                    None)
    newest = recs[0]
    return {**newest, "configs": configs, "round_overhead_seconds": overhead, "_path": ", ".join(files),
            "device_name": newest.get("device_name"), "date": newest.get("date")}


@dataclass
class CostModel:
    """Seconds of one round on one device, fitted to ``fedrepro bench`` results.

    Per executor e, one round of K clients x S local steps x batch B of a model with f FLOPs per sample
    takes ``S * (o_e + K * B * f * c_e)`` (vectorized: one step for all clients) or
    ``K * S * (o_e + B * f * c_e)`` (sequential): o_e is the per-step overhead (Python, dispatch) and
    c_e the seconds per FLOP, fitted by non-negative least squares on relative errors over the measured
    models. ``round_overhead`` is the rest of a round (sampling, schedules, aggregation, records), from
    bench's whole-run measurement when the file has one.
    """

    overhead: dict  # executor -> seconds per step
    sec_per_flop: dict  # executor -> seconds per FLOP
    round_overhead: float
    source: str

    def round_seconds(self, executor: str, clients: float, steps: float, batch: float, flops: float) -> float:
        o, c = self.overhead[executor], self.sec_per_flop[executor]
        if executor == "vectorized":
            return steps * (o + clients * batch * flops * c)
        return clients * steps * (o + batch * flops * c)


def cost_model_from_bench(rec: dict) -> CostModel | None:
    """Fit ``CostModel`` to a bench JSON (None when it has no usable configuration)."""
    from scipy.optimize import nnls  # lazy: adds 0.34 s CPU to every fedrepro start (measured); fits only

    overhead, per_flop = {}, {}
    for e in ("sequential", "vectorized"):
        rows, ys = [], []
        for c in rec.get("configs", []):
            t = (c.get("median_seconds") or {}).get(e)
            if not t:
                continue
            f = c.get("flops_per_sample") or model_flops(c["model"], tuple(c["input_shape"]), c["num_classes"])
            k, b, s = c["clients"], c["batch_size"], c["local_steps"]
            rows.append([s, s * k * b * f] if e == "vectorized" else [k * s, k * s * b * f])
            ys.append(t)
        if not rows:
            return None
        a, y = np.array(rows, dtype=np.float64), np.array(ys)
        coef, _ = nnls(a / y[:, None], np.ones_like(y))  # relative errors: each model weighs the same
        overhead[e], per_flop[e] = float(coef[0]), float(coef[1])
    return CostModel(overhead, per_flop, float(rec.get("round_overhead_seconds") or 0.0), rec.get("_path", "?"))


# --------------------------------------------------------------------------------------------------
# Estimates


@lru_cache(maxsize=64)
def _generated_sizes(dataset: str, dataset_args: str, num_clients: int | None) -> tuple:
    opts = json.loads(dataset_args)
    if "num_clients" in datasets.options(dataset) and num_clients is not None:
        opts.setdefault("num_clients", num_clients)
    d = datasets.load(dataset, seed=0, **opts)
    return len(d.y_train), len(d.y_test), tuple(d.input_shape), d.output_dim, \
        None if d.clients is None else len(d.clients)


def dataset_shape(exp) -> dict:
    """Train size, test size, input shape, classes and natural clients of ``exp``'s dataset, without
    reading files for the real datasets (a dataset object: its own tensors)."""
    if isinstance(exp.dataset, FederatedDataset):
        d = exp.dataset
        return {"train": len(d.y_train), "test": len(d.y_test), "input_shape": tuple(d.input_shape),
                "classes": d.output_dim, "natural_clients": len(d.clients) if d.natural_clients else None}
    name, _ = datasets.resolve_name(exp.dataset) if isinstance(exp.dataset, str) else (None, {})
    args = dict(exp.dataset_args)
    if name in KNOWN_SIZES:
        n_tr, n_te, shape = KNOWN_SIZES[name]
        classes = 2 if args.get("labels") == "parity" else _NUM_CLASSES.get(name, 10)
        natural = None
    else:
        n_tr, n_te, shape, classes, natural = _generated_sizes(str(exp.dataset),
                                                               json.dumps(args, sort_keys=True),
                                                               exp.num_clients)
    if args.get("train_subset"):
        n_tr = min(n_tr, int(args["train_subset"]))
    elif args.get("validation") and name in KNOWN_SIZES:  # held out of the training data
        n_tr = max(1, n_tr - int(args["validation"]))
    return {"train": n_tr, "test": n_te, "input_shape": shape, "classes": classes, "natural_clients": natural}


def cell_work(exp) -> dict:
    """Sample-gradients (training) and evaluation forwards of one experiment, in expectation over client
    sampling (clients of mean size)."""
    ds = dataset_shape(exp)
    n_clients = exp.num_clients or ds["natural_clients"] or 10
    if ds["natural_clients"] and exp.partition in ("auto", "natural"):
        n_clients = ds["natural_clients"]
    k = exp.clients_per_round or n_clients
    n_i = ds["train"] / n_clients
    b = n_i if exp.batch_size is None else min(exp.batch_size, n_i)
    steps = exp.local_steps if exp.local_steps is not None else exp.local_epochs * math.ceil(n_i / b)
    per_client = exp.local_steps * b if exp.local_steps is not None else exp.local_epochs * n_i
    scheduled = {r for r in range(1, exp.rounds + 1) if r % exp.eval_every == 0} | {exp.rounds}
    tests = scheduled if exp.eval_rounds is None else scheduled & (set(exp.eval_rounds) | {exp.rounds})
    eval_fwd = len(tests) * ds["test"] + len(scheduled) * min(ds["train"], exp.eval_train_samples or ds["train"])
    return {"sample_gradients": float(exp.rounds * k * per_client), "eval_forwards": float(eval_fwd),
            "clients_per_round": k, "steps": float(steps), "batch": float(b), **ds}


def estimate_cell(exp, device_type: str, model: CostModel | None, executor: str) -> dict:
    """Work and estimated seconds of one experiment run alone with ``executor`` (the planner's choice,
    ``benchmark.runs.plan``); ``seconds`` None without a cost model."""
    work = cell_work(exp)
    name = exp.model if isinstance(exp.model, str) else None
    f = model_flops(name, tuple(work["input_shape"]), work["classes"],
                    json.dumps(dict(exp.model_args), sort_keys=True)) if name else 0.0
    out = {**work, "flops_per_sample": f, "executor": executor, "device": device_type, "seconds": None}
    if model is not None and name is not None:
        per_round = model.round_seconds(executor, work["clients_per_round"], work["steps"], work["batch"], f)
        evaluation = work["eval_forwards"] * f * model.sec_per_flop["sequential"] * FORWARD_FRACTION
        out["seconds"] = exp.rounds * (per_round + model.round_overhead) + evaluation
    return out


def human_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def human_count(x: float) -> str:
    return f"{x:.2g}" if x >= 1e4 else f"{x:.0f}"


__all__ = ["executor_rule", "ExecutorChoice", "flops_per_sample", "model_flops", "latest_bench",
           "cost_model_from_bench", "CostModel", "estimate_cell", "estimate_group", "cell_work"]


def estimate_group(exps: list, device_type: str, model: CostModel | None, executor: str) -> dict:
    """Work and seconds of ``exps`` run as one batched job (vectorized over all their clients); one
    experiment: ``estimate_cell`` with ``executor``."""
    first = exps[0]
    alone = estimate_cell(first, device_type, model, executor)
    if len(exps) == 1:
        return alone
    works = [cell_work(e) for e in exps]
    out = {**alone, "executor": "vectorized (batched)", "runs": len(exps),
           "sample_gradients": sum(w["sample_gradients"] for w in works), "seconds": None}
    if model is not None and alone["flops_per_sample"]:
        r, w = len(exps), works[0]
        per_round = model.round_seconds("vectorized", r * w["clients_per_round"], w["steps"], w["batch"],
                                        alone["flops_per_sample"])
        evaluation = sum(x["eval_forwards"] for x in works) * alone["flops_per_sample"] \
            * model.sec_per_flop["sequential"] * FORWARD_FRACTION
        out["seconds"] = first.rounds * (per_round + r * model.round_overhead) + evaluation
    return out


def activation_bytes_per_sample(module, input_shape: tuple[int, ...]) -> float:
    """Bytes of the outputs of every leaf module for one training sample (what backward keeps, about),
    from a forward on the meta device. 0 when the model cannot run on meta."""
    total = [0]

    def hook(_m, _i, out):
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                total[0] += t.numel() * t.element_size()

    try:
        meta = copy.deepcopy(module).to("meta").train()
        handles = [m.register_forward_hook(hook) for m in meta.modules() if not list(m.children())]
        meta(torch.zeros(2, *input_shape, device="meta"))
        for h in handles:
            h.remove()
    except Exception:  # noqa: BLE001
        return 0.0
    return total[0] / 2
