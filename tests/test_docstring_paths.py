"""Docstring paths follow the code (issue 46): every dotted path into ``algorithms`` or ``benchmark`` (a module,
``module.attribute``, ...) named in a docstring or a comment of the project, or in any string of the packages
(messages, evidence texts, ``python -c`` code), imports and resolves its attribute (a class's dataclass field
counts), so that a module moved or a function renamed cannot leave its old name behind in the prose that points
to it. The checker is shown to catch a planted stale path."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("algorithms", "benchmark", "theory", "tests")
#: strings are checked too, except in the tests (planted trees name made-up modules) and the asv benchmarks
#: (they import the modules of older commits too, by their old names, for the asv history)
STRINGS_UNCHECKED = ("tests/", "benchmark/asv/benchmarks.py")
PATH = re.compile(r"(?<![\w./-])((?:algorithms|benchmark)(?:\.[A-Za-z_]\w*)+)")


def prose(source: str, strings: bool = False) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module (``strings``: of every string constant)."""
    out = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
        elif not strings and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                out.append((node.body[0].lineno, doc))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


def resolves(path: str) -> bool:
    """``path`` is a module of this checkout, or a module's attribute (and an attribute of that, ...). A module
    found elsewhere (an editable install of another checkout fills in modules this one lacks) does not count."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        if not Path(obj.__file__).resolve().is_relative_to(ROOT):
            return False
        for name in parts[i:]:
            if hasattr(obj, name):
                obj = getattr(obj, name)
            elif dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)}:
                return True  # a field without a default: no class attribute, but named rightly
            else:
                return False
        return True
    return False


def stale_paths(root: Path) -> list[str]:
    """``file:line path`` for every dotted path in a docstring or comment that does not resolve."""
    found = []
    for top in SCANNED:
        for p in sorted((root / top).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            for line, text in prose(p.read_text(), strings=not rel.startswith(STRINGS_UNCHECKED)):
                for m in PATH.finditer(text):
                    if not resolves(m.group(1)):
                        found.append(f"{rel}:{line + text[:m.start()].count(chr(10))} {m.group(1)}")
    return sorted(set(found), key=lambda f: (f.split(":")[0], int(f.split(":")[1].split()[0]), f))


def test_every_dotted_path_in_docstrings_and_comments_resolves():
    assert stale_paths(ROOT) == []


def test_the_checker_catches_a_planted_stale_path(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "m.py").write_text(
        '"""Runs through benchmark.runs.plan.run and benchmark.sim.engine.LoopConfig.rounds (a field),\n'
        'not benchmark.plan.run (moved) nor algorithms.qp (now algorithms.core.qp)."""\n'
        "x = 1  # see benchmark.runs.build.prepare and benchmark.runs.cost.choose_executor (renamed)\n"
        "CODE = 'from benchmark.memory import _child'  # a string: python -c code\n")
    assert stale_paths(tmp_path) == ["benchmark/m.py:2 algorithms.qp", "benchmark/m.py:2 benchmark.plan.run",
                                     "benchmark/m.py:3 benchmark.runs.cost.choose_executor",
                                     "benchmark/m.py:4 benchmark.memory"]
