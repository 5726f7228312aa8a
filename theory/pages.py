"""One page per paper (``results/papers/<paper>.md``, ``fedrepro report --paper <paper>|all``): does the algorithm do
what its paper says?

A page is generated from what is committed, and nothing else, so that regenerating it gives the same bytes
(``tests/test_paper_pages.py``):

* the paper, its claims and fedrepro's documented deviations from the paper and from its public code
  (``theory.paper_notes``), with the algorithms' docstring summaries (``algorithms``);
* the theory verdicts (``results/theory/<version>/report.json``);
* the empirical verdicts with their scale, the seeds used and why each stopped
  (``results/claims/<version>/report.json``; read tolerantly: the keys of a sequential report are used when
  present, and a report without them is described as fixed seeds);
* the scales the claims code runs now and their cost plans (``theory.empirical``);
* the committed leaderboards of the paper's suites, beside the paper's numbers where the leaderboard has them
  (for orientation only at a reduced scale), and the commands that reproduce the paper's tables on a GPU
  (``theory.paper_suites``; ``results/perf/README.md`` has the session recipe).

``version`` picks the results folders (default: the newest version present for each kind of result).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .empirical.fields import names_of, read_claim
from .paper_notes import NOTES
from .paper_suites import gpu_section, leaderboards_section, newest

PAPERS = ("bherd", "fedbat", "fedswa", "gradma", "lfl")
STOP_KEYS = names_of("why_stopped") + ("stopped",)  # every name a report has given them (``fields.read_claim``)
SEED_KEYS = names_of("seeds")


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]


# ------------------------------------------------------------------------------------------------ verdicts


def _counts(items) -> str:
    counts = {}
    for v in items:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none yet"


def replication_report(results: Path, version: str | None, paper: str) -> tuple[str, dict] | None:
    """(path, report.json) of the replication of ``paper``'s undecided claims under claims ``version``: the
    combined replication report where it holds the paper, else the paper's own (``claims --scale replication
    --paper``), else None."""
    if not version:
        return None
    base = results / "claims" / str(version) / "replication"
    for path in (base / "report.json", base / "partial" / paper / "report.json"):
        rep = _load(path)
        if rep and any(p.get("paper") == paper for p in rep.get("papers", [])):
            return f"results/claims/{version}/replication{str(path)[len(str(base)):]}", rep
    return None


def _replication_blocks(replication: tuple | None, paper: str) -> list[dict]:
    """``paper``'s entries (one per replicated scale) of a replication report."""
    return [p for p in (replication or (None, {}))[1].get("papers", []) if p.get("paper") == paper]


def _replication_claims(replication: tuple | None, paper: str) -> list[dict]:
    return [c for p in _replication_blocks(replication, paper) for c in p["claims"]]


# ------------------------------------------------------------------------------------------------ the opening


#: what each scale of the claims code is, in words (its name alone, "paper", read as the paper's setting, which
#: it is not: the datasets and metrics it substitutes are in its distance); a replication's name ends in "-rep"
SCALE_WORDS = {"cpu": "the reduced CPU scale", "cpu4x": "the reduced CPU scale with 4x the compute per run",
               "paper": "the paper's setting with substitutions", "full": "the paper's full setting"}
SCALE_TAGS = {"cpu": "reduced", "cpu4x": "reduced, 4x compute", "paper": "paper's setting, substituted",
              "full": "paper's full setting"}
#: a verdict in the opening's words (a verdict this table does not know is shown as it is)
VERDICT_WORDS = {"SUPPORTED": "holds", "CONTRADICTED": "does not hold",
                 "NEGLIGIBLE": "does not hold (the effect is shown smaller than the smallest that matters)",
                 "INCONCLUSIVE": "undecided (its seed budget spent)"}
NOT_A_SETTING = ("seeds", "tuning", "learning rate")  # reductions of the protocol, not of the setting


def scale_words(name: str | None) -> str:
    """``cpu`` -> "the reduced CPU scale (`cpu`)"; a replication, "... replicated on fresh seeds"."""
    if not name:
        return "an unnamed scale"
    base, rep = (name[:-4], True) if name.endswith("-rep") else (name, False)
    return (SCALE_WORDS.get(base, f"the {base} scale") + (", replicated on fresh seeds" if rep else "")
            + f" (`{name}`)")


def scale_tag(name: str | None) -> str:
    """A table's scale cell: its name and what it is, "`cpu` (reduced)"."""
    if not name:
        return ""
    base, rep = (name[:-4], True) if name.endswith("-rep") else (name, False)
    return f"`{name}` ({SCALE_TAGS.get(base, base)}{', fresh seeds' if rep else ''})"


def _groups(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every top-level parenthesised group of ``text`` (nested ones inside)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            start, depth = (i if depth == 0 else start), depth + 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                out.append((start, i + 1))
    return out


def _without(text: str, keep=lambda group: False) -> str:
    """``text`` without its top-level parenthesised groups (those for which ``keep`` holds stay)."""
    for a, b in reversed(_groups(text)):
        if not keep(text[a:b]):
            text = text[:a].rstrip() + text[b:]
    return " ".join(text.split())


def _first(text: str) -> str:
    """A value's first clause, asides left out: "ResNet-18 (GroupNorm), 11.2M parameters" -> "ResNet-18"."""
    return re.split(r"[,;] ", _without(text))[0].strip()


def distance_parts(reductions: list[str]) -> list[str]:
    """How far a scale is from the paper's setting: each reduction of the setting (not of the protocol: seeds,
    tuning) as "here (paper there)", its first clause only; datasets and models without their label."""
    parts = []
    for line in reductions:
        what, _, rest = line.partition(": paper ")
        paper, _, here = rest.partition(", here ")
        what = _without(what)
        if not here or what in NOT_A_SETTING:
            continue
        label = "" if what in ("dataset", "model") else f"{what.split(' ')[0]}: " if what.startswith("metric") \
            else f"{what} "
        parts.append(f"{label}{_first(here)} (paper {_first(paper)})")
    return parts


def distance(reductions: list[str]) -> str:
    return ", ".join(distance_parts(reductions)) or "the paper's setting"


def _claim_rows(paper: str, claims_report: dict | None, replication: tuple | None) -> dict:
    """{claim id: [(verdict, scale, its reductions)]} of the first stage and of the replication, in report order."""
    rows: dict[str, list] = {}
    blocks = [p for p in (claims_report or {}).get("papers", []) if p.get("paper") == paper]
    for p in blocks + _replication_blocks(replication, paper):
        for c in p["claims"]:
            rows.setdefault(c["id"], []).append((c["verdict"], c.get("scale", p["scale"].get("scale")),
                                                 p["scale"].get("reductions"), c.get("statement") or c["id"]))
    return rows


def reconcile(verdicts: list[str]) -> str:
    """One answer from a claim's verdicts at its scales: the same at every scale, or the decided ones where the
    others stayed undecided, or "mixed" when decided scales disagree."""
    decided = {v for v in verdicts if v != "INCONCLUSIVE"}
    if not decided:
        return "undecided"
    if decided <= {"SUPPORTED"}:
        return "holds"
    if "SUPPORTED" not in decided and decided <= {"CONTRADICTED", "NEGLIGIBLE"}:
        return "does not hold"
    return "mixed: it holds at one scale and not at another"


#: a claim judged a second time on the authors' code's reading of the algorithms (GradMA's ``<claim>.code``, issue 49)
CODE_SUFFIX = ".code"


def reading(cid: str, ids) -> str | None:
    """Which reading of the algorithm a verdict is about, where a paper's claims are judged under two: the one the
    paper states, or the one its authors' code runs (the ``.code`` twin); None for a claim judged once."""
    if cid.endswith(CODE_SUFFIX):
        return "as the authors' code runs it"
    return "as the paper states it" if cid + CODE_SUFFIX in ids else None


def claim_sentence(cid: str, rows: list[tuple], how: str | None = None) -> str:
    """One sentence: the claim (``how``: the reading it is judged under, where there are two), its verdicts at every
    scale reconciled into one answer, then each scale's verdict, setting and distance from the paper's setting (a
    later scale: only where it differs from the first)."""
    first = re.split(r"(?<=[.:])\s", rows[0][3])[0].rstrip(".:")
    at, base = [], None
    for verdict, scale, reductions, _ in rows:
        parts = None if reductions is None else distance_parts(reductions)
        if parts is None:
            where = "its distance from the paper's setting is not recorded"
        elif base is None:
            base, where = parts, ", ".join(parts) or "the paper's setting"
        else:
            other = [x for x in parts if x not in base]
            where = "as above" + (" but " + ", ".join(other) if other else "")
        at.append(f"{VERDICT_WORDS.get(verdict, verdict.lower())} at {scale_words(scale)}: {where}")
    return (f"- *{first}*{f', {how}' if how else ''} (`{cid}`): **{reconcile([r[0] for r in rows])}**; "
            + "; ".join(at) + ".")


THEORY_WORDS = {"HOLDS": "hold", "VIOLATED": "violated", "INCONCLUSIVE": "inconclusive",
                "UNINFORMATIVE": "uninformative (an algorithm that never moves passes too)"}


def theory_sentence(paper: str, theory_report: dict | None) -> str:
    """The theory checks in one sentence: how many hold, and which do not (by name)."""
    claims = [c for c in (theory_report or {}).get("claims", []) if c.get("paper") == paper]
    if not claims:
        return "- Theory: no numerical check of this paper's theorems yet."
    by: dict[str, list] = {}
    for c in claims:
        by.setdefault(c["verdict"], []).append(c["id"].split(".", 1)[-1])
    rate = max((c.get("false_alarm") or 0.0) for c in claims)
    parts = [f"{len(v)} {THEORY_WORDS.get(k, k.lower())}" + ("" if k == "HOLDS" else f": {', '.join(v)}")
             for k, v in sorted(by.items(), key=lambda kv: (kv[0] != "HOLDS", kv[0]))]
    derived = sum(c.get("kind") == "derived" for c in claims)
    what = "the paper's statements" + (f" ({derived} of them derived from its results)" if derived else "")
    return (f"- Theory ({len(claims)} numerical checks of {what}, each with a false-alarm rate of at most {rate:g}): "
            + "; ".join(parts) + ".")


def confidence_sentence(paper: str, claims_report: dict | None, replication: tuple | None) -> str:
    """The confidence of the intervals the page shows, from the levels the claims report recorded."""
    levels = [lv for p in [q for q in (claims_report or {}).get("papers", []) if q.get("paper") == paper]
              + _replication_blocks(replication, paper) for c in p["claims"] for x in c.get("comparisons", [])
              for k, lv in (x.get("levels") or {}).items() if k in ("SUPPORTED", "CONTRADICTED")]
    alpha = ((claims_report or {}).get("method") or {}).get("alpha")
    if not levels:
        return ""
    conf = 1 - max(levels)
    return (f"Intervals in brackets below are repeated confidence intervals of the mean paired difference: each end "
            f"is a one-sided bound at {100 * conf:.3g}% confidence or more (Holm's level of its claim"
            + (f", at most {alpha:g} per paper for each kind of wrong verdict" if alpha else "")
            + "), valid at whichever look its seeds stopped; the two ends together cover the difference with at least "
            f"{100 * (2 * conf - 1):.3g}% confidence.")


def opening(paper: str, claims_report: dict | None, theory_report: dict | None,
            replication: tuple | None = None) -> list[str]:
    """The page's answer first: one sentence per empirical claim (its verdicts at every scale reconciled, each with
    its setting and its distance from the paper's), one for the theory checks, and the intervals' confidence."""
    rows = _claim_rows(paper, claims_report, replication)
    md = ["## In short", ""]
    if not rows:
        md += ["- Empirical claims: no claims report for this paper yet."]
    md += [claim_sentence(cid, r, reading(cid, rows)) for cid, r in rows.items()]
    md += [theory_sentence(paper, theory_report), ""]
    conf = confidence_sentence(paper, claims_report, replication)
    return md + ([conf, ""] if conf else []) + ["Details, deviations and how to reproduce below.", ""]


def seeds_used(c: dict) -> int:
    c = read_claim(c)
    if isinstance(c.get("seeds"), int):
        return c["seeds"]
    return max((x.get("n") or 0 for x in c.get("comparisons", [])), default=0)


def stop_reason(c: dict) -> str:
    """Why a claim's seeds stopped: the report's own words where it has them (and, for an undecided claim, the
    decision that came closest)."""
    c = read_claim(c)
    why = next((str(c[k]) for k in ("why_stopped", "stopped", "reason") if c.get(k)), None)
    if why is None:
        return f"a fixed {seeds_used(c)} paired seeds (this report has no sequential stopping)"
    closest = c.get("closest") if isinstance(c.get("closest"), dict) else None
    return why + (f"; closest: {closest['text']}" if closest and closest.get("text") else "")


def _which(sc) -> str:
    """The claims a declared replication repeats: named, or (declared before its first stage ran) those that stage
    leaves INCONCLUSIVE."""
    if getattr(sc, "inconclusive_only", False):
        return ("those of " + (", ".join(sc.only) if sc.only else "its claims")
                + " that the first stage leaves INCONCLUSIVE (tuned again)")
    return ", ".join(sc.only)


def replication_section(paper: str, replication: tuple | None) -> list[str]:
    """The undecided claims repeated on fresh seeds: their verdicts beside the first stage's, or what is declared
    and not run yet."""
    from . import empirical
    from .empirical.report import diverged_lines
    from .empirical.scale import REPLICATION, paper_scales

    declared = paper_scales(empirical.paper(paper), "replication")
    rep = _replication_claims(replication, paper)
    if not declared and not rep:
        return []
    recorded = (replication[1].get("method") or {}).get("replication") if rep else None
    md = ["### Replication on fresh seeds", "", recorded or REPLICATION, ""]  # a report keeps the text it was judged by
    busy = [p for p in _replication_blocks(replication, paper) if p.get("under_way")]
    if busy:
        md += [f"Under way ({'; '.join(p['under_way'] for p in busy)}; from `{replication[0]}`): "
               f"`fedrepro claims --scale replication --paper {paper}` resumes it.", ""]
    if not rep and not busy:
        return md + ["Declared and not run yet: " + "; ".join(
            f"{_which(sc)} at the {sc.replicates} scale, seeds {sc.seed_start}-{sc.seed_start + sc.max_seeds - 1}"
            f" in looks {', '.join(map(str, sc.looks))}, {sc.cpu_minutes:g} CPU-min" for sc in declared)
            + f" (`fedrepro claims --scale replication --paper {paper}`).", ""]
    if not rep:
        return md
    keys = {(c["id"], c.get("scale")): c.get("key_number", "") for c in replication[1].get("claims", [])}
    rows = [[c["id"], f"**{c['verdict']}**", scale_tag(c["scale"]), seeds_used(c), stop_reason(c),
             keys.get((c["id"], c["scale"]), "")]
            for c in rep]
    return md + [f"From `{replication[0]}`:", ""] + _table(
        ["claim", "verdict", "scale", "seeds", "why it stopped", "key number"], rows) + [""] + diverged_lines(rep)


def _pair(x: dict, with_setting: bool) -> str:
    return f"{x['a']} vs {x['b']}" + (f" ({x['setting']})" if with_setting else "")


def grid_end_lines(blocks: list[dict], noise: str | None = None) -> list[str]:
    """Per scale, the tuning choices at an end of their grid (``benchmark.campaign.tuning.grid_end``): a verdict between arms
    tuned at their grid's ceiling answers "under this grid", which a reader of the verdicts should see. ``noise``:
    the path of the tuning-noise page beside the claims report, where there is one."""
    from benchmark.campaign.tuning import chosen_at_end, point_label

    out = []
    for p in blocks:
        ends = chosen_at_end(p.get("tuning") or {})
        if ends:
            out.append(f"Tuning at the {p['scale'].get('scale')} scale: {len(ends)} of {len(p['tuning'])} choices are "
                       "an end of their grid (" + "; ".join(f"{k}: {point_label(pt)}" for k, pt in ends) + "): a "
                       "better point may lie beyond it, and the verdicts compare arms tuned alike under that grid"
                       + (f" (`{noise}` measures how stable the choices are)." if noise else "."))
            out.append("")
    return out


def empirical_section(paper: str, claims_report: dict | None, where: str,
                      replication: tuple | None = None, noise: str | None = None) -> list[str]:
    from .empirical.report import diverged_lines

    md = ["## Empirical verdicts", ""]
    blocks = [p for p in (claims_report or {}).get("papers", []) if p.get("paper") == paper]
    if not blocks:
        return md + [f"No empirical claims report for this paper yet ({where}).", ""]
    md += [f"From `{where}`. Each claim is a paired comparison over seeds after the same tuning budget for every "
           "method (the claims report explains the test); the scale says how far the runs are from the paper's "
           "setting.", ""]
    # a claim run at two scales has one key number per scale: keyed by (claim, scale), or the second scale's
    # numbers would stand beside the first scale's verdict
    keys = {(c["id"], c.get("scale")): c.get("key_number", "") for c in claims_report.get("claims", [])}
    rows = []
    for p in blocks:
        for c in p["claims"]:
            scale = c.get("scale", p["scale"].get("scale"))
            rows.append([c["id"], c["statement"], f"**{c['verdict']}**", scale_tag(scale), seeds_used(c), stop_reason(c),
                         keys.get((c["id"], scale), "")])
    md += _table(["claim", "tested", "verdict", "scale", "seeds", "why it stopped", "key number"], rows) + [""]
    md += error_lines(paper, claims_report, blocks, replication)
    md += diverged_lines([dict(c, scale=c.get("scale", p["scale"].get("scale"))) for p in blocks for c in p["claims"]])
    md += grid_end_lines(blocks, noise)
    for p in blocks:
        for c in p["claims"]:
            comp = c.get("companion")
            if comp:
                many = len(c["comparisons"]) > 1
                md += [f"{c['id']} ({c.get('scale', p['scale'].get('scale'))} scale): decided on `{c['metric']}`; the "
                       f"claim's own `{comp['metric']}` beside it (mean paired difference, points): " + "; ".join(
                           f"{_pair(x, many)} " + ("-" if y.get("mean") is None else f"{100 * y['mean']:+.2f}")
                           for x, y in zip(c["comparisons"], comp["comparisons"])) + ".", ""]
    md += objection_lines(blocks)
    for p in blocks:
        sc = p["scale"]
        md += [f"Scale **{sc.get('scale')}**, {scale_words(sc.get('scale')).rsplit(' (', 1)[0]}: kept from the paper: "
               + "; ".join(sc.get("kept", []))
               + ".", "", "Reductions (paper -> here): " + "; ".join(sc.get("reductions", [])) + ".", ""]
    return md + replication_section(paper, replication)


def objection_lines(blocks: list[dict]) -> list[str]:
    """Per claim, as its report declared it (0.4.0 on; a report before declares none and gets nothing): the deciding
    metric and why it can show the claimed effect, the paper's own metric, the metrics beside it, and the strongest
    objection an author could raise against the test with what the protocol does about it
    (``report_protocol.declared_lines``), at the claim's first scale."""
    from .empirical.report_protocol import declared_lines

    md, seen = [], set()
    for p in blocks:
        for c in p["claims"]:
            lines = [] if c["id"] in seen else declared_lines(c)
            if lines:
                seen.add(c["id"])
                md += [f"**{c['id']}** (`{c.get('scale', p['scale'].get('scale'))}` scale).", ""] + lines
    return (["### Each test's metric, and the strongest objection to it", ""] + md) if md else []


def error_lines(paper: str, claims_report: dict, blocks: list[dict], replication: tuple | None) -> list[str]:
    """The error rates of the report's verdicts for ``paper``: the sentence generated from the family its judges
    used (``family.paper_statement`` on the recorded ``method.families``), or, for a report judged before the
    families (0.3.0), what its code did (``family.before_families``)."""
    from .empirical.family import before_families, paper_statement

    fam = next((f for f in (claims_report.get("method") or {}).get("families") or [] if f.get("paper") == paper), None)
    if fam:
        used = {p["scale"].get("scale"): (p.get("budget") or {}).get("looks") for p in blocks}
        return [paper_statement(fam, used), ""]
    scales = [p["scale"].get("scale") for p in blocks + _replication_blocks(replication, paper)]
    text = before_families(claims_report, paper, list(dict.fromkeys(scales)))
    return [text, ""] if text else []


def theory_section(paper: str, theory_report: dict | None, where: str) -> list[str]:
    md = ["## Theory verdicts", ""]
    claims = [c for c in (theory_report or {}).get("claims", []) if c.get("paper") == paper]
    if not claims:
        return md + [f"No theory claims for this paper in `{where}`.", ""]
    counts = {}
    for c in claims:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    md += [f"From `{where}` ({', '.join(f'{n} {v}' for v, n in sorted(counts.items()))}). HOLDS / VIOLATED: a "
           "calibrated test on convex problems with a known optimum or on real training, VIOLATED only with every "
           "hypothesis of the statement verified in the run; PREMISE FAILS: an assumption the algorithm cannot meet "
           "(the statement is not contradicted); NOT REPRODUCED: an empirical figure not reproduced at the stated "
           "setting; UNINFORMATIVE: an algorithm that never moves would pass too.", ""]
    rows = [[c["id"], c.get("kind", ""), c.get("source", ""), f"**{c['verdict']}**", c.get("key_number", "")]
            for c in claims]
    return md + _table(["claim", "kind", "source", "verdict", "key number"], rows) + [""] + findings(claims)


FINDINGS = ("VIOLATED", "PREMISE FAILS", "NOT REPRODUCED")


def findings(claims: list[dict]) -> list[str]:
    """For each VIOLATED, PREMISE FAILS or NOT REPRODUCED verdict: the paper's words, the hypotheses checked in the
    run and the one-line reason (theory reports from 0.4.0 carry them)."""
    md = []
    for c in claims:
        if c["verdict"] not in FINDINGS or "hypotheses" not in c:
            continue
        hyps = c.get("hypotheses") or []
        held = [h["name"] for h in hyps if h["holds"]]
        failed = [f"{h['name']} ({h['value']})" if h.get("value") else h["name"] for h in hyps if not h["holds"]]
        md += [f"**{c['id']}: {c['verdict']}.** " + (f"{c['quote']}" if c.get("quote") else c["statement"]), ""]
        if held:
            md += [f"- Hypotheses verified in the run ({len(held)} of {len(hyps)}): " + "; ".join(held) + "."]
        if failed:
            md += ["- Not met: " + "; ".join(failed) + "."]
        if c.get("reason"):
            md += [f"- Why: {c['reason'].rstrip('.')}."]
        md += [""]
    return md


# ------------------------------------------------------------------------------------------------ scales


def scales_section(paper: str) -> list[str]:
    from . import empirical
    from .empirical.family import family_of, paper_statement
    from .empirical.scale import paper_scales

    mod = empirical.paper(paper)
    md = ["## Scales the claims run at now", "",
          f"`theory/empirical/{paper}.py`; `fedrepro claims --paper {paper}` runs them on a CPU, resumable. The "
          "cost plan counts the tuning runs and up to the most paired seeds the plan allows, at the measured "
          "minutes per run.", "", "Error rates of the claims at these scales (theory/empirical/family.py): "
          + paper_statement(family_of(mod).describe()), ""]
    for sc in paper_scales(mod) + paper_scales(mod, "replication"):
        d = sc.describe()
        only = ", ".join(d["only"]) if d["only"] else "all claims"
        why = without_notes(d["why"] or "")
        md += [f"### `{d['scale']}`: {scale_words(d['scale']).rsplit(' (', 1)[0]} ({only})", "", why[:1].upper() + why[1:],
               ""]
        if d.get("replication"):
            r = d["replication"]
            md += [f"A replication of `{r['replicates']}` (`fedrepro claims --scale replication --paper {paper}`): "
                   f"fresh seeds {r['seeds'][0]}-{r['seeds'][1]}, looks {r['looks']}, its own budget of "
                   f"{r['cpu_minutes']:g} CPU-min.", ""]
        if d["metrics"]:
            md += ["Metric: " + "; ".join(f"`{a}` measured by `{b}`" for a, b in d["metrics"].items()) + ".", ""]
        md += ["Reductions (paper -> here):", ""] + [f"- {r}" for r in d["reductions"]] + [""]
        if d.get("plan"):
            md += ["Plan: " + without_notes(d["plan"][-1]) + " (`fedrepro claims --paper " + paper
                   + " --dry-run` lists each arm's cost per run).", ""]
    return md


#: an aside in the claims code's texts that is a working note (how a cost was measured, on which load, from which
#: records), not something a reader of the page needs: left out of the page
NOTE_MARKS = ("records:", "measured", "load ", "probe", "extrapolated", "CPU time per run")


def without_notes(text: str) -> str:
    """``text`` without the parenthesised asides that are working notes (``NOTE_MARKS``), and without the
    development machine ("this 2-core CPU")."""
    text = _without(text, keep=lambda group: not any(m in group for m in NOTE_MARKS))
    return text.replace("on this 2-core CPU", "on a 2-core CPU")


# ------------------------------------------------------------------------------------------------ page


OUTSIDE = "../shared/"  # the project's working notes beside the repository: never named on a page


def in_repository(text: str) -> str:
    """``text`` without references to files outside the repository (the paper summaries under ``../shared/`` that
    the algorithms' docstrings cite): an aside naming one is dropped, and so is a sentence naming one."""
    text = _without(text, keep=lambda group: OUTSIDE not in group)
    return " ".join(x for x in re.split(r"(?<=\.)\s+", text) if OUTSIDE not in x)


def implementation_section(paper: str) -> list[str]:
    import algorithms

    n = NOTES[paper]
    md = ["## What fedrepro implements", ""]
    rows = []
    for name in n["algorithms"]:
        cls = algorithms.get_class(name)
        module_doc = sys.modules[cls.__module__].__doc__
        own_file = getattr(cls, "algorithm", cls).__module__ != cls.__module__  # a configuration in its own module
        doc = ((module_doc if own_file else None) or cls.__doc__ or module_doc or "").strip()
        first = in_repository(" ".join(doc.split("\n\n")[0].split()))
        rows.append([f"`{name}`", f"`{cls.__module__.replace('.', '/')}.py`", first])
    md += _table(["algorithm", "module", "what (its docstring; the equations and choices are there)"], rows) + [""]
    md += ["### Deviations from the paper", ""] + [f"- {x}" for x in n["from_paper"]] + [""]
    md += ["### Deviations from the public code" + ("" if n["code"] else " (none released)"), ""]
    if n["code"]:
        md += [f"Public code: {n['code']} (read for behaviour only, never copied).", ""]
    md += [f"- {x}" for x in n["from_code"]] + [""]
    md += ["The paper suites' `[notes]` (" + ", ".join(f"`benchmark/suites/{s}.toml`" for s in n["suites"]["paper"])
           + ") list every choice the paper leaves open at its own setting.", ""]
    return md


def page(paper: str, results: Path, theory_version: str | None = None,
         claims_version: str | None = None, out: Path | None = None) -> str:
    """The markdown page of ``paper`` from the committed results under ``results``, its links relative to the
    folder ``out`` it is written into."""
    if paper not in NOTES:
        raise ValueError(f"unknown paper {paper!r}; papers with a page: {', '.join(PAPERS)}")
    n = NOTES[paper]
    tv = theory_version or newest(results / "theory", "report.json")
    cv = claims_version or newest(results / "claims", "report.json")
    theory = _load(results / "theory" / str(tv) / "report.json") if tv else None
    claims = _load(results / "claims" / str(cv) / "report.json") if cv else None
    replication = replication_report(results, cv, paper)
    md = [f"# {n['title']} ({n['cite']})", "",
          f"Does the algorithm do what the paper says? This page is generated by `fedrepro report --paper {paper} --publish` "
          f"from the committed results (theory {tv or '-'}, empirical claims {cv or '-'}); do not edit it by hand.",
          ""] + opening(paper, claims, theory, replication) + ["## What the paper claims", ""] + [
              f"- {c}" for c in n["claims"]] + [""]
    noise = f"results/claims/{cv}/tuning-noise.md"
    md += empirical_section(paper, claims, f"results/claims/{cv}/report.json", replication,
                            noise if cv and (results / "claims" / str(cv) / "tuning-noise.md").is_file() else None)
    md += theory_section(paper, theory, f"results/theory/{tv}/report.json")
    md += implementation_section(paper)
    md += scales_section(paper)
    md += leaderboards_section(paper, results, out)
    md += gpu_section(paper, (cv, (claims or {}).get("code_version", {}).get("git_commit")) if cv else None)
    return "\n".join(md).rstrip() + "\n"


def write_pages(papers, results="results", out: str | None = None) -> list[Path]:
    """Write ``<out>/<paper>.md`` (default ``<results>/papers``) for each paper; ``papers``: names or "all"."""
    results = Path(results)
    names = list(PAPERS) if papers in ("all", ["all"], ("all",)) else [papers] if isinstance(papers, str) else papers
    folder = Path(out) if out else results / "papers"
    texts = {p: page(p, results, out=folder) for p in names}  # an unknown paper fails before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for p, text in texts.items():
        path = folder / f"{p}.md"
        path.write_text(text)
        paths.append(path)
    return paths
