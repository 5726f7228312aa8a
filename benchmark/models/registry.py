"""The model registry: ``build``, ``names``, ``describe``, ``param_count`` and ``stages`` (the
``benchmark.models`` docstring says what each model is and how a model is cut into stages).

A model registers itself with ``@_register(name, paper=..., source=..., ...)`` in its paper's module
(``benchmark/models/<paper>.py``).
"""
from __future__ import annotations

import difflib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: how to build the model, and where the paper specifies it."""

    name: str
    builder: Callable[..., nn.Module]
    paper: str
    source: str
    summary: str
    default_input: tuple[int, ...]
    default_classes: int
    expects: str
    options: dict = field(default_factory=dict)  # option name -> default


SPECS: dict[str, ModelSpec] = {}


def _register(name: str, *, paper: str, source: str, summary: str, default_input: tuple[int, ...],
              default_classes: int, expects: str, options: dict | None = None):
    def deco(builder):
        SPECS[name] = ModelSpec(name, builder, paper, source, summary, tuple(default_input),
                                default_classes, expects, dict(options or {}))
        return builder
    return deco


def names() -> list[str]:
    """All registry names, sorted."""
    return sorted(SPECS)


def _spec(name: str) -> ModelSpec:
    if not isinstance(name, str) or name not in SPECS:
        close = difflib.get_close_matches(str(name).lower(), names(), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown model {name!r}{hint} Known models: {', '.join(names())}")
    return SPECS[name]


def build(name: str, input_shape, num_classes: int, **options) -> nn.Module:
    """A new model ``name`` for inputs of shape ``input_shape`` (no batch axis) and ``num_classes``
    outputs. ``options`` are model-specific (see ``SPECS[name].options``)."""
    spec = _spec(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        accepted = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "none"
        raise ValueError(f"{name}: unknown option(s) {', '.join(unknown)}; accepted: {accepted}")
    try:
        shape = tuple(int(s) for s in input_shape)
    except TypeError:
        raise ValueError(f"{name} expects input_shape {spec.expects}; got {input_shape!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{name} expects input_shape {spec.expects}; got {shape}")
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"{name}: num_classes must be a positive integer, got {num_classes!r}")
    kwargs = {**spec.options, **options}
    return spec.builder(name, shape, int(num_classes), **kwargs)


def param_count(module: nn.Module) -> int:
    """Number of trainable scalars (what travels in the flat parameter vector)."""
    return sum(p.numel() for p in module.parameters())


_COUNTS: dict[str, int] = {}


def describe(name: str) -> str:
    """One line: name, paper, where the paper specifies it, and its parameter count on the paper's
    input (``default_input`` -> ``default_classes``)."""
    spec = _spec(name)
    if name not in _COUNTS:
        with torch.device("meta"):
            _COUNTS[name] = param_count(build(name, spec.default_input, spec.default_classes))
    shape = "x".join(str(s) for s in spec.default_input)
    return (f"{name}: {spec.paper}, {spec.source}: {spec.summary}; "
            f"{_COUNTS[name]:,} parameters for input {shape} -> {spec.default_classes} "
            f"output{'s' if spec.default_classes != 1 else ''}")


_WEIGHT_LAYERS = (nn.Linear, nn.modules.conv._ConvNd)
_POOLS = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
          nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)


def stages(module: nn.Module) -> list[nn.Module]:
    """The model as a chain of stages (``benchmark.models`` docstring, "Stages"): ``x -> s_1 -> ... -> s_B``.

    Works on any copy of a registry model, including one whose layers an executor replaced.
    A model that is neither an ``nn.Sequential`` nor defines ``fedrepro_stages()`` raises ValueError.
    """
    if hasattr(module, "fedrepro_stages"):
        return list(module.fedrepro_stages())
    if not isinstance(module, nn.Sequential):
        raise ValueError(f"{type(module).__name__} has no stages: it is not an nn.Sequential and does not "
                         "define fedrepro_stages()")
    groups: list[list[tuple[str, nn.Module]]] = [[]]
    for name, child in module.named_children():
        cur = groups[-1]
        has_weight = any(isinstance(c, _WEIGHT_LAYERS) for _, c in cur)
        has_pool = any(isinstance(c, _POOLS) for _, c in cur)
        if isinstance(child, _WEIGHT_LAYERS) and has_weight and (has_pool or isinstance(child, nn.Linear)):
            groups.append([])
        groups[-1].append((name, child))
    return [nn.Sequential(OrderedDict(g)) for g in groups]
