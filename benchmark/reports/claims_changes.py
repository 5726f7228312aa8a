"""Why an empirical claim's verdict changed between two versions (``fedrepro report --compare OLD NEW``, issue 43).

A claim's *standing* in a version is the verdict of the last stage that judged it: the first stage
(``claims/<v>/report.json``) or, where that left the claim INCONCLUSIVE, its declared replication
(``claims/<v>/replication/report.json``, whose scales are named ``<scale>-rep``). A claim judged at several scales
(a main claim again at 4x the compute) has one standing per scale. For every claim whose standing changed, the two
versions' protocols are set side by side from the reports alone: the scale and stage, how many paired seeds and why
they stopped, the deciding metric, the smallest effect that matters, each compared pair's mean difference with its
interval, and the tuning of every arm the claim compares (the chosen point, its validation score, on how many
tuning seeds, whether it lies at an edge of its grid that the rule could still extend, or a value fixed by the
protocol with its reason; and how far ahead of the runner-up it was, with the standard error of that gap over the
tuning seeds, so that a choice between two points that the tuning seeds cannot tell apart reads as a tie: the
cause of FedSWA's three changed verdicts from 0.4.0 to 0.5.0). Nothing is recomputed: what the two reports say, in one place, so that a changed
verdict reads with its cause (a better-tuned baseline, another metric, more seeds) next to it.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from benchmark.campaign.tuning import at_edge, lost_to_failures, point_label

REP = "-rep"  # the suffix of a replication's scale


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _entries(report: dict, stage: str) -> list[dict]:
    """One entry per judged claim row of a claims report: its summary row, the paper section (scale, tuning) and
    the claim's full record (comparisons, metric, margin) that the row came from."""
    papers = report.get("papers", [])
    out = []
    for row in report.get("claims", []):
        paper = next((p for p in papers if p.get("paper") == row.get("paper")
                      and (p.get("scale") or {}).get("scale") == row.get("scale")), None)
        claim = next((c for c in (paper or {}).get("claims", []) if c.get("id") == row["id"]), None)
        out.append({"row": row, "paper": paper, "claim": claim, "stage": stage})
    return out


def _reports(root: Path, version: str) -> tuple[dict | None, dict]:
    """A version's first-stage report (None if absent) and its replication's ({} if absent), each read once."""
    base = Path(root) / "claims" / version
    return _load(base / "report.json"), _load(base / "replication" / "report.json") or {}


def standings(root: Path, version: str, reports: tuple[dict | None, dict] | None = None) -> dict[str, dict] | None:
    """{key: entry} of a version's claims (None without a first-stage report): key the claim id for its first
    scale and "id (scale scale)" for each further one, as the first-stage report orders them; the entry of the
    replication where the first stage left the claim INCONCLUSIVE and a replication judged it. ``reports``:
    ``_reports(root, version)`` where the caller has read them already."""
    first, rep = reports or _reports(root, version)
    if first is None:
        return None
    rep_rows = {(e["row"]["id"], e["row"].get("scale")): e for e in _entries(rep, "replication")}
    out, seen = {}, set()
    for e in _entries(first, "first stage"):
        cid, scale = e["row"]["id"], e["row"].get("scale")
        key = cid if cid not in seen else f"{cid} ({scale} scale)"
        seen.add(cid)
        again = rep_rows.get((cid, f"{scale}{REP}"))
        out[key] = again if e["row"]["verdict"] == "INCONCLUSIVE" and again is not None else e
    return out


def shown(e: dict) -> str:
    """"VERDICT (scale)", or "VERDICT (scale, replication)"."""
    row = e["row"]
    where = row.get("scale") or "-"
    return f"{row['verdict']} ({where}{', replication' if e['stage'] == 'replication' else ''})"


def _tuning(e: dict, setting: str, arm: str) -> str:
    t = ((e["paper"] or {}).get("tuning") or {}).get(f"{setting} / {arm}")
    if t is None:
        return "no tuning in the report"
    if "fixed" in t:
        return f"fixed, not tuned ({t['fixed']})"
    if t.get("all_failed") or not t.get("points"):
        return "nothing trained on any grid point"
    pick = t["points"][t["chosen_index"]]
    seeds = len(pick.get("validation_accuracy") or {})
    score = "" if pick.get("mean") is None else f", validation {100 * pick['mean']:.1f}"
    where = "at an edge of its grid" if at_edge(t) else "interior"
    return (f"{point_label(pick['point'])}{score} on {seeds} tuning seed{'s' if seeds != 1 else ''}, {where} "
            f"({len(t['points'])} points tried)") + _runner_up(t)[0] + "".join(_better_where_trained(t))


TIE_SE = 2  # a choice ahead of its runner-up by less than this many standard errors of the gap reads as a tie


def _runner_up(t: dict) -> tuple[str, bool]:
    """(", ahead of <point> by G +- SE points (paired over the k tuning seeds both scored)" with ": a tie" appended
    when G < TIE_SE x SE, whether it is a tie): the gap between the choice and the next best point, each seed's
    scores paired (the tuning seeds give every point the same data), so a flip between versions reads as the noise
    it is. ("", False) without a runner-up."""
    pick = t["points"][t["chosen_index"]]
    others = [x for i, x in enumerate(t["points"]) if i != t["chosen_index"] and x.get("mean") is not None]
    if pick.get("mean") is None or not others:
        return "", False
    nxt = max(others, key=lambda x: x["mean"])
    a, b = pick.get("validation_accuracy") or {}, nxt.get("validation_accuracy") or {}
    d = [100 * (a[s] - b[s]) for s in a if s in b and a[s] is not None and b[s] is not None]
    gap = 100 * (pick["mean"] - nxt["mean"])
    if len(d) < 2:
        return f", ahead of {point_label(nxt['point'])} by {gap:.2f} points (one tuning seed: no spread)", False
    se = statistics.stdev(d) / math.sqrt(len(d))
    tie = gap < TIE_SE * se
    return (f", ahead of {point_label(nxt['point'])} by {gap:.2f} +- {se:.2f} points (paired over the {len(d)} tuning "
            f"seeds both scored){': a tie' if tie else ''}"), tie


def _better_where_trained(t: dict) -> list[str]:
    """", but <point> reached X on the k of n tuning seeds where it trained" for each point that lost to the
    choice only by runs that diverged or failed (``benchmark.campaign.tuning.lost_to_failures``)."""
    return [f", but {point_label(x['point']['point'])} reached {100 * x['trained']:.1f} on the {x['trained_on']} of "
            f"{x['seeds']} tuning seeds where it trained ({' and '.join(x['statuses'])} on the "
            f"other{'s' if x['failed'] > 1 else ''})" for x in lost_to_failures(t)]


def _arms(e: dict) -> list[tuple[str, str]]:
    """(setting, arm) of every arm the claim's comparisons name, in their order."""
    out = []
    for x in (e["claim"] or {}).get("comparisons", []):
        for arm in (x["a"], x["b"]):
            if (x["setting"], arm) not in out:
                out.append((x["setting"], arm))
    return out


def explain(old_e: dict, new_e: dict, old: str, new: str) -> list[str]:
    """The lines that set the two versions' judgements of one claim side by side (module docstring)."""
    o, n = old_e["row"], new_e["row"]
    lines = [f"{v}: **{e['row']['verdict']}** at the {e['row'].get('scale')} scale ({e['stage']})"
             + (f", {seeds} paired seeds" if (seeds := e["row"].get("seeds_used") or e["row"].get("seeds")) else "")
             + (f"; {e['row']['why_stopped']}" if e["row"].get("why_stopped") else "")
             for v, e in ((old, old_e), (new, new_e))]
    if o.get("metric") != n.get("metric"):
        reason = (new_e["claim"] or {}).get("metric_reason")
        lines.append(f"Deciding metric: `{o.get('metric')}` in {old}, `{n.get('metric')}` in {new}"
                     + (f" ({new}'s reason: {reason})" if reason else ""))
    om, nm = (o.get("margin") or {}).get("value"), (n.get("margin") or {}).get("value")
    if om != nm:
        lines.append(f"Smallest effect that matters (in the metric's units): {om} in {old}, {nm} in {new}"
                     + (f" ({new}: {n['margin']['reason']})" if (n.get("margin") or {}).get("reason") else ""))
    lines += [f"Paired differences in {v}: {e['row'].get('key_number') or '-'}" for v, e in ((old, old_e), (new, new_e))]
    arms = _arms(new_e) or _arms(old_e)
    for setting, arm in arms:
        a, b = _tuning(old_e, setting, arm), _tuning(new_e, setting, arm)
        lines.append(f"Tuning of `{setting} / {arm}`: {old}: {a}; {new}: {b}")
    return lines


def compare_standings(root: Path, old: str, new: str) -> dict:
    """The claims whose standing changed between two versions' reports, each with ``explain``'s lines; the counts
    of unchanged, added and removed ones (``compare.compare_verdicts``'s shape)."""
    ro, rn = _reports(root, old), _reports(root, new)
    o, n = standings(root, old, ro), standings(root, new, rn)
    base = Path(root) / "claims"
    out = {"old_report": str(base / old / "report.json") if o is not None else None,
           "new_report": str(base / new / "report.json") if n is not None else None}
    o, n = o or {}, n or {}
    both = [k for k in n if k in o]
    out["changed"] = [{"id": k, "old": shown(o[k]), "new": shown(n[k]), "why": explain(o[k], n[k], old, new)}
                      for k in both if o[k]["row"]["verdict"] != n[k]["row"]["verdict"]]
    out["unchanged"] = sum(o[k]["row"]["verdict"] == n[k]["row"]["verdict"] for k in both)
    out["tuning"] = tuning_changes(root, old, new, (ro, rn))
    out["added"] = [k for k in n if k not in o]
    out["removed"] = [k for k in o if k not in n]
    return out


def _tunings(reports: tuple[dict | None, dict]) -> dict[tuple[str, str, str], dict]:
    """{(paper, scale, "setting / arm"): tuning record} of a version's first stage and replication reports."""
    out = {}
    for report in reports:
        for p in (report or {}).get("papers", []):
            scale = (p.get("scale") or {}).get("scale")
            out.update({(p.get("paper"), scale, k): t for k, t in (p.get("tuning") or {}).items() if t.get("points")})
    return out


def tuning_changes(root: Path, old: str, new: str, reports: tuple | None = None) -> dict:
    """Every tuning (paper, scale, setting / arm) that both versions ran and that chose another point in ``new``,
    whatever its claims' verdicts did: each with both choices, their tuning seeds and ``_runner_up``'s gap in each
    version; and how many tunings both ran. Same tuning seeds and another choice means the code's numerics moved a
    choice that the tuning seeds may not tell from its runner-up (each such change from 0.4.0 to 0.5.0 was a tie).
    ``reports``: both versions' ``_reports`` where the caller has read them already."""
    ro, rn = reports or (_reports(root, old), _reports(root, new))
    o, n = _tunings(ro), _tunings(rn)
    both = [k for k in n if k in o]
    changed = []
    for k in both:
        a, b = o[k], n[k]
        pa, pb = a["points"][a["chosen_index"]], b["points"][b["chosen_index"]]
        if pa["point"] == pb["point"]:
            continue
        seeds = [sorted((t["points"][t["chosen_index"]].get("validation_accuracy") or {})) for t in (a, b)]
        (lead_a, _), (lead_b, tie) = _runner_up(a), _runner_up(b)
        changed.append({"paper": k[0], "scale": k[1], "tuning": k[2], "old": point_label(pa["point"]) + lead_a,
                        "new": point_label(pb["point"]) + lead_b, "same_seeds": seeds[0] == seeds[1], "tie": tie})
    return {"both": len(both), "changed": changed}
