"""The algorithm registry's lookups: every algorithm by name, loaded on first use.

Algorithm modules register themselves with ``base.register`` when imported; the lookups here import them all
first (``_load_all``). Kept apart from ``base`` so that imports run one way: algorithm modules -> ``base``,
and ``registry`` -> ``_load_all`` -> algorithm modules.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import _REGISTRY, Algorithm, ParamLayout, make_hyper


def names() -> list[str]:
    from .. import _load_all  # noqa: F401  (imports every algorithm module)

    return sorted(_REGISTRY)


def get_class(name: str) -> type[Algorithm]:
    names()
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Known: {', '.join(sorted(_REGISTRY))}") from None


def make(name: str, layout: ParamLayout, num_clients: int, args: Mapping[str, Any] | None = None) -> Algorithm:
    cls = get_class(name)
    return cls(make_hyper(cls, args), layout, num_clients)
