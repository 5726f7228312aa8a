"""The hashed *what* of one run (DESIGN.md): ``Experiment``, its checks (``validate``) and its config hash.

The spec imports neither the round loop nor the executors: what a run is, apart from how it is built
(``benchmark.runs.build``), executed (``benchmark.runs.plan``: ``benchmark.run(Experiment(...)) -> RunResult``)
and recorded (``benchmark.runs.record``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import algorithms
from algorithms.core import optim, plugins

from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.datasets.partition import parse_spec
from benchmark.sim import EXECUTORS, GRAPH, is_compile_mode

# fields whose value is a dict of options (merged key by key by suites and the CLI)
DICT_FIELDS = ("algorithm_args", "dataset_args", "model_args")
# fields that say how a run is executed, not what is computed: left out of the config hash
_HOW_FIELDS = ("executor", "executor_used", "device", "data_root", "download")
#: the divergence rule beyond NaN (``Experiment.divergence_factor``; the round loop, ``benchmark.sim.engine``,
#: applies it): 100 = two orders of magnitude worse than the untrained model (the 0.1.0 matrix's worst finite
#: run, bifl on digits, reached 54x)
DIVERGENCE_FACTOR = 100.0
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
    # when set; the sequential executor is never compiled): True, or "graph" (compiled whole and replayed as a
    # CUDA graph on a GPU; benchmark.sim.executors.VectorizedExecutor)
    compile: bool | str = False
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
        need(is_compile_mode(self.compile),
             f"compile must be False, True or {GRAPH!r} (compiled whole, replayed as a CUDA graph), got {self.compile!r}")
        need(self.executor in ("auto",) + EXECUTORS,
             f"executor must be auto, sequential or vectorized, got {self.executor!r}")
        need(self.device in ("auto", "cpu", "cuda") or str(self.device).startswith("cuda:"),
             f"device must be auto, cpu or cuda, got {self.device!r}")
        optim.make(self.optimizer)  # raises for an unknown optimizer
        need(self.optimizer == "sgd" or self.momentum == 0, f"momentum={self.momentum} is SGD's heavy-ball "
             f"momentum; optimizer {self.optimizer!r} has its own moments: leave momentum at 0")
        if self.partition not in ("auto", "natural"):
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
