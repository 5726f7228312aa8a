"""The algorithm registry: every algorithm by its registry name, found by its folder.

An algorithm module registers what it defines when it is imported: a class with ``@register``, a variant
that differs only in its parameters with ``register(configure(...))`` (or ``with_server_momentum``). The
lookups (``names``, ``get_class``, ``make``) first import every module of ``algorithms/`` (``load_all``):
each top-level module there is an algorithm module, the infrastructure lives in the sub-packages ``core/``
and ``compress/`` (``tests/test_layout.py`` holds every module to that rule), so there is no list to keep.

Variants are configurations, not subclasses. A ``Configuration`` is an algorithm class under another name
with its own ``Hyper`` (other defaults, or extra fields) and, where it says so, another server optimizer
(``optim``): FedAvgM is FedAvg with ``optim.ServerMomentum`` (GradMA paper, Sec. 6.1, the "slow-momentum
variants"), ``bherd_random`` is BHerd with ``selection="random"``, GradMA-W is GradMA with its server memory
and momentum fixed off (``fixed``: not exposed as hyperparameters).
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import hyper, optim, plugins
from .base import Algorithm
from .layout import ParamLayout

_REGISTRY: dict[str, Any] = {}  # name -> an Algorithm subclass or a Configuration of one
_ALGORITHMS = Path(__file__).resolve().parents[1]


class Configuration:
    """``algorithm`` registered as ``name`` with the hyperparameters ``Hyper`` and, when given, the server
    optimizer ``server_optimizer`` in place of the class's own.

    It stands where ``get_class`` returns classes: it has ``name``, ``Hyper``, ``__module__`` (the module that
    registers it) and reads the algorithm class's other attributes (``vectorizable``, ...); calling it with
    ``(hp, layout, num_clients)`` builds the algorithm, whose ``name`` and ``server_optimizer`` are the
    configuration's. Nothing of the algorithm's code is replaced."""

    def __init__(self, algorithm: type[Algorithm], name: str, Hyper: type, server_optimizer: type | None = None,
                 doc: str = "", module: str | None = None):
        if not (isinstance(algorithm, type) and issubclass(algorithm, Algorithm)):
            raise TypeError(f"configure: {algorithm!r} is not an Algorithm class (configure the class itself)")
        self.algorithm, self.name, self.Hyper = algorithm, name, Hyper
        self.server_optimizer = algorithm.server_optimizer if server_optimizer is None else server_optimizer
        self.__doc__ = doc
        self.__module__ = module or algorithm.__module__

    def __call__(self, hp: Any, layout: ParamLayout, num_clients: int) -> Algorithm:
        alg = self.algorithm.__new__(self.algorithm)
        alg.name, alg.server_optimizer = self.name, self.server_optimizer  # read by __init__ already
        alg.__init__(hp, layout, num_clients)
        alg.check_optimizer = self.check_optimizer  # a refusal names the configuration, not its class
        return alg

    def check_optimizer(self, hp: Any, optimizer: Any) -> None:
        """The algorithm's ``check_optimizer`` with this configuration as ``cls`` (its refusals say ``name``)."""
        self.algorithm.check_optimizer.__func__(self, hp, optimizer)

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return getattr(self.algorithm, item)

    def __repr__(self) -> str:
        return f"<configuration {self.name!r} of {self.algorithm.__name__}>"


def _caller_module(depth: int) -> str:
    return sys._getframe(depth + 1).f_globals.get("__name__", "")


def configure(algorithm: type[Algorithm], name: str, doc: str = "", *, server_optimizer: type | None = None,
              fields: tuple = (), fixed: Mapping[str, Any] | None = None, **defaults: Any) -> Configuration:
    """``algorithm`` as ``name`` with other hyperparameter ``defaults`` (each keeps its declared constraint),
    extra ``fields`` (``(name, type, hyper.param(default, constraint), before)``, ``before`` a field name or
    None for the end), ``fixed`` values (hyperparameters, or class constants of ``algorithm.Hyper``, that the
    configuration sets and does not expose: GradMA-W is GradMA with ``m = 0`` and ``beta1 = 0`` fixed) and,
    when given, ``server_optimizer``. ``register`` the result."""
    Hyper = hyper.derive(algorithm.Hyper, defaults, fields, qualname=f"{name}.Hyper", fixed=fixed)
    return Configuration(algorithm, name, Hyper, server_optimizer, doc, _caller_module(1))


def with_server_momentum(algorithm: type[Algorithm], name: str, beta1: float = 0.9, doc: str = "",
                         fields: tuple = ()) -> Configuration:
    """``algorithm`` with the server momentum optimizer (``optim.ServerMomentum``) in place of its plain server
    step (``optim.ServerSGD``), registered as ``name``: the GradMA paper's "slow-momentum variants" (Sec. 6.1;
    App. Alg. 5-6: FedAvgM, FedProxM, MIFAM; MOONM, FedMLBM).

    The local rule, uplink and aggregation are ``algorithm``'s; the hyperparameters gain ``beta1`` (default 0.9,
    Hsu et al.'s value and the top of GradMA's grid {0.1, 0.5, 0.9}) before ``eta_g`` (and ``fields``), and the
    server state gains ``momentum``."""
    if algorithm.server_optimizer is not optim.ServerSGD:
        raise TypeError(f"with_server_momentum: {algorithm.__name__} must step with optim.ServerSGD, "
                        f"not {algorithm.server_optimizer}")
    beta = ("beta1", float, hyper.param(beta1, hyper.MOMENTUM), "eta_g")
    Hyper = hyper.derive(algorithm.Hyper, {}, (beta, *fields), qualname=f"{name}.Hyper")
    doc = doc or f"{algorithm.__name__} with server momentum (``with_server_momentum``): {name}."
    return Configuration(algorithm, name, Hyper, optim.ServerMomentum, doc, _caller_module(1))


def register(entry):
    """Register an Algorithm subclass (``@register``) or a ``Configuration`` under its ``name``; returns it."""
    if not entry.name:
        raise ValueError(f"{entry!r} has no name")
    old = _REGISTRY.get(entry.name)
    if old is not None and old is not entry:
        raise ValueError(f"algorithm {entry.name!r} is registered twice: by "
                         f"{plugins.module_origin(old.__module__)} and by {plugins.module_origin(entry.__module__)}; "
                         "give one of them another name")
    _REGISTRY[entry.name] = entry
    return entry


_builtins_loaded = False  # the folder is listed once per process: every lookup calls load_builtins


def load_builtins() -> None:
    """Import every module of ``algorithms/`` (each registers its algorithms); the sub-packages are not
    algorithms. The folder is listed on the first call only (listing it costs ~0.85 ms, and a run looks names
    up several times); a module whose import failed leaves the flag unset, so the next lookup raises again."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    for mod in pkgutil.iter_modules([str(_ALGORITHMS)]):
        if not mod.ispkg:
            importlib.import_module(f"algorithms.{mod.name}")
    _builtins_loaded = True


def load_all() -> None:
    """The built-in algorithms, then the plugins: installed entry points (``fedrepro.algorithms``) and
    ``$FEDREPRO_PLUGINS`` (``plugins``)."""
    load_builtins()
    plugins.load_installed("algorithms")


def builtin(name: str) -> bool:
    """Whether ``name`` is registered by a module of ``algorithms/`` (not by a plugin or other code)."""
    module = getattr(_REGISTRY.get(name), "__module__", "") or ""
    return module.startswith("algorithms.")


def names() -> list[str]:
    load_all()
    return sorted(_REGISTRY)


def get_class(name: str):
    """The Algorithm class (or ``Configuration``) registered as ``name``."""
    names()
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Known: {', '.join(sorted(_REGISTRY))} (one of your own: "
                         "load its file with --plugin FILE.py)") from None


plugins.track("algorithms", _REGISTRY, register, load_builtins)


def make_hyper(cls, args: Mapping[str, Any] | None) -> Any:
    """The frozen hyperparameter dataclass from ``args`` (command-line strings converted), every field
    checked against its declared constraint (``algorithms.core.hyper.build``): a ``ValueError`` for an unknown
    key, and a ``hyper.HyperparameterError`` ("fedprox: mu must be >= 0 and finite, got 'abc'") for a
    value that does not convert or lies outside its constraint."""
    return hyper.build(cls.name, cls.Hyper, dict(args or {}))


def make(name: str, layout: ParamLayout, num_clients: int, args: Mapping[str, Any] | None = None) -> Algorithm:
    cls = get_class(name)
    return cls(make_hyper(cls, args), layout, num_clients)
