"""The Algorithm contract (this docstring is its reference; README, "Add your own algorithm"): what an algorithm
provides (``Algorithm``), what it sees during local training (``LocalContext``) and at aggregation (``RoundInfo``).

Everything here is pure tensor code: an algorithm sees flat parameter vectors (``layout.ParamLayout``),
gradients and batches (through a ``LocalContext``), never datasets or files.

Conventions
-----------
* Parameters travel as one flat vector (``torch.nn.utils.parameters_to_vector`` layout); a
  ``ParamLayout`` knows each tensor's slice.
* ``local_update`` is a pure function of one client. It may be run under ``torch.func.vmap`` (the
  vectorized executor), so it must not branch on tensor values, call ``.item()``, or draw random
  numbers from global generators: randomness comes from ``ctx.rng`` (``rng.CounterRng``, vmap-safe).
* Uplinks arrive at ``aggregate`` *stacked*: one ``Message`` (``message``) whose tensors have a leading
  client axis (``weights`` has the same length). ``torch.func.vmap(op.decode)(uplinks)`` decodes them all.
* Client state and server state are pytrees of tensors (usually dicts).
* The server step on a pseudo-gradient is a parameter: ``server_optimizer`` (``optim.ServerSGD``,
  ``optim.ServerMomentum``), chosen per registered name (``registry.configure``), never by a subclass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

import torch

from .layout import ParamLayout
from .message import Message
from .rng import Rng


class LocalContext(Protocol):
    """Provided by an executor to ``Algorithm.local_update`` (see ``benchmark/sim/executors.py``).

    Attributes
    ----------
    layout: the ParamLayout of the model.
    rng: a counter-based ``Rng`` private to this client and round.
    optimizer: the local optimizer (``algorithms.core.optim``), configured from the experiment.
    lr: the local learning rate of this round (after any per-round schedule).
    num_steps: int, the number of steps ``loop`` runs (the maximum over clients in a vectorized
        round; clients with fewer steps are masked).
    steps: 0-d tensor, this client's own number of local steps (tau_i).
    num_samples: 0-d float tensor, |D_i|.
    client_id: 0-d int64 tensor.
    round: int, the current round (0-based).
    """

    layout: ParamLayout
    rng: Rng
    optimizer: Any
    lr: float
    num_steps: int
    steps: torch.Tensor
    num_samples: torch.Tensor
    client_id: torch.Tensor
    round: int

    def loss_and_grad(self, params: torch.Tensor, batch: Any,
                      update_stats: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean loss of the model at ``params`` on ``batch`` and its gradient w.r.t. ``params``.

        ``update_stats=False``: an auxiliary gradient that leaves normalisation statistics alone.
        (Optional, beside it: ``descend(params, batch, opt, state, lr) -> (params, state)``, one step of ``opt``
        on the plain loss, which an executor may take another way with the same math; algorithms call it through
        ``algorithms.core.descend``, which falls back to this and ``opt.step`` where a context lacks it.)
        """

    def value_and_grad(self, f: Callable, args: Any, batch: Any,
                       update_stats: bool = True) -> tuple[torch.Tensor, Any]:
        """Gradient of a custom objective ``f(args, model_fn, batch) -> scalar`` w.r.t. ``args``.

        ``model_fn(flat_params, x) -> outputs`` runs the model (normalisation statistics are
        threaded by the executor); ``batch`` has fields ``x``, ``y`` and ``w`` (sample weights,
        0 for padding) and ``ctx.criterion(outputs, batch)`` is the task's mean loss.
        ``model_fn.stages(flat_params, x)`` is the same forward returning each stage's output
        (representations, as MOON and FedMLB need), ``model_fn.num_stages`` their number, and
        ``model_fn.reference(flat_params, h, start=0)`` runs a frozen model (the global model, a
        previous local model) from stage ``start`` without touching normalisation statistics. An
        objective runs one training forward (``model_fn`` or ``model_fn.stages``) per batch.
        """

    def criterion(self, outputs: torch.Tensor, batch: Any) -> torch.Tensor: ...

    def loop(self, step: Callable, carry: Any) -> Any:
        """Run ``carry = step(carry, batch, s)`` for this client's local steps and return carry.

        Steps beyond this client's own count are masked (they change nothing).
        """

    def eval_loss(self, params: torch.Tensor, batch: Any) -> torch.Tensor: ...

    # Optional (the executors have them): ``diagnosing`` is True when an observer of the run collects
    # diagnostics, and ``record(name, value)`` keeps one. Algorithms call ``diagnose`` below.
    diagnosing: bool

    def record(self, name: str, value: Any) -> None: ...


def diagnose(ctx: Any, name: str, value: Any) -> None:
    """Send a diagnostic from ``local_update`` to the run's observers (``benchmark.sim.engine``).

    ``value``: a tensor, or a zero-argument callable returning one (called only when someone listens,
    so a diagnostic costs nothing in the benchmark's runs). Contexts without diagnostics (hand-written
    test contexts) ignore it. vmap-safe: no values are read.
    """
    if getattr(ctx, "diagnosing", False):
        ctx.record(name, value)


@dataclass(frozen=True)
class NoHyperparameters:
    pass


class Algorithm:
    """Base class. Subclasses set ``name`` and ``Hyper`` (a frozen dataclass with the paper's defaults,
    each field declared with its constraint by ``algorithms.core.hyper.param``).

    Methods follow the conventions above. ``aggregate`` also receives a ``RoundInfo`` with the sampled client ids.
    """

    name: ClassVar[str] = ""
    Hyper: ClassVar[type] = NoHyperparameters
    #: False when local_update cannot run under vmap (the engine falls back to the sequential executor)
    vectorizable: ClassVar[bool] = True
    #: the server optimizer (``optim.ServerSGD``, ``optim.ServerMomentum``) that ``server_step`` applies to
    #: the pseudo-gradient, built from the hyperparameters of its fields (eta_g, beta1); None: the
    #: algorithm writes its own server rule. A registered configuration may set another
    #: (``registry.with_server_momentum``: the momentum variant).
    server_optimizer: ClassVar[type | None] = None

    def __init__(self, hp: Any, layout: ParamLayout, num_clients: int):
        self.hp = hp
        self.layout = layout
        self.num_clients = num_clients
        self.server_opt = None if self.server_optimizer is None else self.server_optimizer.from_hyper(hp)

    # -- server side --
    def init(self, params: torch.Tensor) -> dict:
        state = {"params": params.clone()}
        if self.server_opt is not None:
            state.update(self.server_opt.init(params))
        return state

    def server_step(self, server_state: dict, d: torch.Tensor) -> dict:
        """The server state after the server optimizer's step on the pseudo-gradient d (``server_opt``)."""
        params, opt_state = self.server_opt.step(server_state["params"], d, server_state)
        return {**server_state, **opt_state, "params": params}

    def broadcast(self, server_state: dict) -> Message:
        return Message.dense(server_state["params"])

    def global_params(self, server_state: dict) -> torch.Tensor:
        """The model that is evaluated."""
        return server_state["params"]

    def aggregate(self, server_state: dict, uplinks: Message, weights: torch.Tensor,
                  info: "RoundInfo") -> dict:
        raise NotImplementedError

    # -- client side --
    def client_init(self, params: torch.Tensor) -> dict:
        return {}

    def receive(self, downlink: Message, client_state: dict) -> torch.Tensor:
        """Decode the downlink into the model the client starts from."""
        return downlink["x"]

    def local_update(self, ctx: LocalContext, downlink: Message, client_state: dict) -> tuple[Message, dict]:
        raise NotImplementedError

    @classmethod
    def check_optimizer(cls, hp: Any, optimizer: Any) -> None:
        """Raise ``optim.UnsupportedOptimizer`` (``optim.refuse``) for a local optimizer (``optim.SGD``,
        ``optim.Adam``, ...) this algorithm with hyperparameters ``hp`` has no stated rule for. Called before any
        training (``Experiment.validate``, ``benchmark.sim.engine.start``). The default accepts every optimizer:
        the local rule hands it a gradient and nothing is divided by the local steps or learning rate. An
        algorithm whose estimates assume plain SGD (SCAFFOLD's option II, FedNova's tau_i, ...) overrides it."""

    # -- helpers shared by many algorithms --
    @staticmethod
    def client_weights(weights: torch.Tensor, weighting: str) -> torch.Tensor:
        """The aggregation weights p_i of the sampled clients for a ``weighting`` hyperparameter
        (``hyper.WEIGHTING``): the engine's n_i / sum_{j in S} n_j (``"samples"``) or 1/S (``"uniform"``)."""
        if weighting == "uniform":
            return torch.full_like(weights, 1.0 / weights.shape[0])
        return weights

    @staticmethod
    def weighted_mean(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_k w_k x_k for stacked x (K, d) and weights (K,)."""
        return torch.tensordot(weights.to(stacked.dtype), stacked, dims=1)

    @staticmethod
    def sgd_loop(ctx: LocalContext, params: torch.Tensor,
                 grad_fn: Callable | None = None) -> torch.Tensor:
        """Plain local training with the experiment's optimizer; returns the final parameters.

        ``grad_fn(p, batch, s) -> (loss, grad)`` replaces the plain gradient when given
        (FedProx's proximal term, SCAFFOLD's correction, ...).
        """
        opt = ctx.optimizer

        def step(carry, batch, s):
            p, state = carry
            if grad_fn is None:
                return descend(ctx, p, batch, opt, state, ctx.lr)
            _, g = grad_fn(p, batch, s)
            return opt.step(p, g, state, ctx.lr)

        p, _ = ctx.loop(step, (params, opt.init(params)))
        return p


def descend(ctx: LocalContext, params: torch.Tensor, batch: Any, opt, state, lr) -> tuple[torch.Tensor, Any]:
    """One local step of the optimizer ``opt`` (its ``state``) at learning rate ``lr`` on the plain loss of
    ``batch``: ``(params, state)``, as ``ctx.loss_and_grad`` then ``opt.step``. Through ``ctx.descend`` where the
    context has it: an executor may take the step another way with the same math (the vectorized executor fuses
    plain SGD into a plain chain's gradient products: float32 rounding, 0.5.0's numerics). A local loop that needs
    the gradient itself, or changes it, calls ``loss_and_grad``."""
    fused = getattr(ctx, "descend", None)
    if fused is not None:
        return fused(params, batch, opt, state, lr)
    _, g = ctx.loss_and_grad(params, batch)
    return opt.step(params, g, state, lr)


@dataclass(frozen=True)
class RoundInfo:
    round: int
    client_ids: torch.Tensor  # (K,) int64, the sampled clients in the order of the stacked uplinks
    num_clients: int
    num_samples: torch.Tensor  # (K,) |D_i| of the sampled clients
    steps: torch.Tensor  # (K,) tau_i of the sampled clients
    lr: float
