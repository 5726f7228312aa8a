"""A model as a pure function of one flat parameter vector (DESIGN.md, the Algorithm contract).

``FunctionalModel`` runs a module from a flat vector (``torch.func.functional_call``), with BatchNorm's
running statistics as explicit buffers. Everything that changes from call to call travels as an argument
of the call and comes back as its result, never as an attribute stored on a shared object: the sample
weights of the batch (0 for padding rows), the client's counter-based random stream for dropout, and the
batch statistics BatchNorm measured. These per-call tensors enter ``functional_call`` as buffers of the
training copy of the model, exactly as parameters do, so the forward is a function of its inputs (which
``torch.func`` transforms and ``torch.compile`` need).

Training copies. The module is copied once per *variant*, sharing its parameter tensors: BatchNorm is
replaced by a sample-weighted BatchNorm with the same parameters and arithmetic (in rounds without padding
it runs the fused ``F.batch_norm`` kernel instead, about 5x cheaper on a CPU), and ``nn.Dropout`` by a
dropout whose mask is the client's ``CounterRng`` draw (same masks in both executors). The variants differ
in what is fixed before a round: ``weighted`` (some batch may hold zero-weight padding rows) and ``train``
(BatchNorm records its batch statistics and dropout is on) or reference (a frozen model: nothing recorded,
no dropout).

Dropout streams are reserved from the client's ``CounterRng`` before the forward, one per dropout layer
in registration order (for an ``nn.Sequential``, the order in which the layers run): each mask is the
draw ``rng.uniform(x.shape)`` would make at that point of the client's sequence (tested).
"""
from __future__ import annotations

import copy
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.func import functional_call

from algorithms.core import CounterRng, ParamLayout
from algorithms.core.rng import _GOLDEN as _POSITION, _lsr, _to_signed, splitmix64

from benchmark.models import stages
from benchmark.sim import chain_grad, vmap_layers

_STREAM = 0x94D049BB133111EB  # CounterRng: stream of draw c = splitmix64(key + c * _STREAM)
_NO_STREAM = torch.zeros(0, dtype=torch.int64)  # a forward without an rng: dropout off
EVAL_CHUNK = 512  # samples per evaluation forward of a convolutional model on a CPU (FunctionalModel._eval_forward)


class Batch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    w: torch.Tensor  # sample weights: 1 for real samples, 0 for padding


def next_stream(rng: CounterRng) -> torch.Tensor:
    """Reserve ``rng``'s next draw: its stream, as ``CounterRng.uniform`` computes it (the counter advances)."""
    rng.counter += 1
    return splitmix64(rng.key + _to_signed(rng.counter * _STREAM))


def stream_uniform(stream: torch.Tensor, shape) -> torch.Tensor:
    """U[0, 1) in float32 from a reserved stream: what ``CounterRng.uniform(shape)`` returns for that draw."""
    n = math.prod(shape)
    pos = torch.arange(n, dtype=torch.int64, device=stream.device).reshape(tuple(shape))
    return _lsr(splitmix64(stream + pos * _POSITION), 40).to(torch.float32) * (2.0 ** -24)


class _WeightedBatchNorm(torch.nn.Module):
    """BatchNorm in training mode whose batch statistics weight each sample (padding has weight 0).

    Same parameters (``weight``, ``bias``) and the same arithmetic as ``F.batch_norm(training=True)``.
    ``sample_weight`` (and, when ``record``, the output slots ``batch_mean`` and ``batch_var``, where the
    batch mean and unbiased variance are written for the running statistics) are given by each call.
    """

    def __init__(self, bn: torch.nn.modules.batchnorm._BatchNorm, weighted: bool, record: bool):
        super().__init__()
        self.eps, self.momentum, self.affine = bn.eps, bn.momentum, bn.affine
        self.weighted, self.record = weighted, record
        if bn.affine:
            self.weight = torch.nn.Parameter(bn.weight.detach().clone())
            self.bias = torch.nn.Parameter(bn.bias.detach().clone())
        self.register_buffer("sample_weight", torch.ones(0), persistent=False)
        if record:
            self.register_buffer("batch_mean", torch.zeros(0), persistent=False)
            self.register_buffer("batch_var", torch.zeros(0), persistent=False)

    def forward(self, x):
        weight, bias = (self.weight, self.bias) if self.affine else (None, None)
        return self.run(x, weight, bias, self.sample_weight, *((self.batch_mean, self.batch_var) if self.record
                                                                 else (None, None)))

    def run(self, x, weight, bias, sample_weight, mean_slot, var_slot):
        """``forward`` with its call's tensors given: the parameters, the sample weights and, when ``record``, the
        slots of the batch statistics (what ``functional_call`` swaps in as this module's buffers; a plain chain,
        ``_run_chain``, passes them directly)."""
        per_channel = x.shape[0] * (math.prod(x.shape[2:]) if x.dim() > 2 else 1)
        # the folding layers (benchmark.sim.vmap_layers) for feature maps; the op-by-op forms when compiling
        # (inductor traces no vmap rule) and for (N, C) features (BatchNorm1d: small activations, and it keeps
        # the vectorized gradma_mlp runs of results/gradma_reduced_fmnist/0.3.0 bit for bit)
        fold = x.dim() > 2 and not torch.compiler.is_compiling()
        if not self.weighted and per_channel > 1:  # all weights 1: the fused kernel, same arithmetic
            if self.record and not vmap_layers.folding() and not torch.compiler.is_compiling():
                # the batch statistics from the kernel's own pass (0.5.0, issue 45): the zeroed slots are its
                # running statistics with momentum 1, so it writes 1 * s + 0 * 0 = s, the mean and the unbiased
                # variance it normalized with (one pass over x instead of torch.var_mean's second one: FedBAT's
                # CNN cell -21% CPU). Not bit for bit var_mean's: the variance differs at float32 rounding.
                return F.batch_norm(x, mean_slot.zero_(), var_slot.zero_(), weight, bias, True, 1.0, self.eps)
            if self.record:
                var, mean = torch.var_mean(x.detach(), dim=[0] + list(range(2, x.dim())), correction=1)
                mean_slot.copy_(mean)
                var_slot.copy_(var)
            if fold:
                return vmap_layers.batch_norm(x, weight, bias, self.eps)
            return F.batch_norm(x, None, None, weight, bias, True, 0.0, self.eps)
        if fold:
            y, mean, var, cnt = vmap_layers.weighted_batch_norm(x, sample_weight, weight, bias, self.eps)
        else:
            y, mean, var, cnt = self._op_by_op(x, sample_weight, weight, bias)
        if self.record:
            mean_slot.copy_(mean.detach())
            var_slot.copy_((var * cnt / (cnt - 1).clamp(min=1)).detach())
        return y

    def _op_by_op(self, x, sample_weight, weight, bias):
        """``vmap_layers.weighted_batch_norm`` as tensor arithmetic (what a compiled step traces)."""
        dims = [0] + list(range(2, x.dim()))
        shape = [x.shape[0]] + [1] * (x.dim() - 1)
        w = sample_weight.reshape(shape).to(x.dtype)
        cnt = sample_weight.sum() * (math.prod(x.shape[2:]) if x.dim() > 2 else 1)
        mean = (w * x).sum(dim=dims) / cnt
        cshape = [1, -1] + [1] * (x.dim() - 2)
        xc = x - mean.reshape(cshape)
        var = (w * xc * xc).sum(dim=dims) / cnt
        y = xc * torch.rsqrt(var.reshape(cshape) + self.eps)
        if weight is not None:
            y = y * weight.reshape(cshape) + bias.reshape(cshape)
        return y, mean, var, cnt


class _FoldedMaxPool(torch.nn.Module):
    """``nn.MaxPool2d`` (stride = kernel, no padding) through ``vmap_layers.max_pool2d``: the same values, bit
    for bit, without vmap's layout copies."""

    def __init__(self, kernel: tuple[int, int]):
        super().__init__()
        self.kernel = list(kernel)

    @staticmethod
    def replaces(mod: torch.nn.Module) -> bool:
        if type(mod) is not torch.nn.MaxPool2d or mod.return_indices or mod.ceil_mode:
            return False
        pair = torch.nn.modules.utils._pair
        stride = mod.stride if mod.stride is not None else mod.kernel_size
        return pair(stride) == pair(mod.kernel_size) and pair(mod.padding) == (0, 0) and pair(mod.dilation) == (1, 1)

    def forward(self, x):
        if torch.compiler.is_compiling() or x.dim() != 4:
            return F.max_pool2d(x, self.kernel)
        return vmap_layers.max_pool2d(x, self.kernel)


class _CounterDropout(torch.nn.Module):
    """Dropout whose mask comes from a reserved stream of the client's ``CounterRng`` (``stream``, given by
    each call); ``on=False`` (reference forwards, or p = 0) is the identity and draws nothing."""

    def __init__(self, p: float, on: bool):
        super().__init__()
        self.p, self.on = p, on and p > 0
        if self.on:
            self.register_buffer("stream", torch.zeros((), dtype=torch.int64), persistent=False)

    def forward(self, x):
        return self.run(x, self.stream if self.on else None)

    def run(self, x, stream):
        """``forward`` with its call's stream given (None or empty: no mask)."""
        if not self.on or stream is None or stream.numel() == 0:  # off, or no rng given for this call
            return x
        keep = (stream_uniform(stream, x.shape) >= self.p).to(x.dtype)
        return x * keep / (1 - self.p)


def _like_data(flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The parameters in the data's floating dtype. Messages are float32, so in a float32 run this returns ``flat``
    itself; only ``fedrepro validate``'s float64 CNN problem (float64 data and model) computes on the float32
    parameters it receives in float64 (``benchmark/perf/validate.py``)."""
    return flat if flat.dtype == x.dtype or not x.is_floating_point() else flat.to(x.dtype)


def _with(params: dict, state: dict) -> dict:
    return {**params, **state} if state else params


def _replace(root: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent = root.get_submodule(name.rpartition(".")[0]) if "." in name else root
    setattr(parent, name.rpartition(".")[2], new)


def _chain(module: torch.nn.Module) -> list | None:
    """A chain model (an ``nn.Sequential`` of flatten, linear, ReLU, zero-padded convolution, folded pooling and a
    training copy's BatchNorm and dropout layers: the digits MLPs, BHerd's SVM, GradMA's MLP, FedBAT's and LFL's
    CNNs) as the list of its layers' operations, which :func:`_run_chain` calls directly: the same ATen calls as
    the modules' ``forward``, without ``functional_call``'s swapping of parameters and buffers (issue 45: about 14%
    of a vmapped MLP step, 0.9 ms of a 2.9 ms gradient of GradMA's MLP). None for any other model."""
    from benchmark.models.blocks import _Flatten

    if type(module) is not torch.nn.Sequential:
        return None
    ops = []
    for name, m in module.named_children():
        t = type(m)
        if t is torch.nn.Linear:
            ops.append(("linear", f"{name}.weight", None if m.bias is None else f"{name}.bias"))
        elif t is torch.nn.Conv2d and m.padding_mode == "zeros" and not isinstance(m.padding, str):
            ops.append(("conv", f"{name}.weight", None if m.bias is None else f"{name}.bias",
                        (m.stride, m.padding, m.dilation, m.groups)))
        elif t is torch.nn.ReLU and not m.inplace:
            ops.append(("relu",))
        elif t is _Flatten:
            ops.append(("flatten",))
        elif t is _FoldedMaxPool:
            ops.append(("module", m))
        elif t is _WeightedBatchNorm:
            ops.append(("bn", m, name))
        elif t is _CounterDropout:
            ops.append(("dropout", m, name))
        else:
            return None
    return ops


def _run_chain(ops: list, params: dict, x: torch.Tensor, state: dict | None = None) -> torch.Tensor:
    """The chain's forward; ``state``: the call's tensors of its BatchNorm and dropout layers, keyed as
    ``FunctionalModel._call_state`` names them for a whole-model call."""
    for op in ops:
        kind = op[0]
        if kind == "linear":
            x = F.linear(x, params[op[1]], None if op[2] is None else params[op[2]])
        elif kind == "conv":
            x = F.conv2d(x, params[op[1]], None if op[2] is None else params[op[2]], *op[3])
        elif kind == "relu":
            x = F.relu(x)
        elif kind == "flatten":
            x = x.flatten(1)
        elif kind == "bn":
            m, n = op[1], op[2]
            x = m.run(x, params[f"{n}.weight"] if m.affine else None, params[f"{n}.bias"] if m.affine else None,
                      state[f"{n}.sample_weight"], state.get(f"{n}.batch_mean"), state.get(f"{n}.batch_var"))
        elif kind == "dropout":
            x = op[1].run(x, state.get(f"{op[2]}.stream"))
        else:
            x = op[1](x)
    return x


class _Variant:
    """One training copy of the model and what a call must give it (names relative to the copy)."""

    def __init__(self, module: torch.nn.Module, weighted: bool, train: bool):
        shared = {id(t): t for t in [*module.parameters(), *module.buffers()]}
        self.module = copy.deepcopy(module, memo=shared).train()  # new modules, the same tensors
        self.train, self.bn, self.dropout = train, [], []
        for name, mod in list(self.module.named_modules()):
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.track_running_stats:
                if mod.momentum is None:
                    raise ValueError("BatchNorm with momentum=None (cumulative average) is not supported")
                _replace(self.module, name, _WeightedBatchNorm(mod, weighted, record=train))
                self.bn.append(name)
            elif isinstance(mod, torch.nn.Dropout):
                _replace(self.module, name, _CounterDropout(mod.p, on=train))
                if train and mod.p > 0:
                    self.dropout.append(name)
            elif _FoldedMaxPool.replaces(mod):
                _replace(self.module, name, _FoldedMaxPool(torch.nn.modules.utils._pair(mod.kernel_size)))
            elif isinstance(mod, torch.nn.modules.dropout._DropoutNd):
                raise ValueError(f"{type(mod).__name__} is not supported by the executors; use nn.Dropout")
        self.calls = [(n, n) for n in [*self.bn, *self.dropout]]  # what a whole-model call is given
        self.ops = _chain(self.module)  # a chain model: called op by op, its call's tensors given directly
        self.stages, self.stages_error = None, None
        try:
            full = {id(m): n for n, m in self.module.named_modules()}
            self.stages = [(m, [n for n, _ in m.named_parameters()],
                            [(rel, full[id(sub)]) for rel, sub in m.named_modules()
                             if isinstance(sub, (_WeightedBatchNorm, _CounterDropout))])
                           for m in stages(self.module)]
        except ValueError as e:  # not a chain of stages: only model_fn.stages needs one
            self.stages_error = str(e)


class FunctionalModel:
    """Runs a module from a flat parameter vector, with BatchNorm statistics as explicit buffers.

    Nothing of a call is kept on this object: ``forward_train`` takes the batch's sample weights and
    the client's rng and returns, beside the output, BatchNorm's batch statistics (``stats``:
    name -> (mean, unbiased variance)) for :meth:`updated_buffers`.
    """

    def __init__(self, module: torch.nn.Module, task: str):
        self.module = module
        self.task = task
        self.layout = ParamLayout.from_module(module)
        self.loss = getattr(module, "fedrepro_loss", "default")  # e.g. "squared_hinge" for BHerd's SVM
        if self.loss not in ("default", "squared_hinge"):
            raise ValueError(f"unknown model loss {self.loss!r}")
        special = any(isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd))
                      for m in module.modules())
        plain = None if special else _Variant(module, True, True)  # nothing to vary: one copy serves all
        self._variants = {(w, t): plain or _Variant(module, w, t) for w in (True, False) for t in (True, False)}
        #: a plain chain's gradient written out under vmap (``benchmark.sim.chain_grad``), or None
        self.chain_grad = chain_grad.plan(plain.ops if plain else None, self.loss, task, self.layout)
        self.bn_names = list(self._variants[True, True].bn)
        self._momentum = {n: module.get_submodule(n).momentum for n in self.bn_names}
        self._channels = {n: module.get_submodule(n).running_mean.shape for n in self.bn_names}
        self.has_dropout = bool(self._variants[True, True].dropout)
        self.eval_module = copy.deepcopy(module).eval()
        self._conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules())
        for name, mod in list(self.eval_module.named_modules()):  # the same values, through the faster kernel
            if _FoldedMaxPool.replaces(mod):
                _replace(self.eval_module, name, _FoldedMaxPool(torch.nn.modules.utils._pair(mod.kernel_size)))

    @property
    def train_module(self) -> torch.nn.Module:
        """The training copy of the model (weighted BatchNorm, counter-based dropout)."""
        return self._variants[True, True].module

    def initial_buffers(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, mod in self.module.named_modules():
            if name in self.bn_names:
                out[f"{name}.running_mean"] = mod.running_mean.detach().clone()
                out[f"{name}.running_var"] = mod.running_var.detach().clone()
        return out

    def _call_state(self, v: _Variant, x: torch.Tensor, w, rng, like: dict | None, names) -> tuple[dict, dict]:
        """The per-call tensors of variant ``v`` for modules ``names`` ((key, full name) pairs), and the
        statistics slots (full name -> (mean slot, var slot)) they fill."""
        state, slots = {}, {}
        if not names:
            return state, slots
        if w is None or w.shape[0] != x.shape[0]:
            w = torch.ones(x.shape[0], device=x.device)
        for key, full in names:
            if full in v.dropout:  # no rng: an empty stream, dropout off
                state[f"{key}.stream"] = next_stream(rng) if rng is not None else _NO_STREAM
            elif full in v.bn:
                state[f"{key}.sample_weight"] = w
                if v.train:
                    ref = like[f"{full}.running_mean"] if like else \
                        torch.zeros(self._channels[full], device=x.device)
                    slots[full] = (torch.zeros_like(ref), torch.zeros_like(ref))
                    state[f"{key}.batch_mean"], state[f"{key}.batch_var"] = slots[full]
        return state, slots

    def forward_train(self, flat: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None = None, rng=None,
                      weighted: bool = True, buffers: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Training-mode forward: (output, BatchNorm batch statistics). ``w``: the batch's sample weights
        (None, or another number of rows: all ones); ``rng``: the client's ``CounterRng`` (dropout; None:
        no dropout);
        ``buffers``: the client's BatchNorm buffers (they give the statistics' shapes, and their batching
        under vmap)."""
        v = self._variants[weighted, True]
        state, slots = self._call_state(v, x, w, rng, buffers, v.calls)
        params = self.layout.unflatten(_like_data(flat, x))
        if v.ops is not None:
            return _run_chain(v.ops, params, x, state), slots
        out = functional_call(v.module, _with(params, state), (x,))
        return out, slots

    def reference_forward(self, flat: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None = None,
                          weighted: bool = True) -> torch.Tensor:
        """A frozen model's training-mode forward: BatchNorm on batch statistics, nothing recorded, no dropout."""
        v = self._variants[weighted, False]
        state, _ = self._call_state(v, x, w, None, None, v.calls)
        params = self.layout.unflatten(_like_data(flat, x))
        if v.ops is not None:
            return _run_chain(v.ops, params, x, state)
        return functional_call(v.module, _with(params, state), (x,))

    def stage_modules(self) -> list:
        """The training copy of the model as a chain of stages (``benchmark.models.stages``): (module,
        parameter names) per stage."""
        return [(m, names) for m, names, _ in self._stages(self._variants[True, True])]

    def _stages(self, v: _Variant) -> list:
        if v.stages is None:
            raise ValueError(v.stages_error)
        return v.stages

    def forward_stages(self, flat: torch.Tensor, x: torch.Tensor, start: int = 0, w: torch.Tensor | None = None,
                       rng=None, weighted: bool = True, buffers: dict | None = None, train: bool = True
                       ) -> tuple[list[torch.Tensor], dict]:
        """Training-mode forward through stages ``start, start+1, ...``: (the output of each, BatchNorm
        statistics). ``train=False``: the reference forward (nothing recorded, no dropout)."""
        v = self._variants[weighted, train]
        mods = self._stages(v)
        if not 0 <= start < len(mods):
            raise ValueError(f"start stage {start} out of range: the model has {len(mods)} stages")
        params = self.layout.unflatten(_like_data(flat, x))
        outs, h, stats = [], x, {}
        for mod, names, extra in mods[start:]:
            state, slots = self._call_state(v, h, w, rng, buffers, extra)
            h = functional_call(mod, _with({n: params[n] for n in names}, state), (h,))
            outs.append(h)
            stats.update(slots)
        return outs, stats

    def updated_buffers(self, buffers: dict, stats: dict) -> dict:
        """The running statistics after one training forward: (1 - momentum) * old + momentum * batch."""
        new = dict(buffers)
        for name in self.bn_names:
            mean, var = stats[name]
            m = self._momentum[name]
            new[f"{name}.running_mean"] = (1 - m) * buffers[f"{name}.running_mean"] + m * mean
            new[f"{name}.running_var"] = (1 - m) * buffers[f"{name}.running_var"] + m * var
        return new

    def criterion(self, out: torch.Tensor, batch: Batch, vectorized: bool = False) -> torch.Tensor:
        """The batch's mean loss weighted by its sample weights. ``vectorized`` (under vmap): the cross-entropy as
        log_softmax and a gather of the targets, whose batching rules vmap has (``cross_entropy`` falls back to a
        Python decomposition: 0.74 against 1.0 ms per MLP step of 10 clients); the same values and gradients bit
        for bit (one entry per row: the negation and the scatter of its gradient are exact)."""
        w = batch.w
        if self.loss == "squared_hinge":  # labels {0, 1} -> {-1, +1}; 0.5 * max(0, 1 - y s)^2
            per = 0.5 * torch.clamp(1 - (2.0 * batch.y - 1) * out.reshape(-1), min=0) ** 2
        elif self.task == "classification" and vectorized and out.dim() == 2:
            per = -torch.log_softmax(out, 1).gather(1, batch.y[:, None])[:, 0]
        elif self.task == "classification":
            per = F.cross_entropy(out, batch.y, reduction="none")
        else:
            y = batch.y if batch.y.dim() == out.dim() else batch.y.reshape(out.shape)
            per = F.mse_loss(out, y, reduction="none")
            per = per.reshape(per.shape[0], -1).mean(dim=1)
        return (per * w).sum() / w.sum()

    def _eval_forward(self, state: dict, x: torch.Tensor) -> torch.Tensor:
        """The eval-mode outputs of ``x``; for a convolutional model on a CPU, in chunks of :data:`EVAL_CHUNK`
        samples whose activations stay in cache (2x faster for the claims' CNNs; each sample's output is the
        same bit for bit, so the losses summed over the whole batch are too: golden histories)."""
        if not self._conv or x.device.type != "cpu" or len(x) <= EVAL_CHUNK:
            return functional_call(self.eval_module, state, (x,))
        return torch.cat([functional_call(self.eval_module, state, (x[i:i + EVAL_CHUNK],))
                          for i in range(0, len(x), EVAL_CHUNK)])

    @torch.no_grad()
    def evaluate(self, flat: torch.Tensor, buffers: dict, x: torch.Tensor, y: torch.Tensor,
                 batch_size: int = 4096) -> tuple[float, float]:
        """(mean loss, accuracy or None) of the model at ``flat`` on (x, y), in eval mode."""
        state = dict(self.layout.unflatten(_like_data(flat, x)))
        state.update(buffers)
        total, correct, n = 0.0, 0, len(x)
        for i in range(0, n, batch_size):
            out = self._eval_forward(state, x[i:i + batch_size])
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
