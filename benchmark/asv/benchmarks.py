"""asv benchmarks: an executor round, compressors, partitioning, a theory check, and the speedup ratio.

Small, CPU-sized workloads that track regressions from commit to commit (README.md here). asv imports
this package as ``asv`` (the folder's name), so everything of fedrepro is imported absolutely.

Threads: every benchmark pins torch to one CPU thread (``THREADS``): the workloads are small and
overhead-bound, and on a shared machine torch's intra-op threads make timings swing by orders of
magnitude (benchmark/asv/README.md); one thread makes the recorded history comparable.
"""
import numpy as np
import torch

THREADS = 1


def _pin_threads():
    torch.set_num_threads(THREADS)


def _digits_round_workload(clients: int, batch_size: int, local_steps: int):
    from benchmark import bench

    cfg = bench.Config("digits", "logreg", (1, 8, 8), 10, clients, batch_size, local_steps,
                       samples_per_client=4 * batch_size)
    return bench.Workload(cfg, torch.device("cpu"))


class ExecutorRound:
    """One FedAvg round (broadcast, local updates, aggregate) of each executor: digits logreg
    (1x8x8 inputs, 10 classes), 4 clients, batch 32, 5 local steps."""

    params = ["sequential", "vectorized"]  # noqa: RUF012 (asv reads these class attributes)
    param_names = ["executor"]  # noqa: RUF012
    timeout = 120

    def setup(self, executor):
        _pin_threads()
        self.workload = _digits_round_workload(4, 32, 5)
        self.fn = self.workload.fns[executor]
        self.fn()  # warm up (first-call dispatch and functorch set-up)

    def time_round(self, executor):
        self.fn()


class Compressors:
    """Encode and decode of a 1e5-entry update (sign, lfl q=2, qsgd s=1)."""

    params = ["sign", "lfl", "qsgd"]  # noqa: RUF012
    param_names = ["operator"]  # noqa: RUF012

    def setup(self, name):
        from algorithms import compression
        from algorithms.base import CounterRng

        _pin_threads()
        self.op = compression.get(name)
        self.x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
        self.rng = CounterRng(0)
        self.message = self.op.encode(self.x, self.rng)

    def time_encode(self, name):
        self.op.encode(self.x, self.rng)

    def time_decode(self, name):
        self.op.decode(self.message)


class Partition:
    """dirichlet:0.3 over 60,000 labels (10 classes) into 100 clients."""

    def setup(self):
        self.labels = np.random.default_rng(0).integers(0, 10, 60_000)

    def time_dirichlet(self):
        from benchmark import partition

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
            self.workload.time_once(method)

    def track_vectorized_over_sequential(self):
        w = self.workload
        seq, vec = [], []
        for _ in range(self.timing_repeats):
            seq.append(w.time_once("sequential"))
            vec.append(w.time_once("vectorized"))
        return float(np.median(seq) / np.median(vec))
