"""Empirical claims: each paper's headline experimental claims as statements that paired runs can support or
contradict (DESIGN.md, "Empirical claims"); ``fedrepro claims`` runs them and writes the report.

* ``claim``: arms, metrics, comparisons (margin, direction), claims; verdicts SUPPORTED / CONTRADICTED /
  INCONCLUSIVE.
* ``paired``: the paired test (``theory.stats``) and Holm's correction over a paper's claims.
* ``scale``: the CPU scale (the paper's regime, reduced and stated) and the full scale (the paper suites).
* ``run``: cells through the benchmark's runner and tuning protocol, then the verdicts.
* one module per paper (``fedbat``, ``gradma``, ``lfl``, ``fedswa``, ``bherd``): its ``CLAIMS``, ``ARMS``,
  ``CPU`` and ``FULL`` scales, and nothing else.
"""
from __future__ import annotations

import importlib

from .claim import CONTRADICTED, INCONCLUSIVE, SUPPORTED, VERDICTS, Arm, Claim, Comparison  # noqa: F401

PAPERS = ("bherd", "fedbat", "fedswa", "gradma", "lfl")


def paper(name: str):
    """The claims module of paper ``name``."""
    if name not in PAPERS:
        raise ValueError(f"unknown paper {name!r}; papers with empirical claims: {', '.join(PAPERS)}")
    return importlib.import_module(f"{__name__}.{name}")


def papers(name: str | None = None) -> list:
    """The paper modules to run: all, or one. A paper's claims are one family for the multiple-testing
    correction, so they always run together."""
    return [paper(n) for n in ([name] if name else PAPERS)]


def all_claims() -> list[Claim]:
    return [c for n in PAPERS for c in paper(n).CLAIMS]
