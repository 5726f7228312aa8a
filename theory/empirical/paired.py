"""Paired per-seed values of a comparison, the checks that make them a pair, and Holm's adjustment.

Per comparison (``claim.Comparison``), the per-seed values x_s come from runs that share the seed (so the
partition, the initial model, the client sampling and the minibatch order; the first two are checked from
the records' fingerprints, the last two come from streams keyed by the seed alone, benchmark/sim/engine.py).
``pair`` collects them, leaving out (and listing) seeds whose runs failed, are missing or do not pair; a run
that diverged counts at chance level (``claim.final_accuracy``). The sequential verdicts built on them are in
``tracker`` (the decisions and their error control) and ``judge`` (from records to the report).

A non-inferiority comparison on accuracy ("A is at most m worse than B") cannot support its claim when B did not
learn (B's mean accuracy below chance + ``LEARNED``): it is reported as uninformative, as a bound a frozen model
would also satisfy.
"""
from __future__ import annotations

import numpy as np

from .claim import METRICS, Comparison, chance_level

ALPHA = 0.05  # per paper, the family-wise rate of each kind of wrong verdict (SUPPORTED, CONTRADICTED, NEGLIGIBLE)
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


def skewness(x: list[float]) -> float | None:
    if len(x) < 3 or float(np.std(x)) == 0:
        return None
    c = np.asarray(x) - np.mean(x)
    return float((c ** 3).mean() / (c ** 2).mean() ** 1.5)
