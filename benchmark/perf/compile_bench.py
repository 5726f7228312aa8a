"""Compiled vs uncompiled local step, timed in one process (issue 24): ``fedrepro bench --compile``.

One configuration (``benchmark.perf.workloads.Config``: a model, K clients of equal size, batch B, S local
steps) as three FedAvg rounds through the engine (``workloads.FederatedRound``, from the same downlink
every call): ``sequential``, ``vectorized`` and ``compiled`` (the vectorized executor with
``Experiment.compile``: the vmapped local update through ``torch.compile``). The compiled round's first
call compiles (one graph per shape: the S steps are unrolled in it); it is timed apart and reported as
the compile time, with the executor's own ``compile_seconds`` (cold only with inductor's on-disk caches
off: ``CACHE_VARS`` set to 0, recorded in the result). Then every method is warmed once and
timed ``repeats`` times in a rotating order; the ratios are of median times (and of the fastest repeats).
The compiled round's aggregated model is compared with the uncompiled one (float tolerance, not bitwise).
With ``graph`` (``fedrepro bench --compile graph``, issue 48) a fourth method, ``graph``: the step compiled whole
and replayed as a CUDA graph (``compile="graph"``), timed and compared the same way (on a CPU it is the
``compiled`` code again, a check of the path rather than a measurement).

What the planner makes of these numbers is ``benchmark.runs.cost.choose_compile`` (its table cites the file
these measurements are written to).
"""
from __future__ import annotations

import copy
import dataclasses
import datetime
import gc
import os
import platform
import statistics
import time

import torch
from torch.utils._pytree import tree_flatten

from benchmark.perf.bench import _device_name, _load, bench_device, make_configs
from benchmark.perf.workloads import FederatedRound, _sync, synthetic_data
from benchmark.runs.experiment import Experiment
from benchmark.runs.record import code_version
from benchmark.sim import numerics

METHODS = ("sequential", "vectorized", "compiled")
GRAPH_METHOD = "graph"
#: inductor's on-disk caches: with them on, a graph compiled before (by any process) loads in seconds
CACHE_VARS = ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE")


def rounds_for(cfg, device, graph: bool = False) -> dict:
    """The three rounds of ``cfg`` on ``device`` (module docstring; four with ``graph``), keyed by method."""
    exp = Experiment(algorithm="fedavg", dataset=synthetic_data(cfg), model=cfg.model, num_clients=None,
                     clients_per_round=cfg.clients, rounds=1, local_steps=cfg.local_steps,
                     batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, eval_train_samples=None,
                     divergence_factor=None, device=str(device))
    out = {"sequential": FederatedRound(dataclasses.replace(exp, executor="sequential")),
           "vectorized": FederatedRound(dataclasses.replace(exp, executor="vectorized")),
           "compiled": FederatedRound(dataclasses.replace(exp, executor="vectorized", compile=True))}
    if graph:
        out[GRAPH_METHOD] = FederatedRound(dataclasses.replace(exp, executor="vectorized", compile="graph"))
    return out


def _timed(fn, device) -> tuple[float, object]:  # (seconds, fn's result)


    gc.collect()
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def _max_diff(a, b) -> float:
    """Largest absolute difference between two rounds' server states (``engine.aggregate`` sets them)."""
    fa = [t for t in _tensors(a) if torch.is_floating_point(t)]
    fb = [t for t in _tensors(b) if torch.is_floating_point(t)]
    if len(fa) != len(fb) or not fa:
        raise ValueError("the compiled and uncompiled rounds returned different results")
    return max(float((x - y).abs().max()) for x, y in zip(fa, fb))


def _tensors(x):
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
    leaves = tree_flatten(x)[0]
    out = []
    for v in leaves:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            out += _tensors(v)
    return out


def measure_compile(cfg, device, repeats: int = 5, log=None, graph: bool = False) -> dict:
    """Time ``cfg``'s rounds (module docstring); seconds, medians, ratios, compile time, agreement."""
    rounds = rounds_for(cfg, device, graph)
    methods = tuple(rounds)
    # engine.aggregate moves each round's server state on from where the last call left it (the downlink
    # stays the round's): the agreement is checked from the same starting state, one call each
    start = {m: copy.deepcopy((r.runs[0].server, r.runs[0].buffers)) for m, r in rounds.items()}
    first = _timed(rounds["compiled"], device)[0]
    compile_s = rounds["compiled"].executor.compile_seconds
    if log is not None:
        log(f"  {cfg.model}: compiled round's first call {first:.1f} s (compile_seconds {compile_s:.1f})")
    graph_first = _timed(rounds[GRAPH_METHOD], device)[0] if graph else None
    seconds = {m: [] for m in methods}
    for m in methods:  # warm (the compiled ones: their second call, any lazy work after compilation; a CUDA
        _timed(rounds[m], device)  # graph is recorded on a warm call)
    for r in range(repeats):
        order = methods[r % len(methods):] + methods[:r % len(methods)]
        for m in order:
            seconds[m].append(_timed(rounds[m], device)[0])
        if log is not None:
            log(f"  {cfg.model}: repeat {r + 1}/{repeats} " + " ".join(f"{k}={v[-1]:.3f}s" for k, v in seconds.items()))
    for m in ("vectorized", "compiled") + ((GRAPH_METHOD,) if graph else ()):
        rounds[m].runs[0].server, rounds[m].runs[0].buffers = copy.deepcopy(start[m])
        rounds[m]()
    med = {m: statistics.median(v) for m, v in seconds.items()}
    best = {m: min(v) for m, v in seconds.items()}

    def against(m: str, compile_seconds: float) -> dict:  # a compiled method against the uncompiled round
        saved = med["vectorized"] - med[m]
        return {"over_vectorized": med["vectorized"] / med[m], "over_vectorized_min": best["vectorized"] / best[m],
                "over_sequential": med["sequential"] / med[m],
                # rounds after which the compile time is paid back (None: never, not faster)
                "break_even_rounds": compile_seconds / saved if saved > 0 else None,
                "max_abs_diff_vs_vectorized": _max_diff(rounds[m].runs[0].server, rounds["vectorized"].runs[0].server)}

    c = against("compiled", compile_s)
    extra = {}
    if graph:
        g_s = rounds[GRAPH_METHOD].executor.compile_seconds
        extra = {"graph_first_call_seconds": graph_first, "graph_compile_seconds": g_s,
                 "graph_over_compiled": med["compiled"] / med[GRAPH_METHOD],
                 **{f"graph_{k}": v for k, v in against(GRAPH_METHOD, g_s).items()}}
    return {**extra, "model": cfg.model, "clients": cfg.clients, "batch_size": cfg.batch_size, "local_steps": cfg.local_steps,
            "seconds": seconds, "median_seconds": med, "min_seconds": best,
            "first_compiled_call_seconds": first, "compile_seconds": compile_s,
            # speed ratios (> 1: compiled faster)
            "compiled_over_vectorized": c["over_vectorized"], "compiled_over_vectorized_min": c["over_vectorized_min"],
            "compiled_over_sequential": c["over_sequential"],
            "vectorized_over_sequential": med["sequential"] / med["vectorized"],
            "break_even_rounds": c["break_even_rounds"], "max_abs_diff_vs_vectorized": c["max_abs_diff_vs_vectorized"]}


def markdown(result: dict) -> str:
    """The measurements as a markdown table."""
    lines = [f"`fedrepro bench --compile` on {result['device']} ({result['device_name']}), torch {result['torch']}, "
             f"{result['threads']} threads, median of {result['repeats']} interleaved repeats; load average "
             f"{result['load_average_before']} -> {result['load_average_after']}; inductor caches "
             f"{result.get('inductor_caches')} (compile seconds are cold with both '0').", "",
             "| model | clients x batch x steps | sequential s | vectorized s | compiled s | compiled / vectorized "
             "speed (fastest) | compiled / sequential speed | compile s | break-even rounds | max abs diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["models"]:
        m, be = r["median_seconds"], r["break_even_rounds"]
        lines.append(f"| {r['model']} | {r['clients']}x{r['batch_size']}x{r['local_steps']} | {m['sequential']:.3f} "
                     f"| {m['vectorized']:.3f} | {m['compiled']:.3f} | {r['compiled_over_vectorized']:.2f}x "
                     f"({r['compiled_over_vectorized_min']:.2f}x) | {r['compiled_over_sequential']:.2f}x "
                     f"| {r['compile_seconds']:.1f} | {'never' if be is None else f'{be:,.0f}'} "
                     f"| {r['max_abs_diff_vs_vectorized']:.1e} |")
    graphs = [r for r in result["models"] if "graph_over_vectorized" in r]
    if graphs:
        lines += ["", "The step compiled whole and replayed as a CUDA graph (`compile=\"graph\"`; on a CPU the compiled "
                  "code without a graph):", "",
                  "| model | graph s | graph / vectorized speed (fastest) | graph / compiled speed | graph / sequential "
                  "speed | compile s | break-even rounds | max abs diff |", "|---|---|---|---|---|---|---|---|"]
        for r in graphs:
            be = r["graph_break_even_rounds"]
            lines.append(f"| {r['model']} | {r['median_seconds'][GRAPH_METHOD]:.3f} | {r['graph_over_vectorized']:.2f}x "
                         f"({r['graph_over_vectorized_min']:.2f}x) | {r['graph_over_compiled']:.2f}x "
                         f"| {r['graph_over_sequential']:.2f}x | {r['graph_compile_seconds']:.1f} "
                         f"| {'never' if be is None else f'{be:,.0f}'} | {r['graph_max_abs_diff_vs_vectorized']:.1e} |")
    return "\n".join(lines) + "\n"


def run_compile_bench(preset: str = "fmnist_cnn", models: tuple[str, ...] | None = None, device: str | None = None,
                      clients: int = 10, batch_size: int = 64, local_steps: int | None = None,
                      repeats: int | None = None, threads: int | None = None, seed: int = 0, quick: bool = False,
                      log=None, graph: bool = False, tf32: bool = False) -> dict:
    """:func:`measure_compile` for each configuration of ``benchmark.perf.bench.make_configs`` (the flags of
    ``fedrepro bench --compile``), under the runs' numerics policy, with the environment recorded."""
    dev = bench_device(device)
    cfgs = make_configs(preset, models, clients, batch_size, local_steps, quick, seed)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        load = _load()
        with numerics.applied(numerics.Numerics(tf32=True) if tf32 else None):
            configs = [measure_compile(c, dev, repeats or (3 if quick else 5), log, graph) for c in cfgs]
        return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "device": str(dev), "device_name": _device_name(dev), "torch": torch.__version__,
                "python": platform.python_version(), "threads": torch.get_num_threads(),
                "repeats": repeats or (3 if quick else 5), "load_average_before": load, "load_average_after": _load(),
                "code_version": code_version(), "numerics": numerics.in_force(),
                # compile seconds are cold only with these off ("0"): a cached graph compiles in seconds
                "inductor_caches": {v: os.environ.get(v) for v in CACHE_VARS},
                "kind": "compile", "models": configs}  # not "configs": cost.latest_bench reads those
    finally:
        torch.set_num_threads(before)
