"""The Algorithm contract of DESIGN.md, the messages that travel, and the algorithm registry.

Everything here is pure tensor code: an algorithm sees flat parameter vectors, gradients and batches
(through a ``LocalContext``), never datasets or files.

Conventions
-----------
* Parameters travel as one flat vector (``torch.nn.utils.parameters_to_vector`` layout); a
  ``ParamLayout`` knows each tensor's slice.
* ``local_update`` is a pure function of one client. It may be run under ``torch.func.vmap`` (the
  vectorized executor), so it must not branch on tensor values, call ``.item()``, or draw random
  numbers from global generators: randomness comes from ``ctx.rng`` (counter-based, vmap-safe).
* Uplinks arrive at ``aggregate`` *stacked*: one ``Message`` whose tensors have a leading client axis
  (``weights`` has the same length). ``torch.func.vmap(op.decode)(uplinks)`` decodes them all.
* Client state and server state are pytrees of tensors (usually dicts).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Protocol

import torch
from torch.utils import _pytree as pytree

from . import hyper, optim

# --------------------------------------------------------------------------------------------------
# Messages


@dataclass(frozen=True)
class Message:
    """What travels on a link.

    ``parts`` are the encoded tensors that are actually sent (packed signs as uint8, level indices,
    fp32 scalars, ...); ``meta`` is static decoding information that both ends know in advance
    (shapes, operator parameters) and is not counted. ``bits`` is computed from the payload: 8 bits
    per byte of every part, so padding of packed data is counted honestly.
    """

    parts: Mapping[str, torch.Tensor]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bits(self) -> int:
        return int(sum(8 * t.numel() * t.element_size() for t in self.parts.values()))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.parts[key]

    @staticmethod
    def dense(x: torch.Tensor, key: str = "x") -> "Message":
        """A full-precision (fp32) message: 32 bits per entry."""
        return Message({key: x.to(torch.float32)})

    def stacked_bits(self) -> int:
        """Bits of one client's message when ``parts`` carry a leading client axis."""
        n = next(iter(self.parts.values())).shape[0] if self.parts else 1
        return self.bits // max(n, 1)


def _msg_flatten(m: Message):
    keys = tuple(m.parts.keys())
    return [m.parts[k] for k in keys], (keys, tuple(sorted(m.meta.items(), key=lambda kv: kv[0])))


def _msg_unflatten(values, context):
    keys, meta = context
    return Message(dict(zip(keys, values)), dict(meta))


def _msg_flatten_with_keys(m: Message):
    values, ctx = _msg_flatten(m)
    return [(pytree.MappingKey(k), v) for k, v in zip(ctx[0], values)], ctx


pytree.register_pytree_node(
    Message,
    _msg_flatten,
    _msg_unflatten,
    serialized_type_name="algorithms.base.Message",
    flatten_with_keys_fn=_msg_flatten_with_keys,
)


def stack_trees(trees: list) -> Any:
    """Stack a list of identically-shaped pytrees along a new leading axis."""
    flat = [pytree.tree_flatten(t) for t in trees]
    spec = flat[0][1]
    leaves = [torch.stack(list(col)) for col in zip(*(f[0] for f in flat))]
    return pytree.tree_unflatten(leaves, spec)


def unstack_tree(tree: Any, n: int) -> list:
    """Inverse of ``stack_trees``."""
    leaves, spec = pytree.tree_flatten(tree)
    return [pytree.tree_unflatten([leaf[i] for leaf in leaves], spec) for i in range(n)]


def tree_map(fn: Callable, *trees: Any) -> Any:
    return pytree.tree_map(fn, *trees)


# --------------------------------------------------------------------------------------------------
# Parameter layout


@dataclass(frozen=True)
class ParamSlice:
    name: str
    start: int
    stop: int
    shape: tuple[int, ...]
    kind: str  # "weight" (conv/linear weight), "bias", "norm" (BN/GN/LN affine), "other"

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ParamLayout:
    """Where each named tensor of a model lives in the flat parameter vector."""

    slices: tuple[ParamSlice, ...]

    @property
    def size(self) -> int:
        return self.slices[-1].stop if self.slices else 0

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slices]

    def __len__(self) -> int:
        return len(self.slices)

    @staticmethod
    def from_module(module: torch.nn.Module) -> "ParamLayout":
        kinds: dict[str, str] = {}
        for mod_name, mod in module.named_modules():
            for p_name, _ in mod.named_parameters(recurse=False):
                full = f"{mod_name}.{p_name}" if mod_name else p_name
                if isinstance(mod, (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm,
                                    torch.nn.LayerNorm)):
                    kinds[full] = "norm"
                elif p_name == "bias":
                    kinds[full] = "bias"
                elif p_name == "weight" and isinstance(mod, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
                    kinds[full] = "weight"
                else:
                    kinds[full] = "other"
        slices, start = [], 0
        for name, p in module.named_parameters():
            n = p.numel()
            slices.append(ParamSlice(name, start, start + n, tuple(p.shape), kinds.get(name, "other")))
            start += n
        return ParamLayout(tuple(slices))

    @staticmethod
    def single(d: int, name: str = "x", kind: str = "weight") -> "ParamLayout":
        """A layout with one tensor of d entries (toy problems, compressors)."""
        return ParamLayout((ParamSlice(name, 0, d, (d,), kind),))

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``flat`` with each tensor's shape (works under vmap and grad)."""
        return {s.name: flat[s.start:s.stop].view(s.shape) for s in self.slices}

    def flatten(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([tensors[s.name].reshape(-1) for s in self.slices])

    def segment_ids(self, device=None) -> torch.Tensor:
        """Tensor of length ``size`` with the index of the slice each entry belongs to."""
        counts = torch.tensor([s.numel for s in self.slices], device=device)
        return torch.repeat_interleave(torch.arange(len(self.slices), device=device), counts)

    def mask(self, kinds: tuple[str, ...], device=None) -> torch.Tensor:
        """Boolean mask of the entries whose slice kind is in ``kinds``."""
        m = torch.zeros(self.size, dtype=torch.bool, device=device)
        for s in self.slices:
            if s.kind in kinds:
                m[s.start:s.stop] = True
        return m


# --------------------------------------------------------------------------------------------------
# Randomness that works the same under vmap and in a plain loop

_MASK64 = (1 << 64) - 1


def _to_signed(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


_GOLDEN = _to_signed(0x9E3779B97F4A7C15)
_C1 = _to_signed(0xBF58476D1CE4E5B9)
_C2 = _to_signed(0x94D049BB133111EB)


def _lsr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def splitmix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on int64 tensors (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ _lsr(z, 30)) * _C1
    z = (z ^ _lsr(z, 27)) * _C2
    return z ^ _lsr(z, 31)


class Rng(Protocol):
    def uniform(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor: ...

    def normal(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor: ...


class CounterRng:
    """Counter-based generator: numbers are a hash of (key, call counter, position).

    The key is an int64 tensor (a 0-d tensor per client, batched under vmap), so every client gets
    its own independent stream while the vectorized and the sequential executors draw exactly the
    same numbers. Each call advances a Python-side counter, so the sequence of calls (not their
    values) must be the same in both executors, which holds for pure local updates.
    """

    def __init__(self, key: torch.Tensor | int, device: torch.device | str | None = None):
        if not isinstance(key, torch.Tensor):
            key = torch.tensor(int(key), dtype=torch.int64, device=device)
        self.key = splitmix64(key.to(torch.int64))
        self.device = self.key.device if device is None else torch.device(device)
        self.counter = 0

    def _bits(self, shape) -> torch.Tensor:
        self.counter += 1
        n = math.prod(shape)
        pos = torch.arange(n, dtype=torch.int64, device=self.device).reshape(tuple(shape))
        stream = splitmix64(self.key + _to_signed(self.counter * 0x94D049BB133111EB))
        return splitmix64(stream + pos * _GOLDEN)

    def uniform(self, shape) -> torch.Tensor:
        """U[0, 1) in float32 with 24 random bits."""
        return _lsr(self._bits(tuple(shape)), 40).to(torch.float32) * (2.0 ** -24)

    def normal(self, shape) -> torch.Tensor:
        """Standard normal via Box-Muller (float32)."""
        u1 = self.uniform(shape)
        u2 = self.uniform(shape)
        return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)

    def integers(self, high: int, shape) -> torch.Tensor:
        return (self.uniform(shape) * high).to(torch.int64).clamp_(max=high - 1)


class TorchRng:
    """Adapter: a ``torch.Generator`` behind the ``Rng`` protocol (not usable under vmap)."""

    def __init__(self, generator: torch.Generator | None = None):
        self.generator = generator
        self.device = generator.device if generator is not None else torch.device("cpu")

    def uniform(self, shape) -> torch.Tensor:
        return torch.rand(tuple(shape), generator=self.generator, device=self.device)

    def normal(self, shape) -> torch.Tensor:
        return torch.randn(tuple(shape), generator=self.generator, device=self.device)

    def integers(self, high: int, shape) -> torch.Tensor:
        return torch.randint(high, tuple(shape), generator=self.generator, device=self.device)


def as_rng(r: Rng | torch.Generator | int | None) -> Rng:
    """Accept an ``Rng``, a ``torch.Generator``, an int seed, or None (global generator)."""
    if r is None or isinstance(r, torch.Generator):
        return TorchRng(r)
    if isinstance(r, int):
        g = torch.Generator()
        g.manual_seed(r)
        return TorchRng(g)
    return r


# --------------------------------------------------------------------------------------------------
# What an algorithm sees during local training


class LocalContext(Protocol):
    """Provided by an executor to ``Algorithm.local_update`` (see ``benchmark/executors.py``).

    Attributes
    ----------
    layout: the ParamLayout of the model.
    rng: a counter-based ``Rng`` private to this client and round.
    optimizer: the local optimizer (``algorithms.optim``), configured from the experiment.
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
    """Send a diagnostic from ``local_update`` to the run's observers (``benchmark.engine``).

    ``value``: a tensor, or a zero-argument callable returning one (called only when someone listens,
    so a diagnostic costs nothing in the benchmark's runs). Contexts without diagnostics (hand-written
    test contexts) ignore it. vmap-safe: no values are read.
    """
    if getattr(ctx, "diagnosing", False):
        ctx.record(name, value)


# --------------------------------------------------------------------------------------------------
# The Algorithm contract


@dataclass(frozen=True)
class NoHyperparameters:
    pass


class Algorithm:
    """Base class. Subclasses set ``name`` and ``Hyper`` (a frozen dataclass with the paper's defaults,
    each field declared with its constraint by ``algorithms.hyper.param``).

    Methods follow DESIGN.md. ``aggregate`` also receives a ``RoundInfo`` with the sampled client ids.
    """

    name: ClassVar[str] = ""
    Hyper: ClassVar[type] = NoHyperparameters
    #: False when local_update cannot run under vmap (the engine falls back to the sequential executor)
    vectorizable: ClassVar[bool] = True
    #: the server optimizer (``optim.ServerSGD``, ``optim.ServerMomentum``) that ``server_step`` applies to
    #: the pseudo-gradient, built from the hyperparameters of its fields (eta_g, beta1); None: the
    #: algorithm writes its own server rule. ``with_server_momentum`` makes the momentum variant.
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
                _, g = ctx.loss_and_grad(p, batch)
            else:
                _, g = grad_fn(p, batch, s)
            p, state = opt.step(p, g, state, ctx.lr)
            return p, state

        p, _ = ctx.loop(step, (params, opt.init(params)))
        return p


@dataclass(frozen=True)
class RoundInfo:
    round: int
    client_ids: torch.Tensor  # (K,) int64, the sampled clients in the order of the stacked uplinks
    num_clients: int
    num_samples: torch.Tensor  # (K,) |D_i| of the sampled clients
    steps: torch.Tensor  # (K,) tau_i of the sampled clients
    lr: float


# --------------------------------------------------------------------------------------------------
# Registry

_REGISTRY: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"algorithm {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def make_hyper(cls: type[Algorithm], args: Mapping[str, Any] | None) -> Any:
    """The frozen hyperparameter dataclass from ``args`` (command-line strings converted), every field
    checked against its declared constraint (``algorithms.hyper.build``): a ``ValueError`` for an unknown
    key, and a ``hyper.HyperparameterError`` ("fedprox: mu must be >= 0 and finite, got 'abc'") for a
    value that does not convert or lies outside its constraint."""
    return hyper.build(cls.name, cls.Hyper, dict(args or {}))


def with_server_momentum(base: type[Algorithm], name: str, beta1: float = 0.9) -> type[Algorithm]:
    """``base`` with the server momentum optimizer (``optim.ServerMomentum``) in place of its plain
    server step (``optim.ServerSGD``), named ``name`` (``register`` it): the GradMA paper's "slow-momentum
    variants" (Sec. 6.1; App. Alg. 5-6: FedAvgM, FedProxM, MIFAM; MOONM, FedMLBM).

    The variant keeps base's local rule, uplink and aggregation and overrides nothing else; its
    ``Hyper`` is base's with ``beta1`` (default 0.9, Hsu et al.'s value and the top of GradMA's grid
    {0.1, 0.5, 0.9}) before ``eta_g``, and its server state gains ``momentum``.
    """
    if base.server_optimizer is not optim.ServerSGD:
        raise TypeError(f"with_server_momentum: {base.__name__} must step with optim.ServerSGD, "
                        f"not {base.server_optimizer}")
    cls_name = f"{base.__name__}M"
    hp = hyper.with_field(base.Hyper, "beta1", float, hyper.param(beta1, hyper.MOMENTUM), before="eta_g",
                          qualname=f"{cls_name}.Hyper")
    doc = f"{base.__name__} with server momentum (``with_server_momentum``): {name}."
    return type(cls_name, (base,), {"name": name, "Hyper": hp, "server_optimizer": optim.ServerMomentum,
                                    "__module__": base.__module__, "__qualname__": cls_name, "__doc__": doc})
