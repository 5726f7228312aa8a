"""The theory report: ``report.md`` (every claim with its kind, verdict and evidence), ``report.json`` (the same,
with the hash of the code it was generated on, for ``tests/test_theory_report.py``) and one plot per series.

Written from the claims' result dicts (``theory.claims``: id, paper, kind, source, statement, quote, verdict, key
number, reason, hypotheses, evidence, series) by ``fedrepro theory``; this module takes plain values and imports
nothing of ``theory`` (``benchmark`` is the package that writes files). The verdicts (``VOCABULARY``, DESIGN.md
"Theory checks"): HOLDS, VIOLATED (the conclusion fails under every hypothesis, each listed with its value in the
run), PREMISE FAILS, NOT REPRODUCED, INCONCLUSIVE, UNINFORMATIVE.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from benchmark.runs import store
from benchmark.runs.record import code_version, environment

PAPER_TITLES = {
    "fedbat": "FedBAT (Li et al., ICML 2024)",
    "gradma": "GradMA (Luo et al., CVPR 2023)",
    "lfl": "LFL (Amiri et al., arXiv 2006.10672v2)",
    "fedswa": "FedSWA / FedMoSWA (Liu et al., ICML 2025)",
    "bherd": "BHerd (Luo et al., arXiv 2403.16557v1)",
    "qsgd": "QSGD (Alistarh et al., NeurIPS 2017)",
    "compression": "Compression operators (error feedback, biased compressors)",
}


def _plot(series: dict, path: Path) -> bool:
    import matplotlib  # lazy: matplotlib adds 0.1 s CPU, pyplot 0.4 s, to every fedrepro start (measured)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, ys in series.get("y", {}).items():
        xs = series.get("x", list(range(len(ys))))
        ax.plot(xs[:len(ys)], ys, label=label)
    if series.get("logx"):
        ax.set_xscale("log")
    if series.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(series.get("xlabel", ""))
    ax.set_ylabel(series.get("ylabel", ""))
    if series.get("title"):
        ax.set_title(series["title"], fontsize=9)
    ax.grid(alpha=0.3)
    if len(series.get("y", {})) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _fmt_evidence(ev, depth: int = 0) -> list[str]:
    lines = []
    for k, v in ev.items():
        if k == "traceback":
            lines.append(f"{'  ' * depth}- {k}:\n\n```\n{v}\n```")
        elif isinstance(v, dict):
            lines.append(f"{'  ' * depth}- {k}:")
            lines += _fmt_evidence(v, depth + 1)
        else:
            if isinstance(v, float):
                v = f"{v:.6g}" if math.isfinite(v) else str(v)
            elif isinstance(v, list) and len(v) > 12:
                v = f"[{', '.join(map(str, v[:6]))}, ... ({len(v)} values)]"
            lines.append(f"{'  ' * depth}- {k}: {v}")
    return lines


VERDICT_ORDER = ("HOLDS", "VIOLATED", "PREMISE FAILS", "NOT REPRODUCED", "INCONCLUSIVE", "UNINFORMATIVE")
VOCABULARY = (
    "Each claim is a statement with a check that can fail. Its kind: a *paper* claim (a lemma, theorem or sentence "
    "of the paper) or a *derived* statement (a reference formula, a consequence the paper does not state, a property "
    "of the implementation). HOLDS: the statistics support it at the stated false-alarm rate. VIOLATED: the "
    "conclusion fails while every hypothesis the statement states holds in the run (each listed under the claim, "
    "with its value in the run: step-size caps as the proof needs them, the horizon, the algorithm as stated); a "
    "finding, reported with its evidence. PREMISE FAILS: an assumption of the statement, or a corollary's setting, "
    "that the algorithm cannot meet, with the measured evidence: the statement is not contradicted, its premise is "
    "false for the algorithm. NOT REPRODUCED: an empirical figure of the paper that the check could not reproduce "
    "at the setting it states (a figure is not a theorem). INCONCLUSIVE: too little power, or the run is outside "
    "the statement's hypotheses (the reason says which). UNINFORMATIVE: not contradicted, but an algorithm that "
    "never moves would pass the same check (the bound is loose at every horizon the check reaches; the evidence "
    "gives the slack and the horizon where it would bite). Bound checks report their slack, bound / measured.")
KIND_TITLES = {"paper": "paper claims", "derived": "derived statements"}


def summary_counts(results: list[dict]) -> dict:
    """{kind: {verdict: count}} (kinds "paper" and "derived"), for the report's summary."""
    out: dict = {}
    for r in results:
        k = r.get("kind", "paper")
        out.setdefault(k, {v: 0 for v in VERDICT_ORDER})
        out[k][r["verdict"]] = out[k].get(r["verdict"], 0) + 1
    return out


def counts_line(counts: dict) -> str:
    parts = []
    for kind in ("paper", "derived"):
        c = counts.get(kind)
        if not c:
            continue
        n = sum(c.values())
        parts.append(f"{n} {KIND_TITLES[kind]}: " + ", ".join(f"{c[v]} {v}" for v in VERDICT_ORDER if c.get(v)))
    return "; ".join(parts) + "."


def hypotheses_lines(hyps: list[dict], cell=str) -> list[str]:
    """The hypotheses a check verified in its run, as a markdown table (none: nothing)."""
    from tabulate import tabulate

    if not hyps:
        return []
    rows = [[cell(h["name"]), cell(h["source"]), h.get("kind", "setting"), cell(h.get("value", "")),
             "yes" if h["holds"] else "**no**"] for h in hyps]
    return ["Hypotheses in the run:", "", tabulate(rows, headers=["hypothesis", "source", "kind", "in the run",
                                                                  "holds"], tablefmt="github"), ""]


def write_report(results: list[dict], folder: Path, provenance: dict | None = None) -> dict:
    """report.md, report.json and the plots. ``provenance``: {"code_hash", "hashed_files"} of
    ``theory.provenance`` (recorded so that a test can tell when the report is stale)."""
    folder.mkdir(parents=True, exist_ok=True)
    version = code_version()
    counts = summary_counts(results)

    def cell(text: str) -> str:  # norms like ||x|| must not split a markdown table cell
        return str(text).replace("|", "\\|")

    rows = [[f"[{r['id']}](#{r['id'].replace('.', '')})", r.get("kind", "paper"), r["paper"], cell(r["source"]),
             f"**{r['verdict']}**", cell(r["key_number"])] for r in results]
    md = [f"# Theory report ({version['package']})", "",
          f"Code {version['git_commit'] or '?'}{' (dirty)' if version['git_dirty'] else ''}. "
          f"{len(results)} claims. {counts_line(counts)}", "", VOCABULARY, ""]
    if provenance:
        md += [f"Code hash {provenance['code_hash'][:16]} over {len(provenance['hashed_files'])} files (theory/ and "
               "the algorithms the claims use; see theory/provenance.py).", ""]
    md += [tabulate(rows, headers=["claim", "kind", "paper", "source", "verdict", "key number"], tablefmt="github"),
           ""]
    by_paper = defaultdict(list)
    for r in results:
        by_paper[r["paper"]].append(r)
    for paper, rs in sorted(by_paper.items()):
        md += [f"## {PAPER_TITLES.get(paper, paper)}", ""]
        for r in rs:
            md += [f"### {r['id']}", "", f"*{r['source']}* ({r.get('kind', 'paper')}): {r['statement']}", ""]
            if r.get("quote"):
                md += [f"> {r['quote']}", ""]
            md += [f"**{r['verdict']}** ({r['key_number']}); false-alarm rate {r['false_alarm']:g}; "
                   f"{r['seconds']:.1f} s{' (quick mode)' if r['quick'] else ''}.", ""]
            if r.get("reason"):
                md += [f"Why {r['verdict']}: {r['reason'].rstrip('.')}.", ""]
            md += hypotheses_lines(r.get("hypotheses") or [], cell)
            if r.get("conditions"):
                md += [f"Conditions: {r['conditions']}", ""]
            md += _fmt_evidence(r["evidence"]) + [""]
            for name, s in (r.get("series") or {}).items():
                fname = f"{r['id']}.{name}.png".replace("/", "_")
                if _plot(s, folder / fname):
                    md += [f"![{name}]({fname})", ""]
    (folder / "report.md").write_text("\n".join(md))
    payload = {"code_version": version, "environment": environment(__import__("torch").device("cpu")),
               "summary": counts, **(provenance or {}),
               "claims": [{k: v for k, v in r.items() if k != "series"} for r in results]}
    store.write_json_atomic(folder / "report.json", json.loads(json.dumps(payload, default=str)), indent=1)
    return {"markdown": folder / "report.md", "json": folder / "report.json"}
