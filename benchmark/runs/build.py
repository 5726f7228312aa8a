"""Building a run (DESIGN.md): an ``Experiment`` made into its data, partition, model, algorithm, optimizer and
round-loop settings on a device (``prepare``), as ``benchmark.runs.plan.execute`` runs it, and its result from
what the round loop returned (``make_result``: the trained model, the record's config, provenance and metrics).

``loop_config`` is the one place the round loop's settings (``engine.LoopConfig``) are built: from the experiment,
with the job's ``compile`` decision and a caller's ``lr_schedule`` (the theory checks' step sizes).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

import algorithms
from algorithms.core import optim

from benchmark import datasets, models
from benchmark.datasets import partition as part
from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.runs.experiment import Experiment, config_hash
from benchmark.runs.record import RunResult, environment, final_metrics, run_code_version
from benchmark.sim import engine
from benchmark.sim.functional import FunctionalModel


def load_dataset(exp: Experiment, device: torch.device) -> FederatedDataset:
    if isinstance(exp.dataset, FederatedDataset):
        data = exp.dataset
    else:
        opts = dict(exp.dataset_args)
        # datasets with natural clients generate num_clients of them (unless re-partitioned)
        if "num_clients" in datasets.options(exp.dataset) and exp.num_clients is not None \
                and exp.partition in ("auto", "natural"):
            opts.setdefault("num_clients", exp.num_clients)
        data = datasets.load(exp.dataset, data_root=exp.data_root, download=exp.download, seed=exp.seed, **opts)
    return data.to(device)


def make_partition(exp: Experiment, data: FederatedDataset) -> tuple[list[np.ndarray], dict]:
    labels = data.y_train.cpu().numpy()
    spec = exp.partition
    if spec == "natural" and not data.natural_clients:
        raise ValueError(f"dataset {data.name!r} has no natural clients; choose a partition such as iid or "
                         f"dirichlet:0.3")
    if data.natural_clients and spec in ("auto", "natural"):
        if exp.num_clients is not None and exp.num_clients != len(data.clients):
            raise ValueError(f"dataset {data.name!r} has {len(data.clients)} natural clients, "
                             f"but num_clients={exp.num_clients}")
        parts = [c.cpu().numpy().astype(np.int64) for c in data.clients]
        spec = "natural"
    else:
        spec = "iid" if spec == "auto" else spec  # natural clients are pooled, then partitioned
        parts = part.split(labels if data.task == "classification" else np.zeros(len(labels), np.int64),
                           spec, exp.num_clients or 10, exp.seed)
    stats = part.statistics(labels, parts, data.num_classes) if data.task == "classification" else {
        "counts": [len(p) for p in parts]}
    return parts, {"spec": spec, "num_clients": len(parts), "fingerprint": part.fingerprint(parts),
                   "statistics": stats}


def build_model(exp: Experiment, data: FederatedDataset) -> torch.nn.Module:
    torch.manual_seed(exp.seed)
    if isinstance(exp.model, str):
        return models.build(exp.model, data.input_shape, data.output_dim, **exp.model_args)
    return exp.model(data.input_shape, data.output_dim)


def model_fingerprint(module: torch.nn.Module) -> str:
    """Hash of a model's parameters and buffers (names, shapes, float64 values): runs that share a seed and a
    model share their initial model, which paired comparisons check (``initial_model`` in the record)."""
    h = hashlib.sha256()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def loop_config(exp: Experiment, compile: bool | str = False,
                lr_schedule: Callable[[int], float] | None = None) -> engine.LoopConfig:
    """The round loop's settings for ``exp``; ``compile``: the job's decision (``benchmark.runs.plan``, from
    ``exp.compile`` and the measured rule); ``lr_schedule``: round -> local learning rate, replacing
    ``lr * lr_decay ** round``."""
    return engine.LoopConfig(exp.rounds, exp.clients_per_round, None if exp.local_steps else exp.local_epochs,
                             exp.local_steps, exp.batch_size, exp.lr, exp.lr_decay, exp.eval_every, exp.seed,
                             exp.eval_train_samples, lr_schedule=lr_schedule,
                             divergence_factor=exp.divergence_factor, compile=compile,
                             eval_rounds=None if exp.eval_rounds is None else frozenset(exp.eval_rounds))


@dataclass
class Prepared:
    """What a run is made of, built from an ``Experiment`` on a device (``benchmark.runs.plan.execute``)."""

    data: FederatedDataset
    parts: list[np.ndarray]
    partition: dict
    module: torch.nn.Module
    fmodel: FunctionalModel
    alg: Any
    cfg: engine.LoopConfig
    optimizer: Any
    device: torch.device
    initial_model: dict = field(default_factory=dict)  # {"fingerprint": ...} of the seeded initial model


def prepare(exp: Experiment, device: torch.device | str, data: FederatedDataset | None = None, *,
            compile: bool | str = False, lr_schedule: Callable[[int], float] | None = None) -> Prepared:
    """Validate ``exp`` and build its data, partition, model, algorithm, loop settings (:func:`loop_config`, with
    ``compile`` and ``lr_schedule``) and optimizer on ``device`` (resolved by ``benchmark.runs.plan``). ``data``:
    the dataset already loaded on the device (the runs of a batched job share one copy)."""
    exp.validate()
    device = torch.device(device)
    data = load_dataset(exp, device) if data is None else data
    parts, part_info = make_partition(exp, data)
    k = exp.clients_per_round
    if k is not None and k > len(parts):
        raise ValueError(f"clients_per_round={k} exceeds the number of clients ({len(parts)})")
    module = build_model(exp, data).to(device)
    initial = {"fingerprint": model_fingerprint(module)}
    fmodel = FunctionalModel(module, data.task)
    if fmodel.loss == "squared_hinge" and data.num_classes != 2:
        raise ValueError(f"model {exp.model!r} is a binary squared-hinge SVM: it needs a dataset with 2 classes "
                         f"(labels 0/1), but {data.name!r} has {data.num_classes}")
    alg = algorithms.make(exp.algorithm, fmodel.layout, len(parts), exp.algorithm_args)
    opt = optim.make(exp.optimizer, exp.momentum, exp.weight_decay)
    return Prepared(data, parts, part_info, module, fmodel, alg, loop_config(exp, compile, lr_schedule), opt, device,
                    initial)


def make_result(exp: Experiment, p: Prepared, out: engine.LoopResult, wall: float, execution: dict,
                init: torch.Tensor | None = None, threads_rule: str | None = None,
                cpu: float | None = None) -> RunResult:
    """The run's result and record from what ``engine`` returned (the trained model loaded into ``p.module``)."""
    module = p.module
    torch.nn.utils.vector_to_parameters(out.params.detach(), module.parameters())
    for name, buf in module.named_buffers():
        if name in out.buffers:
            buf.copy_(out.buffers[name])
    config = exp.config()
    if init is not None:
        config["init_fingerprint"] = hashlib.sha256(
            init.detach().to(torch.float32).cpu().contiguous().numpy().tobytes()).hexdigest()[:16]
    config["executor_used"] = out.executor
    if exp.compile:
        execution = {**execution, "compile_seconds": round(out.compile_seconds, 3)}
    env = environment(p.device)
    if threads_rule:
        env["threads_rule"] = threads_rule
    return RunResult(config, config_hash(config), run_code_version(exp.algorithm), env, p.partition,
                     out.history, {**final_metrics(out.history, wall, cpu), "num_params": p.fmodel.layout.size},
                     out.status, out.message, module.eval(), execution,
                     {"fingerprint": config["init_fingerprint"]} if init is not None else p.initial_model)
