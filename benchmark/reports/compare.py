"""``fedrepro report --compare OLD NEW``: what changed between two versions' committed results.

* Leaderboards: for every suite with a ``runs.csv`` in both ``results/<suite>/OLD`` and ``results/<suite>/NEW``
  (the committed per-run numbers; run records are git-ignored), each cell's final test accuracy over its seeds.
  A cell *moved beyond its seed spread* when the two versions' [min, max] ranges over seeds do not overlap.
  That happens by chance too. The same seeds on unchanged code give the same numbers (nothing moves), but a
  change that redraws the runs' randomness without changing their distribution (another order of random draws,
  a different reduction order) makes the m old and n new values exchangeable continuous draws: they fall in every
  order alike, and the ranges are disjoint only when all m old ones sit below or above all n new ones, 2 of the
  C(m+n, m) equally likely orders (``chance_disjoint``; 0.10 at 3 seeds against 3, 0.008 at 5 against 5). Each
  suite states the sum over its cells: how many would move under such a change alone, so that a few moved cells
  among many are read as what they may be.
  Cells are matched by the ``cell`` column (the config hash without the seed) when both files have it, else by
  the descriptive columns (algorithm, its arguments, dataset, partition, N, S, rounds, model).
* Theory verdicts: ``results/theory/<v>/report.json``, claim by claim; a changed verdict is listed with the new
  report's reason for it (theory reports from 0.4.0 give one for every VIOLATED, PREMISE FAILS, NOT REPRODUCED
  and every INCONCLUSIVE that the hypotheses decided).
* Empirical-claim verdicts: on the CPU scales each claim's standing (``claims_changes``: the first stage's verdict,
  or its replication's where the first stage left it INCONCLUSIVE), every changed one with the two versions'
  protocols side by side (scale, seeds, metric, margin, paired differences, each compared arm's tuning); the
  full scale from ``results/claims/<v>/full/report.json``.
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from tabulate import tabulate

from benchmark.reports import claims_changes

_DESCRIPTIVE = ("algorithm", "algorithm_args", "dataset", "partition", "num_clients", "clients_per_round", "rounds",
                "model")


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _cells(rows: list[dict], use_cell: bool) -> dict[tuple, dict]:
    out: dict[tuple, dict] = defaultdict(lambda: {"acc": [], "status": defaultdict(int), "label": ""})
    for r in rows:
        key = (r["cell"],) if use_cell else tuple(r.get(k, "") for k in _DESCRIPTIVE)
        c = out[key]
        c["label"] = " ".join(f"{k}={r.get(k)}" for k in _DESCRIPTIVE if r.get(k) not in ("", "{}", None))
        c["status"][r["status"]] += 1
        acc = r.get("test_accuracy_fraction", r.get("test_accuracy"))  # the name in runs.csv files written before the column said its unit
        if r["status"] == "ok" and acc not in ("", None):
            c["acc"].append(100 * float(acc))
    return out


def chance_disjoint(m: int, n: int) -> float:
    """The probability that the [min, max] ranges of m and n exchangeable continuous draws do not overlap."""
    return 2 / math.comb(m + n, m) if m and n else 0.0


def compare_suite(old_csv: Path, new_csv: Path) -> dict:
    old_rows, new_rows = _read_csv(old_csv), _read_csv(new_csv)
    use_cell = bool(old_rows and new_rows and "cell" in old_rows[0] and "cell" in new_rows[0])
    old, new = _cells(old_rows, use_cell), _cells(new_rows, use_cell)
    moved, status, same, chance, single = [], [], 0, 0.0, 0
    for key in sorted(set(old) & set(new), key=str):
        o, n = old[key], new[key]
        if dict(o["status"]) != dict(n["status"]):
            status.append({"cell": n["label"], "old": dict(o["status"]), "new": dict(n["status"])})
        if o["acc"] and n["acc"]:
            disjoint = max(o["acc"]) < min(n["acc"]) or max(n["acc"]) < min(o["acc"])
            chance += chance_disjoint(len(o["acc"]), len(n["acc"]))
            single += len(o["acc"]) == len(n["acc"]) == 1
            row = {"cell": n["label"], "old": _stats(o["acc"]), "new": _stats(n["acc"]),
                   "delta": float(np.mean(n["acc"]) - np.mean(o["acc"]))}
            if disjoint:
                moved.append(row)
            else:
                same += 1
    return {"matched": len(set(old) & set(new)), "only_old": len(set(old) - set(new)),
            "only_new": len(set(new) - set(old)), "moved": moved, "status_changed": status, "within_spread": same,
            "expected_by_chance": chance, "one_seed": single,
            "matched_by": "cell hash" if use_cell else "descriptive columns (" + ", ".join(_DESCRIPTIVE) + ")"}


def _stats(v: list[float]) -> dict:
    return {"mean": float(np.mean(v)), "min": float(min(v)), "max": float(max(v)), "seeds": len(v)}


def _verdicts(path: Path) -> dict[str, tuple[str, str | None, str]]:
    """{key: (verdict, scale, reason)} of a report's claims. A claim run at several scales (a claims report's main
    claim at two scales) has one row per scale: its first row is keyed by the claim id, so that it meets the other
    version's row of that claim, and each further row by "id (scale scale)". ``reason``: the report's one line on
    why the verdict is what it is (theory reports from 0.4.0), else ""."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out, seen = {}, set()
    for c in data.get("claims", []):
        key = c["id"] if c["id"] not in seen else f"{c['id']} ({c.get('scale')} scale)"
        seen.add(c["id"])
        out[key] = (c["verdict"], c.get("scale"), str(c.get("reason") or "") if "hypotheses" in c else "")
    return out


def _shown(v: tuple) -> str:
    return v[0] if v[1] is None else f"{v[0]} ({v[1]})"


def compare_verdicts(old: Path, new: Path) -> dict:
    """Verdicts that changed between two reports, each with the new report's reason for its verdict (where it
    gives one); a verdict shows its scale where the report gives one (a change of scale is part of what
    changed)."""
    o, n = _verdicts(old), _verdicts(new)
    return {"old_report": str(old) if old.is_file() else None, "new_report": str(new) if new.is_file() else None,
            "changed": [{"id": i, "old": _shown(o[i]), "new": _shown(n[i]), **({"reason": n[i][2]} if n[i][2] else {})}
                        for i in sorted(set(o) & set(n)) if o[i][0] != n[i][0]],
            "unchanged": sum(o[i][0] == n[i][0] for i in set(o) & set(n)),
            "added": sorted(set(n) - set(o)), "removed": sorted(set(o) - set(n))}


def compare(results: Path, old: str, new: str) -> dict:
    results = Path(results)
    suites = {}
    for d in sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []:
        a, b = d / old / "runs.csv", d / new / "runs.csv"
        if a.is_file() and b.is_file():
            suites[d.name] = compare_suite(a, b)
    return {"old": old, "new": new, "suites": suites,
            "theory": compare_verdicts(results / "theory" / old / "report.json", results / "theory" / new / "report.json"),
            "claims": claims_changes.compare_standings(results, old, new),
            "claims_full": compare_verdicts(results / "claims" / old / "full" / "report.json",
                                            results / "claims" / new / "full" / "report.json")}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(c: dict) -> str:
    out = [f"# Results {c['old']} -> {c['new']}", ""]
    out += ["## Leaderboards", "",
            "A cell *moved* when its [min, max] over seeds in the two versions do not overlap (final test accuracy, "
            "%). Only suites with a committed runs.csv in both versions are compared. Unchanged code on the same seeds "
            "moves nothing; a change that redraws the runs' randomness without changing their distribution makes "
            "ranges of few seeds disjoint by chance (2 in C(m+n, m) for m and n seeds: 0.10 at 3 against 3), so "
            "each suite states how many of its cells such a change would move.", ""]
    if not c["suites"]:
        out += ["No suite has results in both versions.", ""]
    for name, s in c["suites"].items():
        compared = len(s["moved"]) + s["within_spread"]
        if compared and s.get("one_seed") == compared:  # no spread: "beyond their seed spread" would mislead
            moves = (f"{len(s['moved'])} differ, {s['within_spread']} {'is' if s['within_spread'] == 1 else 'are'} "
                     "equal (one seed per cell in both versions: no spread, so any difference counts as a move)")
        else:
            moves = f"{len(s['moved'])} moved beyond their seed spread, {s['within_spread']} within it"
        out += [f"### {name}", "", f"{s['matched']} cells matched by {s['matched_by']} ({s['only_old']} only in "
                f"{c['old']}, {s['only_new']} only in {c['new']}); {moves}; {len(s['status_changed'])} changed "
                "status. A change that only "
                f"redrew the runs' randomness would move about {s['expected_by_chance']:.1f} of these "
                "cells by chance.", ""]
        if s["moved"]:
            rows = [[m["cell"], f"{m['old']['mean']:.2f} [{m['old']['min']:.2f}, {m['old']['max']:.2f}]",
                     f"{m['new']['mean']:.2f} [{m['new']['min']:.2f}, {m['new']['max']:.2f}]", f"{m['delta']:+.2f}"]
                    for m in s["moved"]]
            out += [tabulate(rows, headers=["cell", c["old"], c["new"], "Δ"], tablefmt="github"), ""]
        if s["status_changed"]:
            rows = [[m["cell"], m["old"], m["new"]] for m in s["status_changed"]]
            out += [tabulate(rows, headers=["cell", f"status {c['old']}", f"status {c['new']}"], tablefmt="github"),
                    ""]
    for key, title in (("theory", "Theory verdicts"), ("claims", "Empirical-claim verdicts (CPU scales)"),
                       ("claims_full", "Empirical-claim verdicts (full scale)")):
        v = c[key]
        out += [f"## {title}", ""]
        if not v["old_report"] or not v["new_report"]:
            missing = [x for x, p in ((c["old"], v["old_report"]), (c["new"], v["new_report"])) if not p]
            out += [f"No report for {' and '.join(missing)}.", ""]
            continue
        out += [f"{len(v['changed'])} changed, {v['unchanged']} unchanged, {len(v['added'])} added, "
                f"{len(v['removed'])} removed.", ""]
        if v["changed"]:
            why = any(x.get("reason") for x in v["changed"])
            out += [tabulate([[x["id"], x["old"], x["new"]] + ([_cell(x.get("reason") or "-")] if why else [])
                              for x in v["changed"]],
                             headers=["claim", c["old"], c["new"]] + ([f"why ({c['new']}'s reason)"] if why else []),
                             tablefmt="github"), ""]
        if key == "claims":
            out += ["A claim's verdict here is its standing: the first stage's, or its declared replication's where "
                    "the first stage left it INCONCLUSIVE (marked \"replication\"). Each changed one follows with the "
                    "two versions' protocols side by side, as their reports state them.", ""]
            for x in v["changed"]:
                out += [f"### {x['id']}: {x['old']} -> {x['new']}", ""] + [f"- {_cell(line)}" for line in x["why"]]
                out += [""]
            t = v.get("tuning") or {"both": 0, "changed": []}
            if t["both"]:
                ties = sum(x["tie"] for x in t["changed"])
                out += ["### Tuning choices that changed", "",
                        f"{len(t['changed'])} of the {t['both']} tunings that both versions ran chose another point "
                        f"in {c['new']} ({ties} of them a tie in {c['new']}: ahead of the runner-up by less than "
                        f"{claims_changes.TIE_SE} standard errors of the gap over the tuning seeds), whether or not "
                        "a verdict changed with them.", ""]
                if t["changed"]:
                    out += [tabulate([[x["paper"], x["scale"], x["tuning"], _cell(x["old"]), _cell(x["new"]),
                                       "yes" if x["same_seeds"] else "no"] for x in t["changed"]],
                                     headers=["paper", "scale", "tuning", c["old"], c["new"], "same tuning seeds"],
                                     tablefmt="github"), ""]
        if v["added"]:
            out += ["Added: " + ", ".join(f"`{i}`" for i in v["added"]), ""]
        if v["removed"]:
            gone = (f"Judged in {c['old']}, not in {c['new']} (a scale its protocol does not run, or a paper not judged "
                    "yet)" if key == "claims" else "Removed")
            out += [f"{gone}: " + ", ".join(f"`{i}`" for i in v["removed"]), ""]
    return "\n".join(out)
