"""The hashed *what* of one run (``Experiment``), what a run is built from, and its JSON record (DESIGN.md).

How a run is executed (device, executor, threads, batched groups) is decided by ``benchmark.runs.plan``, which
also runs it: ``benchmark.run(Experiment(...)) -> RunResult``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import torch

import algorithms
from algorithms.core import optim, plugins

from benchmark.sim import engine, numerics
from benchmark.runs import store
from benchmark.sim import executors as ex
from benchmark.datasets.federated_dataset import FederatedDataset

RECORD_SCHEMA = 1

# fields whose value is a dict of options (merged key by key by suites and the CLI)
DICT_FIELDS = ("algorithm_args", "dataset_args", "model_args")
# fields that say how a run is executed, not what is computed: left out of the config hash
_HOW_FIELDS = ("executor", "executor_used", "device", "data_root", "download")
# the divergence rule beyond NaN (``Experiment.divergence_factor``): ``benchmark.sim.engine``, its one source
DIVERGENCE_FACTOR = engine.DIVERGENCE_FACTOR
# fields added after results were published, with the value they had implicitly before: at that value they
# are left out of the config hash, so existing cells keep their names (the record's config still shows them)
_HASH_NEUTRAL_DEFAULTS = {"divergence_factor": DIVERGENCE_FACTOR, "compile": False, "eval_rounds": None}
_DEFAULT_NUM_CLIENTS = 10  # Experiment.num_clients' default


@dataclass(frozen=True)
class Experiment:
    """One federated training run. Field names match the CLI flags (``--num-clients``, ...)."""

    algorithm: str = "fedavg"
    dataset: Any = "digits"  # a registered name or a FederatedDataset
    partition: str = "auto"  # auto = the dataset's natural clients if it has them, else iid; or "natural"
    num_clients: int | None = _DEFAULT_NUM_CLIENTS
    clients_per_round: int | None = None  # None = all clients every round
    rounds: int = 20
    local_epochs: int | None = 1
    local_steps: int | None = None  # when set, replaces local_epochs
    batch_size: int | None = 32  # None = the full local dataset every step
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    lr_decay: float = 1.0  # multiplicative per round
    seed: int = 0
    model: Any = "logreg"  # a registered name or a callable(input_shape, num_classes) -> nn.Module
    algorithm_args: dict = field(default_factory=dict)
    dataset_args: dict = field(default_factory=dict)
    model_args: dict = field(default_factory=dict)
    eval_every: int = 1
    eval_train_samples: int | None = 10000  # the training objective is measured on this many samples
    # training loss > divergence_factor x the initial model's training loss = "diverged" (None: NaN/inf only)
    divergence_factor: float | None = DIVERGENCE_FACTOR
    executor: str = "auto"  # auto (benchmark.runs.plan decides) | sequential | vectorized
    device: str = "auto"  # auto (benchmark.runs.plan decides) | cpu | cuda
    data_root: str | None = None
    download: bool = False
    # torch.compile the vectorized local update (equal to float tolerance, not bitwise: part of the hash
    # when True; the sequential executor is never compiled)
    compile: bool = False
    # the rounds (1-based) whose scheduled evaluation includes the test set; None: every scheduled one (every
    # eval_every-th and the last). The training objective is measured at every scheduled evaluation still (the
    # divergence rule reads it) and the last round always evaluates the test set: fewer test evaluations, the
    # same numbers at those evaluated (issue 45; the claims set it to the rounds their metrics read)
    eval_rounds: tuple | None = None

    def __post_init__(self):
        if self.eval_rounds is not None and not isinstance(self.eval_rounds, tuple):
            object.__setattr__(self, "eval_rounds", tuple(self.eval_rounds))
        # a dataset of your own with natural clients (``FederatedDataset.from_tensors``) has as many clients as it
        # holds: the default num_clients (10) follows them, as it follows nothing else
        if isinstance(self.dataset, FederatedDataset) and self.dataset.natural_clients \
                and self.partition in ("auto", "natural") and self.num_clients == _DEFAULT_NUM_CLIENTS:
            object.__setattr__(self, "num_clients", len(self.dataset.clients))

    def validate(self) -> None:
        """Every field checked before any work, with a message that names it and what to give instead (the CLI,
        suites and the Python API all call this)."""
        def need(cond, msg):
            if not cond:
                raise ValueError(msg)

        def count(name, v, lowest=1, none_ok=True):
            need((v is None and none_ok) or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                             and v >= lowest),
                 f"{name} must be >= {lowest} (an integer{', or None' if none_ok else ''}), got {v!r}")

        need(isinstance(self.dataset, (str, FederatedDataset)), "dataset must be a registered name (see `fedrepro "
             f"list datasets`) or a FederatedDataset (FederatedDataset.from_tensors), got {self.dataset!r}")
        need(isinstance(self.model, str) or callable(self.model), "model must be a registered name (see `fedrepro "
             f"list models`) or a callable (input_shape, num_classes) -> nn.Module, got {self.model!r}")
        count("rounds", self.rounds, none_ok=False)
        count("num_clients", self.num_clients)
        count("clients_per_round", self.clients_per_round)
        need(self.clients_per_round is None or self.num_clients is None or self.clients_per_round <= self.num_clients,
             f"clients_per_round={self.clients_per_round} exceeds the number of clients ({self.num_clients}): at "
             "most every client takes part in a round")
        if self.local_steps is None:
            count("local_epochs", self.local_epochs, none_ok=False)
        else:
            count("local_steps", self.local_steps, none_ok=False)
            need(self.local_epochs in (None, 1), f"local_steps={self.local_steps} and local_epochs="
                 f"{self.local_epochs} are both set: local_steps replaces local_epochs, give one of them")
        count("batch_size", self.batch_size)
        count("eval_every", self.eval_every, none_ok=False)
        count("eval_train_samples", self.eval_train_samples)
        for name in ("lr", "momentum", "weight_decay", "lr_decay"):
            v = getattr(self, name)
            need(isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and np.isfinite(v),
                 f"{name} must be a finite number, got {v!r}")
        need(self.lr > 0, f"lr must be a positive number, got {self.lr}")
        need(0 <= self.momentum < 1, f"momentum must be in [0, 1) (heavy-ball momentum; 0: plain SGD), got "
             f"{self.momentum}")
        need(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        need(0 < self.lr_decay <= 1, f"lr_decay must be in (0, 1], got {self.lr_decay}")
        need(self.eval_rounds is None or all(isinstance(r, int) and 1 <= r <= self.rounds for r in self.eval_rounds),
             f"eval_rounds must be rounds between 1 and rounds ({self.rounds}), got {self.eval_rounds!r}")
        need(self.divergence_factor is None or (isinstance(self.divergence_factor, (int, float))
                                                and 1 < self.divergence_factor < float("inf")),
             f"divergence_factor must be a number > 1 (or None to flag only NaN/inf), got {self.divergence_factor!r}")
        need(self.executor in ("auto",) + ex.EXECUTORS,
             f"executor must be auto, sequential or vectorized, got {self.executor!r}")
        need(self.device in ("auto", "cpu", "cuda") or str(self.device).startswith("cuda:"),
             f"device must be auto, cpu or cuda, got {self.device!r}")
        optim.make(self.optimizer)  # raises for an unknown optimizer
        need(self.optimizer == "sgd" or self.momentum == 0, f"momentum={self.momentum} is SGD's heavy-ball "
             f"momentum; optimizer {self.optimizer!r} has its own moments: leave momentum at 0")
        if self.partition not in ("auto", "natural"):
            from benchmark.datasets.partition import parse_spec

            parse_spec(self.partition)  # raises for an unknown kind or an invalid parameter
        cls = algorithms.get_class(self.algorithm)
        hp = algorithms.core.make_hyper(cls, self.algorithm_args)
        try:  # a plugin whose Hyper lacks its server optimizer's fields (eta_g) fails here, not in round 1
            None if cls.server_optimizer is None else cls.server_optimizer.from_hyper(hp)
        except AttributeError as e:
            raise ValueError(f"algorithm {self.algorithm!r} steps with {cls.server_optimizer.__name__}, which reads "
                             f"{e.name or e} from its hyperparameters, but its Hyper has no such field: add it "
                             "(e.g. eta_g: float = param(1.0, POSITIVE))") from None
        # an algorithm refuses a local optimizer its formulas have no rule for (optim.UnsupportedOptimizer)
        cls.check_optimizer(hp, optim.make(self.optimizer, self.momentum, self.weight_decay))

    def config(self) -> dict:
        """JSON-serialisable configuration (datasets and models by name)."""
        d = dataclasses.asdict(dataclasses.replace(self, dataset=None, model=None))
        d["dataset"] = self.dataset.name if isinstance(self.dataset, FederatedDataset) else self.dataset
        if isinstance(self.dataset, FederatedDataset):
            d["dataset_fingerprint"] = _tensor_fingerprint(self.dataset)
        d["model"] = self.model if isinstance(self.model, str) else _qualname(self.model)
        if self.local_steps is not None:
            d["local_epochs"] = None
        source = plugins.source_sha256(self.algorithm) if isinstance(self.algorithm, str) else None
        if source:  # an algorithm from a plugin: its code is part of what is computed (built-ins: no key)
            d["algorithm_source"] = f"sha256:{source}"
        return d

    def config_hash(self) -> str:
        return config_hash(self.config())

    def loop_config(self) -> engine.LoopConfig:
        """The round loop's settings for this experiment."""
        return engine.LoopConfig(self.rounds, self.clients_per_round,
                                 None if self.local_steps else self.local_epochs, self.local_steps,
                                 self.batch_size, self.lr, self.lr_decay, self.eval_every, self.seed,
                                 self.eval_train_samples, divergence_factor=self.divergence_factor,
                                 compile=self.compile,
                                 eval_rounds=None if self.eval_rounds is None else frozenset(self.eval_rounds))


def config_hash(config: dict) -> str:
    semantic = {k: v for k, v in config.items() if k not in _HOW_FIELDS
                and not (k in _HASH_NEUTRAL_DEFAULTS and v == _HASH_NEUTRAL_DEFAULTS[k])}
    blob = json.dumps(semantic, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _qualname(obj: Callable) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _tensor_fingerprint(data: FederatedDataset) -> str:
    h = hashlib.sha256()
    for t in (data.x_train, data.y_train, data.x_test, data.y_test):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    for c in data.clients or []:
        h.update(c.cpu().numpy().tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# Provenance


def package_version() -> str:
    """fedrepro's version: the source tree's pyproject.toml when running from one (``PYTHONPATH=.``, no
    install, or an editable install), else the installed distribution's metadata."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pyproject = os.path.join(root, "pyproject.toml")
    if os.path.isfile(pyproject):
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        try:
            with open(pyproject, "rb") as f:
                meta = tomllib.load(f).get("project", {})
            if meta.get("name") == "fedrepro" and meta.get("version"):
                return str(meta["version"])
        except (OSError, ValueError):
            pass
    try:
        from importlib.metadata import version

        return version("fedrepro")
    except Exception:  # noqa: BLE001 - neither a source tree nor an install
        return "0+unknown"


@lru_cache(maxsize=1)
def code_version() -> dict:
    pkg = package_version()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commit, dirty = None, None
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        if commit:
            # untracked (not ignored) files count: a new algorithm module changes results too
            st = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "algorithms", "benchmark",
                                 "theory"], capture_output=True, text=True, timeout=10).stdout
            dirty = bool(st.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package": pkg, "git_commit": commit, "git_dirty": dirty}


def run_code_version(algorithm: str) -> dict:
    """``code_version()`` and, when plugins are loaded or the algorithm is not a built-in, ``plugins``: the
    provenance of each (origin, sha256 of its source, the names it registered; ``algorithms.core.plugins``)."""
    loaded = [p.provenance() for p in plugins.loaded()]
    own = plugins.algorithm_provenance(algorithm) if isinstance(algorithm, str) else None
    if own is not None and own not in loaded:
        loaded.append(own)
    return {**code_version(), "plugins": loaded} if loaded else code_version()


def environment(device: torch.device) -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
           "numpy": np.__version__, "device": str(device), "threads": torch.get_num_threads(),
           "numerics": numerics.in_force()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


# --------------------------------------------------------------------------------------------------
# Running


@dataclass
class RunResult:
    config: dict
    config_hash: str
    code_version: dict
    environment: dict
    partition: dict
    history: list[dict]
    final: dict
    status: str
    message: str = ""
    model: torch.nn.Module | None = None
    #: how the run was executed: the executor and why it was chosen (``benchmark.runs.cost``)
    execution: dict = field(default_factory=dict)
    initial_model: dict | None = None  # {"fingerprint": ...} of the parameters before round 1

    def record(self) -> dict:
        rec = {"schema": RECORD_SCHEMA, "config": self.config, "config_hash": self.config_hash,
               "code_version": self.code_version, "environment": self.environment,
               "partition": self.partition, "history": self.history, "final": self.final,
               "status": self.status, "message": self.message, "execution": self.execution}
        if self.initial_model is not None:
            rec["initial_model"] = self.initial_model
        return rec

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.record(), indent=indent, default=_json_default)

    def save(self, folder: str | os.PathLike) -> tuple[str, str | None]:
        """Write the record as ``<folder>/<config_hash>.json``; if that fails, to a fallback folder.

        Returns the path written and, for a fallback, why ``folder`` failed: a finished run is never lost.
        """
        rec = json.loads(self.to_json(indent=None))
        path, why = store.write_record_or_rescue(folder, rec)
        return str(path), why


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    return str(o)


def load_dataset(exp: Experiment, device: torch.device) -> FederatedDataset:
    if isinstance(exp.dataset, FederatedDataset):
        data = exp.dataset
    else:
        from benchmark import datasets

        opts = dict(exp.dataset_args)
        # datasets with natural clients generate num_clients of them (unless re-partitioned)
        if "num_clients" in datasets.options(exp.dataset) and exp.num_clients is not None \
                and exp.partition in ("auto", "natural"):
            opts.setdefault("num_clients", exp.num_clients)
        data = datasets.load(exp.dataset, data_root=exp.data_root, download=exp.download, seed=exp.seed, **opts)
    return data.to(device)


def make_partition(exp: Experiment, data: FederatedDataset) -> tuple[list[np.ndarray], dict]:
    from benchmark.datasets import partition as part

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
        from benchmark import models

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


def final_metrics(history: list[dict], wall: float, cpu: float | None = None) -> dict:
    """The run's summary: last evaluated metrics, bits, ``wall_time`` (seconds since the job started) and, when
    measured, ``cpu_time`` (the process's CPU seconds over the same span: unlike the wall time it does not grow
    when other jobs share the cores, so CPU budgets count it)."""
    evaluated = [h for h in history if h["test_accuracy"] is not None or h["test_loss"] is not None]
    last = evaluated[-1] if evaluated else {}
    out = {"test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
           "train_loss": last.get("train_loss"), "rounds_completed": len(history),
           "bits_up_total": int(sum(h["bits_up"] for h in history)),
           "bits_down_total": int(sum(h["bits_down"] for h in history)),
           "bits_up_per_round": float(np.mean([h["bits_up"] for h in history])) if history else 0.0,
           "bits_down_per_round": float(np.mean([h["bits_down"] for h in history])) if history else 0.0,
           "wall_time": wall, **({} if cpu is None else {"cpu_time": cpu})}
    accs = [(h["test_accuracy"], h["round"]) for h in evaluated if h["test_accuracy"] is not None]
    if accs:
        best = max(accs)
        # selected on the test set: an optimistic number, reported apart from the headline
        out["best_test_accuracy_selected_on_test"] = best[0]
        out["best_round"] = best[1]
    return out


def chance_level(rec: dict) -> float:
    """The accuracy of guessing: 1 / the number of classes of the run's training labels (its partition
    statistics), 0.0 when unknown (regression). The one source of this rule (diverged runs count at it)."""
    k = (rec.get("partition") or {}).get("statistics", {}).get("num_classes")
    return 1.0 / k if k else 0.0


@dataclass
class Prepared:
    """What a run is made of, built from an ``Experiment`` on a device (``benchmark.runs.plan.execute``)."""

    data: FederatedDataset
    parts: list[np.ndarray]
    partition: dict
    module: torch.nn.Module
    fmodel: ex.FunctionalModel
    alg: Any
    cfg: engine.LoopConfig
    optimizer: Any
    device: torch.device
    initial_model: dict = field(default_factory=dict)  # {"fingerprint": ...} of the seeded initial model


def prepare(exp: Experiment, device: torch.device | str, data: FederatedDataset | None = None) -> Prepared:
    """Validate ``exp`` and build its data, partition, model, algorithm, loop settings and optimizer on
    ``device`` (resolved by ``benchmark.runs.plan``). ``data``: the dataset already loaded on the device (the
    runs of a batched job share one copy)."""
    exp.validate()
    device = torch.device(device)
    data = load_dataset(exp, device) if data is None else data
    parts, part_info = make_partition(exp, data)
    k = exp.clients_per_round
    if k is not None and k > len(parts):
        raise ValueError(f"clients_per_round={k} exceeds the number of clients ({len(parts)})")
    module = build_model(exp, data).to(device)
    initial = {"fingerprint": model_fingerprint(module)}
    fmodel = ex.FunctionalModel(module, data.task)
    if fmodel.loss == "squared_hinge" and data.num_classes != 2:
        raise ValueError(f"model {exp.model!r} is a binary squared-hinge SVM: it needs a dataset with 2 classes "
                         f"(labels 0/1), but {data.name!r} has {data.num_classes}")
    alg = algorithms.make(exp.algorithm, fmodel.layout, len(parts), exp.algorithm_args)
    opt = optim.make(exp.optimizer, exp.momentum, exp.weight_decay)
    return Prepared(data, parts, part_info, module, fmodel, alg, exp.loop_config(), opt, device, initial)


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
