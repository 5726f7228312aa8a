"""The error family of a paper's empirical claims: each kind of wrong verdict (SUPPORTED, CONTRADICTED, NEGLIGIBLE)
at most ``paired.ALPHA`` per paper, over every scale and stage its claims are judged on (DESIGN.md, "Empirical
claims": the error rates the report states are the code's, one family per paper).

A paper's claims are judged in *units*, each with its own tracker (``judge.tracker_for``): every CPU scale of its
first stage (``SCALES``, e.g. "cpu" and "cpu4x", or "paper") and every replication it declares (``REPLICATIONS``,
e.g. "cpu-rep"). The units run at different times and stop on their own: a replication runs after the first stage,
on the claims it left INCONCLUSIVE. One Holm procedure over all of them is therefore not possible (its step-down
would reopen verdicts already written, and a replication's claims are chosen by the first stage's outcome).
Instead the paper's alpha is split in advance over its units (Bonferroni), alpha_u = w_u alpha with
sum_u w_u <= 1, and within unit u Holm's procedure over the claims judged there keeps each kind of wrong verdict
at alpha_u (``tracker``). Then, for each kind,

    P(some wrong verdict of that kind, over all of the paper's units) <= sum_u alpha_u <= alpha,

whatever the dependence between units and whatever the first stage decides a replication repeats: a
replication's seeds are fresh, so given the first stage's outcome its Holm family holds at alpha_u whichever
claims it repeats. A unit never run (a replication with nothing left to repeat) leaves its share unspent.

The weights: equal over the units (w_u = 1 / number of units) unless the paper module declares
``ALPHA_SPLIT = {scale name: weight}``, positive weights over exactly its units summing to at most 1. Both are
fixed with the scales, before any run (``fedrepro claims --dry-run`` prints them).

Outside the family: the quick scale (a smoke test, never a verdict; judged at the share of the first scale it
shrinks, so that it runs the same code) and the full scale (the paper suites' cells on a GPU, not a unit of the
CPU plan): a full-scale report is a family of its own at alpha, and says so, unless ``ALPHA_SPLIT`` names "full".

``statement`` writes the sentences the claims report and the paper pages print, from ``Family.describe``: the
same object that gives each judge its level (``alpha_at``).
"""
from __future__ import annotations

from dataclasses import dataclass

from theory.stats.sequential import Design

from . import paired
from .scale import paper_scales

FIRST, REPLICATION, FULL = "first stage", "replication", "the paper suites' cells"
KINDS = "SUPPORTED, CONTRADICTED, NEGLIGIBLE"


@dataclass(frozen=True)
class Unit:
    """One scale and stage of a paper whose claims share a Holm family: its name, stage, share of the paper's
    alpha (a fraction) and declared looks."""

    scale: str
    stage: str
    share: float
    looks: tuple


@dataclass(frozen=True)
class Family:
    """A paper's error family (module docstring): its alpha and the units it is split over (``split``: "equal" or
    "declared", from ``ALPHA_SPLIT``)."""

    paper: str
    alpha: float
    units: tuple
    split: str = "equal"

    def unit(self, scale: str) -> Unit | None:
        return next((u for u in self.units if u.scale == scale), None)

    def alpha_at(self, scale: str) -> float:
        """The family level of the claims judged at ``scale``: its unit's share of alpha; the quick scale gets the
        first unit's (it runs that scale's path), the full scale without a share the whole alpha (a family of its
        own, stated); any other scale is refused (judged outside the family, it would break the paper's rate)."""
        u = self.units[0] if scale == "quick" else self.unit(scale)
        if u is None and scale != "full":
            raise ValueError(f"{self.paper}: scale {scale!r} is none of the paper's declared scales and stages "
                             f"({', '.join(x.scale for x in self.units)}); declare it in SCALES or REPLICATIONS so "
                             "that it gets its share of the paper's error rate")
        return self.alpha if u is None else self.alpha * u.share

    def describe(self, designs=()) -> dict:
        """The family as plain data (what report.json records and ``statement`` reads): alpha, split, units (scale,
        stage, alpha, looks) and the spending function and skewness allowance of the judge's ``designs`` (default:
        those a judge of these looks would use)."""
        out = {"paper": self.paper, "alpha": self.alpha, "split": self.split,
               "units": [{"scale": u.scale, "stage": u.stage, "alpha": self.alpha * u.share, "looks": list(u.looks)}
                         for u in self.units]}
        d = designs[0] if designs else Design(self.units[0].looks)  # the judge's, or the defaults it would use
        out["spending"], out["skew"] = d.spending, d.skew
        return out


def scale_looks(looks: tuple, max_seeds: int | None = None) -> tuple:
    """The budget's looks up to a scale's seed maximum, which becomes the last look: a first-stage scale's design
    (``run.run_paper`` runs it, ``family_of`` declares it)."""
    if not max_seeds:
        return tuple(looks)
    out = tuple(n for n in looks if n < max_seeds)
    return out + (int(max_seeds),)


def family_of(mod, alpha: float | None = None) -> Family:
    """The error family of paper module ``mod`` (a paper's, or a claims file's) from its declarations: its first
    stage's CPU scales with their looks (the budget's, up to each scale's max_seeds, as ``run.run_paper`` runs
    them), its replications with their declared looks, and ``ALPHA_SPLIT`` where it declares one. ``alpha``:
    default ``paired.ALPHA``."""
    from . import declaration  # the version being judged may have run an earlier protocol's declarations

    alpha = paired.ALPHA if alpha is None else float(alpha)
    looks = declaration(mod, "BUDGET").looks
    units = [(sc.name, FIRST, scale_looks(looks, sc.max_seeds)) for sc in paper_scales(mod, "cpu")]
    units += [(sc.name, REPLICATION, tuple(sc.looks)) for sc in paper_scales(mod, "replication")]
    names = [n for n, _, _ in units]
    if len(set(names)) < len(names) or "full" in names:
        raise ValueError(f"{mod.PAPER}: two scales share a name ({', '.join(names)}); each scale and stage is a unit "
                         "of the paper's error family and needs its own (\"full\" is the paper suites' scale)")
    split = declaration(mod, "ALPHA_SPLIT", None)
    weights = split_weights(mod.PAPER, names, split)
    if "full" in weights:  # the paper suites' cells, one look of their seeds (run.run_full)
        units.append(("full", FULL, ()))
    return Family(mod.PAPER, alpha, tuple(Unit(n, st, weights[n], tuple(lk)) for n, st, lk in units),
                  "declared" if split else "equal")


def split_weights(paper: str, names: list[str], declared: dict | None) -> dict:
    """{unit: weight}: equal, or ``declared`` checked (positive, over exactly the units, at most 1 in all; "full"
    may be added)."""
    if not declared:
        return {n: 1.0 / len(names) for n in names}
    extra, missing = set(declared) - set(names) - {"full"}, set(names) - set(declared)
    if extra or missing:
        raise ValueError(f"{paper}: ALPHA_SPLIT must give a weight to each of its scales and stages "
                         f"({', '.join(names)}); " + "; ".join(x for x in (
                             f"unknown: {', '.join(sorted(extra))}" if extra else "",
                             f"missing: {', '.join(sorted(missing))}" if missing else "") if x))
    if any(not w > 0 for w in declared.values()) or sum(declared.values()) > 1 + 1e-12:
        raise ValueError(f"{paper}: ALPHA_SPLIT weights must be positive and sum to at most 1, got {declared}")
    return {n: float(w) for n, w in declared.items()}


def alpha_at(mod, scale: str) -> float:
    """The family level at which ``mod``'s claims at ``scale`` are judged (``Family.alpha_at``)."""
    return family_of(mod).alpha_at(scale)


def described(mod, scale: str, judge) -> dict:
    """What a paper's report entry records of its family (``Family.describe`` with the judge's designs), and
    which unit this entry is."""
    return {**family_of(mod).describe(judge.designs), "judged_at": scale, "judged_alpha": judge.alpha}


# ------------------------------------------------------------------------------------------------ sentences

SPENDING_NAMES = {"pocock": "Pocock", "obf": "O'Brien-Fleming"}


def _looks(looks) -> str:
    return ", ".join(str(n) for n in looks)


def _unit(u: dict, used: dict) -> str:
    lk = used.get(u["scale"]) or u["looks"]
    if not lk:
        return f"{u['scale']} ({u['stage']}, one look of their seeds)"
    note = "" if list(lk) == list(u["looks"]) else f" by --looks instead of the declared {_looks(u['looks'])}"
    return f"{u['scale']} ({u['stage']}, looks {_looks(lk)}{note})"


def paper_statement(fam: dict, looks_used: dict | None = None) -> str:
    """How ``fam`` (``Family.describe``) holds the paper's error rates, in two sentences. ``looks_used``: {scale:
    looks} where a report judged a unit at other looks than declared (``--looks``)."""
    used, units, a = looks_used or {}, fam["units"], fam["alpha"]
    head = f"{fam['paper']}: each kind of wrong verdict ({KINDS}) at most {a:g} over all of the paper's claims"
    if len(units) == 1:
        text = (f"{head}, judged at one scale and stage: {units[0]['alpha']:.3g} at {_unit(units[0], used)}, with "
                "Holm's procedure over them.")
    else:
        how = "as the paper declares" if fam.get("split") == "declared" else "in equal shares"
        text = (f"{head} at its {len(units)} scales and stages, split in advance {how} (Bonferroni): "
                + ", ".join(f"{u['alpha']:.3g} at {_unit(u, used)}" for u in units)
                + "; within each share, Holm's procedure over the claims judged there.")
    if not any(u["scale"] == "full" for u in units):
        text += f" The full scale (the paper suites' cells), where judged, is a family of its own at {a:g}."
    return text


def shares_line(fam: dict) -> str:
    """The family in one line, for ``fedrepro claims --dry-run``: each unit's level."""
    return (f"error family: each kind of wrong verdict at most {fam['alpha']:g} per paper, "
            + ", ".join(f"{u['alpha']:.3g} at {u['scale']} ({u['stage']})" for u in fam["units"])
            + (" (declared split)" if fam.get("split") == "declared" else ""))


def statement(families: list[dict], looks_used: dict | None = None) -> str:
    """The report's statement of its error rates (markdown), from the families of its papers (``Family.describe``
    as recorded): one sentence on the intervals (spending, allowance), then a list of ``paper_statement`` per
    paper. ``looks_used``: {paper: {scale: looks}}."""
    if not families:
        return ""
    first = families[0]
    spending = SPENDING_NAMES.get(first["spending"], first["spending"])
    head = (f"Error rates (theory/empirical/family.py): repeated confidence intervals from Lan-DeMets "
            f"({spending}-type) error spending on Student t statistics with a skewness allowance g = "
            f"{first['skew']:g}, at each scale's looks (a claim may stop at fewer seeds), so that each kind "
            "of wrong verdict keeps its rate under this optional stopping (calibrated for every declared look "
            "design in tests/test_empirical_calibration.py).")
    return "\n\n".join([head, "\n".join(f"- {paper_statement(f, (looks_used or {}).get(f['paper']))}"
                                         for f in families)])


def before_families(report: dict, paper: str, scales: list[str]) -> str:
    """What the error rates of a report judged before the families (0.3.0 and older: one Holm family per paper,
    scale and stage, each at the report's alpha) were for ``paper`` over ``scales`` (those of the report and its
    replication): a sentence for the paper pages, which keep the report's own recorded text beside it."""
    alpha = (report.get("method") or {}).get("alpha")
    if alpha is None or not scales:
        return ""
    n = len(scales)
    if n == 1:
        return (f"Error rates of this report: one Holm family over the paper's claims at the {scales[0]} scale, each "
                f"kind of wrong verdict at {alpha:g}.")
    return (f"Error rates of this report as its code judged them: one Holm family per scale and stage, each kind of "
            f"wrong verdict at {alpha:g} within each, so over this paper's {n} scales and stages "
            f"({', '.join(scales)}) up to {n} x {alpha:g} = {n * alpha:.2g} per kind, although the report's text "
            f"says {alpha:g} per paper; the claims code now holds {alpha:g} per paper over every scale and stage "
            "(\"Scales the claims run at now\").")
