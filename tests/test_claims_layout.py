"""The layout of theory/claims (issue 16): a claims module holds its paper's claims, short; shared machinery
(drivers, evidence and verdict helpers, problems, Monte-Carlo estimators) lives in theory/ modules of its own."""
from __future__ import annotations

import ast
import pathlib

import pytest

CLAIMS = pathlib.Path(__file__).resolve().parents[1] / "theory" / "claims"
MAX_LINES = 500


def _modules():
    return sorted(CLAIMS.rglob("*.py"))


def _paper(path: pathlib.Path) -> str:
    """The paper a claims module belongs to: ``<paper>.py`` or ``<paper>/<section>.py``."""
    rel = path.relative_to(CLAIMS)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(CLAIMS).as_posix())
def test_no_claims_module_is_over_500_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, (f"{path.relative_to(CLAIMS.parents[1])} has {n} lines (limit {MAX_LINES}): move shared "
                            "machinery to a theory/ module, or split the paper's claims by section "
                            "(theory/claims/<paper>/<section>.py)")


@pytest.mark.parametrize("path", [p for p in _modules() if p.name != "__init__.py" or p.parent != CLAIMS],
                         ids=lambda p: p.relative_to(CLAIMS).as_posix())
def test_a_claims_module_imports_no_other_papers_claims(path):
    """Shared code is imported from theory/ modules, never from another paper's claims module."""
    own = _paper(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("theory.claims."):
            other = node.module.split(".")[2]
            assert other == own, f"{path.relative_to(CLAIMS)} imports from theory.claims.{other}"
