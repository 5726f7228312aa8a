"""What the theory report depends on: the files hashed into ``report.json``'s ``code_hash``.

The committed report (``results/theory/<version>/report.json``) records a SHA-256 over these files, and
``tests/test_theory_report.py`` fails when they changed after the report was generated:

* the ``theory/`` files the claims load: every ``theory/claims/**/*.py`` module and, transitively, every
  ``theory`` module those import (statistics, problems, run helpers, ``theory/__init__.py``). Not the
  empirical claims (``theory/empirical/``, with their own report and records) nor the paper pages
  (``theory/pages.py``), which no theory claim imports: a change there leaves every theory verdict as it was;
* the ``algorithms/`` modules the claims use: the modules that define the algorithms the claims train
  (``CLAIM_ALGORITHMS``, by registry name), the ``algorithms`` modules that ``theory/`` imports directly
  (``from algorithms import compress``, ...), and, transitively, every ``algorithms`` module those
  import (their relative imports, e.g. ``gradma.py`` -> ``core/qp.py``, ``core/base.py``).

Not hashed: ``benchmark/`` (the round loop and executors are held to their numbers by the
executor-equivalence, hand-computation and observer tests) and the other algorithms.
``theory.runs`` refuses to train an ``algorithms/`` algorithm that is not in ``CLAIM_ALGORITHMS``, so the
list cannot silently fall behind the claims.
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# registry names of the algorithms the claims train
CLAIM_ALGORITHMS = ("bherd", "fedavg", "fedbat", "fedmoswa", "fedswa", "gradma", "gradma_s", "gradma_w", "lfl",
                    "lossless", "scaffold")


PACKAGES = ("algorithms", "theory")


def _module_file(dotted: str) -> Path | None:
    """The file of an ``algorithms`` or ``theory`` module or package (``algorithms.core.qp`` ->
    algorithms/core/qp.py), or None."""
    if dotted.split(".")[0] not in PACKAGES:
        return None
    p = ROOT.joinpath(*dotted.split("."))
    for f in (p.with_suffix(".py"), p / "__init__.py"):
        if f.exists():
            return f
    return None


def _imports(path: Path) -> set[Path]:
    """``algorithms`` and ``theory`` files imported by a file (at any depth of its code): ``from pkg[.x] import
    y`` (y's own file when y is a module, else x's), ``import pkg.x`` and the relative imports. The packages'
    ``__init__.py`` files are left to :func:`hashed_files`."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = list(parts[:-1])
    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            subs = {_module_file(f"{mod}.{a.name}") for a in node.names} - {None}
            out |= subs or ({_module_file(mod)} - {None})
        elif isinstance(node, ast.Import):
            out |= {_module_file(a.name) for a in node.names} - {None}
    return out - {ROOT / pkg / "__init__.py" for pkg in PACKAGES}


def hashed_files() -> list[Path]:
    """The files of the module docstring, sorted by path relative to the repository root."""
    import algorithms

    todo = set((ROOT / "theory" / "claims").rglob("*.py")) | {ROOT / "theory" / "__init__.py"}
    todo |= {_module_file(algorithms.get_class(n).__module__) for n in CLAIM_ALGORITHMS}
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo |= _imports(f) - seen
        init = f.parent / "__init__.py"  # a submodule's import runs its package's __init__ first
        if init.exists() and init != ROOT / "algorithms" / "__init__.py":
            todo.add(init)
    return sorted(seen, key=lambda p: p.relative_to(ROOT).as_posix())


def file_hashes() -> dict[str, str]:
    """{relative path: SHA-256 of its bytes} for :func:`hashed_files`."""
    return {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in hashed_files()}


def code_hash(files: dict[str, str] | None = None) -> str:
    """One SHA-256 over the sorted (path, file hash) pairs."""
    files = file_hashes() if files is None else files
    h = hashlib.sha256()
    for path, digest in sorted(files.items()):
        h.update(f"{path}\0{digest}\n".encode())
    return h.hexdigest()


def check_algorithm(name: str) -> None:
    """ValueError when a claim trains an ``algorithms/`` algorithm missing from ``CLAIM_ALGORITHMS`` (its code
    would not be hashed). Algorithms defined elsewhere (tests' planted defects) are allowed."""
    import algorithms

    cls = algorithms.get_class(name)
    if cls.__module__.startswith("algorithms.") and name not in CLAIM_ALGORITHMS:
        raise ValueError(f"the claims train {name!r}, which is not in theory.provenance.CLAIM_ALGORITHMS: add it, "
                         "so that the theory report's code hash covers its module")
