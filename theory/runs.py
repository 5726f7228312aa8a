"""How the claims run the project's algorithms: through the benchmark's own path, with observers.

There is one way to train here, the benchmark's: ``benchmark.runs.plan.run`` plans an ``Experiment`` and executes
it (the data, partition, model and algorithm built by ``benchmark.runs.build.prepare``, the round loop of
``benchmark.sim.engine``). The claims only add observers (``benchmark.sim.engine``), which record without changing a
number:

* :class:`ParamTrace`: the global model before round 0 and after every round (float64, CPU), the
  sampled clients, chosen server-state scalars, and a per-round ``hook(before, after, info)``;
* :class:`StepGradSq`: ||g||^2 of every local stochastic gradient (per-step observation, sequential);
* :class:`Diagnostics`: what an algorithm sends with ``algorithms.core.diagnose`` (GradMA's QP_l
  corrections, BHerd's stored steps and selection, FedBAT's latent update and step sizes), per client.

:func:`trace` runs an ``Experiment`` with ``benchmark.runs.plan.run`` itself. :func:`run_problem` runs a convex
toy problem (``theory.problems``) with a step-size schedule the ``Experiment`` cannot express (eta(t) =
alpha/(t + beta) per round, FedBAT's eta_t = 2/(mu(gamma + t)) per cumulative local step): the same
``benchmark.runs.plan.run``, with its ``lr_schedule`` and :class:`InverseTimeSGD` as the local optimizer.

:func:`run_lfl` (written for LFL's checks, shared with FedBAT's) wraps :func:`run_problem` into a
:class:`Run` of float64 arrays, with the per-step ||g||^2 when asked (``StepGradSq``); :func:`start_point`
and :func:`seeds_for` give the runs independent starting points and seeds; :func:`grad_sq_sup` is the
plug-in G^2, :func:`sq_errors` and :func:`opt_gaps` the distance to theta* and the optimality gap per round.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils import _pytree as pytree

from benchmark.sim import engine
from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import run as run_experiment
from theory.outcome import CheckContext
from theory.provenance import check_algorithm

__all__ = ["Diagnostics", "InverseTimeSGD", "ParamTrace", "StepGradSq", "Trace", "run_problem", "single_thread",
           "trace"]


# --------------------------------------------------------------------------------------------------
# Observers


class ParamTrace(engine.Observer):
    """Records the global parameters (float64, CPU) at the start and after every round, the sampled
    clients of every round, ``server_keys`` scalars of the server state after every round, and
    ``hook(server_before, server_after, info)`` per round (e.g. LFL's theta(t+1) - theta_hat(t))."""

    def __init__(self, server_keys: Sequence[str] = (), hook: Callable | None = None):
        self.server_keys = tuple(server_keys)
        self.hook = hook
        self.params: list[torch.Tensor] = []
        self.client_ids: list[np.ndarray] = []
        self.server: dict[str, list[float]] = {k: [] for k in self.server_keys}
        self.extra: list = []
        self.parts, self.data, self.alg = None, None, None  # the run's partition, dataset and algorithm

    def _keep(self, params: torch.Tensor) -> None:
        self.params.append(params.detach().double().cpu().clone())

    def on_start(self, run):
        self.parts, self.data, self.alg = run.parts, run.data, run.alg
        self._keep(run.alg.global_params(run.server))

    def on_round_end(self, run, e):
        self._keep(e.params)
        self.client_ids.append(e.info.client_ids.detach().cpu().numpy().copy())
        for k in self.server_keys:
            self.server[k].append(float(e.server[k]))
        if self.hook is not None:
            self.extra.append(self.hook(e.server_before, e.server, e.info))


class StepGradSq(engine.Observer):
    """||g||^2 (float64) of the last gradient each local step took, per (round, client, step): the
    stochastic gradient the optimizer applies for plain local SGD (LFL, FedBAT's [g_m, g_alpha])."""

    steps = True

    def __init__(self):
        self.values: dict[tuple[int, int], list[float]] = {}

    def on_step(self, run, e):
        leaves = pytree.tree_leaves(e.grads[-1]) if e.grads else []
        self.values.setdefault((e.round, e.client_id), []).append(
            float(sum((leaf.detach().double() ** 2).sum() for leaf in leaves)))

    def array(self, client_ids: Sequence[np.ndarray]) -> np.ndarray:
        """(rounds, clients, steps) in the order of each round's sampled clients."""
        return np.array([[self.values[(r, int(c))] for c in ids] for r, ids in enumerate(client_ids)],
                        dtype=np.float64)


class Diagnostics(engine.Observer):
    """The algorithm's diagnostics (``algorithms.core.diagnose``), per round a list of
    (client_id, {name: tensor}) in the order of the stacked uplinks."""

    diagnostics = True

    def __init__(self, names: Sequence[str] | None = None):
        self.names = None if names is None else set(names)
        self.rounds: list[list[tuple[int, dict]]] = []

    def on_round_start(self, run, e):
        self.rounds.append([])

    def on_client(self, run, e):
        d = {k: v.detach().cpu() for k, v in e.diagnostics.items() if self.names is None or k in self.names}
        self.rounds[-1].append((e.client_id, d))

    def stacked(self, name: str) -> np.ndarray:
        """name's values for every (round, client) as one float64 array (rounds, clients, calls, ...)."""
        return np.array([[d[name].double().numpy() for _, d in rnd] for rnd in self.rounds])


# --------------------------------------------------------------------------------------------------
# Running


@dataclass
class Trace:
    """A run as the claims see it."""

    params: torch.Tensor  # (rounds + 1, d) float64: the initial vector, then after every round
    client_ids: np.ndarray  # (rounds, K)
    server: dict = field(default_factory=dict)  # key -> per-round floats
    extra: list = field(default_factory=list)  # the ParamTrace hook's values per round
    status: str = "ok"
    executor: str = ""
    parts: list = field(default_factory=list)
    data: object = None
    exp: Experiment | None = None
    alg: object = None
    final: dict = field(default_factory=dict)  # final metrics (trace: the run record's; run_problem: {})


@contextlib.contextmanager
def single_thread():
    """Torch on one intra-op thread, then restore the previous count. These problems have a few hundred
    parameters at most: intra-op threads only add synchronisation, which on a loaded machine costs
    10-50x (measured: a 64x64 MLP step 0.3 ms on one thread, 15 ms on two under load)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def _trace_of(rec: ParamTrace, status: str, executor: str, exp, final: dict | None = None) -> Trace:
    ids = np.stack(rec.client_ids) if rec.client_ids else np.zeros((0, 0), np.int64)
    return Trace(torch.stack(rec.params), ids, rec.server, rec.extra, status, executor, rec.parts, rec.data, exp,
                 rec.alg, final or {})


def trace(exp: Experiment, *, init: torch.Tensor | None = None, server_keys: Sequence[str] = (),
          hook: Callable | None = None, observers: Sequence = ()) -> Trace:
    """Run ``exp`` with ``benchmark.runs.plan.run`` (the benchmark's entry point) and record it.

    ``init``: the initial flat parameter vector (replaces the seeded initialisation). Runs on one thread.
    """
    check_algorithm(exp.algorithm)
    rec = ParamTrace(server_keys, hook)
    with single_thread():
        res = run_experiment(exp, observers=[rec, *observers], init=init)
    return _trace_of(rec, res.status, res.config["executor_used"], exp, res.final)


def trace_group(exps: Sequence[Experiment], *, init: torch.Tensor | None = None,
                server_keys: Sequence[str] = ()) -> list[Trace]:
    """Run ``exps`` (runs that may share one batched job: the same problem, algorithm and sizes, e.g. several
    sampling seeds) as ONE job of ``benchmark.runs.plan.group_job`` and record each as :func:`trace` does; every run
    starts from ``init``. A batched run's record equals the same run alone (``benchmark.runs.batched``), to float
    rounding; batching 8 seeds of a 10-parameter problem costs about 2.5 single runs, not 8."""
    from benchmark.runs.plan import execute, group_job

    for e in exps:
        check_algorithm(e.algorithm)
    recs = [ParamTrace(server_keys) for _ in exps]
    out: list = [None] * len(exps)
    with single_thread():
        job = group_job(exps)
        for i, res in execute(job, observers=[[r] for r in recs], init=init):
            out[i] = _trace_of(recs[i], res.status, res.config["executor_used"], exps[i], res.final)
    return out


class InverseTimeSGD:
    """Plain SGD whose step size decays within a round: eta_s = 1 / (1/lr + c s) at local step s
    (``algorithms.core.optim`` protocol, vmap-safe: s is the optimizer state, reset every round).

    With the round's lr = 2/(mu (gamma + r tau + 1)) and c = mu/2 this is FedBAT's eta_t =
    2/(mu (gamma + t)) over the cumulative local step t = r tau + s + 1 (Theorems 1-2)."""

    def __init__(self, c: float, weight_decay: float = 0.0):
        self.c, self.weight_decay = float(c), float(weight_decay)

    def init(self, params: torch.Tensor) -> dict:
        return {"s": torch.zeros((), dtype=params.dtype, device=params.device)}

    def step(self, params, grad, state, lr):
        if self.weight_decay:
            grad = grad + self.weight_decay * params
        eta = 1.0 / (1.0 / lr + self.c * state["s"])
        return params - eta * grad, {"s": state["s"] + 1}


def run_problem(problem, algorithm: str, args: dict, *, rounds: int, local_steps: int, batch_size: int | None,
                lr: float | Callable[[int], float], seed: int, theta0: torch.Tensor,
                clients_per_round: int | None = None, step_decay: float = 0.0, executor: str = "vectorized",
                server_keys: Sequence[str] = (), hook: Callable | None = None, observers: Sequence = ()) -> Trace:
    """Run ``algorithm`` on a ``theory.problems.ConvexProblem`` from ``theta0``.

    ``lr``: a constant or a schedule ``lr(round)``; ``step_decay`` c > 0 decays it within the round
    (:class:`InverseTimeSGD`). ``batch_size=None``: full local batches (deterministic gradients). The
    problem's clients are the run's clients; minibatches, sampling and algorithm noise follow the
    engine's seeding from ``seed``. Evaluation runs once, after the last round.
    """
    wd = float(problem.experiment_args.get("weight_decay", 0.0))
    exp = Experiment(algorithm=algorithm, dataset=problem.data, num_clients=None, model=problem.model,
                     clients_per_round=clients_per_round, rounds=rounds, local_steps=local_steps,
                     batch_size=batch_size, lr=float(lr(0)) if callable(lr) else float(lr), weight_decay=wd,
                     algorithm_args=dict(args), seed=seed, eval_every=rounds, eval_train_samples=None,
                     executor=executor, device="cpu")
    check_algorithm(algorithm)
    rec = ParamTrace(server_keys, hook)
    with single_thread():
        res = run_experiment(exp, observers=[rec, *observers], init=theta0, lr_schedule=lr if callable(lr) else None,
                             optimizer=InverseTimeSGD(step_decay, wd) if step_decay else None)
    return _trace_of(rec, res.status, res.config["executor_used"], exp)


@dataclass
class Run:
    """One run: ``params`` (R+1, d) float64, theta(0) first; ``grad_sq`` (R, K, steps) when recorded;
    ``client_ids`` (R, K); ``extra`` the hook's values per round; ``status`` "ok" or "diverged"."""

    params: np.ndarray
    client_ids: np.ndarray
    grad_sq: np.ndarray | None = None
    extra: list = field(default_factory=list)
    status: str = "ok"


def run_lfl(
    problem,
    algorithm: str,
    args: dict,
    *,
    rounds: int,
    local_steps: int,
    batch_size: int | None,
    lr: float | Callable[[int], float],
    seed: int,
    theta0: torch.Tensor,
    step_decay: float = 0.0,
    clients_per_round: int | None = None,
    record_grads: bool = False,
    hook: Callable | None = None,
) -> Run:
    """``algorithm`` on ``problem`` from ``theta0`` with step size ``lr`` (a constant or ``lr(round)``, decayed
    within the round by ``step_decay``): ``theory.runs.run_problem`` with observers. ``batch_size=None``:
    full local batches (deterministic gradients)."""
    g = StepGradSq() if record_grads else None
    tr = run_problem(problem, algorithm, args, rounds=rounds, local_steps=local_steps, batch_size=batch_size,
                     lr=lr, seed=seed, theta0=theta0, clients_per_round=clients_per_round,
                     step_decay=step_decay, hook=hook, observers=[g] if g is not None else ())
    ids = tr.client_ids
    return Run(tr.params.numpy(), ids, g.array(ids) if g is not None and len(ids) else None, tr.extra, tr.status)


def start_point(problem, seed: int, radius: float) -> torch.Tensor:
    """theta* + radius * u with u uniform on the unit sphere (seeded), rounded to float32 (float64 out)."""
    d = problem.optimum.numel()
    u = np.random.default_rng([int(seed), 77]).normal(size=d)
    w = problem.optimum.double() + radius * torch.from_numpy(u / np.linalg.norm(u))
    return w.to(torch.float32).double()


def seeds_for(ctx: CheckContext, n: int) -> list[int]:
    """n Monte-Carlo seeds derived from the context's seed (disjoint for different ctx seeds)."""
    return [int(ctx.seed) * 10_000 + i for i in range(n)]


def grad_sq_sup(runs: list[Run], num_clients: int) -> float:
    """Plug-in G^2: max over (round, client, local step) of the mean over runs of ||g||^2 (recipe 6).

    With partial participation a client's mean is over the runs that sampled it in that round (sampling is
    independent of the trajectory, so this is an unbiased estimate of its E||g||^2)."""
    R, _, s = runs[0].grad_sq.shape
    tot = np.zeros((R, num_clients, s))
    cnt = np.zeros((R, num_clients, 1))
    for run in runs:
        for r in range(R):
            tot[r, run.client_ids[r]] += run.grad_sq[r]
            cnt[r, run.client_ids[r]] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tot / cnt
    return float(np.nanmax(mean))


def sq_errors(p, runs: list[Run]) -> np.ndarray:
    """||theta(t) - theta*||^2 per run and round: (runs, R+1) float64."""
    w = torch.from_numpy(np.stack([r.params for r in runs]))  # (S, R+1, d)
    return ((w - p.optimum.double()) ** 2).sum(-1).numpy()


def opt_gaps(p, runs: list[Run]) -> np.ndarray:
    """F(theta(t)) - F* per run and round: (runs, R+1) float64."""
    return np.array([[p.objective(torch.from_numpy(w)) - p.f_star for w in r.params] for r in runs])
