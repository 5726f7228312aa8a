"""What a claim's check receives and returns: the verdicts, the kinds of claim, ``CheckContext`` and ``Outcome``.

The meaning of each verdict and kind is documented in ``theory.claims`` (the registry); the shared helpers that
map statistics to verdicts are in ``theory.verdicts``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

HOLDS, VIOLATED, INCONCLUSIVE, UNINFORMATIVE = "HOLDS", "VIOLATED", "INCONCLUSIVE", "UNINFORMATIVE"
VERDICTS = (HOLDS, VIOLATED, INCONCLUSIVE, UNINFORMATIVE)
PAPER_CLAIM, DERIVED = "paper", "derived"
KINDS = (PAPER_CLAIM, DERIVED)


@dataclass
class Outcome:
    verdict: str
    key_number: str
    evidence: dict = field(default_factory=dict)
    conditions: str = ""
    series: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


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
