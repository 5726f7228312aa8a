"""``fedrepro bench``: vectorized vs sequential executor throughput, and the centralized limit.

Everything is measured in one process, on the same work, so only ratios are compared (DESIGN.md,
Performance). One configuration = a model, K clients of equal size, batch B and S local steps:

* ``sequential`` and ``vectorized``: one FedAvg round planned (``benchmark.runs.plan``) and run by the engine
  (``workloads.FederatedRound``: ``engine.local_training`` with that executor, then ``engine.aggregate``),
  from the same downlink every repeat, so evaluation and client sampling are excluded; ``auto``: the
  executor the planner picks;
* the limit: centralized training of the same model on the same samples, S steps on the K*B samples
  of the round concatenated into one batch (the same sample-gradients, one weight set). Two plain
  implementations are timed and the faster one is the limit (the best one can do for this work):
  ``limit_module`` (an ``nn.Module`` step: forward, ``backward()``, ``torch.optim.SGD``, native
  BatchNorm) and ``limit_functional`` (``torch.func.grad`` of ``functional_call`` on a flat parameter
  vector, the machinery the executors use, without vmap).

Throughput is sample-gradients per second (K * B * S per round) and rounds per second (for the limit,
"equivalent rounds": S centralized steps). Each method is warmed up, then the methods are timed in a
rotating order ``repeats`` times and the median time is used; CUDA is synchronised around each timing.
Data are synthetic random tensors (throughput does not depend on the values).
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import torch
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile

from benchmark import models
from benchmark.perf import devices
from benchmark.perf.workloads import RUN_METHODS, Config, RunsWorkload, Workload, _sync
from benchmark.runs.plan import resolve_device as resolve, run
from benchmark.runs.record import code_version
from benchmark.sim import engine, numerics

SCHEMA = 1
RUN_ROUNDS = {False: 3, True: 1}  # rounds per cell in the batched-runs measurement (full, --quick)
METHODS = ("sequential", "vectorized", "auto", "limit_module", "limit_functional")


@dataclass(frozen=True)
class Preset:
    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    models: tuple[str, ...]
    local_steps: int  # full run
    quick_local_steps: int
    about: str


PRESETS = {
    "fmnist_cnn": Preset("fmnist_cnn", (1, 28, 28), 10, ("fedbat_cnn",), 5, 1,
                         "FedBAT's FMNIST CNN (4 conv-BN-ReLU-pool) on 1x28x28 inputs"),
    "digits": Preset("digits", (1, 8, 8), 10, ("logreg", "mlp"), 20, 5,
                     "the offline digits models (logreg, mlp) on 1x8x8 inputs"),
}

#: (device type, preset, model, metric, minimum) from issues 4 and 14, the CUDA ones restated by issue 48 in what
#: the device can do: the batched runs' FLOP/s (counted FLOPs per sample-gradient x sample-gradients/s) as a
#: fraction of the device's dense FP32 peak (``benchmark.perf.devices``; 1.2e6 sample-gradients/s, the old
#: target, is 72e12 FLOP/s for the FedBAT CNN's 6.02e7 FLOPs per sample-gradient: above an H100's 67e12), and
#: the vectorized step against the ``nn.Module`` limit (the plain training loop a user would write)
TARGETS = (
    ("cpu", "digits", "logreg", "vectorized_over_sequential", 3.0),
    ("cpu", "fmnist_cnn", "fedbat_cnn", "auto_over_best", 0.9),  # auto within 10% of the faster executor
    ("cpu", "digits", "logreg", "batched_over_one_after_another", 2.0),  # 6 cells batched vs alone
    ("cpu", "digits", "mlp", "batched_over_one_after_another", 2.0),
    ("cuda", "fmnist_cnn", "fedbat_cnn", "batched_fraction_of_fp32_peak", 0.4),
    ("cuda", "fmnist_cnn", "fedbat_cnn", "vectorized_over_sequential", 20.0),
    ("cuda", "fmnist_cnn", "fedbat_cnn", "vectorized_over_limit_module", 0.6),
)


class BenchError(ValueError):
    """A user error (bad flag, missing device): exit code 2."""


@dataclass
class Measurement:
    config: Config
    params: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    flops_per_sample: float = 0.0
    auto: dict = field(default_factory=dict)  # the executor choice of ``executor="auto"`` (benchmark.runs.cost)

    def median(self, method: str) -> float:
        return statistics.median(self.seconds[method])

    def summary(self) -> dict:
        c = self.config
        work = c.sample_gradients_per_round
        med = {m: self.median(m) for m in self.seconds}
        best = {m: min(v) for m, v in self.seconds.items()}
        sgs = {m: work / t for m, t in med.items()}
        rps = {m: 1.0 / t for m, t in med.items()}
        limit_kind = max(("limit_module", "limit_functional"), key=lambda m: sgs[m])
        sgs["limit"], rps["limit"] = sgs[limit_kind], rps[limit_kind]
        return {
            "preset": c.preset, "model": c.model, "params": self.params, "input_shape": list(c.input_shape),
            "num_classes": c.num_classes, "clients": c.clients, "batch_size": c.batch_size,
            "local_steps": c.local_steps, "samples_per_client": c.samples_per_client,
            "sample_gradients_per_round": work,
            "seconds": self.seconds, "median_seconds": med,
            "sample_gradients_per_s": sgs, "rounds_per_s": rps, "limit_kind": limit_kind,
            "flops_per_sample": self.flops_per_sample, "auto_executor": self.auto.get("executor"),
            "auto_reason": self.auto.get("reason"),
            "vectorized_over_sequential": sgs["vectorized"] / sgs["sequential"],
            # auto against the faster of the two executors, each timed separately (1 = the right pick)
            "auto_over_best": sgs["auto"] / max(sgs["sequential"], sgs["vectorized"]),
            "vectorized_over_limit": sgs["vectorized"] / sgs["limit"],
            "vectorized_over_limit_module": sgs["vectorized"] / sgs["limit_module"],
            "sequential_over_limit": sgs["sequential"] / sgs["limit"],
            # the same ratios from the fastest repeat of each method (less sensitive to other processes)
            "min_seconds": best,
            "vectorized_over_sequential_min": best["sequential"] / best["vectorized"],
            "vectorized_over_limit_min": (min(best["limit_module"], best["limit_functional"])
                                          / best["vectorized"]),
        }


# --------------------------------------------------------------------------------------------------
# Devices


def bench_device(name: str | None):
    """The device to measure on: ``benchmark.runs.plan.resolve_device``'s (the one rule), its errors as
    ``BenchError``."""
    try:
        return resolve(name)[0]
    except ValueError as e:
        raise BenchError(f"--{e}") from None


def _device_name(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} ({os.cpu_count()} logical CPUs)"


def _load() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


# --------------------------------------------------------------------------------------------------
# Measuring


def measure(cfg: Config, device, repeats: int, warmup: int, log=None) -> Measurement:
    """Warm up every method, then time them ``repeats`` times in a rotating order."""
    w = Workload(cfg, device)
    m = Measurement(cfg, w.params, {name: [] for name in METHODS}, w.flops_per_sample, w.auto.execution())
    for method in METHODS:
        for _ in range(warmup):
            w.time_once(method)
    for r in range(repeats):
        order = METHODS[r % len(METHODS):] + METHODS[:r % len(METHODS)]
        for method in order:
            m.seconds[method].append(w.time_once(method))
        if log is not None:
            log(f"  {cfg.preset}/{cfg.model}: repeat {r + 1}/{repeats} "
                + " ".join(f"{k}={v[-1]:.3f}s" for k, v in m.seconds.items()))
    return m


# --------------------------------------------------------------------------------------------------
# Batched runs: R cells as one job vs one after another

def measure_runs(cfg: Config, device, runs: int, rounds: int, repeats: int, warmup: int, log=None) -> dict:
    w = RunsWorkload(cfg, device, runs, rounds)
    seconds = {m: [] for m in RUN_METHODS}
    for m in RUN_METHODS:
        for _ in range(warmup):
            w.time_once(m)
    for r in range(repeats):
        for m in (RUN_METHODS if r % 2 == 0 else RUN_METHODS[::-1]):
            seconds[m].append(w.time_once(m))
        if log is not None:
            log(f"  runs {cfg.preset}/{cfg.model}: repeat {r + 1}/{repeats} "
                + " ".join(f"{k}={v[-1]:.3f}s" for k, v in seconds.items()))
    med = {m: statistics.median(v) for m, v in seconds.items()}
    overhead = measure_round_overhead(w)
    return {"round_overhead_seconds": overhead, "preset": cfg.preset, "model": cfg.model, "runs": runs, "rounds": rounds, "clients": cfg.clients,
            "batch_size": cfg.batch_size, "local_steps": cfg.local_steps, "sample_gradients": w.sample_gradients,
            "alone_executor": w.alone_executor, "seconds": seconds, "median_seconds": med,
            "sample_gradients_per_s": {m: w.sample_gradients / t for m, t in med.items()},
            "seconds_per_run_round": {m: t / (runs * rounds) for m, t in med.items()},
            "batched_over_one_after_another": med["one_after_another"] / med["batched"],
            "batched_sample_gradients_per_s": w.sample_gradients / med["batched"]}


def round_overhead(result: dict) -> float | None:
    """The rest of a round beyond the executor (sampling, schedules, aggregation, evaluation, records)
    per run, for ``benchmark.runs.cost.CostModel``: measured on the batched-runs workload with the fewest FLOPs."""
    runs = [r for r in result.get("runs", []) if r.get("round_overhead_seconds") is not None]
    flops = {c["model"]: c.get("flops_per_sample", 0) for c in result.get("configs", [])}
    if not runs:
        return None
    return min(runs, key=lambda r: flops.get(r["model"], 0))["round_overhead_seconds"]


def measure_round_overhead(w: "RunsWorkload") -> float:
    """One untimed pass of the runs alone with a clock on the executor (from ``on_round_start``, after the
    broadcast, to the first ``on_client``, right after local training): wall time per run-round minus the
    executor's."""
    class Clock(engine.Observer):
        executor = 0.0
        t0 = None

        def on_round_start(self, run_state, event):
            self.t0 = time.perf_counter()

        def on_client(self, run_state, event):
            if self.t0 is not None:
                self.executor += time.perf_counter() - self.t0
                self.t0 = None

    clock = Clock()
    _sync(w.device)
    t0 = time.perf_counter()
    for e in w.exps:
        run(e, observers=[clock])
    _sync(w.device)
    return max(0.0, (time.perf_counter() - t0 - clock.executor) / (w.runs * w.rounds))


# --------------------------------------------------------------------------------------------------
# Profiles (what bounds a missed target)


def profile_table(fn, device, rows: int = 25) -> str:
    """``torch.profiler`` of one call of ``fn``: the operators by self time (CUDA time on a GPU)."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    fn()  # warm
    _sync(device)
    with profile(activities=acts) as prof:
        fn()
        _sync(device)
    keys = ("self_cuda_time_total", "self_device_time_total") if device.type == "cuda" else ("self_cpu_time_total",)
    for key in keys:  # torch versions name the device column differently
        try:
            return prof.key_averages().table(sort_by=key, row_limit=rows)
        except Exception:  # noqa: BLE001
            continue
    return prof.key_averages().table(row_limit=rows)


def write_profiles(cfgs: list, device, path: str, runs: int, quick: bool, log=None) -> str:
    """One text file with the profile of one vectorized round, one limit round and (with ``runs``) one
    batched job of every configuration."""
    parts = []
    for c in cfgs:
        w = Workload(c, device)
        for method in ("vectorized", "limit_module"):
            if log is not None:
                log(f"profiling {c.preset}/{c.model} {method}")
            parts.append(f"## {c.preset}/{c.model}: {method}, {c.clients}x{c.batch_size}x{c.local_steps}\n\n"
                         + profile_table(w.fns[method], device))
        if runs:
            rw = RunsWorkload(c, device, runs, RUN_ROUNDS[quick])
            if log is not None:
                log(f"profiling {c.preset}/{c.model} batched runs")
            parts.append(f"## {c.preset}/{c.model}: {runs} batched runs x {RUN_ROUNDS[quick]} rounds\n\n"
                         + profile_table(lambda rw=rw: rw.time_once("batched"), device))
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write("\n\n".join(parts) + "\n")
    return path


# --------------------------------------------------------------------------------------------------
# Running a set of configurations


def make_configs(preset: str = "fmnist_cnn", models: tuple[str, ...] | None = None, clients: int = 10,
                 batch_size: int = 64, local_steps: int | None = None, quick: bool = False,
                 seed: int = 0) -> list[Config]:
    """The configurations to measure: each preset's models (or ``models``), ``preset`` "all" for every one."""
    if preset != "all" and preset not in PRESETS:
        raise BenchError(f"unknown preset {preset!r}; choose {', '.join([*PRESETS, 'all'])}")
    presets = list(PRESETS) if preset == "all" else [preset]
    if clients < 1 or batch_size < 1:
        raise BenchError("--clients and --batch-size must be >= 1")
    if local_steps is not None and local_steps < 1:
        raise BenchError("--local-steps must be >= 1")
    out = []
    for name in presets:
        p = PRESETS[name]
        steps = local_steps or (p.quick_local_steps if quick else p.local_steps)
        for model in models or p.models:
            out.append(Config(name, model, p.input_shape, p.num_classes, clients, batch_size, steps,
                              samples_per_client=4 * batch_size, seed=seed))
    return out


def evaluate_targets(device_type: str, summaries: list[dict]) -> list[dict]:
    """Each target of ``TARGETS`` on this device type against the measurements that carry its metric; a metric
    carried as None (with its reason under ``why_<metric>``) gives a target not evaluated (``met`` None)."""
    out = []
    for dev, preset, model, metric, minimum in TARGETS:
        for s in summaries:
            if dev == device_type and s["preset"] == preset and s["model"] == model and metric in s:
                row = {"device": dev, "preset": preset, "model": model, "metric": metric, "minimum": minimum,
                       "value": s[metric]}
                out.append({**row, "met": None, "why": s.get(f"why_{metric}", "not measured")} if s[metric] is None
                           else {**row, "met": s[metric] >= minimum})
    return out


def add_peak_fraction(runs: list[dict], summaries: list[dict], device_name: str) -> None:
    """The batched runs' FLOP/s from the counted FLOPs per sample-gradient (``flops_per_sample``: forward and
    backward), and on a GPU its fraction of the device's dense FP32 peak (with TF32 on as well: the target is stated
    against FP32, and a TF32 run says so in its numerics), None with the reason where the peak is not listed."""
    flops = {s["model"]: s.get("flops_per_sample", 0.0) for s in summaries}
    peak = devices.peak_flops(device_name) if device_name else None
    for r in runs:
        f = flops.get(r["model"]) or 0.0
        if f:
            r["flops_per_s"] = r["batched_sample_gradients_per_s"] * f
            r["peak_flops_per_s"] = peak
            if device_name:
                r["batched_fraction_of_fp32_peak"] = r["flops_per_s"] / peak if peak else None
                if not peak:
                    r["why_batched_fraction_of_fp32_peak"] = (f"the FP32 peak of {device_name!r} is not listed "
                                                              "(benchmark/perf/devices.py)")


def run_bench(preset: str = "fmnist_cnn", models: tuple[str, ...] | None = None, device: str | None = None,
              clients: int = 10, batch_size: int = 64, local_steps: int | None = None, repeats: int | None = None,
              warmup: int | None = None, threads: int | None = None, seed: int = 0, quick: bool = False,
              runs: int = 6, profile: str | None = None, log=None, tf32: bool = False) -> dict:
    """Measure the configurations of ``make_configs`` on ``device`` (the flags of ``fedrepro bench``, as plain
    values): executors, the limit, the auto choice and, with ``runs`` > 0, batched runs. ``threads``: torch's
    CPU threads while measuring (restored after); ``profile``: also write torch.profiler tables to this file;
    ``tf32``: measure with TF32 on (CUDA matmuls and convolutions; never the runs' default), recorded in the
    result's numerics."""
    dev = bench_device(device)
    if threads is not None and threads < 1:
        raise BenchError("--threads must be >= 1")
    if runs < 0:
        raise BenchError("--runs must be >= 0")
    if repeats is not None and repeats < 1:
        raise BenchError("--repeats must be >= 1")
    if warmup is not None and warmup < 0:
        raise BenchError("--warmup must be >= 0")
    cfgs = make_configs(preset, models, clients, batch_size, local_steps, quick, seed)
    threads_before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:  # timed under the numerics policy the runs use (TF32, determinism: benchmark.sim.numerics), recorded
        with numerics.applied(numerics.Numerics(tf32=True) if tf32 else None):
            return _run_bench(cfgs, dev, repeats or (3 if quick else 5), 1 if warmup is None else warmup, quick,
                              runs, profile, log)
    finally:
        torch.set_num_threads(threads_before)  # leave the process as it was (tests, notebooks)


def _run_bench(cfgs: list[Config], device, repeats: int, warmup: int, quick: bool, runs_n: int,
               profile: str | None, log) -> dict:
    for c in cfgs:
        if c.model not in models.names():
            raise BenchError(f"unknown model {c.model!r}; see `fedrepro list models`")

    load_before = _load()
    cpus = os.cpu_count() or 1
    if log is not None and device.type == "cpu" and load_before and load_before[0] > cpus:
        log(f"warning: load average {load_before[0]} on {cpus} CPUs: other processes compete for the cores, "
            f"timings will be noisy (with {torch.get_num_threads()} torch threads, badly so; --threads 1 is "
            "steadier on a loaded machine)")
    t0 = time.perf_counter()
    summaries = []
    for c in cfgs:
        if log is not None:
            log(f"measuring {c.preset}/{c.model}: {c.clients} clients x batch {c.batch_size} x "
                f"{c.local_steps} local steps on {device}")
        summaries.append(measure(c, device, repeats, warmup, log).summary())
    runs = []
    if runs_n:
        for c in cfgs:
            if log is not None:
                log(f"measuring batched runs {c.preset}/{c.model}: {runs_n} cells x {c.clients} clients x batch "
                    f"{c.batch_size} x {c.local_steps} local steps x {RUN_ROUNDS[quick]} rounds on {device}")
            runs.append(measure_runs(c, device, runs_n, RUN_ROUNDS[quick], repeats, warmup, log))

    add_peak_fraction(runs, summaries, _device_name(device) if device.type == "cuda" else "")
    head = summaries[0]
    result = {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "device_name": _device_name(device),
        "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
        "quick": bool(quick), "repeats": repeats, "warmup": warmup,
        "load_average_before": load_before, "load_average_after": _load(),
        "wall_seconds": time.perf_counter() - t0,
        "code_version": code_version(), "numerics": numerics.in_force(),
        "headline": f"{head['preset']}/{head['model']}",
        "vectorized_over_sequential": head["vectorized_over_sequential"],
        "vectorized_over_limit": head["vectorized_over_limit"],
        "throughput": {"unit": "sample-gradients/s", **{m: head["sample_gradients_per_s"][m]
                                                       for m in ("sequential", "vectorized", "limit")}},
        "configs": summaries,
        "runs": runs,
        "targets": evaluate_targets(device.type, summaries + runs),
    }
    if runs:
        result["round_overhead_seconds"] = round_overhead(result)
    if profile:
        result["profile"] = write_profiles(cfgs, device, profile, runs_n, quick, log)
    return result


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _flops(r: dict) -> str:
    if not r.get("flops_per_s"):
        return "-"
    frac = r.get("batched_fraction_of_fp32_peak")
    return f"{r['flops_per_s']:.3g}" + ("" if frac is None else f" ({frac:.1%})")


def table(result: dict) -> str:
    rows = []
    for s in result["configs"]:
        sg, rp = s["sample_gradients_per_s"], s["rounds_per_s"]
        lim = "module" if s["limit_kind"] == "limit_module" else "functional"
        rows.append([s["preset"], s["model"], f"{s['params']:,}",
                     f"{s['clients']}x{s['batch_size']}x{s['local_steps']}",
                     _fmt(sg["sequential"]), _fmt(sg["vectorized"]), f"{_fmt(sg['limit'])} ({lim})",
                     f"{rp['sequential']:.3g}", f"{rp['vectorized']:.3g}",
                     f"{s['vectorized_over_sequential']:.2f}x ({s['vectorized_over_sequential_min']:.2f}x)",
                     f"{s['vectorized_over_limit']:.0%} ({s['vectorized_over_limit_min']:.0%})",
                     f"{s['auto_executor'][:3]}: {s['auto_over_best']:.2f}"])
    headers = ["preset", "model", "params", "clients x batch x steps", "sequential sg/s", "vectorized sg/s",
               "limit sg/s", "seq rounds/s", "vec rounds/s", "vec/seq", "vec/limit", "auto: picks, /faster"]
    lines = [(f"fedrepro bench on {result['device']} ({result['device_name']}), torch {result['torch']}, "
              f"{result['threads']} threads, median of {result['repeats']}; load average "
              f"{result['load_average_before']} -> {result['load_average_after']}"),
             tabulate(rows, headers=headers, tablefmt="github"),
             ("sg/s = sample-gradients per second; limit = centralized training of the same model on the "
              "same K*B samples per step (the faster of an nn.Module step and a torch.func.grad step); "
              "throughputs and ratios from median times, ratios in parentheses from the fastest repeats; "
              "auto: the executor executor=\"auto\" picks (benchmark.runs.cost), timed separately, over the faster "
              "of sequential and vectorized (1 = the right pick).")]
    if result.get("runs"):
        rows = [[r["preset"], r["model"], f"{r['runs']} x {r['clients']}x{r['batch_size']}x{r['local_steps']} x "
                 f"{r['rounds']} rounds", r["alone_executor"],
                 _fmt(r["sample_gradients_per_s"]["one_after_another"]), _fmt(r["sample_gradients_per_s"]["batched"]),
                 f"{r['batched_over_one_after_another']:.2f}x", _flops(r)] for r in result["runs"]]
        lines += ["", "Batched runs (complete runs, set-up and evaluation included):",
                  tabulate(rows, headers=["preset", "model", "cells x clients x batch x steps x rounds",
                                          "alone: executor", "one after another sg/s", "batched sg/s",
                                          "batched / one after another", "batched FLOP/s (of FP32 peak)"],
                           tablefmt="github")]
        if result.get("round_overhead_seconds") is not None:
            lines.append(f"rest of a round beyond the executor (cost model of `fedrepro list suites`): "
                         f"{result['round_overhead_seconds'] * 1e3:.1f} ms")
    for t in result["targets"]:
        verdict = (f"not evaluated: {t['why']}" if t["met"] is None
                   else f"{t['value']:.2f} -> {'met' if t['met'] else 'NOT met'}")
        lines.append(f"target {t['device']} {t['preset']}/{t['model']}: {t['metric']} >= {t['minimum']:g}: {verdict}")
    return "\n".join(lines)


