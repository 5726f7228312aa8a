"""Algorithms and compression transforms from outside the package: plugins (README, "Add your own algorithm").

A plugin is Python code that registers algorithms (``registry.register``) or compression transforms
(``compress.register_operator``) when it is imported:

* a file, ``load("my_alg.py")`` (``fedrepro ... --plugin my_alg.py``, a suite's ``plugins = [...]``);
* an importable module, ``load("mypkg.algs")``;
* an installed distribution's entry point in the group ``fedrepro.algorithms`` (or ``fedrepro.transforms``),
  naming a module (importing it registers) or an Algorithm class / ``Configuration`` / ``Transform`` class
  (registered under its ``name``). The lookups (``registry.load_all``, ``compress.names``) load them.

Plugins loaded by ``load`` are added to ``$FEDREPRO_PLUGINS`` (os.pathsep-separated, files as absolute paths),
which the lookups also load: worker processes (``--backend process``, a local Ray) load the same plugins as
the process that started them. Set it yourself to load plugins into any command.

Every plugin keeps its provenance (``Plugin.provenance``): its origin (the file; or the module, with its
distribution's name and version and the entry point), the sha256 of its source (of the file's bytes exactly as
executed, so ``sha256sum my_alg.py`` gives the same; of a module's file; of every ``.py`` file of a package)
and the names it registered. A plugin that registers a name already taken (a built-in's, another plugin's) or
fails to import raises ``PluginError`` naming the file (or module, or entry point) and why; the names it
registered before failing are removed again.

Loading a file again after it changed (same path, other sha256) replaces its registrations (an edited plugin in
a long-lived session); the experiments of its algorithms then have another config hash
(``source_sha256`` enters ``Experiment.config``), so a resumed suite runs them again.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import importlib.metadata
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ENV = "FEDREPRO_PLUGINS"
GROUPS = {"algorithms": "fedrepro.algorithms", "transforms": "fedrepro.transforms"}


class PluginError(ValueError):
    """A plugin that cannot be found, fails to import, or registers a name already taken."""


@dataclass
class _Tracked:
    """A registry that plugins add to: its entries by name, how to register an object found by an entry point,
    and how to import its built-ins first."""

    entries: dict
    add: Callable[[Any], Any]  # the registry's register function
    load_builtins: Callable[[], None]


_TRACKED: dict[str, _Tracked] = {}  # "algorithms" / "transforms" -> its registry


def track(kind: str, entries: dict, add: Callable[[Any], Any], load_builtins: Callable[[], None]) -> None:
    """Called by a registry when it is imported (``registry``, ``compress.registry``): its entries, its register
    function and its loader of built-ins."""
    _TRACKED[kind] = _Tracked(entries, add, load_builtins)


@dataclass
class Plugin:
    key: str  # an absolute file path, a module name, or "entry point <group>:<name>"
    origin: dict  # {"file": ...} | {"module": ...} | {"entry_point": ..., "distribution": ..., "version": ...}
    sha256: str
    module: str  # its name in sys.modules
    names: dict = field(default_factory=dict)  # kind -> the names it registered

    def provenance(self) -> dict:
        return {**self.origin, "sha256": self.sha256, **{k: v for k, v in self.names.items() if v}}

    def describe(self) -> str:
        o = self.origin
        if "entry_point" in o:
            return f"entry point {o['entry_point']} of {o['distribution']} {o['version']}"
        return f"file {o['file']}" if "file" in o else f"module {o['module']} ({o.get('path', '?')})"


_PLUGINS: dict[str, Plugin] = {}  # key -> the plugin loaded under it
_LOADING: set[str] = set()
_ENTRY_POINTS_DONE: set[str] = set()
_ENV_SEEN: list[str | None] = [None]


def loaded() -> list[Plugin]:
    """The plugins loaded in this process, in load order."""
    return list(_PLUGINS.values())


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sha256_module(mod: ModuleType) -> tuple[str, str]:
    """The sha256 of a module's source and the path it covers: a package's every .py file (relative names and
    bytes), a module's file."""
    if hasattr(mod, "__path__"):
        roots = [Path(p) for p in mod.__path__]
        h = hashlib.sha256()
        for root in roots:
            for f in sorted(root.rglob("*.py")):
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        return h.hexdigest(), os.pathsep.join(map(str, roots))
    path = getattr(mod, "__file__", None)
    if not path or not os.path.isfile(path):
        return "", "(no source file)"
    return sha256_file(Path(path)), path


def is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec


def _builtins_first() -> None:
    """Import the built-ins of every registry first: a plugin's names are what its import adds, and a name it
    takes from a built-in is an error now, not when the built-in is imported later."""
    _TRACKED["algorithms"].load_builtins()  # the algorithm modules import compress: its registry is tracked then
    for t in list(_TRACKED.values()):
        t.load_builtins()


def snapshot() -> dict[str, set]:
    """The names every tracked registry holds now: compare with ``added`` after code that may register."""
    return {k: set(t.entries) for k, t in _TRACKED.items()}


def added(before: dict[str, set]) -> dict[str, list]:
    """What each registry gained since ``snapshot()`` returned ``before``: {kind: sorted names}."""
    return {k: sorted(set(t.entries) - before.get(k, set())) for k, t in _TRACKED.items()}


def rollback(before: dict[str, set], module: str | None = None) -> None:
    """Remove what the registries gained since ``before`` (and the module ``module`` from sys.modules): code
    that failed, or was not allowed to register, leaves no stray names behind."""
    for kind, names in added(before).items():
        for n in names:
            _TRACKED[kind].entries.pop(n, None)
    if module:
        sys.modules.pop(module, None)


def error_line(e: BaseException, filename: str | os.PathLike | None) -> int | None:
    """The line of the deepest frame of file ``filename`` in ``e``'s traceback (None: the file has none)."""
    if filename is None:
        return None
    target = os.path.realpath(filename)
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if os.path.realpath(f.filename) == target]
    return lines[-1] if lines else None


def _where(e: BaseException, filename: str | None) -> str:
    """' (line N)' of the deepest frame of the plugin's own file in the traceback, if any."""
    line = error_line(e, filename)
    return f" (line {line})" if line else ""


_MODULE_FILES: dict[str, str] = {}  # the module name of a file plugin -> its path


def module_origin(module: str) -> str:
    """Who a module is, in words, for errors: a built-in module, a plugin file, a plugin module."""
    if module == "algorithms" or module.startswith("algorithms."):
        return f"the built-in {module}"
    if module in _MODULE_FILES:
        return f"plugin file {_MODULE_FILES[module]}"
    return f"module {module}"


def _import_file(path: Path, source: bytes) -> str:
    name = f"fedrepro_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    _MODULE_FILES[name] = str(path)
    mod = ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # dataclasses and the listing read it while it runs
    exec(compile(source, str(path), "exec"), mod.__dict__)  # noqa: S102 - the plugin the user named
    return name


def _missing_file(spec: str, path: Path) -> PluginError:
    near = sorted(p.name for p in path.parent.glob("*.py")) if path.parent.is_dir() else []
    close = difflib.get_close_matches(path.name, near, n=3)
    hint = f" Did you mean {', '.join(close)} (in {path.parent})?" if close else ""
    return PluginError(f"plugin file {spec!r} not found (looked for {path}).{hint} A plugin is the path of a .py "
                       "file or an importable module name such as mypkg.algorithms")


def load(spec: str, base: str | os.PathLike | None = None, propagate: bool = True) -> Plugin:
    """Load the plugin ``spec``: a .py file (relative to ``base``, default the working directory) or a module
    name. Idempotent; a file that changed since it was loaded is loaded again. ``propagate``: add it to
    ``$FEDREPRO_PLUGINS`` (worker processes load it too)."""
    spec = str(spec).strip()
    if not spec:
        raise PluginError("empty plugin name: give the path of a .py file or a module name")
    if is_file_spec(spec):
        path = (Path(base or os.getcwd()) / os.path.expanduser(spec)).resolve()
        if not path.is_file():
            raise _missing_file(spec, path)
        key, source = str(path), path.read_bytes()
        sha = hashlib.sha256(source).hexdigest()
    else:
        key, path, source, sha = spec, None, None, None
    old = _PLUGINS.get(key)
    if old is not None and (sha is None or old.sha256 == sha) or key in _LOADING:
        return _PLUGINS.get(key)
    _builtins_first()
    if old is not None:  # the file changed: its new version replaces the old registrations
        unload(old)
    _LOADING.add(key)
    before, module = snapshot(), None
    try:
        if path is not None:
            module = _import_file(path, source)
            origin = {"file": str(path)}
        else:
            plugin_mod = _import_module(spec)
            module = plugin_mod.__name__
            sha, where = sha256_module(plugin_mod)
            origin = {"module": spec, "path": where}
    except PluginError:
        rollback(before, module)
        raise
    except BaseException as e:  # noqa: BLE001 - any error of the plugin's code is reported as the plugin's
        rollback(before, module if path is not None else None)
        what = f"plugin file {path}" if path is not None else f"plugin module {spec!r}"
        raise PluginError(f"{what} failed to import{_where(e, str(path) if path else None)}: "
                          f"{type(e).__name__}: {e}") from e
    finally:
        _LOADING.discard(key)
    what = f"plugin file {path}" if path is not None else f"plugin module {spec!r}"
    try:
        check_registered(what, added(before), module)
    except PluginError:
        rollback(before, module if path is not None else None)
        raise
    plugin = Plugin(key, origin, sha, module, added(before))
    _PLUGINS[key] = plugin
    if propagate:
        _propagate(key)
    return plugin


NAME = re.compile(r"[a-z][a-z0-9_]*")  # registry names: the papers' names in lowercase, ``_`` for variants


def check_registered(what: str, names: dict[str, list], module: str | None) -> None:
    """What a plugin registered, checked when it loads (not when a run first uses it): at least one algorithm or
    transform (a file that registers nothing was named by mistake, or forgot ``@register``); lowercase registry
    names (DESIGN.md, "Names"); and every field its algorithms' server optimizers read (``optim.ServerSGD`` reads
    ``eta_g``) declared in their ``Hyper``."""
    if not any(names.values()):
        if module and any(getattr(e, "__module__", "") == module for t in _TRACKED.values()
                          for e in t.entries.values()):
            return  # a module imported before (an entry point's): its names are registered already
        raise PluginError(f"{what} registers nothing: decorate its Algorithm subclass with @register (from algorithms "
                          "import register) or its Transform with @register_operator, and give it a new name")
    for kind, added_names in names.items():
        for n in added_names:
            if not NAME.fullmatch(n):
                raise PluginError(f"{what} registers the {kind[:-1]} {n!r}: registry names are lowercase letters, "
                                  f"digits and _ (e.g. {re.sub(r'[^a-z0-9_]', '_', n.lower())!r}); rename it")
    for n in names.get("algorithms", []):
        cls = _TRACKED["algorithms"].entries[n]
        opt = getattr(cls, "server_optimizer", None)
        needed = [f.name for f in dataclasses.fields(opt)] if dataclasses.is_dataclass(opt) else []
        have = {f.name for f in dataclasses.fields(cls.Hyper)} if dataclasses.is_dataclass(cls.Hyper) else set()
        missing = [f for f in needed if f not in have]
        if missing:
            raise PluginError(f"{what}: algorithm {n!r} steps with server_optimizer = {opt.__name__}, which reads "
                              f"{', '.join(missing)} from the hyperparameters, but its Hyper has no such field: add "
                              f"{' and '.join(missing)} to Hyper (e.g. eta_g: float = param(1.0, POSITIVE)), or set "
                              "server_optimizer = None and write the server step")


def _import_module(spec: str) -> ModuleType:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name and spec.startswith(e.name):
            raise PluginError(f"no plugin module {spec!r} (nothing of that name is importable here; a plugin file "
                              "must be given as a path ending in .py)") from None
        raise


def unload(plugin: Plugin) -> None:
    """Remove a plugin's registrations and module (tests; a changed file's reload)."""
    for kind, names in plugin.names.items():
        for n in names:
            _TRACKED[kind].entries.pop(n, None)
    if "file" in plugin.origin:
        sys.modules.pop(plugin.module, None)
    _PLUGINS.pop(plugin.key, None)


def _propagate(key: str) -> None:
    have = [s for s in os.environ.get(ENV, "").split(os.pathsep) if s]
    if key not in have:
        os.environ[ENV] = os.pathsep.join(have + [key])
    _ENV_SEEN[0] = os.environ[ENV]


def load_environment() -> None:
    """Load the plugins named in ``$FEDREPRO_PLUGINS`` (each once)."""
    value = os.environ.get(ENV, "")
    if value == _ENV_SEEN[0]:
        return
    for spec in [s for s in value.split(os.pathsep) if s.strip()]:
        if spec not in _PLUGINS and spec not in _LOADING:
            try:
                load(spec, propagate=False)
            except PluginError as e:
                raise PluginError(f"${ENV}: {e}") from None
    _ENV_SEEN[0] = value


def load_entry_points(kind: str) -> None:
    """Load the installed distributions' entry points of ``kind``'s group (each once per process)."""
    group = GROUPS[kind]
    if group in _ENTRY_POINTS_DONE:
        return
    _ENTRY_POINTS_DONE.add(group)  # first: an entry point's module may look names up while it loads
    try:
        for ep in importlib.metadata.entry_points(group=group):
            _load_entry_point(ep, kind)
    except BaseException:
        _ENTRY_POINTS_DONE.discard(group)  # raised again at the next lookup, never skipped silently
        raise


def _load_entry_point(ep, kind: str) -> Plugin:
    key = f"entry point {ep.group}:{ep.name}"
    if key in _PLUGINS:
        return _PLUGINS[key]
    dist = getattr(ep, "dist", None)
    origin = {"entry_point": f"{ep.group}:{ep.name} = {ep.value}",
              "distribution": getattr(dist, "name", None) or "?", "version": getattr(dist, "version", None) or "?"}
    _builtins_first()
    before = snapshot()
    try:
        obj = ep.load()
        if not isinstance(obj, ModuleType) and getattr(obj, "name", None) not in _TRACKED[kind].entries:
            _TRACKED[kind].add(obj)
    except BaseException as e:  # noqa: BLE001
        rollback(before, None)
        raise PluginError(f"plugin entry point {origin['entry_point']!r} of {origin['distribution']} "
                          f"{origin['version']} failed to load: {type(e).__name__}: {e}") from e
    sha, where = sha256_module(sys.modules[ep.module])
    plugin = Plugin(key, {**origin, "path": where}, sha, ep.module, added(before))
    _PLUGINS[key] = plugin
    return plugin


def load_installed(kind: str = "algorithms") -> None:
    """What every lookup loads: the entry points of ``kind`` and ``$FEDREPRO_PLUGINS``."""
    load_entry_points(kind)
    load_environment()


def plugin_of(kind: str, name: str) -> Plugin | None:
    for p in _PLUGINS.values():
        if name in p.names.get(kind, ()):
            return p
    return None


def algorithm_provenance(name: str) -> dict | None:
    """Where the algorithm registered as ``name`` comes from, when not from ``algorithms/``: its plugin's
    provenance, or (registered by other code, e.g. a script) its module's file and sha256. None for a built-in
    or an unknown name."""
    algs = _TRACKED["algorithms"]
    if name not in algs.entries:  # not looked up yet (a fresh worker): what a lookup would load, first
        algs.load_builtins()
        load_installed("algorithms")
    p = plugin_of("algorithms", name)
    if p is not None:
        return p.provenance()
    entry = algs.entries.get(name)
    module = getattr(entry, "__module__", "") or ""
    if entry is None or module == "algorithms" or module.startswith("algorithms."):
        return None
    mod = sys.modules.get(module)
    sha, where = sha256_module(mod) if mod is not None else ("", "(not imported)")
    return {"module": module, "path": where, "sha256": sha, "algorithms": [name]}


def source_sha256(name: str) -> str | None:
    """The sha256 of the source of a non-built-in algorithm ``name`` (None for a built-in or unknown one)."""
    p = algorithm_provenance(name)
    return (p or {}).get("sha256") or None
