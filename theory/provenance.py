"""What the theory report depends on: the files hashed into ``report.json``'s ``code_hash``.

The committed report (``results/theory/<version>/report.json``) records a SHA-256 over these files, and
``tests/test_theory_report.py`` fails when they changed after the report was generated:

* every ``theory/**/*.py`` file (the claims, statistics, problems and run helpers);
* the ``algorithms/`` modules the claims use: the modules that define the algorithms the claims train
  (``CLAIM_ALGORITHMS``, by registry name), the ``algorithms`` modules that ``theory/`` imports directly
  (``from algorithms import compression``, ...), and, transitively, every ``algorithms`` module those
  import (their relative imports, e.g. ``gradma.py`` -> ``qp.py``, ``fedavgm.py``, ``base.py``).

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


def _algorithm_imports(path: Path) -> set[str]:
    """``algorithms`` modules (file stems) imported by a file: ``from algorithms[.x] import y``, ``import
    algorithms.x`` and, inside algorithms/, ``from .x import y`` / ``from . import x``."""
    out: set[str] = set()
    inside = path.parent.name == "algorithms"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 and inside:
                if mod:
                    out.add(mod.split(".")[0])
                else:
                    out.update(a.name for a in node.names)
            elif node.level == 0 and (mod == "algorithms" or mod.startswith("algorithms.")):
                if mod == "algorithms":
                    out.update(a.name for a in node.names)
                else:
                    out.add(mod.split(".")[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("algorithms."):
                    out.add(a.name.split(".")[1])
    return {m for m in out if (ROOT / "algorithms" / f"{m}.py").exists()}


def hashed_files() -> list[Path]:
    """The files of the module docstring, sorted by path relative to the repository root."""
    import algorithms

    theory = sorted((ROOT / "theory").rglob("*.py"))
    todo = {Path(algorithms.get_class(n).__module__.split(".")[-1]).name for n in CLAIM_ALGORITHMS}
    for f in theory:
        todo |= _algorithm_imports(f)
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo |= _algorithm_imports(ROOT / "algorithms" / f"{m}.py") - seen
    algs = sorted(ROOT / "algorithms" / f"{m}.py" for m in seen)
    return sorted(theory + algs, key=lambda p: p.relative_to(ROOT).as_posix())


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
