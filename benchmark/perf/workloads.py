"""What ``fedrepro bench`` (and the asv benchmarks) time: federated rounds and whole runs through the engine,
and the centralized limit, on a configuration's synthetic data (``benchmark.perf.bench`` times them).

* :class:`FederatedRound`: one round of an experiment as ``benchmark.runs.plan`` plans and prepares it, timed
  as its local training and aggregation (``benchmark.sim.engine``) from the same downlink every call;
* the limit: centralized training of the same model on the same samples, S steps on the K*B samples of a
  round concatenated into one batch: an ``nn.Module`` step and a ``torch.func.grad`` step;
* :class:`Workload`: a callable per method of one configuration; :class:`RunsWorkload`: R complete runs,
  batched (``benchmark.runs.plan.run_group``) and one after another (``benchmark.runs.plan.run``).
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad

from algorithms.core import ParamLayout

from benchmark import models
from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.runs import cost, plan
from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import run, run_group
from benchmark.sim import engine, executors as ex

RUN_METHODS = ("one_after_another", "batched")


@dataclass
class Config:
    preset: str
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    clients: int
    batch_size: int
    local_steps: int
    samples_per_client: int
    seed: int = 0
    lr: float = 0.01

    @property
    def sample_gradients_per_round(self) -> int:
        return self.clients * self.batch_size * self.local_steps


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synthetic_data(cfg: Config, test: int | None = None):
    """The configuration's random data: K clients of ``samples_per_client`` (natural clients), and a test set
    of ``test`` random samples (None: one per class)."""
    g = torch.Generator().manual_seed(cfg.seed)
    n = cfg.samples_per_client
    clients = [(torch.randn(n, *cfg.input_shape, generator=g),
                torch.randint(0, cfg.num_classes, (n,), generator=g)) for _ in range(cfg.clients)]
    if test is None:
        tst = (torch.randn(cfg.num_classes, *cfg.input_shape, generator=g), torch.arange(cfg.num_classes))
    else:
        tst = (torch.randn(test, *cfg.input_shape, generator=g),
               torch.randint(0, cfg.num_classes, (test,), generator=g))
    return FederatedDataset.from_tensors(clients, tst, name="bench-synthetic", num_classes=cfg.num_classes)


class FederatedRound:
    """One federated round of an experiment through the engine, as ``benchmark.runs.plan`` plans and prepares it:
    sampling, the clients' schedules and the broadcast are done once (``engine.begin_round``); a call is the
    round's local training (``engine.local_training``, the job's executor) and aggregation
    (``engine.aggregate``), from the same downlink every time. Evaluation is excluded."""

    def __init__(self, exp):
        """``exp``: an Experiment, or a planned ``plan.Job`` (e.g. a batched group, ``plan.group_job``)."""
        self.job = exp if isinstance(exp, plan.Job) else plan.plan_one(exp)
        self.preps, self.runs, self.hypers = plan.start(self.job)
        self.plans = [engine.begin_round(r) for r in self.runs]
        self.executor = ex.get(self.job.executor, compile=self.runs[0].cfg.compile)  # as engine.run_rounds

    def __call__(self):
        outs = engine.local_training(self.runs, self.plans, self.executor, self.hypers, [()] * len(self.runs))
        return [engine.aggregate(r, p.round, p.ids, p.jobs, o, p.lr)
                for r, p, o in zip(self.runs, self.plans, outs)]


def _limit_module(module, x, y, idx, lr: float):
    """Centralized training, an ``nn.Module`` step (forward, ``backward()``, ``torch.optim.SGD``, native
    BatchNorm): ``idx[s]`` is step s's batch; from the same weights every call."""
    plain = copy.deepcopy(module).train()
    sgd = torch.optim.SGD(plain.parameters(), lr=lr)
    saved = [p.detach().clone() for p in plain.parameters()]
    saved_bufs = [t.detach().clone() for t in plain.buffers()]

    def limit_module():
        with torch.no_grad():
            for p, v in zip(plain.parameters(), saved):
                p.copy_(v)
            for t, v in zip(plain.buffers(), saved_bufs):
                t.copy_(v)
        for i in idx:
            loss = F.cross_entropy(plain(x[i]), y[i])
            sgd.zero_grad(set_to_none=True)
            loss.backward()
            sgd.step()
        return loss.detach()

    return limit_module


def _limit_functional(module, x, y, idx, lr: float):
    """Centralized training with ``torch.func.grad`` of ``functional_call`` on a flat parameter vector (the
    executors' machinery, without vmap)."""
    functional = copy.deepcopy(module).train()
    layout = ParamLayout.from_module(functional)
    p0 = torch.nn.utils.parameters_to_vector(module.parameters()).detach().clone()
    saved_named_bufs = {name: t.detach().clone() for name, t in functional.named_buffers()}

    def loss_fn(p, bufs, xb, yb):  # buffers are an input, so BatchNorm may update them in place
        return F.cross_entropy(functional_call(functional, (layout.unflatten(p), bufs), (xb,)), yb)

    grad_fn = grad(loss_fn)

    def limit_functional():
        p = p0
        bufs = {name: t.clone() for name, t in saved_named_bufs.items()}
        for i in idx:
            p = p - lr * grad_fn(p, bufs, x[i], y[i])
        return p

    return limit_functional


class Workload:
    """One configuration prepared on a device: a callable per method, each doing one round's work."""

    def __init__(self, cfg: Config, device):
        self.cfg, self.device = cfg, device
        exp = Experiment(algorithm="fedavg", dataset=synthetic_data(cfg), model=cfg.model, num_clients=None,
                         clients_per_round=cfg.clients, rounds=1, local_steps=cfg.local_steps,
                         batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, eval_train_samples=None,
                         divergence_factor=None, device=str(device))
        self.auto = plan.plan_one(exp)  # executor="auto": timed on its own, with its own noise
        rounds = {e: FederatedRound(dataclasses.replace(exp, executor=e)) for e in ("sequential", "vectorized")}
        prep, first = rounds["vectorized"].preps[0], rounds["vectorized"].plans[0]
        module = prep.module
        self.params = models.param_count(module)
        self.flops_per_sample = cost.flops_per_sample(module, cfg.input_shape)
        # the limit: the round's K*B samples of each step as one centralized batch
        idx = torch.cat([j.schedule.idx for j in first.jobs], dim=1).to(device)  # (S, K*B)
        x, y = prep.data.x_train, prep.data.y_train
        self.fns = {**rounds, "auto": FederatedRound(dataclasses.replace(exp, executor=self.auto.executor)),
                    "limit_module": _limit_module(module, x, y, idx, cfg.lr),
                    "limit_functional": _limit_functional(module, x, y, idx, cfg.lr)}

    def time_once(self, method: str) -> float:
        fn = self.fns[method]
        gc.collect()
        _sync(self.device)
        t0 = time.perf_counter()
        fn()
        _sync(self.device)
        return time.perf_counter() - t0


class RunsWorkload:
    """R cells of FedAvg (3 seeds x 2 learning rates when R = 6) on the configuration's synthetic data,
    each a complete run (set-up, ``rounds`` rounds, evaluation every round on a small test set): one
    after another as a user gets them alone (``executor="auto"``), and as one batched job
    (``benchmark.runs.plan.run_group``)."""

    def __init__(self, cfg: Config, device, runs: int, rounds: int):
        self.cfg, self.device, self.runs, self.rounds = cfg, device, runs, rounds
        data = synthetic_data(cfg, test=64)
        lrs = (cfg.lr, cfg.lr / 2)
        self.exps = [Experiment(algorithm="fedavg", dataset=data, model=cfg.model, num_clients=None,
                                clients_per_round=cfg.clients, rounds=rounds, local_steps=cfg.local_steps,
                                batch_size=cfg.batch_size, lr=lrs[i % 2], seed=i // 2, eval_every=1,
                                eval_train_samples=64, device=str(device)) for i in range(runs)]
        self.alone_executor = None

    @property
    def sample_gradients(self) -> int:
        return self.runs * self.rounds * self.cfg.sample_gradients_per_round

    def time_once(self, method: str) -> float:
        gc.collect()
        _sync(self.device)
        t0 = time.perf_counter()
        if method == "batched":
            run_group(self.exps)
        else:
            for e in self.exps:
                self.alone_executor = run(e).execution.get("executor")
        _sync(self.device)
        return time.perf_counter() - t0


