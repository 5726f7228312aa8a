"""The paired test behind the empirical verdicts, with Holm's correction over the claims of a paper.

Per comparison (``claim.Comparison``), the per-seed values x_s of runs that share the seed (so the partition,
the initial model, the client sampling and the minibatch order; the first two are checked from the records'
fingerprints, the last two come from streams keyed by the seed alone, benchmark/engine.py) are
tested with ``theory.stats.upper_bound`` (one-sided Student t and Hall's skewness-corrected t, rejecting only
when both reject: ``method="conservative"``) in both directions against the boundary b:

* p_support: H0 "E[x] <= b" (the claim is false), rejected -> the data support the claim;
* p_contra:  H0 "E[x] >= b" (the claim is true), rejected -> the data contradict it.

A claim is the intersection of its c comparisons: its support p-value is the largest of theirs (an
intersection-union test needs no correction), its contradiction p-value c times the smallest (Bonferroni:
one contradicted comparison contradicts the claim). Over the k claims of a paper, Holm's step-down procedure
controls each family at ``ALPHA``: the probability that any claim of the paper is wrongly reported SUPPORTED
is at most ALPHA, and likewise for CONTRADICTED (up to the t approximation with few seeds; exact for Gaussian
differences). Neither rejected: INCONCLUSIVE, with the number of seeds a one-sided t-test at the same level
would need to decide with probability ``POWER`` if the true mean difference and its spread were the observed
ones (``stats.samples_needed_for_bias``): a planning figure, not a promise.

A non-inferiority comparison on accuracy ("A is at most m worse than B") cannot support its claim when B did not
learn (B's mean accuracy below chance + ``LEARNED``): it is reported as uninformative, as a bound a frozen model
would also satisfy.

The interval reported per comparison is Student t's [lower bound at the support level, upper bound at the
contradiction level] that Holm's procedure tests this claim at (one-sided bounds); the decision uses the
conservative p-values, so a comparison whose t interval just excludes the boundary may stay undecided when
Hall's test does not reject. Measured levels with 5 seeds at a nominal one-sided 0.05 (20,000 draws): Gaussian
differences 0.040 / 0.038 (support / contradiction side); exponential-shaped (skewness 2) differences 0.008 / 0.110,
so with strongly skewed per-seed differences the rate on one side can be about twice nominal: the report shows each
comparison's sample skewness.
"""
from __future__ import annotations

import math

import numpy as np

from theory import stats

from .claim import CONTRADICTED, INCONCLUSIVE, METRICS, SUPPORTED, Claim, Comparison, chance_level

ALPHA = 0.05  # family-wise rate of wrong SUPPORTED (and, separately, wrong CONTRADICTED) verdicts per paper
POWER = 0.8  # the power behind "seeds needed"
# "A is no worse than B" says nothing when B did not learn: a non-inferiority comparison on accuracy is only
# supported when B's mean accuracy is at least this far above chance (1 / number of classes)
LEARNED = 0.05


def pair(comp: Comparison, metric: str, runs_a: dict, runs_b: dict) -> dict:
    """Per-seed values of one comparison from the two arms' final records ({seed: record}); pairing checked.

    Records that failed (an exception, no metrics) or are missing leave their seed out, and are listed.
    """
    seeds = sorted(set(runs_a) | set(runs_b))
    used, x, problems, unpaired = [], [], [], []
    for s in seeds:
        ra, rb = runs_a.get(s), runs_b.get(s)
        bad = [(n, r) for n, r in ((comp.a, ra), (comp.b, rb)) if r is None or r["status"] not in ("ok", "diverged")]
        if bad:
            problems += [f"seed {s}: {n} {'missing' if r is None else r['status']}"
                         + (f" ({r.get('message', '')[:120]})" if r is not None and r.get("message") else "")
                         for n, r in bad]
            continue
        why = pairing_mismatch(ra, rb)
        if why:
            unpaired.append(f"seed {s}: {why}")
            continue
        used.append(s)
        x.append(comp.values(metric, ra, rb))
    ref = [METRICS[metric][0](runs_b[s]) for s in used]
    chance = [chance_level(runs_b[s]) for s in used]
    return {"seeds": used, "x": x, "problems": problems, "unpaired": unpaired,
            "b_mean": float(np.mean(ref)) if ref else None, "chance": max(chance) if chance else None,
            "diverged": sorted({f"{n} seed {s}" for s in used for n, r in ((comp.a, runs_a[s]), (comp.b, runs_b[s]))
                                if r["status"] == "diverged"})}


def pairing_mismatch(ra: dict, rb: dict) -> str:
    """Why two records are not a pair (same seed, partition and initial model), or ''."""
    if ra["config"]["seed"] != rb["config"]["seed"]:
        return f"seeds differ ({ra['config']['seed']} vs {rb['config']['seed']})"
    pa, pb = (ra.get("partition") or {}).get("fingerprint"), (rb.get("partition") or {}).get("fingerprint")
    if pa != pb:
        return f"partitions differ ({pa} vs {pb})"
    ia, ib = (ra.get("initial_model") or {}).get("fingerprint"), (rb.get("initial_model") or {}).get("fingerprint")
    if ia is not None and ib is not None and ia != ib:
        return f"initial models differ ({ia} vs {ib})"
    return ""


def _pvalues(x: list[float], b: float) -> tuple[float, float]:
    if len(x) < 2:
        return 1.0, 1.0
    if not all(math.isfinite(v) for v in x):
        return 1.0, 1.0
    p_support = stats.upper_bound(np.asarray(x), b, alpha=ALPHA).p_value
    p_contra = stats.upper_bound(-np.asarray(x), -b, alpha=ALPHA).p_value
    return float(p_support), float(p_contra)


def uninformative(comp: Comparison, metric: str, pr: dict) -> str:
    """Why a comparison cannot support its claim whatever the data (its reference did not learn), or ''."""
    if comp.test != "noninferior" or METRICS[metric][2] != "points" or pr.get("b_mean") is None:
        return ""
    if pr["b_mean"] < pr["chance"] + LEARNED:
        return (f"{comp.b} did not learn (mean {100 * pr['b_mean']:.1f}% vs chance {100 * pr['chance']:.1f}%): "
                f"'no worse than {comp.b}' is vacuous")
    return ""


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values (step-down; reject H_i at family-wise level a iff adjusted p_i <= a)."""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    adj, running = [1.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adj[i] = running
    return adj


def _rank(pvalues: list[float], i: int) -> int:
    """0-based position of p_i in the ascending order used by ``holm`` (ties by index)."""
    return sorted(range(len(pvalues)), key=lambda j: pvalues[j]).index(i)


def _bounds(x: list[float], b: float, level_s: float, level_c: float) -> tuple[float | None, float | None]:
    """Student-t one-sided bounds (lower at the support level, upper at the contradiction level). Shown, not
    used for the decision: Hall's correction inside the conservative test inverts to intervals that leave
    the metric's range at 5 seeds and Holm's levels, so the display uses the t alone."""
    if len(x) < 2 or not all(math.isfinite(v) for v in x):
        return None, None
    lo = stats.upper_bound(np.asarray(x), b, alpha=level_s, method="t").details["lower_confidence_bound"]
    hi = stats.upper_bound(np.asarray(x), b, alpha=level_c, method="t").details["upper_confidence_bound"]
    return float(lo), float(hi)


def _skewness(x: list[float]) -> float | None:
    if len(x) < 3 or float(np.std(x)) == 0:
        return None
    c = np.asarray(x) - np.mean(x)
    return float((c ** 3).mean() / (c ** 2).mean() ** 1.5)


def seeds_needed(x: list[float], b: float, level: float) -> int | None:
    """Seeds a one-sided t-test at ``level`` needs to decide with probability POWER if the mean and the sd of
    x were the truth; None when no number decides (mean exactly at the boundary, or no spread to estimate)."""
    if len(x) < 2:
        return None
    e, sd = float(np.mean(x)) - b, float(np.std(x, ddof=1))
    if e == 0 or sd == 0 or not math.isfinite(e):
        return None
    return int(stats.samples_needed_for_bias(e, sd, alpha=level, power=POWER, one_sided=True))


def decide(claims: list[Claim], paired: dict[str, list[dict]], alpha: float = ALPHA) -> list[dict]:
    """Verdicts for the claims of one paper. ``paired[claim.id]`` holds ``pair(...)`` for each comparison, in
    order. Returns one dict per claim: verdict, Holm-adjusted p-values, per-comparison evidence."""
    k = len(claims)
    sup, con, per = [], [], []
    for c in claims:
        rows = []
        for comp, pr in zip(c.comparisons, paired[c.id]):
            ps, pc = _pvalues(pr["x"], comp.boundary)
            vacuous = uninformative(comp, c.metric, pr)
            rows.append({"p_support": 1.0 if vacuous else ps, "p_contra": pc, "uninformative": vacuous})
        per.append(rows)
        sup.append(max(r["p_support"] for r in rows))
        con.append(min(1.0, len(rows) * min(r["p_contra"] for r in rows)))
    sup_adj, con_adj = holm(sup), holm(con)
    out = []
    for i, c in enumerate(claims):
        ncomp = len(c.comparisons)
        level_s = alpha / (k - _rank(sup, i))
        level_c = alpha / ((k - _rank(con, i)) * ncomp)
        verdict = SUPPORTED if sup_adj[i] <= alpha else CONTRADICTED if con_adj[i] <= alpha else INCONCLUSIVE
        comps, needed = [], []
        for comp, pr, pv in zip(c.comparisons, paired[c.id], per[i]):
            x, b = pr["x"], comp.boundary
            lo, hi = _bounds(x, b, level_s, level_c)
            mean = float(np.mean(x)) if x else None
            side = None if mean is None else ("supports" if pv["p_support"] <= level_s else
                                              "contradicts" if pv["p_contra"] <= level_c else "undecided")
            if pv["uninformative"] and side != "contradicts":
                side = "uninformative"
            n_more = None
            if side == "undecided":
                n_more = seeds_needed(x, b, level_s if mean > b else level_c)
                needed.append(n_more)
            comps.append({"a": comp.a, "b": comp.b, "test": comp.test, "setting": comp.setting,
                          "statement": comp.describe(c.metric), "boundary": b, "seeds": pr["seeds"],
                          "values": x, "mean": mean, "sd": float(np.std(x, ddof=1)) if len(x) > 1 else None,
                          "n": len(x), "lower": lo, "upper": hi, "skewness": _skewness(x), "level_support": level_s,
                          "level_contra": level_c, "p_support": pv["p_support"], "p_contra": pv["p_contra"],
                          "side": side, "seeds_needed": n_more, "uninformative": pv["uninformative"],
                          "reference_mean": pr["b_mean"], "chance": pr["chance"], "problems": pr["problems"],
                          "unpaired": pr["unpaired"], "diverged": pr["diverged"]})
        vacuous = [pv["uninformative"] for pv in per[i] if pv["uninformative"]]
        decided = [s for s in needed if s is not None]
        out.append({"verdict": verdict, "p_support": sup[i], "p_contra": con[i], "p_support_holm": sup_adj[i],
                    "p_contra_holm": con_adj[i], "comparisons": comps,
                    "seeds_needed": (max(decided) if decided and len(decided) == len(needed) else None)
                    if verdict == INCONCLUSIVE else None,
                    "undecidable": verdict == INCONCLUSIVE and any(s is None for s in needed),
                    **({"reason": "uninformative: " + "; ".join(vacuous)} if vacuous and verdict == INCONCLUSIVE
                       else {})})
    return out
