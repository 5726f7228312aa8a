"""Claims of the user's own: a Python file that declares claims the way a paper module does (``bherd.py`` is the
shortest), so that ``fedrepro claims --claims FILE.py`` answers "does my method beat the baselines?" with the same
machinery as the papers' claims: the same tuning budget for every arm on a validation split, paired seeds in looks
until each claim is decided, the error control of ``tracker`` under that stopping, and the same report.

The file defines (names as in a paper module):

* ``PAPER``: a lowercase name of its own (not one of the five papers'), which labels its claims and its report
  folder; ``TITLE``: one line for the report's heading (default ``PAPER``);
* ``ARMS``: {name: ``arm(algorithm, name=..., **fixed args)``}, built-in or plugin algorithms (``--plugin``);
* ``CLAIMS``: a list of ``Claim`` (``paper=PAPER``), each a statement with its metric, its comparisons
  (``Comparison(a, b, "superior" | "noninferior", boundary, setting)``) and its smallest effect that matters
  (``Margin``), all fixed before any run; optionally what a paper reports for it, metrics shown ``beside`` the
  deciding one, why that metric, and the strongest objection (``Claim``'s docstring);
* ``BUDGET``: ``Budget(looks, cpu_minutes, reason)``;
* ``CPU`` (or ``SCALES``, the first running every claim): a ``CpuScale`` with the settings the comparisons name,
  one tuning grid per arm (the learning rate over the same values for every arm that tunes it), the validation
  split and the first look's seeds; its defaults tune on 3 seeds and extend a learning rate chosen at an end of its
  grid by x3 (``CpuScale.extend``).

``load(path)`` imports the file, checks it (every error names the file and what to fix) and registers it, so that
``theory.empirical.paper(PAPER)`` finds it. ``examples/my_claims.py`` is a complete one.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from algorithms.core import plugins

from .claim import Arm, Budget, Claim
from .scale import CpuScale

MODULES: dict[str, ModuleType] = {}  # PAPER -> the loaded claims file


class ClaimsFileError(ValueError):
    """A claims file that cannot be used, with the file named and what to fix."""


def load(path, builtin: tuple = ()) -> str:
    """Import the claims file ``path``, check it and register it under its ``PAPER``; return that name. Loading
    the same file again replaces it (a name another file took is an error). ``builtin``: the papers' names."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no claims file {path}: give the path of a .py file that declares PAPER, ARMS, "
                                "CLAIMS, BUDGET and CPU (examples/my_claims.py is one)")
    name = f"fedrepro_claims_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    import algorithms

    algorithms.names()  # the built-ins and installed plugins first: what the file adds is what it registered
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    before = plugins.snapshot()
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - any error in the user's file is reported with its line
        plugins.rollback(before)
        line = plugins.error_line(e, path)
        raise ClaimsFileError(f"claims file {path}{f' line {line}' if line else ''}: {type(e).__name__}: {e}") from e
    added = [f"{kind} ({', '.join(names)})" for kind, names in plugins.added(before).items() if names]
    if added:  # a worker process would not have them, and no record would say where they came from
        plugins.rollback(before)
        raise ClaimsFileError(f"claims file {path} registers {' and '.join(added)}: put them in a plugin file and pass "
                              "it with --plugin FILE (then worker processes load them too, and every record names "
                              "the file and its sha256)")
    problems = check(mod, builtin)
    if problems:
        raise ClaimsFileError(f"claims file {path}: " + "; ".join(problems))
    old = MODULES.get(mod.PAPER)
    if old is not None and Path(old.__file__).resolve() != path.resolve():
        raise ClaimsFileError(f"claims file {path}: PAPER {mod.PAPER!r} is already taken by {old.__file__}")
    if not hasattr(mod, "TITLE"):
        mod.TITLE = str(mod.PAPER)
    if not hasattr(mod, "CPU"):
        mod.CPU = mod.SCALES[0]  # the first scale runs every claim, as a paper module's CPU
    mod.__file__ = str(path)
    sys.modules[name] = mod
    MODULES[mod.PAPER] = mod
    return mod.PAPER


def provenance(paper: str) -> dict:
    """The loaded claims file of ``paper``: its path and the sha256 of its text (recorded in the report's meta)."""
    path = Path(MODULES[paper].__file__)
    return {"path": str(path.resolve()), "sha256": plugins.sha256_file(path)}


def check(mod, builtin: tuple = ()) -> list[str]:
    """What is wrong with claims module ``mod`` (empty: nothing): the names it must define, their types, and
    that every comparison names an arm of ``ARMS`` with a tuning grid and a setting of each scale that runs it."""
    import algorithms

    missing = [n for n in ("PAPER", "ARMS", "CLAIMS", "BUDGET") if not hasattr(mod, n)]
    if not hasattr(mod, "CPU") and not hasattr(mod, "SCALES"):
        missing.append("CPU (or SCALES)")
    if missing:
        return [f"it must define {', '.join(missing)} (see theory/empirical/own.py)"]
    out = []
    if not isinstance(mod.PAPER, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", mod.PAPER):
        out.append(f"PAPER must be a lowercase name (letters, digits, _), got {mod.PAPER!r}")
    elif mod.PAPER in builtin:
        out.append(f"PAPER {mod.PAPER!r} is one of the papers' names ({', '.join(builtin)}): choose another")
    if not isinstance(mod.BUDGET, Budget):
        out.append("BUDGET must be a theory.empirical.Budget(looks, cpu_minutes, reason)")
    if not isinstance(mod.ARMS, dict) or not all(isinstance(a, Arm) and a.name == k for k, a in mod.ARMS.items()):
        out.append("ARMS must be {name: arm(algorithm, name=name, ...)} with each key its arm's name")
        return out
    known = set(algorithms.names())
    for a in mod.ARMS.values():
        if a.algorithm not in known:
            out.append(f"arm {a.name!r}: unknown algorithm {a.algorithm!r} (an algorithm of your own needs --plugin "
                       "FILE; `fedrepro list algorithms` lists them)")
    claims = mod.CLAIMS
    if not isinstance(claims, (list, tuple)) or not claims or not all(isinstance(c, Claim) for c in claims):
        out.append("CLAIMS must be a non-empty list of theory.empirical.Claim")
        return out
    for c in claims:
        if c.paper != mod.PAPER:
            out.append(f"claim {c.id!r}: paper={c.paper!r}, not PAPER ({mod.PAPER!r})")
        for arm_name in sorted(c.arms):
            if arm_name not in mod.ARMS:
                out.append(f"claim {c.id!r} compares arm {arm_name!r}, which ARMS does not define "
                           f"(ARMS: {', '.join(sorted(mod.ARMS))})")
    if len({c.id for c in claims}) != len(claims):
        out.append("claim ids must be distinct")
    scales = tuple(getattr(mod, "SCALES", ())) or ((mod.CPU,) if hasattr(mod, "CPU") else ())
    if not scales:
        out.append("SCALES must hold at least one theory.empirical.CpuScale")
    for sc in scales:
        if not isinstance(sc, CpuScale):
            out.append("CPU (and each of SCALES) must be a theory.empirical.CpuScale")
            continue
        for c in claims:
            if sc.only and c.id not in sc.only:
                continue
            for comp in c.comparisons:
                if comp.setting not in sc.settings:
                    out.append(f"claim {c.id!r}: setting {comp.setting!r} is not one of scale {sc.name!r}'s "
                               f"settings ({', '.join(sorted(sc.settings))})")
                for arm_name in (comp.a, comp.b):
                    if arm_name in mod.ARMS and arm_name not in sc.grids:
                        out.append(f"scale {sc.name!r} has no tuning grid for arm {arm_name!r} (grids: "
                                   f"{', '.join(sorted(sc.grids))})")
    return sorted(set(out), key=out.index)


__all__ = ["MODULES", "ClaimsFileError", "check", "load", "provenance"]
