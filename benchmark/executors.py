"""How local updates run: the sequential reference and the vectorized executor (torch.func.vmap).

Both build the same ``ClientContext`` for each client: batches are index gathers into the training
tensors, gradients come from ``torch.func`` on a functional copy of the model, randomness from a
counter-based ``CounterRng`` keyed by (seed, round, client). The vectorized executor stacks the
sampled clients and runs ``Algorithm.local_update`` once under ``torch.func.vmap``; clients with fewer
local steps are masked (a masked step leaves every carried tensor unchanged), and partial batches are
padded with zero-weight samples. Hence both executors give the same numbers up to float rounding.

Normalisation layers: BatchNorm runs in training mode on batch statistics; its running statistics
are buffers threaded through the local loop by the context (never seen by algorithms), updated with
the module's momentum, masked like any carried tensor, and averaged by the engine with the
aggregation weights. Padding rows (vectorized executor, partial batches only) are copies of real rows
with weight 0: they enter neither the loss nor BatchNorm's batch statistics (BatchNorm is replaced, in
the training copy of the model, by a sample-weighted BatchNorm with the same parameters; in rounds
without padding it runs the fused ``F.batch_norm`` kernel instead, about 5x cheaper on a CPU).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from algorithms.core import (Algorithm, CounterRng, Message, ParamLayout, splitmix64, stack_trees,
                             tree_map, unstack_tree)

EXECUTORS = ("sequential", "vectorized")



# Batched runs' hyperparameters (benchmark.batched): a run's numeric hyperparameters as 0-d tensors


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


class Batch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    w: torch.Tensor  # sample weights: 1 for real samples, 0 for padding


# --------------------------------------------------------------------------------------------------
# The functional model shared by both executors


class _WeightedBatchNorm(torch.nn.Module):
    """BatchNorm in training mode whose batch statistics weight each sample (padding has weight 0).

    Same parameters (``weight``, ``bias``) and the same arithmetic as ``F.batch_norm(training=True)``;
    the batch mean and unbiased variance are recorded for the running statistics.
    """

    def __init__(self, bn: torch.nn.modules.batchnorm._BatchNorm, owner: "FunctionalModel"):
        super().__init__()
        self.eps, self.momentum, self.affine = bn.eps, bn.momentum, bn.affine
        if bn.affine:
            self.weight = torch.nn.Parameter(bn.weight.detach().clone())
            self.bias = torch.nn.Parameter(bn.bias.detach().clone())
        self._owner = [owner]  # a list: not registered as a submodule

    def forward(self, x):
        owner = self._owner[0]
        dims = [0] + list(range(2, x.dim()))
        per_channel = x.shape[0] * (math.prod(x.shape[2:]) if x.dim() > 2 else 1)
        if not owner.weighted and per_channel > 1:  # all weights 1: the fused kernel, same arithmetic
            if owner.recording:
                var, mean = torch.var_mean(x.detach(), dim=dims, correction=1)
                owner._captured.append((mean, var))
            return F.batch_norm(x, None, None, self.weight if self.affine else None,
                                self.bias if self.affine else None, True, 0.0, self.eps)
        shape = [x.shape[0]] + [1] * (x.dim() - 1)
        w = owner.sample_weights.reshape(shape).to(x.dtype)
        per_sample = math.prod(x.shape[2:]) if x.dim() > 2 else 1
        cnt = owner.sample_weights.sum() * per_sample
        mean = (w * x).sum(dim=dims) / cnt
        cshape = [1, -1] + [1] * (x.dim() - 2)
        xc = x - mean.reshape(cshape)
        var = (w * xc * xc).sum(dim=dims) / cnt
        if owner.recording:
            owner._captured.append((mean.detach(), (var * cnt / (cnt - 1).clamp(min=1)).detach()))
        y = xc * torch.rsqrt(var.reshape(cshape) + self.eps)
        if self.affine:
            y = y * self.weight.reshape(cshape) + self.bias.reshape(cshape)
        return y


class _CounterDropout(torch.nn.Module):
    """Dropout whose mask comes from the client's counter-based RNG (same masks in both executors)."""

    def __init__(self, p: float, owner: "FunctionalModel"):
        super().__init__()
        self.p = p
        self._owner = [owner]

    def forward(self, x):
        rng = self._owner[0].rng
        if rng is None or self.p == 0:
            return x
        keep = (rng.uniform(x.shape) >= self.p).to(x.dtype)
        return x * keep / (1 - self.p)


class FunctionalModel:
    """Runs a module from a flat parameter vector, with BatchNorm statistics as explicit buffers."""

    def __init__(self, module: torch.nn.Module, task: str):
        self.module = module
        self.task = task
        self.layout = ParamLayout.from_module(module)
        self.train_module = copy.deepcopy(module).train()
        self.sample_weights: torch.Tensor | None = None
        self.rng = None  # set per step by the client context (dropout masks)
        self.loss = getattr(module, "fedrepro_loss", "default")  # e.g. "squared_hinge" for BHerd's SVM
        if self.loss not in ("default", "squared_hinge"):
            raise ValueError(f"unknown model loss {self.loss!r}")
        self._captured: list = []
        self.recording = True  # False during reference forwards (no BatchNorm statistics recorded)
        # True when some batch may hold zero-weight padding rows (vectorized rounds with partial
        # batches): BatchNorm then weights its statistics; executors set it per round
        self.weighted = True
        self._stages: list | None = None
        self.bn_names, self._bn = [], []
        for name, mod in list(self.train_module.named_modules()):
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.track_running_stats:
                if mod.momentum is None:
                    raise ValueError("BatchNorm with momentum=None (cumulative average) is not supported")
                self.bn_names.append(name)
                self._bn.append(mod)
                parent = self.train_module.get_submodule(name.rpartition(".")[0]) if "." in name \
                    else self.train_module
                setattr(parent, name.rpartition(".")[2], _WeightedBatchNorm(mod, self))
            elif isinstance(mod, torch.nn.Dropout):
                parent = self.train_module.get_submodule(name.rpartition(".")[0]) if "." in name \
                    else self.train_module
                setattr(parent, name.rpartition(".")[2], _CounterDropout(mod.p, self))
            elif isinstance(mod, torch.nn.modules.dropout._DropoutNd):
                raise ValueError(f"{type(mod).__name__} is not supported by the executors; use nn.Dropout")
        self.eval_module = copy.deepcopy(module).eval()

    def initial_buffers(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, mod in self.module.named_modules():
            if name in self.bn_names:
                out[f"{name}.running_mean"] = mod.running_mean.detach().clone()
                out[f"{name}.running_var"] = mod.running_var.detach().clone()
        return out

    def forward_train(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Training-mode forward; BatchNorm uses ``self.sample_weights`` (set per batch)."""
        if self.sample_weights is None or self.sample_weights.shape[0] != x.shape[0]:
            self.sample_weights = torch.ones(x.shape[0], device=x.device)
        return functional_call(self.train_module, self.layout.unflatten(flat), (x,))

    def stage_modules(self) -> list:
        """The training copy of the model as a chain of stages (``benchmark.models.stages``)."""
        if self._stages is None:
            from .models import stages
            mods = stages(self.train_module)
            self._stages = [(m, [n for n, _ in m.named_parameters()]) for m in mods]
        return self._stages

    def forward_stages(self, flat: torch.Tensor, x: torch.Tensor, start: int = 0) -> list[torch.Tensor]:
        """Training-mode forward through stages ``start, start+1, ...``: the output of each."""
        mods = self.stage_modules()
        if not 0 <= start < len(mods):
            raise ValueError(f"start stage {start} out of range: the model has {len(mods)} stages")
        if self.sample_weights is None or self.sample_weights.shape[0] != x.shape[0]:
            self.sample_weights = torch.ones(x.shape[0], device=x.device)
        params = self.layout.unflatten(flat)
        outs, h = [], x
        for mod, names in mods[start:]:
            h = functional_call(mod, {n: params[n] for n in names}, (h,))
            outs.append(h)
        return outs

    def updated_buffers(self, buffers: dict, captured: list) -> dict:
        new = dict(buffers)
        for name, mod, (mean, var) in zip(self.bn_names, self._bn, captured):
            m = mod.momentum
            new[f"{name}.running_mean"] = (1 - m) * buffers[f"{name}.running_mean"] + m * mean
            new[f"{name}.running_var"] = (1 - m) * buffers[f"{name}.running_var"] + m * var
        return new

    def criterion(self, out: torch.Tensor, batch: Batch) -> torch.Tensor:
        w = batch.w
        if self.loss == "squared_hinge":  # labels {0, 1} -> {-1, +1}; 0.5 * max(0, 1 - y s)^2
            per = 0.5 * torch.clamp(1 - (2.0 * batch.y - 1) * out.reshape(-1), min=0) ** 2
        elif self.task == "classification":
            per = F.cross_entropy(out, batch.y, reduction="none")
        else:
            y = batch.y if batch.y.dim() == out.dim() else batch.y.reshape(out.shape)
            per = F.mse_loss(out, y, reduction="none")
            per = per.reshape(per.shape[0], -1).mean(dim=1)
        return (per * w).sum() / w.sum()

    @torch.no_grad()
    def evaluate(self, flat: torch.Tensor, buffers: dict, x: torch.Tensor, y: torch.Tensor,
                 batch_size: int = 4096) -> tuple[float, float]:
        """(mean loss, accuracy or None) of the model at ``flat`` on (x, y), in eval mode."""
        state = dict(self.layout.unflatten(flat))
        state.update(buffers)
        total, correct, n = 0.0, 0, len(x)
        for i in range(0, n, batch_size):
            out = functional_call(self.eval_module, state, (x[i:i + batch_size],))
            yb = y[i:i + batch_size]
            if self.loss == "squared_hinge":
                s_ = out.reshape(-1)
                total += (0.5 * torch.clamp(1 - (2.0 * yb - 1) * s_, min=0) ** 2).sum().item()
                correct += ((s_ > 0).long() == yb).sum().item()
            elif self.task == "classification":
                total += F.cross_entropy(out, yb, reduction="sum").item()
                correct += (out.argmax(1) == yb).sum().item()
            else:
                yb = yb if yb.dim() == out.dim() else yb.reshape(out.shape)
                total += F.mse_loss(out, yb, reduction="none").reshape(len(yb), -1).mean(1).sum().item()
        return total / max(n, 1), (correct / max(n, 1) if self.task == "classification" else None)


# --------------------------------------------------------------------------------------------------
# Per-client schedules of minibatches


@dataclass
class Schedule:
    """Minibatch indices of one client for one round: idx (steps, B), w (steps, B)."""

    idx: torch.Tensor
    w: torch.Tensor

    @property
    def steps(self) -> int:
        return int(self.idx.shape[0])


def client_schedule(indices: np.ndarray, rng: np.random.Generator, local_epochs: int | None,
                    local_steps: int | None, batch_size: int | None) -> Schedule:
    """DataLoader(shuffle=True, drop_last=False) semantics per epoch, or a fixed number of steps.

    By epochs: each epoch is a fresh permutation cut into ceil(n/B) batches, the last one partial.
    By steps: permutations are concatenated and cut into full batches of B (min(B, n)).
    ``batch_size=None`` means the full local dataset every step.
    """
    n = len(indices)
    if n == 0:
        raise ValueError("a client with no samples cannot train")
    b = n if batch_size is None else min(int(batch_size), n)
    rows, weights = [], []
    if local_steps is not None:
        need = local_steps * b
        perms = []
        while sum(len(p) for p in perms) < need:
            perms.append(indices[rng.permutation(n)])
        flat = np.concatenate(perms)[:need].reshape(local_steps, b)
        return Schedule(torch.from_numpy(flat.astype(np.int64)), torch.ones(local_steps, b))
    for _ in range(local_epochs):
        perm = indices[rng.permutation(n)]
        for start in range(0, n, b):
            chunk = perm[start:start + b]
            w = np.ones(b, dtype=np.float32)
            if len(chunk) < b:  # pad the partial batch with zero-weight copies of its first sample
                w[len(chunk):] = 0.0
                chunk = np.concatenate([chunk, np.full(b - len(chunk), chunk[0])])
            rows.append(chunk)
            weights.append(w)
    return Schedule(torch.from_numpy(np.stack(rows).astype(np.int64)), torch.from_numpy(np.stack(weights)))


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
    """

    def __init__(self, fmodel: FunctionalModel, rng):
        self._fm, self._rng = fmodel, rng

    def __call__(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._fm.forward_train(flat, x)

    @property
    def num_stages(self) -> int:
        return len(self._fm.stage_modules())

    def stages(self, flat: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        return self._fm.forward_stages(flat, x)

    def reference(self, flat: torch.Tensor, h: torch.Tensor, start: int = 0) -> list[torch.Tensor]:
        fm = self._fm
        fm.recording, fm.rng = False, None
        try:
            return fm.forward_stages(flat, h, start)
        finally:
            fm.recording, fm.rng = True, self._rng


class ClientContext:
    """Implements ``algorithms.base.LocalContext`` for one client (or, under vmap, for each client)."""

    def __init__(self, fmodel: FunctionalModel, data_x: torch.Tensor, data_y: torch.Tensor,
                 idx: torch.Tensor, w: torch.Tensor, active: torch.Tensor | None, buffers: dict,
                 rng_key: torch.Tensor, optimizer, lr: float, steps: torch.Tensor,
                 num_samples: torch.Tensor, client_id: torch.Tensor, round_: int, record: bool = False,
                 step_hook: Callable | None = None):
        self.fmodel = fmodel
        self.layout = fmodel.layout
        self._x, self._y = data_x, data_y
        self._idx, self._w = idx, w
        self._active = active  # (num_steps,) bool, or None when every step is real
        self.buffers = buffers
        self.rng = CounterRng(rng_key)
        self.optimizer = optimizer
        self.lr = lr
        self.num_steps = int(idx.shape[0])
        self.steps = steps
        self.num_samples = num_samples
        self.client_id = client_id
        self.round = round_
        self.trim_padding = False
        self.loss_sum = torch.zeros((), device=data_x.device)
        # diagnostics (algorithms.base.diagnose): name -> values in call order, when an observer asks
        self.diagnosing = record
        self._records: dict[str, list] = {}
        self._step: int | None = None  # the local step being run by ``loop``
        self._step_hook = step_hook  # (s, loss, grads, carry) after every local step (sequential only)
        self._step_grads: list | None = None

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
        i, w = self._idx[s], self._w[s]
        if self.trim_padding:  # sequential: a partial batch is just shorter (padding sits at the end)
            n = int(w.sum().item())
            i, w = i[:n], w[:n]
        return Batch(self._x[i], self._y[i], w)

    def criterion(self, out, batch):
        return self.fmodel.criterion(out, batch)

    # -- gradients --
    def value_and_grad(self, f: Callable, args: Any, batch: Batch, update_stats: bool = True):
        """Gradient of ``f(args, model_fn, batch)`` w.r.t. ``args``; BatchNorm buffers are updated
        unless ``update_stats`` is False (auxiliary gradients, e.g. at another point)."""
        fm = self.fmodel

        def wrapped(a):
            fm._captured = []
            fm.sample_weights = batch.w
            fm.rng = self.rng
            loss = f(a, ModelFn(fm, self.rng), batch)
            return loss, list(fm._captured)

        g, (loss, captured) = grad_and_value(wrapped, has_aux=True)(args)
        if self._step_grads is not None:
            self._step_grads.append(g)
        if len(captured) not in (0, len(fm.bn_names)):
            raise RuntimeError(f"the objective ran {len(captured) // max(len(fm.bn_names), 1)} training "
                               "forwards on one batch; run one (model_fn or model_fn.stages) and use "
                               "model_fn.reference for frozen models")
        if captured and update_stats:
            self.buffers = fm.updated_buffers(self.buffers, captured)
        self._step_loss = loss.detach()
        return loss, g

    def loss_and_grad(self, params: torch.Tensor, batch: Batch, update_stats: bool = True):
        return self.value_and_grad(lambda p, model_fn, b: self.criterion(model_fn(p, b.x), b), params, batch,
                                   update_stats)

    def eval_loss(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            out = self.fmodel.forward_train(params, batch.x)
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
            if self._active is not None:
                a = self._active[s]
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


def _rng_key(seed: int, round_: int, client_id: int, device) -> torch.Tensor:
    k = torch.tensor([seed, round_, client_id], dtype=torch.int64, device=device)
    z = splitmix64(k[0])
    z = splitmix64(z ^ k[1])
    return splitmix64(z ^ k[2])


class SequentialExecutor:
    """The readable reference: clients one after another."""

    name = "sequential"

    def run(self, alg: Algorithm, fmodel: FunctionalModel, x, y, downlink: Message, jobs: list[ClientJob],
            buffers: dict, optimizer, lr: float, seed: int, round_: int, *, record: bool = False,
            on_step: Callable | None = None) -> RoundOutput:
        """``record``: collect diagnostics; ``on_step(client_id, s, loss, grads, carry)`` after every local step."""
        ups, states, bufs, losses, diags = [], [], [], [], []
        dev = x.device
        for job in jobs:
            sch = job.schedule
            hook = None if on_step is None else (
                lambda s, loss, grads, carry, cid=job.client_id: on_step(cid, s, loss, grads, carry))
            ctx = ClientContext(fmodel, x, y, sch.idx.to(dev), sch.w.to(dev), None, dict(buffers),
                                _rng_key(seed, round_, job.client_id, dev), optimizer, lr,
                                torch.tensor(sch.steps, device=dev),
                                torch.tensor(float(job.num_samples), device=dev),
                                torch.tensor(job.client_id, device=dev), round_, record, hook)
            ctx.trim_padding = True
            fmodel.weighted = False  # trimmed batches hold real samples only
            up, st = alg.local_update(ctx, downlink, job.state)
            ups.append(up)
            states.append(st)
            bufs.append(ctx.buffers)
            losses.append(float(ctx.loss_sum) / max(sch.steps, 1))
            if record:
                diags.append(ctx.diagnostics())
        return RoundOutput(stack_trees(ups), states, bufs, losses, diags)


@dataclass
class RunRound:
    """One run's share of a batched round (``VectorizedExecutor.run_many``): its downlink, sampled
    clients, BatchNorm buffers, learning rate, seed, and the numeric hyperparameters that differ across
    the group (``benchmark.batched.tensor_fields``; name -> this run's value)."""

    downlink: Message
    jobs: list[ClientJob]
    buffers: dict
    lr: float
    seed: int
    hyper: dict = field(default_factory=dict)


def _pad_schedules(jobs: list[ClientJob]):
    """Stack the clients' schedules: (idx, w, active) of shapes (K, S, B), (K, S, B), (K, S)."""
    k = len(jobs)
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


class VectorizedExecutor:
    """All sampled clients at once: ``vmap`` over a leading client axis (DESIGN.md, Performance).

    ``run_many`` does the same for the clients of several runs at once (batched runs,
    ``benchmark.batched``): one ``vmap`` over every (run, client) pair, each pair with its run's
    downlink, buffers, learning rate, RNG keys and differing hyperparameters. ``run`` is its one-run
    case. What every run shares stays unbatched (a Python float learning rate, a downlink closed over),
    so a run alone computes exactly as before.
    """

    name = "vectorized"

    def run(self, alg: Algorithm, fmodel: FunctionalModel, x, y, downlink: Message, jobs: list[ClientJob],
            buffers: dict, optimizer, lr: float, seed: int, round_: int, *, record: bool = False,
            on_step: Callable | None = None) -> RoundOutput:
        if on_step is not None:
            raise ValueError("per-step observation needs the sequential executor")
        return self.run_many(alg, fmodel, x, y, [RunRound(downlink, jobs, buffers, lr, seed)], optimizer,
                             round_, record=record)[0]

    def run_many(self, alg: Algorithm, fmodel: FunctionalModel, x, y, runs: list[RunRound], optimizer,
                 round_: int, *, record: bool = False) -> list[RoundOutput]:
        dev = x.device
        jobs = [j for r in runs for j in r.jobs]
        k = len(jobs)
        sizes = [len(r.jobs) for r in runs]
        idx, w, active = _pad_schedules(jobs)
        keys = torch.stack([_rng_key(r.seed, round_, j.client_id, dev) for r in runs for j in r.jobs])
        steps = torch.tensor([j.schedule.steps for j in jobs], device=dev)
        nsamp = torch.tensor([float(j.num_samples) for j in jobs], device=dev)
        cids = torch.tensor([j.client_id for j in jobs], device=dev)
        states = stack_trees([j.state for j in jobs]) if jobs[0].state else {}
        bufs = {n: torch.cat([r.buffers[n].unsqueeze(0).expand(len(r.jobs), *t.shape) for r in runs])
                for n, t in runs[0].buffers.items()}
        needs_mask = bool((~active).any())
        fmodel.weighted = bool(((w == 0) & active.unsqueeze(-1)).any())

        def per_pair(values):  # one value per run -> a (pairs,) tensor
            return torch.tensor([float(v) for v, n in zip(values, sizes) for _ in range(n)],
                                dtype=torch.float32, device=dev)

        shared_lr = len({r.lr for r in runs}) == 1
        lr_arg = None if shared_lr else per_pair([r.lr for r in runs])
        hyper = {f: per_pair([r.hyper[f] for r in runs]) for f in (runs[0].hyper if len(runs) > 1 else {})}
        if len(runs) == 1:
            down_arg = None
        else:
            pair_run = torch.tensor([i for i, n in enumerate(sizes) for _ in range(n)], device=dev)
            down_arg = tree_map(lambda t: t[pair_run], stack_trees([r.downlink for r in runs]))

        def one(idx_i, w_i, act_i, buf_i, key_i, steps_i, n_i, cid_i, state_i, lr_i, down_i, hyper_i):
            lr_v = runs[0].lr if lr_i is None else lr_i
            down = runs[0].downlink if down_i is None else down_i
            ctx = ClientContext(fmodel, x, y, idx_i, w_i, act_i if needs_mask else None, buf_i, key_i,
                                optimizer, lr_v, steps_i, n_i, cid_i, round_, record)
            up, st = batched_local_update(alg, ctx, down, state_i, hyper_i)
            return up, st, ctx.buffers, ctx.loss_sum, ctx.diagnostics()

        in_dims = (0,) * 9 + (None if lr_arg is None else 0, None if down_arg is None else 0, 0)
        up, st, nb, loss, diag = vmap(one, in_dims=in_dims)(
            idx.to(dev), w.to(dev), active.to(dev), bufs, keys, steps, nsamp, cids, states, lr_arg, down_arg, hyper)
        new_states = unstack_tree(st, k) if jobs[0].state else [{} for _ in jobs]
        new_bufs = unstack_tree(nb, k) if nb else [{} for _ in jobs]
        new_diag = unstack_tree(diag, k) if diag else []
        losses = (loss / steps.clamp(min=1)).tolist()
        outs, a = [], 0
        for n in sizes:
            ups = up if len(runs) == 1 else tree_map(lambda t, a=a, n=n: t[a:a + n], up)
            outs.append(RoundOutput(ups, new_states[a:a + n], new_bufs[a:a + n], losses[a:a + n],
                                    new_diag[a:a + n] if new_diag else []))
            a += n
        return outs


def get(name: str):
    if name == "sequential":
        return SequentialExecutor()
    if name == "vectorized":
        return VectorizedExecutor()
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")


def steps_for(n: int, local_epochs: int | None, local_steps: int | None, batch_size: int | None) -> int:
    if local_steps is not None:
        return local_steps
    b = n if batch_size is None else min(batch_size, n)
    return local_epochs * math.ceil(n / b)
