"""The round loop (DESIGN.md): sample, broadcast, local update, aggregate, evaluate, account bits.

Every run goes through :func:`run_rounds`: a job (``benchmark.runs.plan``) of one run or of a batched group,
the benchmark's runs, suites, tuning, ``fedrepro bench`` and the theory checks. Callers watch a run
through observers, never by patching an algorithm.

Contract
--------
:func:`start` builds a run's :class:`RunState` (initial parameters, or ``init``, a flat vector in the
model's layout; server state; buffers). ``run_rounds(runs, executor, hypers, observers)`` trains runs
that share an algorithm, a model and the training tensors in lockstep: each round every unfinished run
prepares its own round (:func:`begin_round`: its sampling, schedules, RNG keys, client states and
downlink), ONE executor call trains all their clients (:func:`local_training`: a ``vmap`` over every
(run, client) pair, or clients one after another), then each run aggregates, evaluates and records on
its own (:func:`end_round`). It yields ``(i, LoopResult)`` as soon as run i finishes (all rounds, or
diverged). A run alone is a job of one; its history equals the same run's in a batched job.

An observer is any object with some of these methods (subclass :class:`Observer` for no-op defaults);
each receives the :class:`RunState` and an event, and must not modify what it is given:

* ``on_start(run)``: before the first round (``run.server`` is the initial server state);
* ``on_round_start(run, RoundStart)``: round r's sampled clients, learning rate, server state, downlink;
* ``on_client(run, ClientUpdate)``: once per sampled client (in the order of the stacked uplinks), after
  local training and before aggregation: its uplink ``Message`` (this client's slice), its new client
  state, its mean local loss, and its diagnostics (below);
* ``on_step(run, LocalStep)``: after every local step of every client (loss, the gradients the step
  took, the carry), only for observers with ``steps = True``; they need the sequential executor
  (``benchmark.runs.plan`` chooses it and says so);
* ``on_round_end(run, RoundEnd)``: after aggregation and evaluation: the server state before and
  after, the ``RoundInfo``, the aggregation weights, the evaluated model and the history entry;
* ``on_end(run, LoopResult)``.

Diagnostics. An algorithm sends a diagnostic from ``local_update`` with
``algorithms.core.diagnose(ctx, name, value)`` (``value`` a tensor or a zero-argument callable, so
nothing is computed when nobody listens). When an observer has ``diagnostics = True`` both executors
collect them: per client, ``name -> tensor`` with one row per call, in call order (a name recorded
once has a leading axis of length 1). Values recorded inside ``ctx.loop`` at a step the vectorized
executor masks (a client with fewer local steps than the round's maximum) are NaN (float tensors) or
left as computed (other dtypes); the sequential executor runs a client's own steps only. Both
executors give the same diagnostics on every real step, to float tolerance.

Observers change no number: a run with observers has the same history as one without (tested).

Divergence (the one rule): a run is "diverged" when its parameters or a loss are not finite, or when
its training loss exceeds ``divergence_factor`` (an experiment's default is
``benchmark.runs.experiment.DIVERGENCE_FACTOR``) times the training loss of its initial model on the same
samples (:func:`loss_growth`); the run stops there.

Randomness, all derived from the experiment seed:
* client sampling: uniform without replacement, ``np.random.default_rng([seed, 1])`` across rounds;
* minibatch order: ``executors.minibatch_rng`` = ``np.random.default_rng([seed, 2, round, client])``;
* training-loss samples: ``np.random.default_rng([seed, 3])``;
* algorithm noise (stochastic quantizers, ...): ``CounterRng`` keyed by (seed, round, client);
* model initialisation: ``torch.manual_seed(seed)`` before the model is built (in ``experiment``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from algorithms.core import Algorithm, Message, RoundInfo, tree_map

from benchmark.sim import executors as ex, functional
from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.sim.phases import phase


@dataclass(frozen=True)
class LoopConfig:
    rounds: int
    clients_per_round: int | None
    local_epochs: int | None
    local_steps: int | None
    batch_size: int | None
    lr: float
    lr_decay: float
    eval_every: int
    seed: int
    eval_train_samples: int | None
    # round -> local learning rate; replaces lr * lr_decay ** round when set (e.g. alpha / (round + beta))
    lr_schedule: Callable[[int], float] | None = None
    # a run whose training loss exceeds this factor times its initial training loss is diverged (None: off)
    divergence_factor: float | None = None
    # compile the vectorized local update (torch.compile; executors.VectorizedExecutor)
    compile: bool | str = False  # True, or "graph": compiled whole, replayed as a CUDA graph
    # the rounds (1-based) whose scheduled evaluation includes the test set (None: all; the last always does)
    eval_rounds: frozenset | None = None


@dataclass
class LoopResult:
    history: list[dict]
    status: str  # "ok" or "diverged"
    server_state: dict
    params: torch.Tensor
    buffers: dict
    executor: str
    message: str = ""
    compile_seconds: float = 0.0  # first calls of compiled local updates (compilation included)


class Diverged(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------------
# Observers and their events


@dataclass(frozen=True)
class RoundStart:
    round: int  # 0-based
    client_ids: np.ndarray  # sampled clients, sorted
    lr: float
    server: dict  # the server state the round starts from
    downlink: Message


@dataclass(frozen=True)
class ClientUpdate:
    round: int
    client_id: int
    uplink: Message  # this client's message (one slice of the stacked uplinks)
    state: Any  # the client's new state
    local_loss: float  # mean training loss over its local steps
    diagnostics: dict  # name -> tensor (one row per diagnose call); {} unless an observer asks


@dataclass(frozen=True)
class LocalStep:
    round: int
    client_id: int
    step: int  # 0-based local step
    loss: torch.Tensor | None  # the step's training loss (None if the step took no gradient)
    grads: list  # the gradients (pytrees) of every value_and_grad / loss_and_grad call of the step
    carry: Any  # what the algorithm's step returned


@dataclass(frozen=True)
class RoundEnd:
    round: int
    info: RoundInfo
    weights: torch.Tensor  # aggregation weights of the sampled clients
    server_before: dict
    server: dict  # after aggregation
    params: torch.Tensor  # the evaluated (global) model, alg.global_params(server)
    entry: dict  # this round's history entry (metrics, bits, wall time)


class Observer:
    """No-op base: override the events you need (see the module docstring)."""

    steps: bool = False  # True: on_step for every local step (runs the sequential executor)
    diagnostics: bool = False  # True: collect the algorithm's diagnose() values for on_client

    def on_start(self, run: "RunState") -> None:
        pass

    def on_round_start(self, run: "RunState", event: RoundStart) -> None:
        pass

    def on_client(self, run: "RunState", event: ClientUpdate) -> None:
        pass

    def on_step(self, run: "RunState", event: LocalStep) -> None:
        pass

    def on_round_end(self, run: "RunState", event: RoundEnd) -> None:
        pass

    def on_end(self, run: "RunState", result: LoopResult) -> None:
        pass


def _listens(o, event: str) -> bool:
    """Whether ``o`` handles ``event`` (a method that is not the no-op of ``Observer``)."""
    fn = getattr(type(o), event, None) or getattr(o, event, None)
    return fn is not None and fn is not getattr(Observer, event)


def _emit(observers: Sequence, event: str, *args) -> None:
    for o in observers:
        if _listens(o, event):
            getattr(o, event)(*args)


class Progress(Observer):
    """Calls ``fn(round, entry)`` after every round (the benchmark's progress bars)."""

    def __init__(self, fn: Callable[[int, dict], None]):
        self.fn = fn

    def on_round_end(self, run, event):
        self.fn(event.round, event.entry)


# --------------------------------------------------------------------------------------------------
# Per-run state and the steps of a round


@dataclass
class RunState:
    """Everything one run carries from round to round."""

    alg: Algorithm
    fmodel: functional.FunctionalModel
    data: FederatedDataset
    parts: list[np.ndarray]
    cfg: LoopConfig
    optimizer: Any
    clients_per_round: int
    sizes: np.ndarray  # |D_i| per client
    params0: torch.Tensor
    server: dict
    buffers: dict
    client_states: dict = field(default_factory=dict)
    sample_rng: np.random.Generator | None = None
    train_idx: torch.Tensor | None = None  # training samples the objective is evaluated on
    history: list[dict] = field(default_factory=list)
    round: int = 0  # the next round to run
    status: str = "ok"
    message: str = ""
    t_start: float = 0.0
    initial_train_loss: float | None = None  # the reference of cfg.divergence_factor

    @property
    def device(self) -> torch.device:
        return self.data.x_train.device

    @property
    def num_clients(self) -> int:
        return len(self.parts)


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


def loss_growth(train_loss: float, initial: float | None, factor: float | None) -> str | None:
    """Divergence that is not NaN: why ``train_loss`` counts as diverged, or None.

    The rule: the training loss exceeds ``factor`` times the training loss of the initial model (on the
    same samples). Off when ``factor`` is None or the initial loss is not a positive number.
    """
    if factor is None or initial is None or not (math.isfinite(initial) and initial > 0):
        return None
    if train_loss > factor * initial:
        return (f"training loss {train_loss:.4g} exceeds divergence_factor {factor:g} x the initial "
                f"training loss {initial:.4g}")
    return None


def start(alg: Algorithm, fmodel: functional.FunctionalModel, data: FederatedDataset, parts: list[np.ndarray],
          cfg: LoopConfig, optimizer, init: torch.Tensor | None = None) -> RunState:
    """The state before round 0: initial parameters (``init`` or the module's), server state, buffers."""
    alg.check_optimizer(alg.hp, optimizer)  # before any training: a local optimizer the algorithm has no rule for
    dev = data.x_train.device
    n_clients = len(parts)
    k = n_clients if cfg.clients_per_round is None else cfg.clients_per_round
    if not 1 <= k <= n_clients:
        raise ValueError(f"clients_per_round must be in [1, {n_clients}], got {k}")
    module_params = torch.nn.utils.parameters_to_vector(fmodel.module.parameters()).detach()
    if init is None:
        params0 = module_params.to(dev)
    else:
        if init.numel() != module_params.numel():
            raise ValueError(f"init has {init.numel()} entries, the model has {module_params.numel()} parameters")
        params0 = init.detach().reshape(-1).to(device=dev, dtype=module_params.dtype).clone()
    train_idx = np.concatenate(parts)
    if cfg.eval_train_samples is not None and len(train_idx) > cfg.eval_train_samples:
        train_idx = np.random.default_rng([cfg.seed, 3]).choice(train_idx, cfg.eval_train_samples,
                                                                 replace=False)
    run = RunState(alg, fmodel, data, parts, cfg, optimizer, k,
                   np.array([len(p) for p in parts]), params0, alg.init(params0),
                   {n: b.to(dev) for n, b in fmodel.initial_buffers().items()},
                   sample_rng=np.random.default_rng([cfg.seed, 1]),
                   train_idx=torch.from_numpy(np.sort(train_idx)).to(dev), t_start=time.perf_counter())
    if cfg.divergence_factor is not None:
        with phase("evaluate"):
            run.initial_train_loss, _ = fmodel.evaluate(params0, run.buffers, data.x_train[run.train_idx],
                                                        data.y_train[run.train_idx])
    return run


def round_lr(cfg: LoopConfig, r: int) -> float:
    return float(cfg.lr_schedule(r)) if cfg.lr_schedule is not None else cfg.lr * cfg.lr_decay ** r


def sample_clients(run: RunState) -> np.ndarray:
    """This round's clients: uniform without replacement (all of them when every client takes part)."""
    n, k = run.num_clients, run.clients_per_round
    return np.sort(run.sample_rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)


def client_jobs(run: RunState, r: int, ids: np.ndarray) -> list[ex.ClientJob]:
    cfg, jobs = run.cfg, []
    for cid in ids.tolist():
        if cid not in run.client_states:
            run.client_states[cid] = run.alg.client_init(run.params0)
        sch = ex.client_schedule(run.parts[cid], ex.minibatch_rng(cfg.seed, r, cid),
                                 cfg.local_epochs, cfg.local_steps, cfg.batch_size)
        jobs.append(ex.ClientJob(cid, sch, run.client_states[cid], int(run.sizes[cid])))
    return jobs


def aggregate(run: RunState, r: int, ids: np.ndarray, jobs: list[ex.ClientJob], out: ex.RoundOutput,
              lr: float) -> tuple[RoundInfo, torch.Tensor]:
    """Server update, client states and BatchNorm buffers after the round's local training."""
    dev = run.device
    n_k = torch.tensor(run.sizes[ids], dtype=torch.get_default_dtype(), device=dev)  # float32 (validate: float64)
    weights = n_k / n_k.sum()
    info = RoundInfo(r, torch.from_numpy(ids).to(dev), run.num_clients, n_k,
                     torch.tensor([j.schedule.steps for j in jobs], device=dev), lr)
    run.server = run.alg.aggregate(run.server, out.uplinks, weights, info)
    for cid, st in zip(ids.tolist(), out.states):
        run.client_states[cid] = st
    if run.buffers:
        # weights[i] is a 0-d tensor: no read per client and buffer (float32 arithmetic, as with float(wk))
        run.buffers = {n: sum(weights[i] * b[n] for i, b in enumerate(out.buffers)) for n in run.buffers}
    return info, weights


def evaluate(run: RunState, params: torch.Tensor, entry: dict, test: bool = True) -> bool:
    """Fill the entry's test (``test``) and training losses (and accuracy) at ``params``; False if non-finite."""
    d, fm = run.data, run.fmodel
    if test:
        entry["test_loss"], entry["test_accuracy"] = fm.evaluate(params, run.buffers, d.x_test, d.y_test)
    entry["train_loss"], _ = fm.evaluate(params, run.buffers, d.x_train[run.train_idx], d.y_train[run.train_idx])
    return (not test or math.isfinite(entry["test_loss"])) and math.isfinite(entry["train_loss"])


def tests_at(cfg: LoopConfig, r: int) -> bool:
    """Whether round ``r`` (1-based), when it evaluates, evaluates the test set too (``cfg.eval_rounds``)."""
    return cfg.eval_rounds is None or r in cfg.eval_rounds or r == cfg.rounds


def _step_hook(run: RunState, r: int, observers: Sequence):
    watching = [o for o in observers if getattr(o, "steps", False)]
    if not watching:
        return None

    def hook(client_id: int, s: int, loss, grads, carry):
        _emit(watching, "on_step", run, LocalStep(r, client_id, s, loss, grads, carry))

    return hook


@dataclass
class RoundPlan:
    """A round prepared by :func:`begin_round`: what the executor needs, and what :func:`end_round` uses."""

    round: int
    lr: float
    ids: np.ndarray
    jobs: list
    downlink: Message
    record: bool  # collect diagnostics


def begin_round(run: RunState, observers: Sequence = ()) -> RoundPlan:
    """Sample, build the clients' jobs and broadcast (round ``run.round``); tells ``on_round_start``."""
    r, cfg, alg = run.round, run.cfg, run.alg
    lr = round_lr(cfg, r)
    ids = sample_clients(run)
    with phase("data"):
        jobs = client_jobs(run, r, ids)
    with phase("server"):
        downlink = alg.broadcast(run.server)
    _emit(observers, "on_round_start", run, RoundStart(r, ids, lr, run.server, downlink))
    return RoundPlan(r, lr, ids, jobs, downlink, any(getattr(o, "diagnostics", False) for o in observers))


def end_round(run: RunState, plan: RoundPlan, out: ex.RoundOutput, observers: Sequence = ()) -> dict:
    """After local training: tell ``on_client``, aggregate, evaluate, record, tell ``on_round_end``.
    Returns the history entry and sets ``run.status`` to "diverged" (with a message) on non-finite
    parameters or losses, or on a training loss past ``cfg.divergence_factor`` times the initial one."""
    r, cfg, alg, ids, downlink = plan.round, run.cfg, run.alg, plan.ids, plan.downlink
    if any(_listens(o, "on_client") for o in observers):
        for i, cid in enumerate(ids.tolist()):
            up = tree_map(lambda t, i=i: t[i], out.uplinks)
            diag = out.diagnostics[i] if out.diagnostics else {}
            _emit(observers, "on_client", run, ClientUpdate(r, cid, up, out.states[i], out.local_loss[i], diag))

    before = run.server
    with phase("server"):
        info, weights = aggregate(run, r, ids, plan.jobs, out, plan.lr)
    params = alg.global_params(run.server)
    entry = {"round": r + 1, "bits_up": int(out.uplinks.bits), "bits_down": int(downlink.bits) * len(ids),
             "local_loss": float(np.mean(out.local_loss)), "test_accuracy": None, "test_loss": None,
             "train_loss": None}
    diverged = not _finite(params) or not math.isfinite(entry["local_loss"])
    if not diverged and ((r + 1) % cfg.eval_every == 0 or r + 1 == cfg.rounds):
        with phase("evaluate"):
            diverged = not evaluate(run, params, entry, tests_at(cfg, r + 1))
    grown = None if diverged or entry["train_loss"] is None else \
        loss_growth(entry["train_loss"], run.initial_train_loss, cfg.divergence_factor)
    entry["wall_time"] = time.perf_counter() - run.t_start
    run.history.append(entry)
    run.round = r + 1
    _emit(observers, "on_round_end", run, RoundEnd(r, info, weights, before, run.server, params, entry))
    if diverged or grown:
        run.status = "diverged"
        run.message = f"{grown} at round {r + 1}" if grown else f"non-finite parameters or loss at round {r + 1}"
    return entry


def local_training(runs: Sequence[RunState], plans: Sequence[RoundPlan], executor, hypers: Sequence[dict],
                   observers: Sequence[Sequence]) -> list[ex.RoundOutput]:
    """ONE executor call for the prepared round of every run: ``executor.run(RoundInputs)``. ``hypers[i]``:
    run i's values of the numeric hyperparameters that differ across a batched job; the local updates
    run ``runs[0].alg`` with them."""
    first = runs[0]
    shares = [ex.RunRound(p.downlink, p.jobs, run.buffers, p.lr, run.cfg.seed, dict(h), _step_hook(run, p.round, o))
              for run, p, h, o in zip(runs, plans, hypers, observers)]
    return executor.run(ex.RoundInputs(first.alg, first.fmodel, first.data.x_train, first.data.y_train,
                                       first.optimizer, plans[0].round, shares, any(p.record for p in plans)))


def running(run: RunState) -> bool:
    return run.round < run.cfg.rounds and run.status == "ok"


def run_rounds(runs: Sequence[RunState], executor: str, hypers: Sequence[dict] | None = None,
               observers: Sequence[Sequence] | None = None,
               after_round: Callable[[list[RunState]], None] | None = None):
    """THE round loop (module docstring): ``runs`` in lockstep, one ``executor`` call per round for all of
    them. ``hypers[i]``: run i's differing numeric hyperparameters (none for a run alone); ``observers[i]``:
    run i's observers; ``after_round(runs)``: called with the runs that trained, once their round has ended
    (``benchmark.runs.checkpoint.Saver``; it changes no number). Yields ``(i, LoopResult)`` as soon as run i
    finishes (all rounds, or diverged)."""
    hypers = list(hypers) if hypers is not None else [{}] * len(runs)
    observers = list(observers) if observers is not None else [()] * len(runs)
    runner = ex.get(executor, compile=runs[0].cfg.compile)
    for i, run in enumerate(runs):
        _emit(observers[i], "on_start", run)
    done = [False] * len(runs)
    while True:
        active = [i for i, run in enumerate(runs) if running(run)]
        for i, run in enumerate(runs):
            if not done[i] and i not in active:
                done[i] = True
                result = finish(run, runner.name, runner.compile_seconds)
                _emit(observers[i], "on_end", run, result)
                yield i, result
        if not active:
            return
        with phase("round"):
            plans = [begin_round(runs[i], observers[i]) for i in active]
            outs = local_training([runs[i] for i in active], plans, runner, [hypers[i] for i in active],
                                  [observers[i] for i in active])
            for i, plan, out in zip(active, plans, outs):
                end_round(runs[i], plan, out, observers[i])
            if after_round is not None:
                after_round([runs[i] for i in active])


def finish(run: RunState, executor: str, compile_seconds: float = 0.0) -> LoopResult:
    return LoopResult(run.history, run.status, run.server, run.alg.global_params(run.server), run.buffers,
                      executor, run.message, compile_seconds)
