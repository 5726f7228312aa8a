"""Plan, then execute (DESIGN.md): the *how* of a list of experiments, decided once, and the one way to run it.

``plan(exps, ...)`` turns experiments (the hashed *what*) into :class:`Job` s and decides, once and each
with its reason:

* the device: ``"auto"`` is CUDA when torch sees one, else the CPU (:func:`resolve_device`, the only place
  that resolves a device);
* the executor of a run alone: ``benchmark.runs.cost.executor_rule``'s rule, from the model's FLOPs and the
  mean local batch, known from the experiment before any data is read (so the dry run and the run agree);
  the sequential one where an observer watches every local step;
* torch's intra-op threads (:func:`choose_threads`: the free cores shared out among the workers);
* the batched groups: runs that share a ``benchmark.runs.batched.group_key`` train as one job (one ``vmap``
  over runs x clients), at most ``group_runs`` of them; ``group_runs=None`` (the default, everywhere) is
  ``benchmark.runs.batched.default_group_runs``'s size for the device and model, and 1 for the process and Ray
  backends (their workers run cells in parallel instead) and for runs whose executor alone is the
  sequential one (asked for, e.g. ``--executor sequential``, or chosen: batching does not pay there).

The reasons go into every run record (``execution``). ``execute(job)`` runs any job, a single run being a
job of one, through the round loop of ``benchmark.sim.engine``; :func:`run` (``benchmark.run``) is one
experiment planned and executed, :func:`run_group` a batched group.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

import algorithms

from benchmark import models
from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.runs import batched, checkpoint, cost, malloc
from benchmark.runs.build import load_dataset, make_result, prepare
from benchmark.runs.experiment import Experiment
from benchmark.runs.record import RunResult, run_code_version
from benchmark.sim import engine, executors as ex, numerics, phases

AUTO = "auto"
BACKENDS = ("local", "process", "ray")


# --------------------------------------------------------------------------------------------------
# Device


def resolve_device(name: str | None = None) -> tuple[torch.device, str]:
    """The device a run with ``device=name`` uses (None or "auto": CUDA when torch sees one, else the CPU),
    and why. Raises ValueError for an unknown device or CUDA that torch does not see."""
    if name in (None, AUTO):
        if torch.cuda.is_available():
            return torch.device("cuda"), "auto: torch sees a CUDA device"
        return torch.device("cpu"), "auto: torch sees no CUDA device"
    name = str(name)
    if name != "cpu" and not (name == "cuda" or name.startswith("cuda:")):
        raise ValueError(f"device must be auto, cpu or cuda, got {name!r}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ValueError(f"device {name} was asked for but torch {torch.__version__} ({built}) sees no CUDA "
                         "device; use --device cpu or --device auto")
    return torch.device(name), "asked for"


def device_type(name: str | None = None) -> str:
    """The device type (cpu, cuda) a run with ``device=name`` uses."""
    return resolve_device(name)[0].type


# --------------------------------------------------------------------------------------------------
# Threads


@dataclass(frozen=True)
class Threads:
    """torch's intra-op threads for a run, and the rule that chose them (stated in the run record)."""

    n: int
    rule: str


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_load() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def choose_threads(workers: int = 1, cpus: int | None = None, load: float | None = None) -> Threads:
    """Threads for each of ``workers`` processes: the free cores (CPUs minus the 1-minute load average,
    at least 1) shared out, at least one each. With ``workers <= cpus`` (the runner's rule) the threads of
    all workers never exceed the cores: oversubscribed torch threads spin against each other (the smoke
    suite on a 2-core machine at load average ~10: 3 min 54 s with torch's default 2 threads, 24 s with 1;
    the same numbers)."""
    cpus = cpus or usable_cpus()
    load = machine_load() if load is None else load
    free = cpus if load is None else max(1, min(cpus, int(cpus - load + 0.5)))
    n = max(1, free // max(1, workers))
    return Threads(n, f"{n} = {free} free of {cpus} CPUs (1-min load {load}) / {workers} worker(s)")


def load_warning(cpus: int | None = None, load: float | None = None) -> str | None:
    """A warning when other processes already keep every core busy, else None."""
    cpus = cpus or usable_cpus()
    load = machine_load() if load is None else load
    if load is None or load <= cpus:
        return None
    return (f"load average {load} on {cpus} CPUs: other processes compete for the cores, so runs get fewer "
            f"torch threads and take longer than on an idle machine (wall times in the records show it)")


def resolve_threads(threads: Threads | int | str | None, backend: str = "local", workers: int = 1) -> Threads | None:
    """``threads`` as given (an int, or ``Threads``), "auto" (the free cores shared among ``workers``; one
    per Ray task), or None (torch's setting left as it is)."""
    if threads is None or isinstance(threads, Threads):
        return threads
    if threads == AUTO:
        return Threads(1, "1: a Ray task holds one CPU") if backend == "ray" else choose_threads(workers)
    return Threads(int(threads), f"{int(threads)} (asked for)")


def use_threads(threads: Threads | int | None) -> str | None:
    """Set torch's intra-op threads; the rule, for the run record (None: left as they are)."""
    threads = resolve_threads(threads)
    if threads is None:
        return None
    torch.set_num_threads(threads.n)
    return threads.rule


# --------------------------------------------------------------------------------------------------
# Executor


def _flops(exp: Experiment, work: dict) -> float:
    """Forward+backward FLOPs per sample of ``exp``'s model, built on the meta device (no data read)."""
    shape, classes = tuple(work["input_shape"]), work["classes"]
    if isinstance(exp.model, str):
        return cost.model_flops(exp.model, shape, classes, json.dumps(dict(exp.model_args), sort_keys=True))
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        module = exp.model(shape, classes)
    return cost.flops_per_sample(module, shape)


def choose_executor(exp: Experiment, device_type: str, observe_steps: bool = False) -> cost.ExecutorChoice:
    """The executor ``exp`` takes alone on ``device_type``: its own, or for "auto" ``benchmark.runs.cost``'s rule on
    the model's FLOPs and the mean local batch (``benchmark.runs.cost.cell_work``); with ``compile``, the
    vectorized executor where its compiled round is measured faster than the sequential one
    (``benchmark.runs.cost.compiled_beats_sequential``)."""
    if observe_steps:
        return cost.ExecutorChoice("sequential", "an observer watches every local step: the sequential executor",
                                   0.0, 0.0)
    vectorizable = algorithms.get_class(exp.algorithm).vectorizable
    if exp.executor != AUTO:
        return cost.executor_rule(exp.executor, device_type, vectorizable, 0.0, 0.0)
    work = cost.cell_work(exp)
    choice = cost.executor_rule(AUTO, device_type, vectorizable, _flops(exp, work), work["batch"])
    why = cost.compiled_beats_sequential(device_type, exp.model, exp.rounds, exp.compile) if exp.compile else None
    if choice.executor == "sequential" and vectorizable and why:
        return dataclasses.replace(choice, executor="vectorized", reason=why)
    return choice


# --------------------------------------------------------------------------------------------------
# Jobs


@dataclass(frozen=True)
class Job:
    """Runs executed together: one run, or a batched group (one ``vmap`` over runs x clients), with every
    decision about how and why (:func:`plan`)."""

    experiments: tuple  # as they run (a batched group's executor field: "vectorized")
    indices: tuple  # their positions in the planned list
    device: str  # resolved: cpu, cuda, cuda:1
    executor: str  # sequential | vectorized
    threads: Threads | None  # torch's intra-op threads (None: left as they are)
    reasons: dict = field(default_factory=dict)  # device, executor, group: why
    choice: dict = field(default_factory=dict)  # a run alone: the executor rule's record (FLOPs per step)
    batched: tuple = ()  # a batched group: the hyperparameters that differ across its runs
    compile: bool | str = False  # the vectorized local update through torch.compile: True or "graph" (cost.choose_compile)
    checkpoints: str | None = None  # a folder: save the runs every checkpoint_every_s, resume them from it
    checkpoint_every_s: float = checkpoint.EVERY_SECONDS  # (benchmark.runs.checkpoint; set by benchmark.campaign.runner)
    numerics: numerics.Numerics | None = None  # the numerics policy the runs use (None: the process's); travels
    # with the job to worker processes and Ray tasks (`fedrepro run --deterministic`)

    def __len__(self) -> int:
        return len(self.experiments)

    def execution(self, i: int = 0) -> dict:
        """Run i's ``execution`` record: the executor and why, and the other decisions with their reasons."""
        how = {"device": self.device, "device_reason": self.reasons.get("device"),
               "threads": None if self.threads is None else self.threads.n,
               "threads_reason": "torch's setting, left as it is" if self.threads is None else self.threads.rule,
               "group_reason": self.reasons.get("group")}
        if "compile" in self.reasons:  # the run asked to compile: whether it does, and why
            how = {**how, "compile": self.compile, "compile_reason": self.reasons["compile"]}
        if len(self) == 1:
            return {**self.choice, "executor": self.executor, "reason": self.reasons.get("executor"), **how}
        return {"executor": self.executor, "reason": self.reasons.get("executor"), "group_runs": len(self),
                "batched_hyperparameters": list(self.batched), "group_index": i, **how}


@dataclass(frozen=True)
class _Cell:
    """One experiment with its own decisions, before grouping."""

    exp: Experiment
    device: torch.device
    device_reason: str
    choice: cost.ExecutorChoice | None
    error: str | None = None


def _cells(exps: Sequence[Experiment], device: str | None, executor: str | None, observe_steps: bool) -> list:
    if executor is not None and executor not in (AUTO, *ex.EXECUTORS):
        raise ValueError(f"executor must be auto, sequential or vectorized, got {executor!r}")
    devices: dict = {device: resolve_device(device)} if device else {}  # checked even when nothing is left to run
    out = []
    for e in exps:
        e = dataclasses.replace(e, **({"device": device} if device else {}), **({"executor": executor} if executor else {}))
        if e.device not in devices:
            devices[e.device] = resolve_device(e.device)
        dev, why = devices[e.device]
        try:
            out.append(_Cell(e, dev, why, choose_executor(e, dev.type, observe_steps)))
        except Exception as err:  # noqa: BLE001 - an invalid cell fails when it runs, and is recorded so
            out.append(_Cell(e, dev, why, None, f"{type(err).__name__}: {err}"))
    return out


def _single(c: _Cell, index: int, threads: Threads | None, group_reason: str) -> Job:
    ch = c.choice or cost.ExecutorChoice(c.exp.executor if c.exp.executor != AUTO else "sequential",
                                         f"not planned ({c.error}); the run reports the error", 0.0, 0.0)
    rec = ch.record()
    compiled, why = _compile(c.exp, ch.executor, c.device.type)
    return Job((c.exp,), (index,), str(c.device), ch.executor, threads,
               {"device": c.device_reason, "executor": ch.reason, "group": group_reason,
                **({"compile": why} if why else {})},
               {k: rec[k] for k in ("flops_per_sample", "flops_per_client_step")}, compile=compiled)


def _compile(exp: Experiment, executor: str, device_type: str) -> tuple[bool | str, str | None]:
    return cost.choose_compile(exp.compile, exp.executor, executor, device_type, exp.model, exp.rounds)


def _group(cells: list, indices: list, threads: Threads | None, group_reason: str) -> Job:
    exps = [dataclasses.replace(c.exp, executor="vectorized") for c in cells]
    cls = algorithms.get_class(exps[0].algorithm)
    free = batched.tensor_fields(exps[0].algorithm)
    hps = [algorithms.core.make_hyper(cls, e.algorithm_args) for e in exps]
    varying = [f for f in sorted(free - {batched.LR}) if len({repr(getattr(h, f)) for h in hps}) > 1]
    lr_varies = len({e.lr for e in exps}) > 1 or len({e.lr_decay for e in exps}) > 1
    c = cells[0]
    compiled, why = _compile(c.exp, "vectorized", c.device.type)  # compile is a field the group shares
    return Job(tuple(exps), tuple(indices), str(c.device), "vectorized", threads,
               {"device": c.device_reason, "group": group_reason,
                "executor": f"batched: {len(exps)} runs in one vmap over (run, client) pairs (benchmark.runs.plan)",
                **({"compile": why} if why else {})},
               {}, tuple((["lr"] if lr_varies else []) + varying), compile=compiled)


def group_size(exp: Experiment, device: torch.device, alone: cost.ExecutorChoice) -> batched.GroupSize:
    """``benchmark.runs.batched.default_group_runs`` for ``exp`` on ``device`` (model on the meta device, no data)."""
    if not isinstance(exp.model, str) or isinstance(exp.dataset, FederatedDataset):
        return batched.GroupSize(batched.CPU_GROUP_RUNS, "a dataset or model object: the CPU default")

    work = cost.cell_work(exp)
    shape = tuple(work["input_shape"])
    with torch.device("meta"):
        module = models.build(exp.model, shape, work["classes"], **dict(exp.model_args))
    flops = cost.flops_per_sample(module, shape)
    free = float(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None
    return batched.default_group_runs(device.type, alone.executor, flops, cost.activation_bytes_per_sample(module, shape),
                                      sum(p.numel() for p in module.parameters()), work["clients_per_round"],
                                      work["batch"], free)


def _key(c: _Cell) -> tuple:
    try:
        return batched.group_key(c.exp)
    except (TypeError, ValueError) as err:  # invalid hyperparameters: the run reports them
        return ("invalid", f"{type(err).__name__}: {err}")


def _seed_key(c: _Cell) -> tuple:
    """``_key`` narrowed to the runs that differ only in their seeds (their whole configuration else equal)."""
    key = _key(c)
    if key[0] != "group":
        return key
    cfg = {k: v for k, v in c.exp.config().items() if k != "seed"}
    return ("group", key[1], json.dumps(cfg, sort_keys=True, default=str))


def _sizes(cells: list, idx: list, group_runs: int | None) -> tuple[int, str]:
    """How many runs of one batch key share a job, and why."""
    if group_runs is not None:
        return group_runs, f"group_runs={group_runs}"
    size = group_size(cells[idx[0]].exp, cells[idx[0]].device, cells[idx[0]].choice)
    return size.runs, size.reason


def plan(exps: Sequence[Experiment], *, device: str | None = None, executor: str | None = None,
         group_runs: int | None = None, backend: str = "local", workers: int = 1,
         threads: Threads | int | str | None = AUTO, observe_steps: bool = False) -> list[Job]:
    """The jobs that run ``exps`` (module docstring), in the order of their first experiment.

    ``device``/``executor``: override every experiment's own (None: keep them). ``group_runs``: at most
    that many runs per batched job (1: every run alone; None: the default rule). ``backend``/``workers``:
    where the runs go (``benchmark.campaign.runner``), for the threads and the default group size. ``threads``:
    "auto" (the free cores), a number, or None (torch's setting left as it is). ``observe_steps``: an
    observer watches every local step (sequential executor, runs alone)."""
    if group_runs is not None and (isinstance(group_runs, bool) or not isinstance(group_runs, int) or group_runs < 1):
        raise ValueError(f"group_runs must be an integer >= 1 (or None: chosen per kind of cell), got {group_runs!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose local, process or ray")
    cells = _cells(exps, device, executor, observe_steps)
    thr = resolve_threads(threads, backend, workers)
    alone = "a single run" if len(cells) == 1 else "observed step by step" if observe_steps else \
        "group_runs=1" if group_runs == 1 else None
    if alone:
        return [_single(c, i, thr, alone) for i, c in enumerate(cells)]
    # the process and Ray backends' workers run cells in parallel: by default they batch only runs that differ in
    # their seeds alone, whose records are then those of the runs alone, bit for bit (0.5.0, issue 45)
    seeds_only = group_runs is None and backend != "local"
    by_key: dict = {}
    for i, c in enumerate(cells):
        by_key.setdefault(("invalid", i) if c.error else _seed_key(c) if seeds_only else _key(c), []).append(i)
    jobs = []
    for key, idx in by_key.items():
        if key[0] != "group":
            why = f"{cells[idx[0]].exp.algorithm} is not vectorizable: runs alone" if key[0] == "alone" else \
                f"not planned ({cells[idx[0]].error or key[1]})"
            jobs += [_single(cells[i], i, thr, why) for i in idx]
            continue
        n, why = _sizes(cells, idx, group_runs)
        if seeds_only:
            why = f"backend {backend}: " + (f"runs that differ only in their seeds (bit for bit as alone); {why}"
                                             if n > 1 else why)
        for s in range(0, len(idx), n):
            part = idx[s:s + n]
            jobs.append(_group([cells[i] for i in part], part, thr, why) if len(part) > 1 else
                        _single(cells[part[0]], part[0], thr, f"{why}; no other run to batch with"
                                if n > 1 else why))
    return sorted(jobs, key=lambda j: j.indices[0])


def plan_one(exp: Experiment, threads: Threads | int | str | None = None, observe_steps: bool = False) -> Job:
    """The job of one run (threads left as they are unless given)."""
    return plan([exp], threads=threads, observe_steps=observe_steps)[0]


def group_job(exps: Sequence[Experiment], threads: Threads | int | str | None = None) -> Job:
    """``exps`` (one ``benchmark.runs.batched.group_key``) as one batched job."""
    keys = {batched.group_key(e) for e in exps}
    if len(keys) != 1 or next(iter(keys))[0] != "group":
        raise ValueError("these experiments cannot share a batched job (they differ in a field that must be "
                         f"equal: one of {', '.join(batched.SHARED_FIELDS)}, or a hyperparameter that is not "
                         "batchable); use benchmark.runs.plan.plan")
    cells = _cells(exps, None, None, False)
    bad = [c.error for c in cells if c.error]
    if bad:
        raise ValueError(bad[0])
    return _group(cells, list(range(len(cells))), resolve_threads(threads), f"{len(cells)} runs asked to batch")


def split(job: Job) -> list[Job]:
    """The runs of ``job`` as jobs of one (a batched job that failed as a whole runs them one by one)."""
    return [dataclasses.replace(plan_one(e, job.threads), indices=(i,), checkpoints=job.checkpoints,
                                checkpoint_every_s=job.checkpoint_every_s, numerics=job.numerics)
            for i, e in zip(job.indices, job.experiments)]


# --------------------------------------------------------------------------------------------------
# Execute


def execute(job: Job, *, observers: Sequence[Sequence] | None = None, init: torch.Tensor | None = None,
            lr_schedule: Callable[[int], float] | None = None, optimizer=None):
    """Run ``job`` through ``benchmark.sim.engine.run_rounds``; yield ``(i, RunResult)`` for its i-th run as soon as
    that run finishes (diverged runs early, the others after the last round).

    ``observers[i]``: run i's observers; ``init``: a flat initial parameter vector replacing the seeded one
    (its fingerprint enters the config and its hash); ``lr_schedule`` (round -> local learning rate) and
    ``optimizer`` replace the experiments' (the theory checks' schedules, which an Experiment cannot state).
    ``job.checkpoints``: a folder the runs resume from and save to (``benchmark.runs.checkpoint``; the runner sets
    it), unused with ``init``, ``lr_schedule`` or ``optimizer``.
    """
    rule = use_threads(job.threads)
    malloc.keep_freed_blocks()
    with phases.phase("job"):
        yield from _execute(job, observers, init, lr_schedule, optimizer, rule)


def _execute(job: Job, observers, init, lr_schedule, optimizer, rule):
    t0, c0 = time.perf_counter(), time.process_time()
    # the job's numerics policy, else the process's (TF32, determinism), recorded in each record
    with numerics.applied() if job.numerics is None else numerics.using(job.numerics):
        preps, runs, hypers = start(job, init, lr_schedule, optimizer)
        resumed, saver = [0] * len(runs), None
        if job.checkpoints is not None and init is None and lr_schedule is None and optimizer is None:
            hashes = [e.config_hash() for e in job.experiments]
            codes = functools.cache(lambda: [run_code_version(e.algorithm) for e in job.experiments])
            resumed = checkpoint.resume(runs, hashes, codes, job.checkpoints)
            before = [r.history[-1]["wall_time"] if k else 0.0 for r, k in zip(runs, resumed)]
            saver = checkpoint.Saver(job.checkpoints, runs, hashes, codes, job.checkpoint_every_s)
        for i, out in engine.run_rounds(runs, job.executor, hypers, observers, after_round=saver):
            wall, how = time.perf_counter() - t0, job.execution(i)
            if resumed[i]:
                wall, how = wall + before[i], {**how, "resumed_from_round": resumed[i]}
            yield i, make_result(job.experiments[i], preps[i], out, wall, how, init, rule,
                                 cpu=time.process_time() - c0)


def start(job: Job, init: torch.Tensor | None = None, lr_schedule: Callable[[int], float] | None = None,
          optimizer=None) -> tuple[list, list, list]:
    """What ``execute`` runs: each run's ``build.Prepared`` (its loop settings with the job's ``compile`` and
    ``lr_schedule``), its ``engine.RunState`` before round 0, and its values of the batched hyperparameters
    (``fedrepro bench`` times rounds of these)."""
    exps = job.experiments
    data = load_dataset(exps[0], torch.device(job.device)) if len(exps) > 1 else None  # one copy for the group
    preps = [prepare(e, job.device, data, compile=job.compile, lr_schedule=lr_schedule) for e in exps]
    runs = [engine.start(p.alg, p.fmodel, p.data, p.parts, p.cfg, optimizer or p.optimizer, init) for p in preps]
    hypers = [{f: float(getattr(p.alg.hp, f)) for f in job.batched if f != "lr"} for p in preps]
    return preps, runs, hypers


def run(exp: Experiment, progress: bool | Callable[[int, dict], None] = False, *, observers: Sequence = (),
        init: torch.Tensor | None = None, threads: Threads | int | str | None = None,
        lr_schedule: Callable[[int], float] | None = None, optimizer=None) -> RunResult:
    """Run one experiment (planned as a job of one, then executed) and return its result: history, final
    metrics, model, provenance, and how it ran (``execution``).

    ``observers`` watch the run (``benchmark.sim.engine``; they change no number). ``init``, ``lr_schedule``,
    ``optimizer`` as in :func:`execute`. ``threads``: torch's intra-op threads ("auto": the free cores, a
    number, or None: torch's setting left as it is). ``progress``: a progress bar, or ``fn(round, entry)``.
    """
    job = plan_one(exp, threads, observe_steps=any(getattr(o, "steps", False) for o in observers))
    callback, bar = None, None
    if progress is True:
        bar = tqdm(total=exp.rounds, desc=f"{exp.algorithm} on {getattr(exp.dataset, 'name', exp.dataset)}",
                   unit="round", leave=False, disable=None)  # no bar when stderr is not a terminal

        def callback(r, entry):
            bar.update(1)
            if entry["test_accuracy"] is not None:
                bar.set_postfix(acc=f"{entry['test_accuracy']:.4f}")
    elif callable(progress):
        callback = progress
    watch = list(observers) + ([engine.Progress(callback)] if callback is not None else [])
    try:
        [(_, result)] = list(execute(job, observers=[watch], init=init, lr_schedule=lr_schedule, optimizer=optimizer))
    finally:
        if bar is not None:
            bar.close()
    return result


def iter_group(exps: Sequence[Experiment]):
    """Run ``exps`` (one ``benchmark.runs.batched.group_key``) as one batched job; yield ``(index, RunResult)`` as
    each run finishes."""
    yield from execute(group_job(exps))


def run_group(exps: Sequence[Experiment]) -> list[RunResult]:
    """``iter_group`` collected, in the order of ``exps``."""
    results = [None] * len(exps)
    for i, res in iter_group(exps):
        results[i] = res
    return results


__all__ = ["Job", "Threads", "plan", "plan_one", "group_job", "split", "execute", "run", "run_group",
           "iter_group", "resolve_device", "device_type", "choose_threads", "choose_executor", "resolve_threads"]


# --------------------------------------------------------------------------------------------------
# Estimates (the dry run)


def estimate(job: Job, model: cost.CostModel | None) -> dict:
    """Work and estimated seconds of ``job`` as planned (``benchmark.runs.cost``; ``seconds`` None without a
    cost model)."""
    return cost.estimate_group(list(job.experiments), torch.device(job.device).type, model, job.executor)


def estimate_cells(exps: Sequence[Experiment], device: str | None, model: cost.CostModel | None,
                   executor: str | None = None) -> dict:
    """Totals over ``exps`` run one after another, each as planned alone on ``device`` (``executor``: an
    override, as in :func:`plan`)."""
    total_sg = total_s = 0.0
    unknown = 0
    for job in plan(exps, device=device, executor=executor, group_runs=1, threads=None):
        est = estimate(job, model)
        total_sg += est["sample_gradients"]
        if est["seconds"] is None:
            unknown += 1
        else:
            total_s += est["seconds"]
    return {"cells": len(exps), "sample_gradients": total_sg, "seconds": None if unknown else total_s,
            "unknown_cells": unknown}
