"""The empirical claims report: ``report.md``, ``report.json`` and one plot per claim and scale
(``<id>.<scale>.png``, ``claim_key``), from the papers' results (``run.run_paper``).

``report.json`` (read by ``benchmark.reports.leaderboard.claim_verdicts``, ``benchmark.reports.compare`` and the paper pages):

* ``code_version``, ``environment``, ``meta`` (scale, quick, wall_seconds, cpus, backend, jobs, load_start,
  load_end, note, looks, ``claims_file`` ({path, sha256} of a claims file of the user's, ``own``), and
  ``judged_by``, the code version that judged the records, once ``rerender`` has re-rendered the report),
  ``counts`` ({verdict: number of claims}), ``method`` (``alpha``, ``spending``, ``skew_allowance``, ``text``, and
  from 0.4.0 ``errors``, the paragraph stating the error rates, and ``families``, each paper's error family as the
  judges used it, ``family.Family.describe``; ``replication``, a replication's text), ``before`` (the version whose
  spreads the markdown shows beside these, or null);
* ``claims``: one summary per claim: ``id``, ``paper``, ``verdict`` (SUPPORTED / CONTRADICTED / NEGLIGIBLE /
  INCONCLUSIVE), ``scale``, ``metric``, ``key_number`` (mean difference and interval per comparison),
  ``seeds`` (the most paired seeds a comparison used), ``stopped`` ("decided", "seeds", "cpu" or "no runs"),
  ``why_stopped`` (a sentence; older reports also wrote these two as ``seeds_used`` and ``stop_reason``, which
  ``fields.read_claim`` maps), ``margin`` ({value, reason} in the metric's unit, or null), ``closest`` (for
  INCONCLUSIVE: {verdict, p_holm, text, tied, seeds_to_reach}, else null; ``tied`` lists the families sharing the
  smallest p-value, and with several ``verdict`` is the one fewest seeds would reach, or null);
* ``papers``: per paper ``paper``, ``title``, ``scale`` (the scale's description), ``budget`` ({looks,
  cpu_minutes, reason}), ``tuning``, ``cells`` (counts and ``cell_seconds``), ``seconds``, ``family`` (the paper's
  error family, ``family.described``: which unit this entry is and its level), and ``claims``: the
  full claim dicts of ``judge.Judge.results``: the summary keys plus ``source``, ``quote``, ``statement``,
  ``direction``, ``looks``, ``p_holm`` ({family: Holm-adjusted repeated p-value}), ``alpha``, ``companion``
  (where a scale's metric stands in for the claim's own: {metric, comparisons: [{seeds, values, n, mean, sd}]} of
  the claim's metric on the same seeds) and ``comparisons``, each with ``a``, ``b``, ``test``, ``setting``, ``statement``, ``boundary``, ``negligible``
  (delta, 0 for none), ``paper_gap``, ``seeds``, ``values``, ``n``, ``mean``, ``sd`` (the spread of the
  per-seed differences), ``lower`` / ``upper`` (the repeated confidence interval's ends at the claim's
  current SUPPORTED / CONTRADICTED levels, ``levels``), ``skewness``, ``side`` (supports, contradicts,
  negligible, undecided, uninformative, no runs), ``stop_look``, ``history`` (n, mean, sd per analysed look),
  ``p`` (repeated p-values per family), ``uninformative``, ``reference_mean``,
  ``chance``, ``problems``, ``unpaired``, ``diverged``.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from tabulate import tabulate

from benchmark.runs import store
from benchmark.campaign.tuning import chosen_at_end
from benchmark.runs.record import code_version, environment
from theory.stats.sequential import SKEW_ALLOWANCE

from .claim import METRICS, VERDICTS
from .family import FIRST, Family, Unit, statement
from .fields import read_report
from .judge import closest
from .paired import ALPHA
from .report_protocol import declared_lines, is_protocol, tuning_lines
from .scale import REPLICATION

MANY_SEEDS = 10_000  # above this, a planning figure is shown as "> 10,000"
METHOD = (
    "Each claim is a paper's empirical statement with a metric, a boundary and a direction, tested on paired runs "
    "(the same seed gives every method the same partition, initial model, client sampling and minibatch order: "
    "the partition and the initial model are checked from the records' fingerprints, the sampling and batch streams "
    "are keyed by the seed alone in benchmark/sim/engine.py). Seeds are added in looks (the paper's budget, e.g. 5, 10, "
    "20, 40 paired seeds) and a comparison stops as soon as it is decided: SUPPORTED when the repeated confidence "
    "interval of the mean difference lies above the claim's boundary, CONTRADICTED when it lies below, NEGLIGIBLE "
    "when it lies within +-the claim's smallest effect that matters (declared in the claim's code with its reason, "
    "at most half the difference the paper reports): a superiority claim whose advantage is shown negligible is not "
    "supported. INCONCLUSIVE only when the paper's budget of seeds or CPU time is spent; the report then says which "
    "decision came closest. The error rates of these verdicts are stated below the method, from the code's "
    "families (theory/empirical/family.py). Every method gets "
    "the same declared tuning budget, selected on a validation split of the training data; the test set is used "
    "only by the final runs. A reduced (CPU) scale keeps each paper's regime and states every reduction: its "
    "verdicts are about that scale, and its accuracies are not the paper's numbers.")


def _unit(metric: str) -> tuple[float, str]:
    return METRICS[metric][3], METRICS[metric][2]


def _num(v, k: float, unit: str, signed: bool = True, decimals: int | None = None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if unit == "x":
        return f"{v:.{decimals}f}x" if decimals is not None else f"{v:.3g}x"
    return f"{k * v:+.2f}" if signed else f"{k * v:.2f}"


def ratio_decimals(x: dict) -> int | None:
    """Decimals that keep a ratio comparison's reason visible: one more than its boundary has, and more until every
    value that differs from the boundary reads differently from it (10.882 against ">= 10.9x" printed as "10.9x")."""
    b = x.get("boundary")
    if not isinstance(b, (int, float)):
        return None
    d = len(f"{b:g}".partition(".")[2]) + 1
    vals = [v for v in [x.get("mean"), x.get("lower"), x.get("upper"), *(x.get("values") or [])]
            if isinstance(v, (int, float)) and math.isfinite(v) and v != b]
    while d < 6 and any(f"{v:.{d}f}" == f"{b:.{d}f}" for v in vals):
        d += 1
    return d


def _seeds(n: int | None) -> str:
    if n is None:
        return ""
    return f"> {MANY_SEEDS:,}" if n > MANY_SEEDS else str(n)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def key_number(c: dict) -> str:
    """Per comparison: the mean difference and its repeated confidence interval, in the metric's unit."""
    k, unit = _unit(c["metric"])
    parts = []
    for x in c["comparisons"]:
        if x["mean"] is None:
            parts.append(f"{x['a']} vs {x['b']}: no paired runs")
            continue
        d = ratio_decimals(x) if unit == "x" else None
        iv = f" [{_num(x['lower'], k, unit, decimals=d)}, {_num(x['upper'], k, unit, decimals=d)}]" \
            if x["lower"] is not None else ""
        tag = f"{x['a']} vs {x['b']}{_in_setting(c, x)}"
        parts.append(f"{tag}: {_num(x['mean'], k, unit, decimals=d)}{'' if unit == 'x' else ' ' + unit}{iv}")
    return "; ".join(parts)


def _in_setting(c: dict, x: dict) -> str:
    """" (setting)" when the claim compares in more than one setting (else the comparisons' names say it all)."""
    return f" ({x['setting']})" if len({y["setting"] for y in c["comparisons"]}) > 1 else ""


def _amount(v: float, k: float, unit: str) -> str:
    return f"{k * v:g} " + (unit[:-1] if unit.endswith("s") and k * v == 1 else unit)


def margin_text(c: dict) -> str:
    if not c.get("margin"):
        return "none (a deterministic ratio: no NEGLIGIBLE verdict)"
    k, unit = _unit(c["metric"])
    deltas = sorted({x["negligible"] for x in c["comparisons"] if x["negligible"]})
    v = _amount(c["margin"]["value"], k, unit)
    if deltas and deltas != [c["margin"]["value"]]:
        v += " (per comparison: " + ", ".join(f"{k * d:g}" for d in deltas) + f" {unit})"
    reason = c["margin"]["reason"]
    return reason if reason.startswith(v) and "(per" not in v else f"{v}: {reason}"  # no "1 point: 1 point of ..."


def verdict_lines(c: dict) -> list[str]:
    """The verdict, why it stopped, the margin, the p-values and, when INCONCLUSIVE, the closest decision."""
    k, unit = _unit(c["metric"])
    md = [f"**{c['verdict']}** at the {c['scale']} scale; {c['why_stopped']}.", "",
          f"Smallest effect that matters: {margin_text(c)}.", ""]
    if c["verdict"] == "NEGLIGIBLE" and "superior" in c["direction"]:
        neg = [x for x in c["comparisons"] if x["side"] == "negligible"]
        md += ["**Not supported**: " + "; ".join(
            f"{x['a']}'s difference from {x['b']}{_in_setting(c, x)} is shown to lie within "
            f"+-{_amount(x['negligible'], k, unit)}"
            for x in neg) + ", smaller than the smallest effect that matters.", ""]
    p = c["p_holm"]
    md.append("Holm-adjusted repeated p-values: " + ", ".join(f"{f} {p[f]:.3g}" for f in p)
              + f" (a verdict needs <= {c['alpha']:.3g}).")
    if c["verdict"] == "INCONCLUSIVE":
        if c.get("uninformative"):
            md.append(f"Uninformative: {c['uninformative']}.")
        md.append(f"Closest decision: {c['closest']['text']}.")
        reach = c["closest"].get("seeds_to_reach")
        if reach:
            which = (f"{c['closest']['verdict']}, the nearest of the tied decisions by this figure"
                     if len(c["closest"].get("tied") or ()) > 1 else c["closest"]["verdict"])
            md.append(f"At the observed means and spreads about {_seeds(reach)} paired seeds would reach {which} "
                      f"(a planning figure: even odds at a single look).")
    return md + [""]


def spreads(report_json: dict) -> dict:
    """{(claim id, a, b, setting[, scale]): (sd, metric, seeds)} of a claims report.json: the spreads to compare
    with. Without the scale, a claim run at two scales gives its first scale's (the row that meets an older
    report's)."""
    out = {}
    for p in report_json.get("papers", []):
        for c in p.get("claims", []):
            for x in c.get("comparisons", []):
                if x.get("sd") is not None:
                    key = (c["id"], x["a"], x["b"], x["setting"])
                    out.setdefault(key, (x["sd"], c["metric"], x.get("n")))
                    out[key + (c.get("scale"),)] = (x["sd"], c["metric"], x.get("n"))
    return out


def first_stages(report_json: dict) -> dict:
    """{(claim id, scale): (verdict, seeds, key number)} of a claims report.json: what a replication repeats."""
    return {(c["id"], c.get("scale")): (c["verdict"], c.get("seeds"), key_number(c))
            for p in read_report(report_json).get("papers", []) for c in p.get("claims", [])}


def previous_report(results_root, version: str) -> tuple[str, dict] | None:
    """The newest claims report.json of a version before ``version`` under results/claims, or None."""
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else -1 for p in v.split("."))

    base = Path(results_root) / "claims"
    found = sorted((d.name for d in base.iterdir() if (d / "report.json").is_file() and key(d.name) < key(version)),
                   key=key) if base.is_dir() else []
    return (found[-1], json.loads((base / found[-1] / "report.json").read_text())) if found else None


def _before(x: dict, c: dict, before: dict | None, k: float, unit: str) -> str:
    if not before:
        return "-"
    key = (c["id"], x["a"], x["b"], x["setting"])
    got = before["spreads"].get(key + (c.get("replicates") or c.get("scale"),)) or before["spreads"].get(key)
    if not got:
        return "-"
    sd, metric, n = got
    kb, ub = _unit(metric)
    return _num(sd, kb, ub, signed=False) + (f" ({metric})" if metric != c["metric"] else "")


def _comparison_row(x: dict, k: float, unit: str) -> list:
    d = ratio_decimals(x) if unit == "x" else None
    vals = " ".join(_num(v, k, unit, decimals=d) for v in x["values"]) or "-"
    skew = x.get("skewness")
    notes = "; ".join(x["problems"] + x["unpaired"] + ([f"diverged: {', '.join(x['diverged'])}"] if x["diverged"]
                                                      else [])
                      + ([x["uninformative"]] if x.get("uninformative") else [])
                      + ([f"skewness {skew:+.1f}"] if skew is not None and abs(skew) > 1 else []))
    delta = f"+-{k * x['negligible']:g}" if x["negligible"] else "-"
    gap = _num(x["paper_gap"], k, unit) if x.get("paper_gap") is not None else "-"
    return [_cell(x["statement"]), x["setting"], x["n"], vals, _num(x["mean"], k, unit, decimals=d),
            _num(x["sd"], k, unit, signed=False, decimals=d),
            f"[{_num(x['lower'], k, unit, decimals=d)}, {_num(x['upper'], k, unit, decimals=d)}]",
            delta, gap, x["side"], _cell(notes)]


def claim_key(c: dict) -> str:
    """The claim at its scale, ``<id>.<scale>``: the name of its plot. A paper's main claim runs at two scales, so
    its id alone named two sections and one plot file, which the second scale overwrote."""
    return f"{c['id']}.{c['scale']}"


def claim_title(c: dict) -> str:
    return f"{c['id']} ({c['scale']} scale)"


def anchor(title: str) -> str:
    """The link target GitHub gives a markdown heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def claim_section(c: dict, before: dict | None = None) -> list[str]:
    k, unit = _unit(c["metric"])
    md = [f"### {claim_title(c)}", "", f"*{c['source']}*: {c['quote']}", "", f"**Tested:** {c['statement']}", ""]
    md += declared_lines(c)
    md += verdict_lines(c)
    first = before and c.get("replicates") and before.get("first", {}).get((c["id"], c["replicates"]))
    if first:
        md += [f"First stage (the {before['version']} report, {c['replicates']} scale, seeds from 0): **{first[0]}** "
               f"with {first[1]} paired seeds; {first[2]}. This replication's seeds are fresh, and its verdict is "
               "its own (not pooled with the first stage's runs).", ""]
    rows = [_comparison_row(x, k, unit) for x in c["comparisons"]]
    for row, x in zip(rows, c["comparisons"]):
        row.insert(6, _before(x, c, before, k, unit))
    sd_before = f"sd in {before['version']}" if before else "sd before"
    md += [tabulate(rows, headers=["comparison", "setting", "seeds", "per seed", "mean", "sd", sd_before,
                                   "repeated CI", "negligible within", "paper's gap", "this comparison", "notes"],
                    tablefmt="github"), ""]
    if c.get("companion"):
        kc, uc = _unit(c["companion"]["metric"])
        md += [f"Beside it, on the same seeds, the {METRICS[c['companion']['metric']][1]}: " + "; ".join(
            f"{x['a']} vs {x['b']}" + (f" ({x['setting']})" if len(c["comparisons"]) > 1 else "")
            + f" {_num(y['mean'], kc, uc)} (sd {_num(y['sd'], kc, uc, signed=False)})"
            for x, y in zip(c["comparisons"], c["companion"]["comparisons"])) + ".", ""]
    return md + [f"![{claim_title(c)}]({claim_key(c)}.png)", ""]


def _tuning_lines(p: dict) -> list[str]:
    sc = p["scale"]
    if not sc.get("tuning", {}).get("rule"):
        return [f"Tuning: {sc['tuning']}.", ""] if sc.get("tuning") else []
    if is_protocol(p["tuning"]):  # 0.4.0: every point's spread over the tuning seeds, the extension, the edges
        return tuning_lines(p)
    t = sc["tuning"]
    md = [f"Tuning: {t['rule']}. Selection on a validation split of {t['validation']} training samples (never the "
          f"test set), tuning seed(s) {t['tune_seeds']}; final runs on fresh seeds in looks of {p['budget']['looks']}"
          f" paired seeds.", ""]
    ends = {k for k, _ in chosen_at_end(p["tuning"])}
    rows = []
    for key, tr in p["tuning"].items():
        cells = []
        for i, pt in enumerate(tr["points"]):
            txt = ", ".join(f"{a}={b}" for a, b in pt["point"].items()) + (
                f": {100 * pt['mean']:.1f}" if pt["mean"] is not None else f": {_no_score(pt)}")
            cells.append(f"**{txt}**" + (" (an end)" if key in ends else "") if i == tr["chosen_index"] else txt)
        rows.append([key, " / ".join(cells)])
    md += [tabulate(rows, headers=["setting / arm", "grid point: validation accuracy % (chosen in bold)"],
                    tablefmt="github"), ""]
    if ends:
        md += [f"{len(ends)} of {len(rows)} choices are an end of their grid (marked \"an end\"): a better point may lie "
               "beyond it, which the declared grid (the same size for every arm) did not try. The comparisons are "
               "between arms tuned alike.", ""]
    return md


def _no_score(pt: dict) -> str:
    """Why a tuning grid point has no score: its runs' statuses where the report kept them (reports before
    2026-11-27 did not, and then both are named)."""
    st = {v for v in (pt.get("status") or {}).values() if v != "ok"}
    return " and ".join(sorted(st)) if st else "no score (diverged or failed)"


def diverged_lines(claims: list[dict]) -> list[str]:
    """Per scale, the runs of the compared arms that diverged (from the comparisons' ``diverged`` notes, "arm seed
    N"), out of the seeds each arm was compared on: a finding in itself, which the per-comparison tables of the
    claims report show only row by row."""
    out = []
    for scale in dict.fromkeys(c.get("scale") for c in claims):
        seeds, bad = {}, {}
        for c in claims:
            if c.get("scale") != scale:
                continue
            for x in c.get("comparisons", []):
                for arm in (x.get("a"), x.get("b")):
                    seeds.setdefault(arm, set()).update(x.get("seeds") or [])
                for note in x.get("diverged") or []:
                    arm, _, seed = note.rpartition(" seed ")
                    if arm and seed.isdigit():
                        bad.setdefault(arm, set()).add(int(seed))
        if bad:
            out.append(f"Runs that diverged at the {scale} scale (each counts at chance level from its divergence "
                       "on, as the claims' metrics declare): " + "; ".join(
                           f"{arm} {len(s)} of {len(seeds.get(arm) or s)} seeds ({', '.join(map(str, sorted(s)))})"
                           for arm, s in sorted(bad.items())) + ".")
    return [x for line in out for x in (line, "")]


def paper_section(p: dict, before: dict | None = None) -> list[str]:
    sc, b = p["scale"], p["budget"]
    if p.get("under_way"):
        return [f"## {p['title']}", "", f"Scale **{sc['scale']}**: under way ({p['under_way']}); its verdicts are "
                "written once its runs are recorded (the same command without --no-run runs them, resumable).", ""]
    cells = {k: v for k, v in p["cells"].items() if k != "cell_seconds"}
    md = [f"## {p['title']}", "", f"Scale: **{sc['scale']}**" + (f", suite `{sc['suite']}`" if "suite" in sc else "")
          + f"; the cells' runs took {p['cells'].get('cell_seconds', 0) / 60:.1f} min in all (summed as recorded, "
          f"a batched run counting its share); the invocation that judged them took {p['seconds']:.0f} s: " + _invocation(cells)
          + ".", "",
          f"Budget: looks of {b['looks']} paired seeds, {b['cpu_minutes']:g} CPU minutes ({b['reason']}).", ""]
    if sc.get("kept"):
        md += ["Kept from the paper: " + "; ".join(sc["kept"]) + ".", "", "Reductions (paper -> here):", ""]
        md += [f"- {r}" for r in sc["reductions"]] + [""]
    md += _tuning_lines(p)
    md += diverged_lines([dict(c, scale=c.get("scale", sc.get("scale"))) for c in p["claims"]])
    for c in p["claims"]:
        md += claim_section(c, before)
    return md


def _invocation(cells: dict) -> str:
    """What this invocation did with the scale's cells: the runs it made, by status, and those already recorded
    (so that "diverged 0" is not read as the count over the judged runs, which ``diverged_lines`` gives)."""
    ran = {k: v for k, v in cells.items() if k != "skipped"}
    done = cells.get("skipped", 0)
    made = ", ".join(f"{k} {v}" for k, v in sorted(ran.items()) if v)
    return (f"it ran {sum(ran.values())} cells" + (f" ({made})" if made else "")
            + f" and found {done} already recorded")


def plot(c: dict, path: Path) -> None:
    """Per comparison: the per-seed values, their mean, the repeated confidence interval, the boundary (dashed)
    and the negligible region (dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, unit = _unit(c["metric"])
    comps = c["comparisons"]
    many = len({y["setting"] for y in comps}) > 1
    fig, ax = plt.subplots(figsize=(6.4, 1.3 + 0.55 * len(comps)))  # 0.3 in of it: the legend
    # every seed gave the same value (a deterministic bit count): dots and CI lie under the mean, so one entry
    flat = all(x["values"] and max(x["values"]) == min(x["values"]) for x in comps)
    for i, x in enumerate(comps):
        y = len(comps) - 1 - i
        if x["values"]:  # just above the row: on it, 40 seeds' dots covered the interval
            ax.scatter([k * v for v in x["values"]], [y + (0 if flat else 0.18)] * len(x["values"]), s=12,
                       color="0.45", zorder=3, label="per seed" if i == 0 and not flat else None)
        if x["lower"] is not None:
            ax.plot([k * x["lower"], k * x["upper"]], [y, y], color="C0", lw=2.5, zorder=2,
                    label="repeated CI (Holm levels)" if i == 0 and not flat else None)
        if x["mean"] is not None:
            ax.scatter([k * x["mean"]], [y], marker="D", color="C3", s=30, zorder=4,
                       label=("mean = every seed = the CI (no spread)" if flat else "mean") if i == 0 else None)
        ax.plot([k * x["boundary"]] * 2, [y - 0.35, y + 0.35], color="k", ls="--", lw=1)
        if x["negligible"]:
            for s in (-1, 1):
                ax.plot([s * k * x["negligible"]] * 2, [y - 0.3, y + 0.3], color="C2", ls=":", lw=1.2,
                        label="+-negligible margin" if i == 0 and s == 1 else None)
    ax.set_yticks(range(len(comps)))
    ax.set_yticklabels([f"{x['a']} vs {x['b']}" + (f"\n{x['setting']}" if many else "") for x in reversed(comps)],
                       fontsize=8)
    what = "ratio B / A" if unit == "x" else f"paired difference A - B ({unit})"
    ax.set_xlabel(f"{what}; dashed: the claim's boundary", fontsize=8)
    # over the figure, not the axes: the y labels push the axes right, and a long claim id ran past the edge
    fig.suptitle(f"{c['id']}: {c['verdict']} ({c['scale']} scale, {c['seeds']} seeds)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    # one row below the axes, in a strip of its own: inside them it covered the lowest comparison's interval
    strip = 0.3 / fig.get_figheight()
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, strip, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(c: dict) -> dict:
    """The per-claim entry of report.json's ``claims`` (see the module docstring)."""
    return {"id": c["id"], "paper": c["paper"], "verdict": c["verdict"], "scale": c["scale"], "metric": c["metric"],
            "key_number": key_number(c), "seeds": c["seeds"], "stopped": c["stopped"],
            "why_stopped": c["why_stopped"], "margin": c["margin"],
            "closest": c.get("closest")}


def _commit(version: dict) -> str:
    """A code version's commit as the header shows it: the hash, "(dirty)" for uncommitted changes."""
    return f"{version.get('git_commit') or '?'}{' (dirty)' if version.get('git_dirty') else ''}"


def header(papers: list[dict], meta: dict, version: dict, counts: dict, before: dict | None = None,
           method: dict | None = None) -> list[str]:
    """The report's title, provenance, method and error rates (``method``, as ``method_of`` builds it or as a
    re-rendered report recorded it), and the table of verdicts."""
    claims = [c for p in papers for c in p["claims"]]
    method = method or method_of(papers)
    again = meta.get("judged_again")  # an earlier version's records judged by this code (fedrepro claims --version)
    by = meta.get("judged_by") or version  # a re-rendered report is the version that judged it
    md = [f"# Empirical claims report ({again or by['package']}"
          + (f", judged again by {by['package']})" if again else ")"), ""]
    if meta.get("quick"):
        md += ["**Quick mode: one look of a few seeds at a reduced scale, a smoke test. These are not verdicts.**", ""]
    code = _commit(version)
    judged, this = meta.get("judged_by"), "This invocation"
    rerendered = bool(judged) and judged.get("git_commit") != version["git_commit"]
    if rerendered:
        this = "The invocation that judged them"
        code = (f"{_commit(judged)} judged the records; code {code} re-rendered this report from its report.json "
                "(`fedrepro claims --rerender`, no run)")
    if again:
        code = (f"{_commit(by)} (version {by['package']}) judged again the records of version {again}, which that "
                f"version's code ran (each record names its commit), with nothing run (`fedrepro claims --version "
                f"{again} --no-run`)" + (f"; code {_commit(version)} re-rendered this report from its report.json"
                                        if rerendered else ""))
    md += [f"Code {code}. {len(claims)} claims: "
           + ", ".join(f"{n} {v}" for v, n in counts.items()) + ". "
           f"The cells' runs took {sum(p['cells'].get('cell_seconds', 0) for p in papers) / 60:.1f} min summed over "
           f"cells (as recorded, a batched run counting its share). {this}: {meta['wall_seconds'] / 60:.1f} "
           f"min on {meta['cpus']} CPU(s), backend {meta['backend']} (jobs {meta['jobs']}); load average "
           f"{meta['load_start']} at the start and {meta['load_end']} at the end (other jobs on the machine)."
           + (f" {meta['note']}" if meta.get("note") else "")
           + (f" Claims declared in {meta['claims_file']['path']} (sha256 {meta['claims_file']['sha256'][:16]})."
              if meta.get("claims_file") else ""), "", method["text"], ""]
    if method.get("errors"):
        md += [method["errors"], ""]
    busy = [f"{p['paper']} ({p['scale']['scale']} scale: {p['under_way']})" for p in papers if p.get("under_way")]
    if busy:
        md += ["**Under way, not judged yet:** " + "; ".join(busy) + ".", ""]
    replicated = any(c.get("replicates") for c in claims)
    if replicated and method.get("replication"):
        md += [method["replication"], ""]
    if before:
        against = (f"first stage (the {before['version']} report): the same scale on other seeds." if replicated else
                   f"{before['version']} report, with that report's metric where it differs: what the scales and "
                   f"metrics of this version changed.")
        md += ["The spread of each comparison (the sd of its per-seed differences) is shown beside its spread in the "
               + against, ""]
    rows = [[f"[{c['id']}](#{anchor(claim_title(c))})", c["paper"], f"**{c['verdict']}**", c["scale"], c["seeds"],
             _cell(c["stopped"]), _cell(key_number(c))] for c in claims]
    return md + [tabulate(rows, headers=["claim", "paper", "verdict", "scale", "seeds", "stopped", "key number"],
                          tablefmt="github"), ""]


def _family(p: dict) -> dict:
    """A paper entry's error family as recorded by ``run.run_paper``, or (an entry written without one, e.g. a
    judge's results passed by hand) one family of its claims at their level, at its scale and looks."""
    if p.get("family"):
        return p["family"]
    alpha = next((c["alpha"] for c in p.get("claims", []) if c.get("alpha") is not None), ALPHA)
    looks = tuple((p.get("budget") or {}).get("looks") or (2,))
    return Family(p["paper"], alpha, (Unit(p["scale"].get("scale", "?"), FIRST, 1.0, looks),)).describe()


def method_of(papers: list[dict]) -> dict:
    """report.json's ``method``: alpha, spending and skewness allowance of the families, the method's text,
    ``errors`` (the error rates' paragraph, ``family.statement``, generated from the families the judges used),
    ``families`` (each paper's, ``Family.describe``) and, when a replication is in the report, its text."""
    fams, used = {}, {}
    for p in papers:
        f = _family(p)
        fams.setdefault(f["paper"], f)
        used.setdefault(f["paper"], {})[p["scale"].get("scale")] = (p.get("budget") or {}).get("looks")
    first = next(iter(fams.values()), {"alpha": ALPHA, "spending": "pocock", "skew": SKEW_ALLOWANCE})
    out = {"alpha": first["alpha"], "spending": first["spending"], "skew_allowance": first["skew"], "text": METHOD,
           "errors": statement(list(fams.values()), used), "families": list(fams.values())}
    if any(c.get("replicates") for p in papers for c in p["claims"]):
        out["replication"] = REPLICATION
    return out


def write_report(papers: list[dict], folder, meta: dict, before: tuple | None = None, env: dict | None = None,
                 method: dict | None = None) -> dict:
    """Write report.md, report.json and the plots into ``folder``; return their paths. ``before``: (version,
    report.json) of an earlier claims report, whose spreads are shown beside this one's; ``env``: the environment
    recorded (default: this machine's; a re-rendered report keeps the one that judged it); ``method``: the method
    and error rates as recorded (a re-rendered report keeps its own; default: ``method_of`` the papers)."""
    before = {"version": before[0], "spreads": spreads(before[1]), "first": first_stages(before[1])} if before else None
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    version = code_version()
    claims = [c for p in papers for c in p["claims"]]
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    method = method or method_of(papers)
    md = header(papers, meta, version, counts, before, method)
    for p in papers:
        md += paper_section(p, before)
        for c in p["claims"]:
            plot(c, folder / f"{claim_key(c)}.png")
    (folder / "report.md").write_text("\n".join(md))
    payload = {"code_version": version, "environment": env or environment(torch.device("cpu")), "meta": meta,
               "counts": counts, "method": method,
               "papers": papers, "claims": [summary(c) for c in claims],
               "before": before["version"] if before else None}
    store.write_json_atomic(folder / "report.json", json.loads(json.dumps(payload, default=str)), indent=1)
    return {"markdown": folder / "report.md", "json": folder / "report.json"}


def rerender(folder, before: tuple | None = None) -> dict:
    """Re-render a written claims report (report.md, the plots, report.json) in ``folder`` from its own
    report.json, with no run records: after a change to the report's wording or plots, where the records are
    archived elsewhere or gone. The verdicts, numbers, tuning and meta stay as judged; what the rendering code
    derives is recomputed: the closest decision of each INCONCLUSIVE claim (``judge.closest``, from the reported
    comparisons, with the skewness allowance it was judged with), the markdown and the plots. ``meta.judged_by``
    keeps the code version that judged the records, and the header names both; the recorded environment is kept,
    and so is the recorded ``method``: its text and error rates state what the code that judged it did (a 0.3.0
    report keeps its own sentence). Older field names are read through ``fields.read_report``. ``before``: as for
    ``write_report``."""
    folder = Path(folder)
    data = read_report(json.loads((folder / "report.json").read_text()))
    method = data.get("method") or method_of(data["papers"])
    for p in data["papers"]:
        for c in p["claims"]:
            if c["verdict"] == "INCONCLUSIVE" and c.get("comparisons"):
                c["closest"] = closest(c["p_holm"], c["comparisons"], c["alpha"], c["metric"],
                                       method.get("skew_allowance", SKEW_ALLOWANCE))
    meta = {**data["meta"], "judged_by": data["meta"].get("judged_by") or data["code_version"]}
    return write_report(data["papers"], folder, meta, before, env=data.get("environment"), method=method)

