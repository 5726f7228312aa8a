"""``--plugin FILE.py|MODULE`` on every command, and the plugins in ``fedrepro list``.

The flag is added to every subcommand by ``main`` (an algorithm or operator name from a plugin is then
accepted wherever a name is: ``--algorithm``, ``--arg``, suites, ``validate --algorithms``, ``tune``); the
plugins are loaded before the command runs (``algorithms.core.plugins.load``), so a plugin that cannot be
loaded is reported as a bad input, naming the file and the error."""
from __future__ import annotations

import functools
import sys

HELP = ("load algorithms / compression transforms from a plugin: a .py file or an importable module "
        "(repeatable; README, 'Add your own algorithm')")


def add_flag(p) -> None:
    p.add_argument("--plugin", action="append", metavar="FILE.py|MODULE", help=HELP)


def loading(func):
    """``func`` (a command) that first loads the plugins of ``--plugin``."""

    @functools.wraps(func)
    def command(a):
        from algorithms.core import plugins

        for spec in getattr(a, "plugin", None) or []:
            p = plugins.load(spec)
            names = ", ".join(n for kind in p.names.values() for n in kind) or "nothing"
            print(f"fedrepro: plugin {p.describe()} (sha256 {p.sha256[:16]}) registers {names}", file=sys.stderr)
        return func(a)

    return command


def is_plugin(name: str) -> bool:
    import algorithms
    from algorithms.core import registry

    algorithms.names()
    return not registry.builtin(name)


def table() -> str:
    """The plugin algorithms and transforms, with their origin and source hash ('' when none is loaded)."""
    from tabulate import tabulate

    import algorithms
    from algorithms.core import plugins

    rows = []
    for name in algorithms.names():
        prov = plugins.algorithm_provenance(name)
        if prov is not None:
            rows.append(["algorithm", name, _origin(prov), (prov.get("sha256") or "?")[:16]])
    for p in plugins.loaded():
        for name in p.names.get("transforms", []):
            rows.append(["transform", name, _origin(p.provenance()), p.sha256[:16]])
    if not rows:
        return ""
    return "Plugins (not part of fedrepro)\n" + tabulate(
        rows, headers=["kind", "name", "origin", "sha256 (first 16)"], tablefmt="github") + "\n"


def _origin(prov: dict) -> str:
    if "entry_point" in prov:
        return f"{prov['distribution']} {prov['version']} (entry point {prov['entry_point']})"
    return prov.get("file") or f"module {prov.get('module')}"
