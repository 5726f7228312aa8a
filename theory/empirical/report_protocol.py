"""The parts of the claims report that show the 0.4.0 protocol (issues 43 and 49): each arm's tuning, every point
tried with its validation score's mean and spread over the tuning seeds, the extension steps and any choice still at
an edge of its grid (``benchmark.campaign.tuning``, steps 2-3); and, per claim, what its declaration says about its metric:
what the paper reports, why the deciding metric can show the claimed effect, the metrics shown beside it on the
same seeds, and the strongest objection an author could raise with what the protocol does about it
(``claim.Claim``). ``report.py`` calls these; reports written before 0.4.0 (no ``edge`` in their tuning) keep
their own table there.
"""
from __future__ import annotations

from tabulate import tabulate

from benchmark.campaign.tuning import failed_runs, lost_to_failures, point_label

from .metrics import METRICS

EDGE_WHY = {"cap": "the declared cap of the extension is reached",
            "no further value": "the key has no further value (the end of the paper's grid)",
            "pending": "its extension has not run yet",
            "diverged beyond": "the next value did not train on most tuning seeds"}


def is_protocol(tuned: dict) -> bool:
    """Whether a paper's tuning summary is of the 0.4.0 protocol (extension steps and edges recorded)."""
    return any("edge" in t or "fixed" in t for t in tuned.values())


def _sort_key(point: dict) -> tuple:
    return tuple((0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))
                 for v in point.values())


def _score(pt: dict) -> str:
    if pt["mean"] is None:
        st = set(failed_runs(pt).values())
        return " and ".join(sorted(st)) if st else "no score"
    sd = pt.get("sd")
    bad = failed_runs(pt)
    return f"{100 * pt['mean']:.1f}" + ("" if sd is None else f" +- {100 * sd:.1f}") + (
        f" ({' and '.join(sorted(set(bad.values())))} on {len(bad)} of {len(pt['status'])})"
        if bad else "")


def beside_failures(key: str, t: dict) -> str | None:
    """A point that scored higher than the pair's choice on the tuning seeds where it trained, and lost it by runs
    that diverged or failed on the others (``benchmark.campaign.tuning.lost_to_failures``): the objection "you ran
    it below its best rate" stated with its numbers, or None (also for a fixed pair or one where nothing trained)."""
    lost = sorted(lost_to_failures(t), key=lambda x: _sort_key(x["point"]["point"]))
    if not lost:
        return None
    pick = t["points"][t["chosen_index"]]
    out = [f"{point_label(x['point']['point'])} reached {100 * x['trained']:.1f} on the {x['trained_on']} of "
           f"{x['seeds']} tuning seeds where it trained ({' and '.join(x['statuses'])} on the "
           f"other{'s' if x['failed'] > 1 else ''}; mean {100 * x['point']['mean']:.1f})" for x in lost]
    return f"{key}: " + "; ".join(out) + f", against {100 * pick['mean']:.1f} at the choice " \
        f"{point_label(pick['point'])}"


def _edge_text(t: dict) -> str:
    parts = [f"{e['key']} {'largest' if e['direction'] == 'up' else 'smallest'} tried: {EDGE_WHY.get(e['why'], e['why'])}"
             for e in t.get("edge", [])]
    return "; ".join(parts) or "interior"


def tuning_rows(tuned: dict) -> tuple[list, list, list]:
    """The tuning table's rows (the tuned pairs), the fixed pairs with their reasons, and the pairs whose choice is
    still at an edge the rule did not settle (``benchmark.campaign.tuning.at_edge``)."""
    from benchmark.campaign.tuning import at_edge

    rows, fixed, edges = [], [], []
    for key, t in tuned.items():
        if "fixed" in t:
            fixed.append((key, t["fixed"]))
            continue
        chosen = t["points"][t["chosen_index"]]["point"] if t["points"] and not t.get("all_failed") else None
        cells = []
        for pt in sorted(t["points"], key=lambda pt: _sort_key(pt["point"])):
            txt = f"{point_label(pt['point'])}: {_score(pt)}" + (" (+)" if pt.get("extension") else "")
            cells.append(f"**{txt}**" if pt["point"] == chosen else txt)
        if at_edge(t):
            edges.append(key)
        rows.append([key, " / ".join(cells), _edge_text(t) if chosen is not None else "nothing trained"])
    return rows, fixed, edges


def failure_notes(tuned: dict) -> list[str]:
    """``beside_failures`` of every tuned pair that has one."""
    return [note for key, t in tuned.items() if (note := beside_failures(key, t))]


def tuning_lines(p: dict) -> list[str]:
    """The 0.4.0 tuning section of a paper's scale (see the module docstring)."""
    sc, tuned = p["scale"], p["tuning"]
    t = sc["tuning"]
    score = next((x.get("score") for x in tuned.values() if x.get("score")), "the mean validation score")
    md = [f"Tuning: {t['rule']}. Selection on a validation split of {t['validation']} training samples (never the "
          f"test set), tuning seeds {t['tune_seeds']}: a point's score is the {score}; final runs on fresh seeds in "
          f"looks of {p['budget']['looks']} paired seeds.", ""]
    rows, fixed, edges = tuning_rows(tuned)
    if rows:
        md += [tabulate(rows, headers=["setting / arm", "point: validation score % (mean +- sd over the tuning "
                                       "seeds; chosen in bold; (+) added by the extension)", "the choice"],
                        tablefmt="github"), ""]
        md += [f"{len(edges)} of {len(rows)} choices are still at an edge of their grid: "
               + (", ".join(edges) + " (the rule stopped there for the reason given; a better point may lie "
                  "beyond it)." if edges else "every choice is interior, or next to a point that did not train on "
                  "most tuning seeds."), ""]
        notes = failure_notes(tuned)
        if notes:
            md += ["Choices below a point that did better where it trained (the declared score counts a run that "
                   "diverged or failed at the accuracy it ended with, so a rate that fails on a minority of tuning "
                   "seeds loses to the next one; an author may object that the arm ran below its best rate, and "
                   "these are the numbers): " + "; ".join(notes) + ".", ""]
    for why in dict.fromkeys(w for _, w in fixed):
        keys = [k for k, w in fixed if w == why]
        md += [f"Not tuned: {', '.join(keys)} run{'s' if len(keys) == 1 else ''} at the setting's own "
               f"hyperparameters: {why}.", ""]
    if sc.get("weighting"):
        md += ["Aggregation weighting per arm: " + "; ".join(f"{a}: {w}" for a, w in sc["weighting"].items()) + ".",
               ""]
    return md


def _num(v, k: float) -> str:
    return "-" if v is None else f"{k * v:+.2f}"


def _sd(v, k: float) -> str:
    return "-" if v is None else f"{k * v:.2f}"


def declared_lines(c: dict) -> list[str]:
    """A claim's declared metric reasoning, the metrics beside it and the strongest objection (see the module
    docstring); nothing for a claim that declares none."""
    md = []
    if c.get("paper_metric") or c.get("metric_reason"):
        md += [f"Deciding metric: the {METRICS[c['metric']][1]}"
               + (f", because {c['metric_reason']}" if c.get("metric_reason") else "") + "."
               + (f" The paper reports: {c['paper_metric']}." if c.get("paper_metric") else ""), ""]
    for b in c.get("beside") or []:
        k, unit = METRICS[b["metric"]][3], METRICS[b["metric"]][2]
        many = len({x["setting"] for x in c["comparisons"]}) > 1
        md += [f"Beside it, on the same seeds (not deciding), the {METRICS[b['metric']][1]}: " + "; ".join(
            f"{x['a']} vs {x['b']}" + (f" ({x['setting']})" if many else "")
            + f" {_num(y['mean'], k)} {unit} (sd {_sd(y['sd'], k)})"
            for x, y in zip(c["comparisons"], b["comparisons"])) + ".", ""]
    if c.get("objection"):
        md += [f"Strongest objection, and what the protocol does about it: {c['objection']}.", ""]
    return md
