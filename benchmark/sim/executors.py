"""How local updates run: the sequential reference and the vectorized executor (torch.func.vmap).

An executor gets one round of one job as a :class:`RoundInputs` (the algorithm, the model, the training
tensors, the optimizer, the round, and each run's :class:`RunRound`: downlink, sampled clients, buffers,
learning rate, seed, batched hyperparameters) and returns a :class:`RoundOutput` per run.

Both executors build the same ``ClientContext`` for each client: batches are index gathers into the training
tensors, gradients come from ``torch.func`` on a functional copy of the model (``benchmark.sim.functional``;
a plain chain's loss gradient under vmap from its backward written out, ``benchmark.sim.chain_grad``, and
a plain chain's plain SGD step under vmap with each layer's update inside its gradient's product, ``descend``),
randomness from a counter-based ``CounterRng`` keyed by (seed, round, client). The vectorized executor stacks the sampled clients (of every run of the job) and runs ``Algorithm.local_update`` once under
``torch.func.vmap``; clients with fewer local steps are masked (a masked step leaves every carried tensor
unchanged), and partial batches are padded with zero-weight samples. Hence both executors give the same
numbers up to float rounding. Nothing is stored on a shared object during a step: what a forward needs
(sample weights, dropout streams) is passed to it and what it measures (BatchNorm statistics) returned.

Normalisation layers: BatchNorm runs in training mode on batch statistics; its running statistics are
buffers threaded through the local loop by the context (never seen by algorithms), updated with the
module's momentum, masked like any carried tensor, and averaged by the engine with the aggregation
weights. Padding rows (vectorized executor, partial batches only) are copies of real rows with weight 0:
they enter neither the loss nor BatchNorm's batch statistics.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.func import vmap

from algorithms.core import Algorithm, CounterRng, Message, splitmix64, stack_trees, tree_map, unstack_tree
from algorithms.core.optim import SGD

from benchmark.sim import EXECUTORS, GRAPH, is_compile_mode
from benchmark.sim import chain_grad, vmap_layers
from benchmark.sim.compiling import GraphCaptureError, compile_local
from benchmark.sim.functional import Batch, FunctionalModel
from benchmark.sim.gradients import grad_and_value
from benchmark.sim.phases import phase
from benchmark.sim.schedules import Schedule, client_schedule, minibatch_rng, steps_for  # noqa: F401
from benchmark.sim.vmap_contract import VmapContractError, is_vmap_refusal


# --------------------------------------------------------------------------------------------------
# Batched runs' hyperparameters (a batched job): a run's numeric hyperparameters as 0-d tensors


def _tensor_hyper(hp, values: dict):
    """A copy of the frozen dataclass ``hp`` with ``values`` (tensors) set, without running its
    ``__init__``/``__post_init__`` (checks on values belong to the real, per-run instances)."""
    new = copy.copy(hp)
    for k, v in values.items():
        object.__setattr__(new, k, v)
    return new


def batched_local_update(alg, ctx, downlink: Message, client_state, hyper: dict):
    """``alg.local_update`` with the numeric hyperparameters ``hyper`` (0-d tensors) in place of its own."""
    if hyper:
        alg = copy.copy(alg)
        alg.hp = _tensor_hyper(alg.hp, hyper)
    return alg.local_update(ctx, downlink, client_state)


# --------------------------------------------------------------------------------------------------
# Per-client schedules of minibatches


# --------------------------------------------------------------------------------------------------
# The context an algorithm sees

class ModelFn:
    """What an objective passed to ``ClientContext.value_and_grad`` receives as ``model_fn``.

    ``model_fn(flat, x)`` is the training forward. ``stages(flat, x)`` is the same forward returning
    every stage's output (``benchmark.models.stages``; the last is the model output), for
    representation-level objectives. Each of the two records BatchNorm statistics, so an objective
    runs exactly one of them on the batch. ``reference(flat, h, start)`` runs a *frozen* model (the
    global model, a previous local model) from stage ``start`` on ``h`` (the input when
    ``start = 0``): BatchNorm normalises with the batch's statistics but records nothing, and dropout
    is off. Gradients flow through ``h`` (FedMLB's hybrid paths), and through ``flat`` only if the
    objective differentiates with respect to it.

    One is made for each gradient: it holds that call's sample weights, rng and weighting, and keeps
    the statistics of its training forward (``stats``) and how many it ran (``forwards``).
    """

    def __init__(self, fmodel: FunctionalModel, w: torch.Tensor, rng, weighted: bool, buffers: dict):
        self._fm, self._w, self._rng, self._weighted, self._buffers = fmodel, w, rng, weighted, buffers
        self.stats: dict = {}
        self.forwards = 0

    def __call__(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out, stats = self._fm.forward_train(flat, x, self._w, self._rng, self._weighted, self._buffers)
        self._count(stats)
        return out

    @property
    def num_stages(self) -> int:
        return len(self._fm.stage_modules())

    def stages(self, flat: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        outs, stats = self._fm.forward_stages(flat, x, 0, self._w, self._rng, self._weighted, self._buffers)
        self._count(stats)
        return outs

    def reference(self, flat: torch.Tensor, h: torch.Tensor, start: int = 0) -> list[torch.Tensor]:
        return self._fm.forward_stages(flat, h, start, self._w, None, self._weighted, train=False)[0]

    def _count(self, stats: dict) -> None:
        self.forwards += 1
        self.stats = stats


@dataclass(frozen=True)
class LocalSetup:
    """What every client of a round shares (closed over by ``vmap``, never batched)."""

    fmodel: FunctionalModel
    x: torch.Tensor  # the training inputs, gathered by index
    y: torch.Tensor
    optimizer: Any
    round: Any  # an int (a 0-d tensor when the local update is compiled)
    record: bool = False  # collect diagnostics (algorithms.core.diagnose)
    weighted: bool = True  # some batch may hold zero-weight padding rows: BatchNorm weights its statistics
    trim_padding: bool = False  # sequential: a partial batch is cut to its real rows (ClientShare.lengths)
    # vectorized: per local step, whether some client is past its own steps there (its carry must be kept by
    # a ``where``); known on the host. None: mask every step (``ClientShare.active`` given)
    masked_steps: tuple[bool, ...] | None = None


@dataclass(frozen=True)
class ClientShare:
    """One client's part of a round (under ``vmap`` every tensor has the client axis)."""

    idx: torch.Tensor  # (steps, B) sample indices
    w: torch.Tensor  # (steps, B) sample weights, 0 for padding
    active: torch.Tensor | None  # (steps,) bool, None when every step is real
    rng_key: torch.Tensor  # the counter-based rng's key (seed, round, client)
    steps: torch.Tensor  # this client's own number of local steps (tau_i)
    num_samples: torch.Tensor  # |D_i| (float)
    client_id: torch.Tensor
    buffers: dict  # BatchNorm buffers at the start of the round
    lr: Any  # the round's learning rate (a float, or a 0-d tensor per client of a batched job)
    lengths: tuple[int, ...] | None = None  # real rows per step, known on the host (sequential trimming)


class ClientContext:
    """Implements ``algorithms.core.LocalContext`` for one client (or, under vmap, for each client)."""

    def __init__(self, setup: LocalSetup, client: ClientShare, step_hook: Callable | None = None):
        self.setup, self.fmodel, self.layout = setup, setup.fmodel, setup.fmodel.layout
        self._idx, self._w, self._active, self._lengths = client.idx, client.w, client.active, client.lengths
        self.buffers = client.buffers
        self.rng = CounterRng(client.rng_key)
        self.optimizer, self.lr, self.round = setup.optimizer, client.lr, setup.round
        self.num_steps = int(client.idx.shape[0])
        self.steps, self.num_samples, self.client_id = client.steps, client.num_samples, client.client_id
        self.loss_sum = torch.zeros((), device=setup.x.device)
        # diagnostics (algorithms.core.diagnose): name -> values in call order, when an observer asks
        self.diagnosing = setup.record
        self._records: dict[str, list] = {}
        self._step: int | None = None  # the local step being run by ``loop``
        self._step_hook = step_hook  # (s, loss, grads, carry) after every local step (sequential only)
        self._step_grads: list | None = None
        self._step_loss = None

    # -- diagnostics --
    def record(self, name: str, value) -> None:
        """Keep a diagnostic for the observers (``value``: a tensor, or a callable returning one).

        Inside ``loop``, a value recorded at a masked step (vectorized executor) is NaN (float dtypes)."""
        if not self.diagnosing:
            return
        value = value() if callable(value) else value
        value = torch.as_tensor(value).detach()
        if self._step is not None and self._active is not None and value.is_floating_point():
            value = torch.where(self._active[self._step], value, torch.full_like(value, math.nan))
        self._records.setdefault(name, []).append(value)

    def diagnostics(self) -> dict[str, torch.Tensor]:
        """name -> the recorded values stacked along a new leading axis (call order)."""
        return {k: torch.stack(v) for k, v in self._records.items()}

    # -- data --
    def batch(self, s: int) -> Batch:
        with phase("data"):
            i, w = self._idx[s], self._w[s]
            if self.setup.trim_padding and self._lengths is not None:  # sequential: a partial batch is just
                n = self._lengths[s]  # shorter (padding sits at the end); its length is known on the host
                if n < i.shape[0]:
                    i, w = i[:n], w[:n]
            return Batch(vmap_layers.gather_rows(self.setup.x, i), self.setup.y[i], w)

    def criterion(self, out, batch):
        return self.fmodel.criterion(out, batch, vectorized=not self.setup.trim_padding)

    # -- gradients --
    def value_and_grad(self, f: Callable, args: Any, batch: Batch, update_stats: bool = True):
        """Gradient of ``f(args, model_fn, batch)`` w.r.t. ``args``; BatchNorm buffers are updated
        unless ``update_stats`` is False (auxiliary gradients, e.g. at another point)."""
        fm = self.fmodel

        fns = []  # this call's model_fn (a local: nothing of the call is kept on a shared object)

        def wrapped(a):
            fns.append(ModelFn(fm, batch.w, self.rng, self.setup.weighted, self.buffers))
            return f(a, fns[0], batch), fns[0].stats

        g, (loss, stats) = grad_and_value(wrapped, args)
        forwards = fns[0].forwards
        if fm.bn_names and forwards > 1:
            raise RuntimeError(f"the objective ran {forwards} training forwards on one batch; run one (model_fn "
                               "or model_fn.stages) and use model_fn.reference for frozen models")
        if stats and update_stats:
            self.buffers = fm.updated_buffers(self.buffers, stats)
        return self._took(loss, g)

    def _took(self, loss: torch.Tensor, g):
        """A step's gradient taken: kept for the step hook (sequential) and its loss for the log."""
        if self._step_grads is not None:
            self._step_grads.append(g)
        self._step_loss = loss.detach()
        return loss, g

    def loss_and_grad(self, params: torch.Tensor, batch: Batch, update_stats: bool = True):
        fm = self.fmodel
        if fm.chain_grad is not None and not self.setup.trim_padding and chain_grad.only_vmap():
            got = chain_grad.value_and_grad(fm.chain_grad, fm.layout, params, batch.x, batch.y, batch.w)
            if got is not None:  # a plain chain under vmap: the same numbers without torch.func's grad
                return self._took(*got)
        return self.value_and_grad(lambda p, model_fn, b: self.criterion(model_fn(p, b.x), b), params, batch,
                                   update_stats)

    def descend(self, params: torch.Tensor, batch: Batch, opt, state, lr):
        """One local step of ``opt`` on the plain loss (``algorithms.core.descend``): ``(params, state)``. Under vmap,
        for a plain chain and plain SGD (no momentum, no weight decay), each layer's update is taken inside its
        gradient's product (``chain_grad.value_and_descend``), in place from a loop's second step on where nothing
        else reads the carry (no masked step, no step hook); else ``loss_and_grad`` and ``opt.step``."""
        fm, s = self.fmodel, self._step
        if (fm.chain_grad is not None and not self.setup.trim_padding and self._step_hook is None
                and type(opt) is SGD and opt.momentum == 0.0 and not opt.weight_decay and chain_grad.only_vmap()):
            masked = s is None or (self._active is not None and (self.setup.masked_steps is None
                                                                 or self.setup.masked_steps[s]))
            got = chain_grad.value_and_descend(fm.chain_grad, fm.layout, params, batch.x, batch.y, batch.w, lr,
                                               in_place=not masked and s > 0)
            if got is not None:
                loss, params = got
                self._took(loss, None)
                return params, state
        _, g = self.loss_and_grad(params, batch)
        return opt.step(params, g, state, lr)

    def eval_loss(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The loss at ``params`` on ``batch`` (BatchNorm on batch statistics, nothing recorded, no dropout)."""
        with torch.no_grad():
            out = self.fmodel.forward_stages(params, batch.x, 0, batch.w, None, self.setup.weighted,
                                             train=False)[0][-1] if self.fmodel.has_dropout else \
                self.fmodel.reference_forward(params, batch.x, batch.w, self.setup.weighted)
            return self.criterion(out, batch)

    # -- the local loop --
    def loop(self, step: Callable, carry: Any) -> Any:
        for s in range(self.num_steps):
            batch = self.batch(s)
            before = (carry, self.buffers, self.loss_sum)
            self._step_loss = None
            self._step = s
            if self._step_hook is not None:
                self._step_grads = []
            new = step(carry, batch, s)
            self._step = None
            if self._step_loss is not None:
                self.loss_sum = self.loss_sum + self._step_loss
            if self._step_hook is not None:
                self._step_hook(s, self._step_loss, self._step_grads, new)
                self._step_grads = None
            if self._active is not None and (self.setup.masked_steps is None or self.setup.masked_steps[s]):
                a = self._active[s]  # where(True, new, old) is new: a step every client runs is not masked
                new, self.buffers, self.loss_sum = tree_map(
                    lambda n, o, a=a: torch.where(a, n, o), (new, self.buffers, self.loss_sum), before)
            carry = new
        return carry


# --------------------------------------------------------------------------------------------------
# Executors


@dataclass
class ClientJob:
    client_id: int
    schedule: Schedule
    state: Any
    num_samples: int


@dataclass
class RoundOutput:
    uplinks: Message  # stacked over clients
    states: list  # new client states, in job order
    buffers: list[dict]  # per-client BN buffers after training
    local_loss: list[float]  # mean training loss over each client's local steps
    diagnostics: list[dict] = field(default_factory=list)  # per client, when recorded (else empty)


@dataclass
class RunRound:
    """One run's share of a round: its downlink, sampled clients, BatchNorm buffers, learning rate, seed,
    the numeric hyperparameters that differ across a batched job (``benchmark.runs.batched.tensor_fields``;
    name -> this run's value), and ``on_step(client_id, s, loss, grads, carry)`` after every local step
    (sequential executor only)."""

    downlink: Message
    jobs: list[ClientJob]
    buffers: dict
    lr: float
    seed: int
    hyper: dict = field(default_factory=dict)
    on_step: Callable | None = None


@dataclass(frozen=True)
class RoundInputs:
    """Everything an executor needs for one round of one job (one run, or a batched group of runs that
    share an algorithm, a model and the training tensors)."""

    alg: Algorithm  # the first run's: local updates take each run's differing hyperparameters
    fmodel: FunctionalModel
    x: torch.Tensor
    y: torch.Tensor
    optimizer: Any
    round: int
    runs: Sequence[RunRound]
    record: bool = False  # collect diagnostics


def _rng_keys(seed: int, round_: int, client_ids, device) -> torch.Tensor:
    """splitmix64(splitmix64(splitmix64(seed) ^ round) ^ client) of all ``client_ids`` at once (elementwise)."""
    k = torch.tensor([seed, round_], dtype=torch.int64, device=device)
    z = splitmix64(splitmix64(k[0]) ^ k[1])
    return splitmix64(z ^ torch.as_tensor(client_ids, dtype=torch.int64, device=device))


class SequentialExecutor:
    """The readable reference: clients one after another (the runs of a job one after another)."""

    name = "sequential"
    compile_seconds = 0.0  # never compiled

    def run(self, inputs: RoundInputs) -> list[RoundOutput]:
        setup = LocalSetup(inputs.fmodel, inputs.x, inputs.y, inputs.optimizer, inputs.round, inputs.record,
                           weighted=False, trim_padding=True)  # trimmed batches hold real samples only
        return [self._run_one(inputs, setup, share) for share in inputs.runs]

    def _run_one(self, inputs: RoundInputs, setup: LocalSetup, share: RunRound) -> RoundOutput:
        ups, states, bufs, losses, diags = [], [], [], [], []
        dev = inputs.x.device
        hyper = {k: torch.tensor(float(v), device=dev) for k, v in share.hyper.items()}
        keys = _rng_keys(share.seed, inputs.round, [j.client_id for j in share.jobs], dev)
        for job, key in zip(share.jobs, keys):
            with phase("client"):
                sch = job.schedule
                hook = None if share.on_step is None else (
                    lambda s, loss, grads, carry, cid=job.client_id: share.on_step(cid, s, loss, grads, carry))
                ctx = ClientContext(setup, ClientShare(
                    sch.idx.to(dev), sch.w.to(dev), None, key,
                    torch.tensor(sch.steps, device=dev), torch.tensor(float(job.num_samples), device=dev),
                    torch.tensor(job.client_id, device=dev), dict(share.buffers), share.lr, sch.lengths), hook)
            with phase("local"):
                up, st = batched_local_update(inputs.alg, ctx, share.downlink, job.state, hyper)
            ups.append(up)
            states.append(st)
            bufs.append(ctx.buffers)
            losses.append(ctx.loss_sum)
            if setup.record:
                diags.append(ctx.diagnostics())
        with phase("client"):
            sums = torch.stack(losses).tolist() if losses else []  # one read per round, not one per client
            losses = [v / max(j.schedule.steps, 1) for v, j in zip(sums, share.jobs)]
            return RoundOutput(stack_trees(ups), states, bufs, losses, diags)


def _pad_schedules(jobs: list[ClientJob]):
    """Stack the clients' schedules: (idx, w, active) of shapes (K, S, B), (K, S, B), (K, S)."""
    k = len(jobs)
    if len({tuple(j.schedule.idx.shape) for j in jobs}) == 1:  # the usual case: nothing to pad
        return (torch.stack([j.schedule.idx for j in jobs]), torch.stack([j.schedule.w for j in jobs]),
                torch.ones(k, jobs[0].schedule.steps, dtype=torch.bool))
    max_steps = max(j.schedule.steps for j in jobs)
    max_b = max(j.schedule.idx.shape[1] for j in jobs)
    idx = torch.zeros(k, max_steps, max_b, dtype=torch.int64)
    w = torch.zeros(k, max_steps, max_b)
    active = torch.zeros(k, max_steps, dtype=torch.bool)
    for i, j in enumerate(jobs):
        s, b = j.schedule.idx.shape
        idx[i, :s, :b] = j.schedule.idx
        idx[i, :s, b:] = j.schedule.idx[:, :1]  # padding rows repeat a real sample, weight 0
        idx[i, s:, :] = j.schedule.idx[:1, :1]  # masked steps: any valid index
        w[i, :s, :b] = j.schedule.w
        w[i, s:, :] = 1.0  # avoid 0/0 in masked steps (their results are discarded)
        active[i, :s] = True
    return idx, w, active


def masked_steps(jobs: list[ClientJob]) -> tuple[bool, ...]:
    """Per stacked local step, whether some client has run all of its own steps by then (its carry is kept by a
    ``where``; at a step every client runs it would only copy): the steps from the fewest steps of a client on."""
    fewest = min(j.schedule.steps for j in jobs)
    return tuple(s >= fewest for s in range(max(j.schedule.steps for j in jobs)))


def _vmapped_local(setup: LocalSetup, alg, lr0, down0, needs_mask: bool, clients: dict, states, lr_arg, down_arg,
                   hyper: dict):
    """Every (run, client) pair's local update under one ``vmap``: what varies from round to round comes in
    as arguments (tensors), so a compiled version is reused across rounds. ``lr0``/``down0``: the shared
    learning rate and downlink when ``lr_arg``/``down_arg`` (per pair) are None."""

    def one(c, state_i, lr_i, down_i, hyper_i):
        share = ClientShare(c["idx"], c["w"], c["active"] if needs_mask else None, c["rng_key"], c["steps"],
                            c["num_samples"], c["client_id"], c["buffers"], lr0 if lr_i is None else lr_i)
        ctx = ClientContext(setup, share)
        up, st = batched_local_update(alg, ctx, down0 if down_i is None else down_i, state_i, hyper_i)
        return up, st, ctx.buffers, ctx.loss_sum, ctx.diagnostics()

    in_dims = (0, 0, None if lr_arg is None else 0, None if down_arg is None else 0, 0)
    return vmap(one, in_dims=in_dims)(clients, states, lr_arg, down_arg, hyper)


class VectorizedExecutor:
    """All sampled clients at once: ``vmap`` over a leading axis of (run, client) pairs (DESIGN.md,
    Performance), each pair with its run's downlink, buffers, learning rate, RNG keys and differing
    hyperparameters. What every run shares stays unbatched (a Python float learning rate, a downlink
    closed over), so a run alone computes exactly as a job of one.

    ``compile=True``: the vmapped local update runs through ``torch.compile`` (issue 24), the learning rate
    passed as a tensor so that a new round's value reuses the compiled code; one compiled entry per
    (model, batch shape, clients, masking, weighting), whose first call (compilation and one round) is
    added to ``compile_seconds``. Results equal the uncompiled step to float tolerance, not bitwise.

    ``compile="graph"`` (issue 48): the same, compiled whole (``fullgraph=True``: a graph break, which is
    where a host sync or a Python branch on a value would sit, is an error rather than a silent split) with
    ``mode="reduce-overhead"``, so that on CUDA the step's kernels are captured once per shape as a CUDA graph
    and replayed each round (static shapes per job: ``dynamic=False``, the round, learning rate and downlink as
    inputs). A replay writes its outputs into the same memory, so they are copied out before the next call.
    On a CPU there is no graph to replay and inductor's code is the ``compile=True`` code."""

    name = "vectorized"

    def __init__(self, compile: bool | str = False):
        if not is_compile_mode(compile):
            raise ValueError(f"compile must be False, True or {GRAPH!r}, got {compile!r}")
        self.compile = compile
        self.compile_seconds = 0.0
        self._compiled: dict = {}

    def _local(self, key: tuple):
        if not self.compile:
            return _vmapped_local, False
        first = key not in self._compiled
        if first:
            self._compiled[key] = compile_local(_vmapped_local, self.compile == GRAPH)
        return self._compiled[key], first

    def run(self, inputs: RoundInputs) -> list[RoundOutput]:
        with phase("client"):  # stacking the (run, client) pairs' inputs, splitting their outputs
            return self._run(inputs)

    def _run(self, inputs: RoundInputs) -> list[RoundOutput]:
        runs, dev = inputs.runs, inputs.x.device
        if any(r.on_step is not None for r in runs):
            raise ValueError("per-step observation needs the sequential executor")
        jobs = [j for r in runs for j in r.jobs]
        sizes = [len(r.jobs) for r in runs]
        with phase("data"):
            idx, w, active = (t.to(dev) for t in _pad_schedules(jobs))
        needs_mask = len({j.schedule.steps for j in jobs}) > 1  # decided on the host: no device read
        width = idx.shape[-1]
        # compiled: the round as a 0-d tensor, an input of the compiled code (an int would be a constant in it,
        # recompiled every round)
        round_ = torch.tensor(inputs.round, device=dev) if self.compile else inputs.round
        # compiled: the masked steps are not given (a pattern that changes with the sampled clients would recompile)
        masked = None if self.compile else masked_steps(jobs)
        setup = LocalSetup(inputs.fmodel, inputs.x, inputs.y, inputs.optimizer, round_, inputs.record,
                           weighted=any(n < width for j in jobs for n in j.schedule.lengths), masked_steps=masked)
        clients = {"idx": idx, "w": w, "active": active,
                   "rng_key": torch.cat([_rng_keys(r.seed, inputs.round, [j.client_id for j in r.jobs], dev) for r in runs]),
                   "steps": torch.tensor([j.schedule.steps for j in jobs], device=dev),
                   "num_samples": torch.tensor([float(j.num_samples) for j in jobs], device=dev),
                   "client_id": torch.tensor([j.client_id for j in jobs], device=dev),
                   "buffers": {n: torch.cat([r.buffers[n].unsqueeze(0).expand(len(r.jobs), *t.shape) for r in runs])
                               for n, t in runs[0].buffers.items()}}
        states = stack_trees([j.state for j in jobs]) if jobs[0].state else {}

        def per_pair(values):  # one value per run -> a (pairs,) tensor
            return torch.tensor([float(v) for v, n in zip(values, sizes) for _ in range(n)],
                                dtype=torch.get_default_dtype(), device=dev)  # float32 but in validate's float64

        one_lr = len({r.lr for r in runs}) == 1 and not self.compile
        lr_arg = None if one_lr else per_pair([r.lr for r in runs])
        # a run alone = the run in a group of seeds, bit for bit (0.5.0): hyperparameters batched only where runs differ,
        # a downlink copy per pair also alone (a shared one makes the first step one matrix product: other rounding)
        hyper = {f: per_pair([r.hyper[f] for r in runs]) for f in (runs[0].hyper if len(runs) > 1 else {})
                 if len({r.hyper[f] for r in runs}) > 1}
        pair_run = torch.tensor([i for i, n in enumerate(sizes) for _ in range(n)], device=dev)
        down_arg = tree_map(lambda t: t[pair_run], stack_trees([r.downlink for r in runs]))
        fn, first = self._local((id(inputs.fmodel), tuple(idx.shape), len(runs), needs_mask, setup.weighted,
                                 setup.record))
        t0 = time.perf_counter()
        try:
            with phase("local"):
                out = fn(setup, inputs.alg, runs[0].lr if lr_arg is None else None,
                         runs[0].downlink if down_arg is None else None, needs_mask, clients, states, lr_arg,
                         down_arg, hyper)
        except RuntimeError as e:
            if self.compile == GRAPH and isinstance(e, torch._dynamo.exc.Unsupported):
                raise GraphCaptureError(inputs.alg.name, e) from e
            if not is_vmap_refusal(e):
                raise
            raise VmapContractError(inputs.alg.name, e) from e
        if first:
            self.compile_seconds += time.perf_counter() - t0
        return _split(out, jobs, sizes, clients["steps"], len(runs) == 1)


def _split(out, jobs: list[ClientJob], sizes: list[int], steps: torch.Tensor, alone: bool) -> list[RoundOutput]:
    """The vmapped results, one ``RoundOutput`` per run (in the order of the (run, client) pairs). A batched run's uplinks are copied out of the group's stacked tensors (a fresh, aligned allocation, as
    a run alone gets), not left as views at an offset: BLAS reductions over the clients (a dot product of
    per-client scalars, e.g. GraB-FedAvg's alpha_t) round differently with the data's memory alignment,
    so a view made a batched record differ from the run alone in the last bits."""
    up, st, nb, loss, diag = out
    k = len(jobs)
    new_states = unstack_tree(st, k) if jobs[0].state else [{} for _ in jobs]
    new_bufs = unstack_tree(nb, k) if nb else [{} for _ in jobs]
    new_diag = unstack_tree(diag, k) if diag else []
    losses = (loss / steps.clamp(min=1)).tolist()
    outs, a = [], 0
    for n in sizes:
        ups = up if alone else tree_map(lambda t, a=a, n=n: t[a:a + n].clone(), up)
        outs.append(RoundOutput(ups, new_states[a:a + n], new_bufs[a:a + n], losses[a:a + n],
                                new_diag[a:a + n] if new_diag else []))
        a += n
    return outs


def get(name: str, compile: bool | str = False):
    """The executor ``name``; ``compile``: compile the vectorized local update (True, or ``"graph"``: whole and
    replayed as a CUDA graph; the sequential reference is never compiled)."""
    if name == "sequential":
        return SequentialExecutor()
    if name == "vectorized":
        return VectorizedExecutor(compile)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
