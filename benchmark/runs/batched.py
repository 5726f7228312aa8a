"""Batched runs: which cells can share one job, and how many by default (the rules ``benchmark.runs.plan`` applies).

Cells that differ only in seed, partition or numeric hyperparameters can train as one job: a group of R runs
in lockstep, each round every run preparing its own clients (its sampling, partition, schedules, RNG keys
and client states), then ONE ``vmap`` running ``local_update`` over all (run, client) pairs, each pair with
its own downlink, learning rate and numeric hyperparameters (batched 0-d tensors), then each run
aggregating, evaluating and recording on its own (``benchmark.sim.engine.run_rounds``). A run's record equals
the record of the same cell run alone with the vectorized executor, to float rounding (tests/test_batched.py).

Which hyperparameters may differ inside a group is measured, not declared (``tensor_fields``): a
probe runs ``local_update`` of the algorithm on a tiny model under ``vmap`` with a field (or the
learning rate) as a batched tensor, and compares with separate instances built by ``algorithms.make``
with each value. A field that fails (Python control flow on it, a value derived in ``__init__``, an
operator built from it) must be equal across a group. Non-float fields always must.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.func import vmap

import algorithms
from algorithms.core import stack_trees, tree_map

from benchmark import datasets
from benchmark.sim import executors as ex, functional
from benchmark.sim.executors import batched_local_update

#: Experiment fields that must be equal inside a group (the others: seed, partition, lr, lr_decay,
#: eval_every, eval_train_samples, algorithm_args' tensor fields, and how-to-run fields)
SHARED_FIELDS = ("algorithm", "dataset", "dataset_args", "model", "model_args", "num_clients",
                 "clients_per_round", "rounds", "local_epochs", "local_steps", "batch_size", "momentum",
                 "weight_decay", "optimizer", "device", "data_root", "download", "compile")
#: datasets whose data depend on the seed (generated): their runs group only with the same seed
SEEDED_DATASETS = ("synthetic",)
LR = "lr"  # the name the probe uses for the local learning rate


# --------------------------------------------------------------------------------------------------
# Which hyperparameters can be batched tensors


def _float_fields(cls) -> list[str]:
    hp = cls.Hyper()
    return [f.name for f in dataclasses.fields(hp)
            if isinstance(getattr(hp, f.name), float) and not isinstance(getattr(hp, f.name), bool)]


def _probe_values(cls, name: str) -> tuple | None:
    """Two valid, distinct values of float field ``name`` (None if none are found)."""
    v0 = getattr(cls.Hyper(), name)
    cands = [v0 * 0.8, v0 * 1.25, v0 + 0.1, v0 - 0.1, 0.3, 0.05] if v0 != 0 else [0.05, 0.1, 0.3]
    for v1 in cands:
        if v1 == v0:
            continue
        try:
            algorithms.core.make_hyper(cls, {name: v1})
            return v0, v1
        except (ValueError, TypeError):
            continue
    return None


def _randomize(tree, gen: torch.Generator):
    def one(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t + 0.1 * torch.randn(t.shape, generator=gen, dtype=t.dtype)
        return t
    return tree_map(one, tree)


@lru_cache(maxsize=None)
def tensor_fields(name: str) -> frozenset:
    """The hyperparameters of algorithm ``name`` (and ``"lr"``) that can differ inside a group."""
    return probe_fields(algorithms.get_class(name))


def probe_fields(cls) -> frozenset:
    """``tensor_fields`` of an algorithm class (registered or not)."""
    if not cls.vectorizable:
        return frozenset()
    fields = [LR, *_float_fields(cls)]
    if _safe_probe(cls, fields):  # all at once (one probe), else one by one
        return frozenset(fields)
    return frozenset(f for f in fields if _safe_probe(cls, [f]))


def _safe_probe(cls, fields: list[str]) -> bool:
    try:
        return _probe(cls, fields)
    except Exception:  # noqa: BLE001 - any failure means: not as a tensor
        return False


def _probe(cls, fields: list[str]) -> bool:
    """Does ``local_update`` under vmap with ``fields`` batched (two values each) equal two separate
    instances built by ``algorithms.make`` with each value? (A field that ``local_update`` never reads,
    e.g. a server step size, passes: it acts only in the per-run server code, which is right.)"""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    fmodel = functional.FunctionalModel(model, "classification")
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 4, generator=gen), torch.randint(0, 3, (24,), generator=gen)
    lrs = (0.05, 0.08) if LR in fields else (0.05, 0.05)
    args: list[dict] = [{}, {}]
    for f in fields:
        if f == LR:
            continue
        values = _probe_values(cls, f)
        if values is None:
            return False
        args[0][f], args[1][f] = values
    algs = [cls(algorithms.core.make_hyper(cls, a), fmodel.layout, 4) for a in args]
    p0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    downs, states = [], []
    for a in algs:
        server = _randomize(a.init(p0), gen)
        downs.append(_randomize(a.broadcast(server), gen))
        states.append(_randomize(a.client_init(p0), gen))
    opt = algorithms.core.optim.make("sgd")
    idx = torch.arange(24).reshape(3, 8)
    w = torch.ones(3, 8)
    key = torch.tensor(7, dtype=torch.int64)
    steps, n, cid = torch.tensor(3), torch.tensor(24.0), torch.tensor(1)

    setup = ex.LocalSetup(fmodel, x, y, opt, 0, weighted=False)

    def one(alg, hyper, lr, down, state):
        ctx = ex.ClientContext(setup, ex.ClientShare(idx, w, None, key, steps, n, cid, {}, lr))
        return batched_local_update(alg, ctx, down, state, hyper)

    ref = [vmap(lambda d, s, a=a, lr=lr: one(a, {}, lr, d, s))(*stack_trees([(dn, st)]))
           for a, lr, dn, st in zip(algs, lrs, downs, states)]
    hyper = {f: torch.tensor([args[0][f], args[1][f]], dtype=torch.float32) for f in args[0]}
    if LR in fields:  # a batched 0-d tensor per pair; else the Python float every run shares
        got = vmap(lambda h, lr, d, s: one(algs[0], h, lr, d, s))(
            hyper, torch.tensor(lrs, dtype=torch.float32), stack_trees(downs), stack_trees(states))
    else:
        got = vmap(lambda h, d, s: one(algs[0], h, lrs[0], d, s))(hyper, stack_trees(downs), stack_trees(states))
    for i in range(2):
        a = torch.utils._pytree.tree_leaves(tree_map(lambda t: t[0], ref[i]))
        b = torch.utils._pytree.tree_leaves(tree_map(lambda t, i=i: t[i], got))
        if len(a) != len(b):
            return False
        for u, v in zip(a, b):
            if u.shape != v.shape or u.dtype != v.dtype:
                return False
            if u.is_floating_point():
                if not torch.allclose(u, v, rtol=1e-5, atol=1e-6):
                    return False
            elif not torch.equal(u, v):
                return False
    return True


# --------------------------------------------------------------------------------------------------
# Grouping cells


def _dataset_name(exp) -> str | None:
    if not isinstance(exp.dataset, str):
        return None

    try:
        return datasets.resolve_name(exp.dataset)[0]
    except ValueError:
        return None


def group_key(exp) -> tuple:
    """Cells with the same key can share a batched job (their values of the tensor fields may differ).
    A dataset or model given as an object (Python API) groups with the same object only."""
    cls = algorithms.get_class(exp.algorithm)
    if not cls.vectorizable:
        return ("alone", exp.config_hash())
    free = tensor_fields(exp.algorithm)
    shared = {f: getattr(exp, f) for f in SHARED_FIELDS}
    for f in ("dataset", "model"):
        if not isinstance(shared[f], str):
            shared[f] = f"object {id(shared[f])}"
    if _dataset_name(exp) in SEEDED_DATASETS:
        shared["seed"] = exp.seed
    if LR not in free:
        shared["lr"] = exp.lr
        shared["lr_decay"] = exp.lr_decay
    hp = algorithms.core.make_hyper(cls, exp.algorithm_args)
    shared["algorithm_args"] = {f.name: getattr(hp, f.name) for f in dataclasses.fields(hp)
                                if f.name not in free}
    return ("group", json.dumps(shared, sort_keys=True, default=str))


#: CPU: runs per batched job by default (fedrepro bench --preset runs: the gain flattens by then)
CPU_GROUP_RUNS = 8
#: CPU: runs batch by default only where one vectorized step of a run is small (the forward's FLOPs over its clients'
#: batches), i.e. per-op overhead, which a group shares, rather than arithmetic and passes over model-sized tensors,
#: which it does not (``cost.flops_per_sample`` x clients x batch; results/perf/README.md, issue 45, seventh round:
#: BHerd's SVM, 1.6e6 FLOPs a step, 1.36x less CPU per run in groups of 5 seeds; FedSWA's MLP, 3.2e8, 0.96x; the digits
#: logreg of the batched-runs table, 1.5-2.7x): a bound between the measured points, not a fitted one
CPU_STEP_FLOPS_MAX = 1e7
#: CUDA: a vectorized step of the whole group should hold about this much arithmetic (FLOPs) to fill
#: the GPU; more runs than that only queue
CUDA_STEP_FLOPS = 2e12
MAX_GROUP_RUNS = 64


@dataclass(frozen=True)
class GroupSize:
    runs: int
    reason: str


#: the memory model of one batched run's round (``run_bytes``): per (run, client) pair, the batch's activations
#: (``cost.activation_bytes_per_sample``: every leaf module's output) times ``ACTIVATION_COPIES``, plus
#: ``PARAM_VECTORS`` parameter-sized float32 vectors. Checked against the measured peak of a round
#: (``benchmark.perf.memory``; results/perf/vmap-layers-2026-11-26-cpu.md, FedBAT CNN, 10 clients x 64). Since
#: BatchNorm and max-pooling fold the clients into channels (``benchmark.sim.vmap_layers``) a round keeps about one
#: copy of the activations (the weighted BatchNorm saves x - mean, no longer every intermediate of its
#: arithmetic; pooling copies no layout): 1.25 budgets the heaviest measured case (FedBAT, padded) 1.2x its
#: peak and clean steps up to 1.6x (3 copies, before, budgeted them 2.5-3.1x); tests/test_memory.py keeps
#: the first in [1, 1.5]x
ACTIVATION_COPIES = 1.25
PARAM_VECTORS = 10


def run_bytes(activation_bytes: float, params: int, clients: int, batch: float) -> float:
    """Bytes one run of a batched group holds at its peak in a round (the memory model above)."""
    return clients * (batch * activation_bytes * ACTIVATION_COPIES + PARAM_VECTORS * params * 4)


def default_group_runs(device_type: str, executor_alone: str, flops_sample: float, activation_bytes: float,
                       params: int, clients: int, batch: float, free_memory: float | None) -> GroupSize:
    """How many runs to batch by default.

    1 where a run alone takes the sequential executor (compute-bound on a CPU: batching only pays where
    vectorizing does). CPU: ``CPU_GROUP_RUNS``, or 1 where a step of a run exceeds ``CPU_STEP_FLOPS_MAX``. CUDA: as
    many as fit in half the free device memory (``run_bytes`` per run) and as make one vectorized step about
    ``CUDA_STEP_FLOPS``, at most ``MAX_GROUP_RUNS``.
    """
    if executor_alone != "vectorized":
        return GroupSize(1, f"a run alone takes the {executor_alone} executor here: batching does not pay")
    step = max(clients * batch * flops_sample, 1.0)
    if device_type == "cpu":
        if step > CPU_STEP_FLOPS_MAX:
            return GroupSize(1, f"cpu: a step of a run is {step:.2g} FLOPs, above {CPU_STEP_FLOPS_MAX:.0e}: arithmetic, "
                                "which batching does not share")
        return GroupSize(CPU_GROUP_RUNS, "cpu default (results/perf/README.md)")
    by_compute = max(1, int(CUDA_STEP_FLOPS // step))
    per_run = run_bytes(activation_bytes, params, clients, batch)
    by_memory = MAX_GROUP_RUNS if not free_memory or per_run <= 0 else max(1, int(0.5 * free_memory // per_run))
    runs = max(1, min(by_compute, by_memory, MAX_GROUP_RUNS))
    return GroupSize(runs, f"{device_type}: {by_compute} by compute ({step:.2g} FLOPs per step per run), "
                           f"{by_memory} by memory ({per_run / 1e9:.2f} GB per run), at most {MAX_GROUP_RUNS}")


__all__ = ["tensor_fields", "probe_fields", "group_key", "batched_local_update", "default_group_runs",
           "GroupSize", "SHARED_FIELDS", "run_bytes"]
