"""The round loop (DESIGN.md): sample, broadcast, local update, aggregate, evaluate, account bits.

Randomness, all derived from the experiment seed:
* client sampling: uniform without replacement, ``np.random.default_rng([seed, 1])`` across rounds;
* minibatch order: ``np.random.default_rng([seed, 2, round, client])`` per client and round;
* algorithm noise (stochastic quantizers, ...): ``CounterRng`` keyed by (seed, round, client);
* model initialisation: ``torch.manual_seed(seed)`` before the model is built (in ``experiment``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from algorithms.base import Algorithm, RoundInfo

from . import executors as ex
from .federated_dataset import FederatedDataset


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
    # a run whose training loss exceeds this factor times its initial training loss is diverged (None: off)
    divergence_factor: float | None = None


@dataclass
class LoopResult:
    history: list[dict]
    status: str  # "ok" or "diverged"
    server_state: dict
    params: torch.Tensor
    buffers: dict
    executor: str
    message: str = ""


class Diverged(RuntimeError):
    pass


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


def train(alg: Algorithm, fmodel: ex.FunctionalModel, data: FederatedDataset, parts: list[np.ndarray],
          cfg: LoopConfig, executor: str, optimizer, progress: Callable[[int, dict], None] | None = None
          ) -> LoopResult:
    dev = data.x_train.device
    n_clients = len(parts)
    k = n_clients if cfg.clients_per_round is None else cfg.clients_per_round
    if not 1 <= k <= n_clients:
        raise ValueError(f"clients_per_round must be in [1, {n_clients}], got {k}")
    if not alg.vectorizable and executor == "vectorized":
        executor = "sequential"
    runner = ex.get(executor)
    sizes = np.array([len(p) for p in parts])

    params0 = torch.nn.utils.parameters_to_vector(fmodel.module.parameters()).detach().to(dev)
    server = alg.init(params0)
    buffers = {n: b.to(dev) for n, b in fmodel.initial_buffers().items()}
    client_states: dict[int, dict] = {}

    sample_rng = np.random.default_rng([cfg.seed, 1])
    train_idx = np.concatenate(parts)
    if cfg.eval_train_samples is not None and len(train_idx) > cfg.eval_train_samples:
        train_idx = np.random.default_rng([cfg.seed, 3]).choice(train_idx, cfg.eval_train_samples,
                                                                 replace=False)
    train_idx_t = torch.from_numpy(np.sort(train_idx)).to(dev)

    initial_loss = None
    if cfg.divergence_factor is not None:
        initial_loss, _ = fmodel.evaluate(params0, buffers, data.x_train[train_idx_t], data.y_train[train_idx_t])
    history: list[dict] = []
    t_start = time.perf_counter()
    status, message = "ok", ""
    for r in range(cfg.rounds):
        lr = cfg.lr * cfg.lr_decay ** r
        ids = np.sort(sample_rng.choice(n_clients, size=k, replace=False)) if k < n_clients \
            else np.arange(n_clients)
        jobs = []
        for cid in ids.tolist():
            if cid not in client_states:
                client_states[cid] = alg.client_init(params0)
            sch = ex.client_schedule(parts[cid], np.random.default_rng([cfg.seed, 2, r, cid]),
                                     cfg.local_epochs, cfg.local_steps, cfg.batch_size)
            jobs.append(ex.ClientJob(cid, sch, client_states[cid], int(sizes[cid])))

        downlink = alg.broadcast(server)
        out = runner.run(alg, fmodel, data.x_train, data.y_train, downlink, jobs, buffers, optimizer, lr,
                         cfg.seed, r)
        n_k = torch.tensor(sizes[ids], dtype=torch.float32, device=dev)
        weights = n_k / n_k.sum()
        info = RoundInfo(r, torch.from_numpy(ids).to(dev), n_clients, n_k,
                         torch.tensor([j.schedule.steps for j in jobs], device=dev), lr)
        server = alg.aggregate(server, out.uplinks, weights, info)
        for cid, st in zip(ids.tolist(), out.states):
            client_states[cid] = st
        if buffers:
            buffers = {n: sum(float(wk) * b[n] for wk, b in zip(weights, out.buffers)) for n in buffers}

        params = alg.global_params(server)
        entry = {"round": r + 1, "bits_up": int(out.uplinks.bits), "bits_down": int(downlink.bits) * k,
                 "local_loss": float(np.mean(out.local_loss)), "test_accuracy": None, "test_loss": None,
                 "train_loss": None}
        diverged = not _finite(params) or not math.isfinite(entry["local_loss"])
        if diverged or (r + 1) % cfg.eval_every == 0 or r + 1 == cfg.rounds:
            if not diverged:
                entry["test_loss"], entry["test_accuracy"] = fmodel.evaluate(params, buffers, data.x_test,
                                                                             data.y_test)
                entry["train_loss"], _ = fmodel.evaluate(params, buffers, data.x_train[train_idx_t],
                                                         data.y_train[train_idx_t])
                diverged = not (math.isfinite(entry["test_loss"]) and math.isfinite(entry["train_loss"]))
                grown = None if diverged else loss_growth(entry["train_loss"], initial_loss, cfg.divergence_factor)
                if grown:
                    status, message = "diverged", f"{grown} at round {r + 1}"
                    diverged = True
        entry["wall_time"] = time.perf_counter() - t_start
        history.append(entry)
        if progress is not None:
            progress(r, entry)
        if diverged:
            status = "diverged"
            message = message or f"non-finite parameters or loss at round {r + 1}"
            break
    params = alg.global_params(server)
    return LoopResult(history, status, server, params, buffers, runner.name, message)


