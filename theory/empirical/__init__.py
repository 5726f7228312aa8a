"""Empirical claims: each paper's headline experimental claims as statements that paired runs can support or
contradict (DESIGN.md, "Empirical claims"); ``fedrepro claims`` runs them and writes the report.

* ``claim``: arms, metrics, comparisons (boundary, direction), claims with their smallest effect that matters
  (``Margin``), each paper's ``Budget``; verdicts SUPPORTED / CONTRADICTED / NEGLIGIBLE / INCONCLUSIVE.
* ``paired``: per-seed values of paired runs, the pairing checks, Holm's adjustment.
* ``tracker``: the look-by-look decisions with error rates that hold under optional stopping
  (``theory.stats.sequential``), Holm over a paper's claims at one scale and stage; ``judge``: from records to the
  report's view; ``family``: one error family per paper, its alpha split in advance over its scales and stages,
  and the sentences that state it; ``fields``: one spelling per report field (older names mapped).
* ``scale``: the CPU scale (the paper's regime, reduced and stated) and the full scale (the paper suites).
* ``run``: tuning (every arm by ``benchmark.campaign.tuning``'s rule, scored by its claims' own metric) and the looks of
  final seeds through the benchmark's runner (resumable), then the verdicts.
* ``report``: the claims report (markdown, report.json, one plot per claim); ``report_protocol``: its 0.4.0
  tuning tables (every point's spread over the tuning seeds, the extension, the edges) and each claim's declared
  metric reasoning, the metrics beside it and the strongest objection.
* one module per paper (``fedbat``, ``gradma``, ``lfl``, ``fedswa``, ``bherd``): its ``CLAIMS``, ``ARMS``,
  ``BUDGET``, ``CPU`` and ``FULL`` scales, and nothing else.
* ``own``: a claims file of the user's, declared like a paper module (``fedrepro claims --claims FILE``).
"""
from __future__ import annotations

import importlib

from .claim import (CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, SUPPORTED, VERDICTS, Arm, Budget, Claim,  # noqa: F401
                    Comparison, Margin)

PAPERS = ("bherd", "fedbat", "fedswa", "gradma", "lfl")

# The claims protocol that the paper modules declare (grids and their extension, tuning seeds, metrics, margins,
# looks, replications), committed before any of its runs, and the claims versions whose records were run under each
# protocol this code still declares. 0.4.0 (c92bd55); 0.5.0: 0.4.0's declarations for BHerd, FedBAT, FedSWA and LFL,
# and for GradMA a new study on seeds no earlier version used, with looks 5, 10, 20, 40 (theory/empirical/gradma.py,
# declared before any GradMA record of 0.5.0); 0.5.1: 0.5.0's declarations for BHerd, FedBAT, GradMA and LFL, and for
# FedSWA a new study on seeds no earlier version used, with looks 5, 10, 20, 40 (5, 10 at its 4x scale;
# theory/empirical/fedswa.py, declared before any FedSWA record of 0.5.1). A paper module that changes a declaration
# keeps the earlier one in its ``EARLIER[protocol]`` (read through :func:`declaration`), so that ``fedrepro claims
# --version V --no-run`` judges V's records again under the declarations they were run with. A version bump that
# keeps the declarations adds itself to ``PROTOCOLS`` (tests/test_claims_version.py checks that this code's version is
# listed); one that changes them declares a new protocol. Another protocol's records would read as cells never run,
# so they are refused.
PROTOCOL = "0.5.1"
# claims version -> the protocol its records were run under
PROTOCOLS = {"0.4.0": "0.4.0", "0.5.0": "0.5.0", "0.5.1": "0.5.1"}
PROTOCOL_VERSIONS = tuple(PROTOCOLS)


def protocol() -> str:
    """The protocol of the claims version being judged (``paths.judged_version``, else this code's)."""
    from . import paths

    return PROTOCOLS.get(paths.judged_version(), PROTOCOL)


_NONE = object()


def declaration(mod, name: str, default=_NONE):
    """Paper module ``mod``'s declaration ``name`` (``BUDGET``, ``CPU``, ``SCALES``, ``REPLICATIONS``,
    ``ALPHA_SPLIT``) under the protocol of the version being judged: the module's own, or the earlier protocol's
    where the module keeps it in ``EARLIER``. ``default``: for a declaration the module may leave out."""
    earlier = getattr(mod, "EARLIER", {}).get(protocol(), {})
    if name in earlier:
        return earlier[name]
    return getattr(mod, name) if default is _NONE else getattr(mod, name, default)


def paper(name: str):
    """The claims module of paper ``name``, or of a claims file of the user's loaded under that name
    (``own.load``, ``fedrepro claims --claims FILE``)."""
    from . import own

    if name in own.MODULES:
        return own.MODULES[name]
    if name not in PAPERS:
        mine = f"; claims files loaded: {', '.join(own.MODULES)}" if own.MODULES else ""
        raise ValueError(f"unknown paper {name!r}; papers with empirical claims: {', '.join(PAPERS)}{mine}")
    return importlib.import_module(f"{__name__}.{name}")


def is_own(name: str | None) -> bool:
    """Whether ``name`` is a claims file of the user's (not one of the papers)."""
    from . import own

    return name in own.MODULES


def load_claims(path) -> str:
    """Load the user's claims file ``path`` (``own.load``); return its PAPER name."""
    from . import own

    return own.load(path, PAPERS)


def papers(name: str | None = None) -> list:
    """The paper modules to run: all, or one. A paper's claims are one family for the multiple-testing
    correction, so they always run together."""
    return [paper(n) for n in ([name] if name else PAPERS)]


def all_claims() -> list[Claim]:
    return [c for n in PAPERS for c in paper(n).CLAIMS]
