"""Claims: named, sourced statements from the papers, each with a check that returns a verdict.

A claim module (one per paper, ``theory/claims/<paper>.py``) registers checks with ``@claim(...)``. A
check receives a ``CheckContext`` (seed, quick mode) and returns an ``Outcome`` (``theory.outcome``):

* ``HOLDS``: the statistics support the statement at the stated false-alarm rate;
* ``VIOLATED``: the statement's conclusion fails while every hypothesis it states holds in the run: the
  hypotheses are recorded in the outcome (``Hypothesis``: step-size caps as the proof needs them, the horizon,
  the algorithm as stated) and asserted; a finding, reported with its evidence, never weakened;
* ``PREMISE FAILS``: an assumption of the statement, or a corollary's setting, that the algorithm cannot meet,
  with the measured evidence (the statement is not contradicted: its premise is false for the algorithm);
* ``NOT REPRODUCED``: an empirical figure of the paper that the check could not reproduce at the setting it
  states (a figure is not a theorem);
* ``INCONCLUSIVE``: the test has too little power, or the run is outside the statement's hypotheses (the
  evidence and ``reason`` say which);
* ``UNINFORMATIVE``: the statement is not contradicted, but a frozen or trivial algorithm (one that never
  moves, or an operator that does nothing) would pass the same check as well: a bound too loose at every
  horizon the check can reach. Reported apart from HOLDS, with the horizon where the bound would bite.

``Outcome`` turns a VIOLATED whose run breaks a setting hypothesis into INCONCLUSIVE, and one whose run breaks a
premise into PREMISE FAILS; ``Claim.run`` turns a paper claim's VIOLATED that records no hypothesis at all into
INCONCLUSIVE (a counterexample must say what it verified). Each writes ``reason``.

Every claim states its ``kind``: ``"paper"`` (a statement the paper makes: a lemma, theorem, corollary, or a
sentence of its text) or ``"derived"`` (a statement this project derived: a reference formula, a consequence
the paper does not state, a property of the implementation), and may give ``quote``: the paper's own words.
Bound checks report their slack (bound / measured) in the evidence.

``evidence`` holds estimates, intervals and p-values (JSON-serialisable), ``key_number`` the one figure
shown in the summary table, ``series`` optional curves for plots ({name: {"x": [...], "y": {label: [...]}},
"xlabel", "ylabel", "logx", "logy"}), ``conditions`` the setting under which the verdict was reached,
``hypotheses`` what the run verified and ``reason`` one line on why the verdict is what it is.
"""
from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from theory.outcome import (DERIVED, HOLDS, INCONCLUSIVE, KINDS, NOT_REPRODUCED, PAPER_CLAIM, PREMISE, PREMISE_FAILS,
                            SETTING, UNINFORMATIVE, VERDICTS, VIOLATED, CheckContext, Hypothesis, Outcome, hypothesis)

__all__ = ["DERIVED", "HOLDS", "INCONCLUSIVE", "KINDS", "NOT_REPRODUCED", "PAPER_CLAIM", "PREMISE", "PREMISE_FAILS",
           "SETTING", "UNINFORMATIVE", "VERDICTS", "VIOLATED", "CheckContext", "Claim", "Hypothesis", "Outcome",
           "all_claims", "claim", "hypothesis"]


@dataclass(frozen=True)
class Claim:
    id: str  # "<paper>.<short name>", e.g. "lfl.lemma1.unbiased"
    paper: str
    source: str  # "Lemma 1", "Theorem 2, Eq. 23", ...
    statement: str  # the exact formula or sentence
    check: Callable[[CheckContext], Outcome]
    false_alarm: float = 1e-3  # the rate at which a true statement is reported VIOLATED
    kind: str = PAPER_CLAIM  # "paper" or "derived" (see the module docstring)
    quote: str = ""  # the paper's own words, where the statement paraphrases them

    def run(self, ctx: CheckContext | None = None) -> dict:
        ctx = ctx or CheckContext()
        t0 = time.perf_counter()
        try:
            # small problems: one thread is much faster than two contending ones (and deterministic)
            with _single_thread():
                out = self.check(ctx)
        except Exception as e:  # noqa: BLE001 - an erroring check is reported, not hidden
            out = Outcome(INCONCLUSIVE, "error", {"error": f"{type(e).__name__}: {e}",
                                                  "traceback": traceback.format_exc(limit=15)},
                          "the check raised an error")
        if out.verdict == VIOLATED and self.kind == PAPER_CLAIM and not out.hypotheses:
            out.verdict = INCONCLUSIVE
            out.reason = ("the numbers contradict the statement, but the check records no hypothesis it verified in "
                          "the run: a VIOLATED must name them (theory.outcome.Hypothesis)")
        return {"id": self.id, "paper": self.paper, "kind": self.kind, "source": self.source,
                "statement": self.statement, "quote": self.quote, "false_alarm": self.false_alarm,
                "verdict": out.verdict, "key_number": out.key_number, "reason": out.reason,
                "hypotheses": [h.to_dict() for h in out.hypotheses], "evidence": out.evidence,
                "conditions": out.conditions, "series": out.series,
                "seconds": time.perf_counter() - t0, "quick": ctx.quick, "seed": ctx.seed}


class _single_thread:
    def __enter__(self):
        import torch
        from threadpoolctl import threadpool_limits

        self._torch = torch.get_num_threads()
        torch.set_num_threads(1)
        self._limits = threadpool_limits(1)
        return self

    def __exit__(self, *exc):
        import torch

        self._limits.restore_original_limits()
        torch.set_num_threads(self._torch)
        return False


_CLAIMS: dict[str, Claim] = {}


def claim(id: str, paper: str, source: str, statement: str, false_alarm: float = 1e-3, *, kind: str,
          json_safe: bool = False, quote: str = ""):
    """Decorator registering ``check(ctx) -> Outcome`` as a claim of the given ``kind`` ("paper"/"derived");
    ``quote``: the paper's own words where ``statement`` paraphrases or sharpens them.

    ``json_safe``: the registered check runs with one BLAS thread and its Outcome's evidence and series are made
    plain JSON (``theory.evidence.json_safe``); the decorated function itself is returned unchanged."""
    if kind not in KINDS:
        raise ValueError(f"claim {id!r}: kind must be one of {KINDS}, got {kind!r}")

    def deco(fn):
        if id in _CLAIMS:
            raise ValueError(f"claim {id!r} registered twice")
        check = fn
        if json_safe:
            from theory.evidence import json_safe_check

            check = json_safe_check(fn)
        _CLAIMS[id] = Claim(id, paper, source, statement, check, false_alarm, kind, quote)
        return fn

    return deco


def _load() -> None:
    """Import every claims module: ``theory/claims/<paper>.py`` and the section modules of a paper's package
    (``theory/claims/<paper>/<section>.py``); names starting with ``_`` are skipped."""
    for mod in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        if not any(part.startswith("_") for part in mod.name.split(".")[2:]):
            importlib.import_module(mod.name)


def all_claims(paper: str | None = None, claim_id: str | None = None) -> list[Claim]:
    _load()
    out = [c for c in _CLAIMS.values() if (paper is None or c.paper == paper)
           and (claim_id is None or c.id == claim_id or c.id.startswith(claim_id + "."))]
    if not out:
        papers = sorted({c.paper for c in _CLAIMS.values()})
        raise ValueError(f"no claim matches paper={paper!r} claim={claim_id!r}; papers: {', '.join(papers)}; "
                         f"claims: {', '.join(sorted(_CLAIMS))}")
    return sorted(out, key=lambda c: (c.paper, c.id))

