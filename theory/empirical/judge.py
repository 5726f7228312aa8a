"""The verdicts of one paper's claims from its run records, look by look: pairs the records (``paired``), feeds
the per-seed values to the sequential ``tracker``, and describes each claim for the report (verdict, why it
stopped, seeds used, repeated confidence intervals, repeated p-values, and, for an INCONCLUSIVE claim, the
decision that came closest).

``Judge(claims, looks, alpha)`` gives claim i the design of the looks up to its ``max_seeds`` (``claim_looks``)
and decides through ``tracker_for``, the tracker the calibration tests simulate; ``alpha`` is the family level of
this paper at this scale and stage (``family.alpha_at``). Each ``look(k, runs, seeds)`` uses, for every comparison
still open, the runs of ``seeds`` (the first n_k seeds of the scale); a comparison that stopped keeps the seeds it
had, whatever runs exist later (its verdict never changes). The report's view reads the tracker through its named
accessors (``Tracker.level``, ``crossed_now``, ``verdict_of``, ...), and writes each field under one name: ``seeds``
(the most paired seeds a comparison used) and ``why_stopped`` (the sentence; ``fields.read_claim`` maps the names
of older reports).
"""
from __future__ import annotations

import math

import numpy as np

from theory.stats.sequential import SKEW_ALLOWANCE, Design, check_looks, seeds_to_reach

from . import paired
from .claim import METRICS, Claim
from .tracker import FAMILIES, OPEN, Spec, Tracker, crossings

ALPHA = paired.ALPHA
REASONS = {"seeds": "its seed budget is spent", "cpu": "its paper's CPU budget is spent",
           "decided": "decided", "no runs": "no paired runs"}


def claim_looks(claim: Claim, looks: tuple) -> tuple:
    """The looks of ``claim``'s design: the declared ``looks`` up to its ``max_seeds`` (the first look when none
    is that small)."""
    return tuple(n for n in looks if n <= (claim.max_seeds or looks[-1])) or tuple(looks[:1])


def tracker_for(claims: list[Claim], looks: tuple, alpha: float, reps: int = 1) -> Tracker:
    """The tracker of ``claims`` (one paper's, at one scale and stage) over ``looks`` at family level ``alpha``: one
    ``Design`` per claim (``claim_looks``), one ``Spec`` per comparison. ``Judge`` decides through it, and the
    calibration tests simulate it with ``reps`` replicates: the same designs, boundaries and Holm levels."""
    designs = [Design(claim_looks(c, tuple(looks))) for c in claims]
    specs = [Spec(i, comp.test, comp.boundary, comp.delta(c)) for i, c in enumerate(claims) for comp in c.comparisons]
    return Tracker(specs, designs, alpha, reps)


class Judge:
    """Sequential verdicts for ``claims`` (one paper at one scale and stage) over the declared ``looks``, at the
    family level ``alpha`` (that unit's share of the paper's, ``family.alpha_at``; see the module docstring)."""

    def __init__(self, claims: list[Claim], looks: tuple, alpha: float = ALPHA, companions: dict | None = None):
        self.claims, self.looks, self.alpha = list(claims), check_looks(looks), float(alpha)
        self.companions = dict(companions or {})  # {metric: another metric shown beside it, on the same seeds}
        self.runs: dict = {}  # per comparison: the (A runs, B runs) of its last look
        self.comps = [(i, comp) for i, c in enumerate(self.claims) for comp in c.comparisons]
        self.tracker = tracker_for(self.claims, self.looks, self.alpha)
        self.designs = self.tracker.designs
        self.trace: list[list[dict]] = [[] for _ in self.comps]  # per comparison: one entry per analysed look
        self.pairs: list[dict | None] = [None] * len(self.comps)
        self.last_look = -1

    def needed(self) -> list[tuple[str, str]]:
        """(setting, arm) pairs the open comparisons need at the next look, in first-use order."""
        out = []
        for j in self.tracker.needed():
            _, comp = self.comps[j]
            for a in (comp.a, comp.b):
                if (comp.setting, a) not in out:
                    out.append((comp.setting, a))
        return out

    def look(self, k: int, runs: dict, seeds) -> None:
        """Look ``k`` on ``runs[(setting, arm)] = {seed: record}``, restricted to ``seeds``."""
        seeds, open_ = set(seeds), set(self.tracker.needed())
        values = []
        for j, (i, comp) in enumerate(self.comps):
            if j in open_:
                ra = {s: r for s, r in runs.get((comp.setting, comp.a), {}).items() if s in seeds}
                rb = {s: r for s, r in runs.get((comp.setting, comp.b), {}).items() if s in seeds}
                self.pairs[j] = paired.pair(comp, self.claims[i].metric, ra, rb)
                self.runs[j] = (ra, rb)
            values.append(self.pairs[j]["x"] if self.pairs[j] else [])
        ok = [not (self.pairs[j] and paired.uninformative(comp, self.claims[i].metric, self.pairs[j]))
              for j, (i, comp) in enumerate(self.comps)]
        self.look_values(k, values, ok)

    def look_values(self, k: int, values: list, can_support=None) -> None:
        """Look ``k`` on the per-seed values of each comparison (flattened over claims, in order): those of
        the comparisons still open are analysed, the others ignored."""
        open_ = set(self.tracker.needed())
        mean, sd, n = np.zeros(len(self.comps)), np.zeros(len(self.comps)), [0] * len(self.comps)
        for j, x in enumerate(values):
            x = np.asarray(x, float)
            if j not in open_ or len(x) < 2:
                continue
            n[j] = len(x)
            mean[j], sd[j] = float(x.mean()), float(x.std(ddof=1))
            if not self.trace[j] or n[j] > self.trace[j][-1]["n"]:
                self.trace[j].append({"look": k, "n": n[j], "mean": mean[j], "sd": sd[j],
                                      "values": [float(v) for v in x]})
        self.tracker.look(k, mean[:, None], sd[:, None], n, can_support=can_support)
        self.last_look = k

    def finish(self, reason: str) -> None:
        """Close the open claims: INCONCLUSIVE for ``reason`` (a key of REASONS, e.g. "cpu")."""
        self.tracker.finish(reason, max(self.last_look, 0))

    # ------------------------------------------------------------------------------------ the report's view

    def results(self) -> list[dict]:
        """One dict per claim (see ``report.py`` for the keys)."""
        if not self.tracker.done:
            self.finish("seeds")
        p = self._claim_pvalues()
        adj = {f: paired.holm([p[i][f] for i in range(len(self.claims))]) for f in FAMILIES}
        neg = [i for i in range(len(self.claims)) if self.tracker.can_be_negligible(i)]
        adj["NEGLIGIBLE"] = [1.0] * len(self.claims)  # Holm over the claims that can be NEGLIGIBLE only
        for i, q in zip(neg, paired.holm([p[i]["NEGLIGIBLE"] for i in neg])):
            adj["NEGLIGIBLE"][i] = q
        return [self._claim(i, {f: adj[f][i] for f in FAMILIES}) for i in range(len(self.claims))]

    def _comp_pvalues(self, j: int) -> dict:
        """Repeated p-values of comparison j per family: the smallest over its analysed looks."""
        i, comp = self.comps[j]
        spec, design = self.tracker.specs[j], self.designs[i]
        out = {f: 1.0 for f in FAMILIES}
        hist = ()
        for t in self.trace[j][:len(self.tracker.history_of(j))]:
            hist += (t["n"],)
            se = t["sd"] / math.sqrt(t["n"])
            m, b, d = t["mean"], spec.boundary, spec.negligible
            if se == 0:
                sup, con, neg = (bool(x[0]) for x in crossings(spec.test, b, d, np.array([m]), np.array([0.0]), 0))
                p = {"SUPPORTED": 0.0 if sup else 1.0, "CONTRADICTED": 0.0 if con else 1.0,
                     "NEGLIGIBLE": 0.0 if neg else 1.0}
            else:
                p = {"SUPPORTED": design.repeated_p((m - b) / se, hist),
                     "CONTRADICTED": design.repeated_p((b - m) / se, hist),
                     "NEGLIGIBLE": max(design.repeated_p((m + d) / se, hist), design.repeated_p((d - m) / se, hist))
                     if d > 0 else 1.0}
            out = {f: min(out[f], p[f]) for f in FAMILIES}
        if self.pairs[j] and paired.uninformative(comp, self.claims[i].metric, self.pairs[j]):
            out["SUPPORTED"] = 1.0
        return out

    def _claim_pvalues(self) -> list[dict]:
        out = []
        for i in range(len(self.claims)):
            per = [self._comp_pvalues(j) for j, (ci, _) in enumerate(self.comps) if ci == i]
            c = len(per)
            out.append({"SUPPORTED": max(q["SUPPORTED"] for q in per),
                        "CONTRADICTED": min(1.0, c * min(q["CONTRADICTED"] for q in per)),
                        "NEGLIGIBLE": min(1.0, c * min(q["NEGLIGIBLE"] for q in per))})
        return out

    def _levels(self, j: int) -> dict:
        """The current Holm level of comparison j's claim in each family (per comparison for CONTRADICTED and
        NEGLIGIBLE)."""
        return {f: self.tracker.level(f, j) for f in FAMILIES}

    def _claim(self, i: int, p_holm: dict) -> dict:
        c, tr = self.claims[i], self.tracker
        comps = [self._comparison(j) for j, (ci, _) in enumerate(self.comps) if ci == i]
        reason = tr.reason_of(i)
        if reason == "seeds" and all(not x["n"] for x in comps):
            reason = "no runs"
        out = {"id": c.id, "paper": c.paper, "source": c.source, "quote": c.quote, "statement": c.statement,
               "metric": c.metric, "direction": c.direction, "verdict": _closed(tr.verdict_of(i)),
               "stopped": reason, "why_stopped": stop_text(reason, comps, self.looks), "p_holm": p_holm,
               "looks": list(self.designs[i].looks), "seeds": max((x["n"] for x in comps), default=0),
               "margin": ({"value": c.margin.value, "reason": c.margin.reason} if c.margin else None),
               "comparisons": comps, "alpha": self.alpha}
        if out["verdict"] == "INCONCLUSIVE":
            out["closest"] = closest(p_holm, comps, self.alpha, c.metric, self.designs[i].skew)
        shown = self.companions.get(c.metric)
        if shown:
            out["companion"] = {"metric": shown, "comparisons": [self._companion(j, shown, x) for j, x in zip(
                [j for j, (ci, _) in enumerate(self.comps) if ci == i], comps)]}
        vacuous = [x["uninformative"] for x in comps if x["uninformative"]]
        if vacuous and out["verdict"] == "INCONCLUSIVE":
            out["uninformative"] = "; ".join(vacuous)
        return out

    def _companion(self, j: int, metric: str, x: dict) -> dict:
        """The comparison's values in another metric, on the seeds it used."""
        ra, rb = self.runs.get(j, ({}, {}))
        used = set(x["seeds"])
        pr = paired.pair(self.comps[j][1], metric, {s: r for s, r in ra.items() if s in used},
                         {s: r for s, r in rb.items() if s in used})
        v = np.asarray(pr["x"], float)
        return {"seeds": pr["seeds"], "values": pr["x"], "n": len(v), "mean": float(v.mean()) if len(v) else None,
                "sd": float(v.std(ddof=1)) if len(v) > 1 else None}

    def _comparison(self, j: int) -> dict:
        i, comp = self.comps[j]
        c, tr, pr = self.claims[i], self.tracker, self.pairs[j] or paired.pair(comp, self.claims[i].metric, {}, {})
        hist = tr.history_of(j)
        x = [t for t in self.trace[j][:len(hist)]]
        last = x[-1] if x else None
        lv = self._levels(j)
        lo = hi = None
        if last:
            se = last["sd"] / math.sqrt(last["n"])
            lo = last["mean"] - self.designs[i].crit(hist, lv["SUPPORTED"]) * se
            hi = last["mean"] + self.designs[i].crit(hist, lv["CONTRADICTED"]) * se
        used = pr["seeds"][:last["n"]] if last and self.pairs[j] else list(range(last["n"])) if last else []
        vals = last["values"] if last else []
        side = self._side(j)
        return {"a": comp.a, "b": comp.b, "test": comp.test, "setting": comp.setting,
                "statement": comp.describe(c.metric), "boundary": comp.boundary, "negligible": comp.delta(c),
                "paper_gap": comp.paper_gap, "seeds": used, "values": vals, "n": len(used),
                "mean": last["mean"] if last else None, "sd": last["sd"] if last else None, "lower": lo,
                "upper": hi, "levels": lv, "skewness": paired.skewness(vals), "side": side,
                "stop_look": tr.stop_look_of(j), "history": [{k: v for k, v in t.items() if k != "values"} for t in x],
                "p": self._comp_pvalues(j),
                "uninformative": paired.uninformative(comp, c.metric, pr) if self.pairs[j] else "",
                "reference_mean": pr["b_mean"], "chance": pr["chance"], "problems": pr["problems"],
                "unpaired": pr["unpaired"], "diverged": pr["diverged"]}

    def _side(self, j: int) -> str:
        tr = self.tracker
        i, comp = self.comps[j]
        if not tr.history_of(j):
            return "no runs"
        sup, con, neg = (tr.crossed_now(f, j) for f in FAMILIES)
        if neg:
            return "negligible"
        if con:
            return "contradicts"
        if sup:
            return "supports"
        if self.pairs[j] and paired.uninformative(comp, self.claims[i].metric, self.pairs[j]):
            return "uninformative"
        return "undecided"


def _closed(verdict: str) -> str:
    """A claim's verdict for the report: still open (no look was analysed) counts as INCONCLUSIVE."""
    return "INCONCLUSIVE" if verdict == "OPEN" else verdict


def seeds_to_reach_family(family: str, comps: list[dict], skew: float = SKEW_ALLOWANCE) -> int | None:
    """Seeds at which a claim's comparisons (the report's dicts: mean, sd, boundary, negligible, levels) would
    reach ``family``'s boundary at their observed means and sds (all of them for SUPPORTED, one for CONTRADICTED
    or NEGLIGIBLE): a planning figure, even odds at one look (``sequential.seeds_to_reach``); None when the
    observed values point the other way. Computed from the reported comparisons alone, so a committed report.json
    can be re-rendered without its run records."""
    need = []
    for x in comps:
        if x.get("mean") is None or x.get("sd") is None:
            continue
        if family == "NEGLIGIBLE" and not x["negligible"]:
            continue
        e = {"SUPPORTED": x["mean"] - x["boundary"], "CONTRADICTED": x["boundary"] - x["mean"],
             "NEGLIGIBLE": (x["negligible"] or 0.0) - abs(x["mean"])}[family]
        need.append(seeds_to_reach(e, x["sd"], x["levels"][family], skew) if e > 0 else None)
    if family == "SUPPORTED":
        return None if not need or None in need else max(need)
    return min((n for n in need if n is not None), default=None)


def closest(p_holm: dict, comps: list[dict], alpha: float, metric: str, skew: float = SKEW_ALLOWANCE) -> dict:
    """The decision an INCONCLUSIVE claim came closest to: the family with the smallest Holm-adjusted repeated
    p-value, with a sentence and the interval's distance to that decision's boundary.

    NEGLIGIBLE counts only where a comparison has a negligible margin (not for a non-inferiority claim, whose
    p-value for it is 1 by construction). When several families share the smallest p-value (typically all at 1,
    the cap), no decision came closer than another, and the sentence says so rather than naming the first in
    order: it gives the distances for each tied family, and ``verdict`` is the tied family that the fewest seeds
    would reach at the observed means and spreads (``seeds_to_reach_family``, a planning figure), or None when
    none would. ``tied`` lists the tied families; ``seeds_to_reach`` is that figure for ``verdict``."""
    possible = [v for v in FAMILIES if v != "NEGLIGIBLE" or any(x.get("negligible") for x in comps)]
    low = min(p_holm[v] for v in possible)
    tied = [v for v in possible if p_holm[v] <= low + 1e-12]
    k, unit = METRICS[metric][3], METRICS[metric][2]
    need = {f: seeds_to_reach_family(f, comps, skew) for f in tied}
    if len(tied) == 1:
        f = tied[0]
        head = f"closest to {f}: Holm-adjusted repeated p-value {p_holm[f]:.3g} (a verdict needs <= {alpha:.3g})"
    else:
        reachable = [v for v in tied if need[v]]
        f = min(reachable, key=lambda v: need[v]) if reachable else None
        head = (f"no decision came closer than another: {_and(tied)} share the Holm-adjusted repeated p-value "
                f"{low:.3g} (a verdict needs <= {alpha:.3g})")
    gaps = _gaps(f, comps, k, unit) if len(tied) == 1 else _tied_gaps(tied, comps, k, unit)
    text = head + (f"; {'; '.join(gaps)}" if gaps else "")
    return {"verdict": f, "p_holm": low, "text": text, "tied": tied, "seeds_to_reach": need.get(f)}


def _short(f: str, x: dict, k: float, unit: str) -> str | None:
    """How far comparison x's repeated interval is from family ``f``'s boundary, or None where it reaches it."""
    lo, hi, b, d = x["lower"], x["upper"], x["boundary"], x.get("negligible") or 0.0
    if f == "SUPPORTED" and lo <= b:
        return f"the interval's lower end is {_fmt(b - lo, k, unit)} below {_fmt(b, k, unit)}"
    if f == "CONTRADICTED" and hi >= b:
        return f"the interval's upper end is {_fmt(hi - b, k, unit)} above {_fmt(b, k, unit)}"
    if f == "NEGLIGIBLE" and d and (lo < -d or hi > d):
        return (f"the interval [{_fmt(lo, k, unit)}, {_fmt(hi, k, unit)}] reaches {_fmt(max(-d - lo, hi - d), k, unit)} "
                f"beyond the negligible band +-{_fmt(d, k, unit)}")
    return None


def _gaps(f: str, comps: list[dict], k: float, unit: str) -> list[str]:
    """Per comparison, how far its repeated interval is from family ``f``'s boundary (those that reach it are
    left out)."""
    out = []
    for x in comps:
        if x["mean"] is None or x["lower"] is None:
            continue
        g = _short(f, x, k, unit)
        if g:
            out.append(f"{x['a']} - {x['b']}: {g}")
    return out


def _tied_gaps(tied: list[str], comps: list[dict], k: float, unit: str) -> list[str]:
    """Per comparison, one clause with its distance to each tied family's boundary."""
    out = []
    for x in comps:
        if x["mean"] is None or x["lower"] is None:
            continue
        parts = [f"{f}: {g}" for f in tied for g in [_short(f, x, k, unit)] if g]
        if parts:
            out.append(f"{x['a']} - {x['b']}: " + ", ".join(parts))
    return out


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _fmt(v: float, k: float, unit: str) -> str:
    return f"{v:.3g}x" if unit == "x" else f"{k * v:.2f} {unit}"


def stop_text(reason: str, comps: list[dict], looks: tuple) -> str:
    seeds = ", ".join(f"{x['a']} vs {x['b']}" + (f" ({x['setting']})" if x["setting"] else "") + f": {x['n']}"
                      for x in comps)
    if reason == "decided":
        return f"decided (seeds per comparison: {seeds})"
    return f"{REASONS.get(reason, reason)} (looks {list(looks)}; seeds per comparison: {seeds})"


__all__ = ["Judge", "claim_looks", "closest", "seeds_to_reach_family", "tracker_for", "OPEN"]
