"""asv benchmarks: an executor round, compressors, partitioning, a theory check, and the speedup ratio.

Small, CPU-sized workloads that track regressions from commit to commit (README.md here). asv imports
this package as ``asv`` (the folder's name), so everything of fedrepro is imported absolutely.

Threads: every benchmark pins torch to one CPU thread (``THREADS``): the workloads are small and
overhead-bound, and on a shared machine torch's intra-op threads make timings swing by orders of
magnitude (benchmark/asv/README.md); one thread makes the recorded history comparable.
"""
import dataclasses
import importlib
import os
import sys
import time

if os.environ.get("FEDREPRO_ASV_ISOLATE"):
    # benchmark/perf/asv_history.py records an old commit from a worktree (ASV_PYTHONPATH): drop an editable
    # install's import hooks, which would otherwise fill in the modules that commit does not have with
    # the installed tree's (a benchmark needing them must fail for that commit, not measure other code)
    sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    sys.path[:] = [p for p in sys.path if not str(p).startswith("__editable__")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in repr(h)]
    sys.path_importer_cache.clear()

import numpy as np  # noqa: E402
import torch  # noqa: E402

THREADS = 1


def _pin_threads():
    torch.set_num_threads(THREADS)


def _module(new: str, old: str):
    """The module ``new`` (benchmark/ in sub-packages by role), else ``old`` (the commits before that layout):
    ``benchmark/perf/asv_history.py`` records old commits with today's benchmarks. ImportError when neither
    exists."""
    try:
        return importlib.import_module(new)
    except ModuleNotFoundError as e:
        if e.name is None or not (new == e.name or new.startswith(e.name + ".")):
            raise  # a module that ``new`` imports is missing, not ``new`` itself
    return importlib.import_module(old)


class _RoundWorkload:
    """One FedAvg round (local updates and aggregation, from a prepared round: sampling, schedules and
    broadcast done once) of each executor, through the engine as ``benchmark.runs.plan`` plans it
    (``benchmark.perf.workloads.FederatedRound``; a top-level workloads module before the sub-packages).
    ``build(input_shape, classes)`` makes the model; the data are random: ``clients`` clients of 4 batches
    each. Commits without workloads time the same round through their executors' own API
    (:func:`_legacy_rounds`), so that ``benchmark/perf/asv_history.py`` can still record them with today's
    benchmarks."""

    def __init__(self, build, input_shape, clients: int, batch_size: int, local_steps: int, seed: int = 0):
        try:
            workloads = _module("benchmark.perf.workloads", "benchmark.workloads")
            Experiment = _module("benchmark.runs.experiment", "benchmark.experiment").Experiment
        except ImportError:  # commits before benchmark/workloads.py: their executors' own API
            self.rounds = _legacy_rounds(build(tuple(input_shape), 10), input_shape, clients, batch_size,
                                         local_steps, seed)
            return
        cfg = workloads.Config("asv", "custom", tuple(input_shape), 10, clients, batch_size, local_steps,
                               samples_per_client=4 * batch_size, seed=seed)
        self.exp = Experiment(algorithm="fedavg", dataset=workloads.synthetic_data(cfg), model=build,
                              num_clients=None, rounds=1, local_steps=local_steps, batch_size=batch_size, lr=0.01,
                              seed=seed, eval_train_samples=None, divergence_factor=None, device="cpu")
        self.rounds = {name: workloads.FederatedRound(dataclasses.replace(self.exp, executor=name))
                       for name in ("sequential", "vectorized")}

    def run(self, executor: str):
        return self.rounds[executor]()

    def seconds(self, executor: str) -> float:
        t0 = time.perf_counter()
        self.run(executor)
        return time.perf_counter() - t0

    def ratio(self, repeats: int) -> float:
        """Median sequential time over median vectorized time, interleaved."""
        seq, vec = [], []
        for _ in range(repeats):
            seq.append(self.seconds("sequential"))
            vec.append(self.seconds("vectorized"))
        return float(np.median(seq) / np.median(vec))


def _legacy_rounds(module, input_shape, clients: int, batch_size: int, local_steps: int, seed: int) -> dict:
    """One FedAvg round per executor for commits before the workloads module, built only from APIs that
    every such commit has (``algorithms.make``, the executors' ``FunctionalModel``/``client_schedule``/
    ``ClientJob``/``get(...).run`` with positional arguments, ``RoundInfo``). Today's commits never take
    this path: their rounds run through the engine (tests/test_layout.py exempts this module's calls)."""
    import algorithms
    from algorithms import RoundInfo  # exported at the top by every commit
    from benchmark import executors as ex

    try:
        from algorithms.core import optim
    except ImportError:  # commits before algorithms/core/
        from algorithms import optim

    g = torch.Generator().manual_seed(seed)
    n = 4 * batch_size
    x = torch.randn(clients * n, *input_shape, generator=g)
    y = torch.randint(0, 10, (clients * n,), generator=g)
    fmodel = ex.FunctionalModel(module, "classification")
    alg = algorithms.make("fedavg", fmodel.layout, clients)
    opt = optim.make("sgd")
    p0 = torch.nn.utils.parameters_to_vector(module.parameters()).detach().clone()
    server = alg.init(p0)
    buffers = fmodel.initial_buffers()
    jobs = []
    for cid in range(clients):
        part = np.arange(cid * n, (cid + 1) * n)
        rng = np.random.default_rng([seed, 2, 0, cid])  # the old commits' rule (executors.minibatch_rng today)
        sch = ex.client_schedule(part, rng, None, local_steps, batch_size)
        jobs.append(ex.ClientJob(cid, sch, alg.client_init(p0), n))
    n_k = torch.full((clients,), float(n))
    info = RoundInfo(0, torch.arange(clients), clients, n_k, torch.tensor([j.schedule.steps for j in jobs]), 0.01)

    def one_round(executor):
        def run():
            out = executor.run(alg, fmodel, x, y, alg.broadcast(server), jobs, buffers, opt, 0.01, 0, 0)
            return alg.aggregate(server, out.uplinks, n_k / n_k.sum(), info)
        return run

    return {name: one_round(ex.get(name)) for name in ("sequential", "vectorized")}


def _logreg(input_shape, classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, classes))


def _digits_round_workload(clients: int, batch_size: int, local_steps: int) -> _RoundWorkload:
    return _RoundWorkload(_logreg, (1, 8, 8), clients, batch_size, local_steps)


def _fedbat_cnn(input_shape, classes):
    from benchmark import models

    return models.build("fedbat_cnn", input_shape, classes)


class ExecutorRound:
    """One FedAvg round (broadcast, local updates, aggregate) of each executor: digits logreg
    (1x8x8 inputs, 10 classes), 4 clients, batch 32, 5 local steps."""

    params = ["sequential", "vectorized"]  # noqa: RUF012 (asv reads these class attributes)
    param_names = ["executor"]  # noqa: RUF012
    timeout = 120

    def setup(self, executor):
        _pin_threads()
        self.workload = _digits_round_workload(4, 32, 5)
        self.workload.run(executor)  # warm up (first-call dispatch and functorch set-up)

    def time_round(self, executor):
        self.workload.run(executor)


class Compressors:
    """Encode and decode of a 1e5-entry update (sign, lfl q=2, qsgd s=1)."""

    params = ["sign", "lfl", "qsgd"]  # noqa: RUF012
    param_names = ["operator"]  # noqa: RUF012

    def setup(self, name):
        from algorithms import compress
        from algorithms.core import CounterRng

        _pin_threads()
        self.op = compress.get(name)
        self.x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
        self.rng = CounterRng(0)
        self.message = self.op.encode(self.x, (), self.rng)[0]

    def time_encode(self, name):
        self.op.encode(self.x, (), self.rng)

    def time_decode(self, name):
        self.op.decode(self.message)


class Partition:
    """dirichlet:0.3 over 60,000 labels (10 classes) into 100 clients."""

    def setup(self):
        self.labels = np.random.default_rng(0).integers(0, 10, 60_000)

    def time_dirichlet(self):
        partition = _module("benchmark.datasets.partition", "benchmark.partition")
        partition.split(self.labels, "dirichlet:0.3", 100, 0)


class TheoryCheck:
    """``theory.stats.mean_zero`` on 2000 x 100 samples (skipped while theory/stats.py is missing)."""

    def setup(self):
        try:
            from theory.stats import mean_zero
        except ImportError:
            raise NotImplementedError("theory.stats.mean_zero is not available") from None
        self.mean_zero = mean_zero
        self.samples = np.random.default_rng(0).standard_normal((2000, 100))

    def time_mean_zero(self):
        self.mean_zero(self.samples)


class Speedup:
    """Vectorized over sequential throughput (a ratio from one process, so machine speed cancels):
    digits logreg, 10 clients, batch 64, 20 local steps, median of 5 rounds each. Issue 4's CPU target
    is >= 3."""

    unit = "x"
    timeout = 300
    timing_repeats = 5
    workload_shape = (10, 64, 20)  # clients, batch size, local steps (tests shrink it)

    def setup(self):
        _pin_threads()
        self.workload = _digits_round_workload(*self.workload_shape)
        for method in ("sequential", "vectorized"):
            self.workload.seconds(method)

    def track_vectorized_over_sequential(self):
        return self.workload.ratio(self.timing_repeats)


class SpeedupCNN:
    """The same ratio on FedBAT's FMNIST CNN (1x28x28, 10 clients, batch 64, 1 local step, median of 3):
    compute-bound on a CPU, where vectorizing does not pay (0.56x in results/perf)."""

    unit = "x"
    timeout = 300
    timing_repeats = 3
    workload_shape = (10, 64, 1)

    def setup(self):
        _pin_threads()
        self.workload = _RoundWorkload(_fedbat_cnn, (1, 28, 28), *self.workload_shape)
        for method in ("sequential", "vectorized"):
            self.workload.seconds(method)

    def track_vectorized_over_sequential(self):
        return self.workload.ratio(self.timing_repeats)


class AutoChoice:
    """``executor="auto"`` against the faster executor on FedBAT's CNN (10 clients, batch 64, 1 local step):
    the time of the executor auto picks over the faster one's (issue 14's CPU target: >= 0.9)."""

    unit = "x"
    timeout = 300
    timing_repeats = 3
    workload_shape = (10, 64, 1)

    def setup(self):
        try:
            plan = _module("benchmark.runs.plan", "benchmark.plan")
        except ImportError:
            raise NotImplementedError("the planner (executor auto) is not available at this commit") from None
        _pin_threads()
        k, b, s = self.workload_shape
        self.workload = _RoundWorkload(_fedbat_cnn, (1, 28, 28), k, b, s)
        self.auto = plan.plan_one(self.workload.exp).executor
        for method in ("sequential", "vectorized"):
            self.workload.seconds(method)

    def track_auto_over_best(self):
        t = {m: [] for m in ("sequential", "vectorized")}
        for _ in range(self.timing_repeats):
            for m in t:
                t[m].append(self.workload.seconds(m))
        med = {m: float(np.median(v)) for m, v in t.items()}
        return min(med.values()) / med[self.auto]


class BatchedRuns:
    """6 runs (3 seeds x 2 learning rates) of FedAvg, digits logreg on 1x8x8 inputs, 10 clients, batch 64,
    5 local steps, 2 rounds: one batched job over one after another (issue 14's CPU target: >= 2)."""

    unit = "x"
    timeout = 300
    timing_repeats = 3
    workload_shape = (10, 64, 5)

    def setup(self):
        try:
            # the runs workload: benchmark/perf/workloads.py, or benchmark/bench.py before the sub-packages
            workloads = _module("benchmark.perf.workloads", "benchmark.bench")
            _module("benchmark.runs.plan", "benchmark.plan").run_group  # noqa: B018 (batched runs exist)
        except (ImportError, AttributeError):
            raise NotImplementedError("batched runs are not available at this commit") from None
        _pin_threads()
        k, b, s = self.workload_shape
        cfg = workloads.Config("digits", "logreg", (1, 8, 8), 10, k, b, s, samples_per_client=4 * b)
        self.workload = workloads.RunsWorkload(cfg, torch.device("cpu"), 6, 2)
        for m in workloads.RUN_METHODS:
            self.workload.time_once(m)

    def track_batched_over_one_after_another(self):
        t = {"one_after_another": [], "batched": []}
        for _ in range(self.timing_repeats):
            for m in t:
                t[m].append(self.workload.time_once(m))
        return float(np.median(t["one_after_another"]) / np.median(t["batched"]))
