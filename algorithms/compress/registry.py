"""The named compression operators: ``get(name, **params)`` builds one, ``names()`` lists them. Every entry is a
``Transform`` (``compress.transform``) registered with ``@register_operator`` in any module of
``algorithms/compress/``; the bits each one sends for d entries, with ``B(n) = 8 ceil(n/8)`` (an
n-bit string padded to whole bytes) and ``L(m) = ceil(log2 m)`` (0 for m = 1)::

    name             params (defaults)                 bits for d entries
    identity         -                                 32 d
    lfl              q=2                               64 + B(d) + B(d L(q+1))
    qsgd             s=1                               32 + B(d) + B(d L(s+1))
    fedpaq           bits=3                            QSGD with s = 2^(bits-1) - 1: 32 + B(d) + B(d (bits-1))
    sign             alpha=0.001                       B(d)
    scaled_sign      -                                 B(d) + 32
    noisy_sign       alpha=0.01, sigma=0.01            B(d)
    stochastic_sign  alpha=0.01, norm="inf"            B(d)   (+32 when alpha=None)
    binarize         alpha=None                        B(d) + 32
    topk             k | ratio (ratio=0.01)            32 k + B(k L(d))
    randk            k | ratio (ratio=0.01), scale     32 k + B(k L(d))
    ef               inner="scaled_sign", **inner      the inner operator's bits (error feedback, stateful)

The theory check ``compression.bits.honest`` recomputes this table independently of the code.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any, Callable

from ..core import plugins
from .transform import Transform
from .wrappers import error_feedback

_OPERATORS: dict[str, Callable[..., Transform]] = {}


def register_operator(entry: Callable[..., Transform], name: str | None = None):
    """Register a transform class (``@register_operator``, under its ``name``) or a factory under ``name``, so
    that ``get(name, **params)`` builds it. Any module of ``algorithms/compress/`` may register one: ``get`` and
    ``names`` import them all first."""
    name = name or getattr(entry, "name", "")
    if not name:
        raise ValueError(f"{entry!r} has no name")
    old = _OPERATORS.get(name, entry)
    if old is not entry:
        raise ValueError(f"compression operator {name!r} is registered twice: by "
                         f"{plugins.module_origin(old.__module__)} and by {plugins.module_origin(entry.__module__)}; "
                         "give one of them another name")
    _OPERATORS[name] = entry
    return entry


_builtins_loaded = False  # listed once per process, as algorithms.core.registry.load_builtins


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{mod.name}")
    _builtins_loaded = True


def _load_all() -> None:
    """The operators of ``algorithms/compress/``, then the plugins' (entry points ``fedrepro.transforms``,
    ``$FEDREPRO_PLUGINS``: ``algorithms.core.plugins``)."""
    _load_builtins()
    plugins.load_installed("transforms")


def ef(inner: str | Transform = "scaled_sign", **inner_params: Any) -> error_feedback:
    """``ef``: error feedback (``wrappers.error_feedback``) around ``inner``, a registered operator's name with
    its parameters (``get("ef", inner="lfl", q=5)``) or a transform."""
    if isinstance(inner, str):
        inner = get(inner, **inner_params)
    elif inner_params:
        raise ValueError(f"ef: parameters {sorted(inner_params)} given with a transform; pass them to get() "
                         "of the inner operator")
    return error_feedback(inner)


register_operator(ef, "ef")
plugins.track("transforms", _OPERATORS, register_operator, _load_builtins)


def names() -> list[str]:
    """The registered operator names."""
    _load_all()
    return sorted(_OPERATORS)


def get(name: str, **params: Any) -> Transform:
    """Build operator ``name`` with ``params``; ValueError (naming the valid choices) otherwise."""
    _load_all()
    try:
        cls = _OPERATORS[name]
    except (KeyError, TypeError):
        import difflib

        close = difflib.get_close_matches(str(name), _OPERATORS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown compression operator {name!r}.{hint} Valid: {', '.join(names())}") from None
    sig = inspect.signature(cls).parameters.values()
    var = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    valid = [p.name for p in sig if p.name != "self" and p.kind not in var]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig)
    unknown = sorted(set(params) - set(valid))
    if unknown and not takes_any:
        raise ValueError(f"{name}: unknown parameter(s) {unknown}; valid parameters: "
                         f"{', '.join(valid) or 'none'}")
    return cls(**params)
