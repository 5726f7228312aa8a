"""What a claim's check receives and returns: the verdicts, the kinds of claim, the hypotheses a run verifies,
``CheckContext`` and ``Outcome``.

The verdicts (DESIGN.md, "Theory checks"; ``theory.claims`` documents each):

* ``HOLDS``, ``INCONCLUSIVE``, ``UNINFORMATIVE`` as before;
* ``VIOLATED``: the conclusion fails while every hypothesis the statement states holds in the run, each recorded
  as a :class:`Hypothesis` (step-size caps as the proof needs them, the horizon, the algorithm as stated);
* ``PREMISE FAILS``: an assumption of the statement (or a corollary's setting) that the algorithm cannot meet,
  measured in the run: the statement is not contradicted, its premise is false for the algorithm;
* ``NOT REPRODUCED``: an empirical figure of the paper that the check could not reproduce at the setting it states
  (a figure is not a theorem: it cannot be VIOLATED).

An :class:`Outcome` applies the rules that keep a VIOLATED honest when it is built: a VIOLATED whose run breaks a
*setting* hypothesis (one the check chose: a step-size cap, a horizon) is outside the statement's hypotheses and
becomes INCONCLUSIVE; one whose run breaks a *premise* (an assumption about the problem or the algorithm's own
iterates, measured) becomes PREMISE FAILS. Each says why in ``reason``. The shared helpers that map statistics to
verdicts are in ``theory.verdicts``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

HOLDS, VIOLATED, INCONCLUSIVE, UNINFORMATIVE = "HOLDS", "VIOLATED", "INCONCLUSIVE", "UNINFORMATIVE"
PREMISE_FAILS, NOT_REPRODUCED = "PREMISE FAILS", "NOT REPRODUCED"
VERDICTS = (HOLDS, VIOLATED, PREMISE_FAILS, NOT_REPRODUCED, INCONCLUSIVE, UNINFORMATIVE)
PAPER_CLAIM, DERIVED = "paper", "derived"
KINDS = (PAPER_CLAIM, DERIVED)
SETTING, PREMISE = "setting", "premise"  # a hypothesis the check sets, or one it measures (see Hypothesis)


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis of the checked statement, and whether the run meets it.

    ``name``: the hypothesis as the paper states it ("eta_l <= 1/(81 beta K alpha)"); ``source``: where
    ("Lemmas G.12, G.13"); ``holds``: whether the run meets it; ``value``: what the run has ("eta_l = 0.00412");
    ``kind``: ``"setting"`` when the check chooses it (step sizes, horizon, participation, the problem's
    constants), ``"premise"`` when it is a property of the algorithm's own iterates or of the problem that the
    check can only measure (GradMA's A4 bound on the QP correction)."""

    name: str
    source: str
    holds: bool
    value: str = ""
    kind: str = SETTING

    def __post_init__(self):
        if self.kind not in (SETTING, PREMISE):
            raise ValueError(f"hypothesis {self.name!r}: kind must be {SETTING!r} or {PREMISE!r}, got {self.kind!r}")
        object.__setattr__(self, "holds", bool(self.holds))

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "holds": self.holds, "value": self.value, "kind": self.kind}


def hypothesis(name: str, source: str, holds: bool, value: str = "", kind: str = SETTING) -> Hypothesis:
    return Hypothesis(name, source, holds, value, kind)


@dataclass
class Outcome:
    """A check's result. ``hypotheses``: what the run verified (see :class:`Hypothesis`); ``reason``: one line
    saying why the verdict is what it is (required for PREMISE FAILS and NOT REPRODUCED, written by the rules
    below when they change a VIOLATED)."""

    verdict: str
    key_number: str
    evidence: dict = field(default_factory=dict)
    conditions: str = ""
    series: dict = field(default_factory=dict)
    hypotheses: list = field(default_factory=list)
    reason: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        self.hypotheses = [h if isinstance(h, Hypothesis) else Hypothesis(**h) for h in self.hypotheses]
        broken = [h for h in self.hypotheses if not h.holds]
        settings = [h for h in broken if h.kind == SETTING]
        premises = [h for h in broken if h.kind == PREMISE]
        if self.verdict == VIOLATED and settings:
            self.verdict = INCONCLUSIVE
            self.reason = ("the conclusion fails, but the run is outside the statement's hypotheses ("
                           + "; ".join(_named(h) for h in settings) + "): not a counterexample")
        elif self.verdict == VIOLATED and premises:
            self.verdict = PREMISE_FAILS
            self.reason = ("the conclusion fails, and so does its premise in the run ("
                           + "; ".join(f"{h.name} [{h.source}]" for h in premises) + "): the statement is not "
                           "contradicted, its premise is false for the algorithm")
        if self.verdict == PREMISE_FAILS and not premises:
            raise ValueError("PREMISE FAILS needs the failed premise, measured: a Hypothesis(kind='premise', "
                             "holds=False) among the outcome's hypotheses")
        if self.verdict == NOT_REPRODUCED and not (self.conditions and self.reason):
            raise ValueError("NOT REPRODUCED needs the setting it was tried at (conditions) and why (reason)")


def _named(h: Hypothesis) -> str:
    return f"{h.name} [{h.source}]" + (f": {h.value}" if h.value else "")


@dataclass(frozen=True)
class CheckContext:
    seed: int = 0
    quick: bool = False  # smaller Monte-Carlo sizes and horizons (tests, CI); the report uses quick=False


@dataclass(frozen=True)
class Setting:
    """Sizes of a check in one mode: rounds (or horizon) and Monte-Carlo seeds."""

    rounds: int
    seeds: int


def pick(ctx: CheckContext, quick: Setting, full: Setting) -> Setting:
    """The setting of the context's mode (quick or full)."""
    return quick if ctx.quick else full
