"""``fedrepro claims``: run the papers' empirical claims (theory/empirical) and write the versioned report
(``results/claims/<version>/report.md``, ``report.json``, one plot per claim)."""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from .. import store
from ..experiment import code_version, environment

CLAIM_VERDICTS = ("SUPPORTED", "CONTRADICTED", "INCONCLUSIVE")
MANY_SEEDS = 10_000  # above this, "seeds needed" is shown as "> 10,000" (the exact figure means nothing)


def _seeds(n: int | None) -> str:
    if n is None:
        return ""
    return f"> {MANY_SEEDS:,}" if n > MANY_SEEDS else str(n)


def _unit(metric: str) -> tuple[float, str]:
    from theory.empirical.claim import METRICS

    return METRICS[metric][3], METRICS[metric][2]


def _num(v, k: float, unit: str, signed: bool = True) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if unit == "x":
        return f"{v:.3g}x"
    return f"{k * v:+.2f}" if signed else f"{k * v:.2f}"


def key_number(c: dict) -> str:
    k, unit = _unit(c["metric"])
    parts = []
    for x in c["comparisons"]:
        if x["mean"] is None:
            parts.append(f"{x['a']} vs {x['b']}: no paired runs")
            continue
        iv = f" [{_num(x['lower'], k, unit)}, {_num(x['upper'], k, unit)}]" if x["lower"] is not None else ""
        tag = f"{x['a']} vs {x['b']}" + (f" ({x['setting']})" if len({y['setting'] for y in c['comparisons']}) > 1
                                         else "")
        parts.append(f"{tag}: {_num(x['mean'], k, unit)}{'' if unit == 'x' else ' ' + unit}{iv}")
    return "; ".join(parts)


def _plot(c: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, unit = _unit(c["metric"])
    comps = c["comparisons"]
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.55 * len(comps)))
    for i, x in enumerate(comps):
        y = len(comps) - 1 - i
        if x["values"]:
            ax.scatter([k * v for v in x["values"]], [y] * len(x["values"]), s=14, color="0.45", zorder=3,
                       label="per seed" if i == 0 else None)
        if x["lower"] is not None:
            ax.plot([k * x["lower"], k * x["upper"]], [y, y], color="C0", lw=2.5, zorder=2,
                    label="t interval (Holm levels)" if i == 0 else None)
        if x["mean"] is not None:
            ax.scatter([k * x["mean"]], [y], marker="D", color="C3", s=30, zorder=4, label="mean" if i == 0 else None)
        ax.plot([k * x["boundary"]] * 2, [y - 0.35, y + 0.35], color="k", ls="--", lw=1)
    ax.set_yticks(range(len(comps)))
    ax.set_yticklabels([f"{x['a']} vs {x['b']}" + (f"\n{x['setting']}" if len({y['setting'] for y in comps}) > 1
                                                   else "") for x in reversed(comps)], fontsize=8)
    what = "ratio B / A" if unit == "x" else f"paired difference A - B ({unit})"
    ax.set_xlabel(f"{what}; dashed: the claim's boundary", fontsize=8)
    ax.set_title(f"{c['id']}: {c['verdict']} ({c['scale']} scale)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _paper_section(p: dict) -> list[str]:
    from tabulate import tabulate

    sc = p["scale"]
    cells = {k: v for k, v in p["cells"].items() if k != "cell_seconds"}
    md = [f"## {p['title']}", "", f"Scale: **{sc['scale']}**" + (f", suite `{sc['suite']}`" if "suite" in sc else "")
          + f"; the cells' runs took {p['cells'].get('cell_seconds', 0) / 60:.1f} min in all (summed, as recorded); "
          f"this invocation {p['seconds']:.0f} s; cells now: " + ", ".join(f"{k} {v}" for k, v in sorted(cells.items()))
          + ".", ""]
    if sc.get("kept"):
        md += ["Kept from the paper: " + "; ".join(sc["kept"]) + ".", "", "Reductions (paper -> here):", ""]
        md += [f"- {r}" for r in sc["reductions"]] + [""]
    if sc.get("tuning", {}).get("rule"):
        t = sc["tuning"]
        md += [f"Tuning: {t['rule']}. Selection on a validation split of {t['validation']} training samples "
               f"(never the test set), tuning seed(s) {t['tune_seeds']}, final runs on fresh seeds "
               f"{t['final_seeds']}.", ""]
        rows = []
        for key, tr in p["tuning"].items():
            pts = " / ".join(("**" if i == tr["chosen_index"] else "") + ", ".join(f"{a}={b}" for a, b in
                                                                                  pt["point"].items())
                             + (f": {100 * pt['mean']:.1f}" if pt["mean"] is not None else ": failed")
                             + ("**" if i == tr["chosen_index"] else "") for i, pt in enumerate(tr["points"]))
            rows.append([key, pts])
        md += [tabulate(rows, headers=["setting / arm", "grid point: validation accuracy % (chosen in bold)"],
                        tablefmt="github"), ""]
    elif sc.get("tuning"):
        md += [f"Tuning: {sc['tuning']}.", ""]
    for c in p["claims"]:
        md += _claim_section(c)
    return md


def _claim_section(c: dict) -> list[str]:
    from tabulate import tabulate

    k, unit = _unit(c["metric"])
    md = [f"### {c['id']}", "", f"*{c['source']}*: {c['quote']}", "", f"**Tested:** {c['statement']}", "",
          f"**{c['verdict']}** at the {c['scale']} scale. Holm-adjusted p-values: support "
          f"{c['p_support_holm']:.3g}, contradiction {c['p_contra_holm']:.3g} (each family at 0.05)."]
    if c["verdict"] == "INCONCLUSIVE":
        if c.get("reason"):
            md.append(f"Reason: {c['reason']}.")
        elif c.get("seeds_needed") and c["seeds_needed"] > MANY_SEEDS:
            md.append(f"More than {MANY_SEEDS:,} paired seeds would be needed (power 0.8 if the observed mean and "
                      f"spread were the truth): the observed difference is tiny next to its spread, so in practice "
                      f"no affordable number of seeds decides it.")
        elif c.get("seeds_needed"):
            md.append(f"About {c['seeds_needed']} paired seeds would decide it (power 0.8 if the observed mean and "
                      f"spread were the truth).")
        elif c.get("undecidable"):
            md.append("No number of seeds decides it at the observed values (a mean difference of exactly the "
                      "boundary, or no spread).")
    md.append("")
    rows = []
    for x in c["comparisons"]:
        vals = " ".join(_num(v, k, unit) for v in x["values"]) or "-"
        skew = x.get("skewness")
        notes = "; ".join(x["problems"] + x["unpaired"] + ([f"diverged: {', '.join(x['diverged'])}"]
                                                          if x["diverged"] else [])
                          + ([x["uninformative"]] if x.get("uninformative") else [])
                          + ([f"skewness {skew:+.1f}: the level is approximate"] if skew is not None and abs(skew) > 1
                             else []))
        rows.append([_cell(x["statement"]), x["setting"], x["n"], vals, _num(x["mean"], k, unit),
                     f"[{_num(x['lower'], k, unit)}, {_num(x['upper'], k, unit)}]",
                     f"{x['p_support']:.3g} / {x['p_contra']:.3g}", x["side"] or "-",
                     _seeds(x["seeds_needed"]), _cell(notes)])
    md += [tabulate(rows, headers=["comparison", "setting", "seeds", "per seed", "mean", "t interval",
                                   "p support / contra", "this comparison", "seeds needed", "notes"],
                    tablefmt="github"), "", f"![{c['id']}]({c['id']}.png)", ""]
    return md


def write_report(papers: list[dict], folder: Path, meta: dict) -> dict:
    from tabulate import tabulate

    folder.mkdir(parents=True, exist_ok=True)
    version = code_version()
    claims = [c for p in papers for c in p["claims"]]
    counts = {v: sum(c["verdict"] == v for c in claims) for v in CLAIM_VERDICTS}
    rows = [[f"[{c['id']}](#{c['id'].replace('.', '')})", c["paper"], _cell(c["source"]), c["metric"],
             _cell("; ".join(x["statement"] for x in c["comparisons"])), f"**{c['verdict']}**", c["scale"],
             _cell(key_number(c))] for c in claims]
    md = [f"# Empirical claims report ({version['package']})", "",
          f"Code {version['git_commit'] or '?'}{' (dirty)' if version['git_dirty'] else ''}. {len(claims)} claims: "
          + ", ".join(f"{n} {v}" for v, n in counts.items()) + ". "
          f"The cells' runs took {sum(p['cells'].get('cell_seconds', 0) for p in papers) / 60:.1f} min summed over "
          f"cells (as recorded, each in one process). This invocation: {meta['wall_seconds'] / 60:.1f} min on "
          f"{meta['cpus']} CPU(s), backend {meta['backend']}"
          f" (jobs {meta['jobs']}); load average {meta['load_start']} at the start and {meta['load_end']} at the end "
          f"(other jobs on the machine)." + (f" {meta['note']}" if meta.get("note") else ""), "",
          "Each claim is a paper's empirical statement with a metric, a margin and a direction, tested on paired "
          "runs (the same seed gives every method the same partition, initial model, client sampling and minibatch "
          "order: the partition and the initial model are checked from the records' fingerprints, the sampling and "
          "batch streams are keyed by the seed alone in benchmark/engine.py). SUPPORTED: the paired one-sided test rejects \"the claim is false\"; "
          "CONTRADICTED: it rejects \"the claim is true\"; INCONCLUSIVE: neither (the report says how many seeds "
          "would decide). Holm's procedure over each paper's claims keeps the rate of any wrong SUPPORTED verdict per "
          "paper at 0.05, and likewise for CONTRADICTED (theory/empirical/paired.py). Every method gets the same "
          "declared tuning budget, selected on a validation split of the training data; the test set is used only by "
          "the final runs. A reduced (CPU) scale keeps each paper's regime and states every reduction: its verdicts "
          "are about that scale, and its accuracies are not the paper's numbers.", "",
          tabulate(rows, headers=["claim", "paper", "source", "metric", "tested", "verdict", "scale", "key number"],
                   tablefmt="github"), ""]
    for p in papers:
        md += _paper_section(p)
        for c in p["claims"]:
            _plot(c, folder / f"{c['id']}.png")
    (folder / "report.md").write_text("\n".join(md))
    payload = {"code_version": version, "environment": environment(__import__("torch").device("cpu")),
               "meta": meta, "counts": counts, "papers": papers,
               "claims": [{"id": c["id"], "paper": c["paper"], "verdict": c["verdict"], "scale": c["scale"],
                           "metric": c["metric"], "key_number": key_number(c)} for c in claims]}
    store.write_json_atomic(folder / "report.json", json.loads(json.dumps(payload, default=str)), indent=1)
    return {"markdown": folder / "report.md", "json": folder / "report.json"}


def cmd_claims(a) -> int:
    from theory import empirical
    from theory.empirical import run as erun
    from theory.empirical.scale import paper_scales

    scale = "quick" if a.quick else a.scale
    try:
        mods = empirical.papers(a.paper)
    except ValueError as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    t0, load0 = time.time(), _load()
    papers = []
    try:
        for m in mods:
            for sc in ([scale] if scale == "full" else paper_scales(m, scale)):  # a paper's CPU scales in turn
                papers.append(erun.run_paper(m, sc, a.results, None, a.backend, a.jobs, progress=not a.no_progress,
                                             run_missing=not a.no_run))
    except KeyboardInterrupt:
        print("\ninterrupted: finished cells are kept; run the same command again to resume", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    base = Path(a.out) if a.out else Path(a.results) / "claims" / code_version()["package"]
    folder = base if scale == "cpu" else base / scale
    if a.paper and not a.out:
        folder = folder / "partial" / a.paper  # one paper never overwrites the whole report, nor another paper
    meta = {"scale": scale, "wall_seconds": time.time() - t0, "cpus": os.cpu_count(), "backend": a.backend,
            "jobs": a.jobs, "load_start": load0, "load_end": _load(), "note": a.note or ""}
    paths = write_report(papers, folder, meta)
    claims = [c for p in papers for c in p["claims"]]
    if a.json:
        print(json.dumps(papers, indent=1, default=str))
    else:
        from tabulate import tabulate

        print(tabulate([[c["id"], c["verdict"], key_number(c)] for c in claims],
                       headers=["claim", "verdict", "key number"], tablefmt="github"))
    print(f"wrote {paths['markdown']}, {paths['json']} and {len(claims)} plots", file=sys.stderr)
    return 0


def _load() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def add_parser(sub) -> None:
    p = sub.add_parser("claims", help="test the papers' empirical claims on paired runs and write the claims report",
                       description="Run each paper's empirical claims (theory/empirical): tune every method with the "
                                   "same budget on a validation split, run the final paired seeds, and judge each "
                                   "claim SUPPORTED / CONTRADICTED / INCONCLUSIVE. Writes "
                                   "results/claims/<version>/report.md, report.json and one plot per claim. Cells are "
                                   "run records under results/claims/<version>/runs (resumable: run again to "
                                   "continue).")
    p.add_argument("--paper", help="only this paper's claims (bherd, fedbat, fedswa, gradma, lfl); written to "
                                   "<folder>/partial/<paper>")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test of every paper's first scale in seconds (1-2 rounds, <= 20 samples per client, 2 "
                        "grid values, 3 seeds) for CI, never a verdict; written to <folder>/quick")
    p.add_argument("--scale", choices=["cpu", "full"], default="cpu",
                   help="cpu: each paper's CPU scales in turn (default; the paper's own setting where a CPU affords it, "
                        "else a stated reduction, and the main claim again at 4x the compute); full: the paper "
                        "suites' cells (GPU), written to <folder>/full")
    p.add_argument("--no-run", action="store_true", help="with --scale full: judge existing suite records only")
    p.add_argument("--backend", choices=["local", "process", "ray"], default="local", help="how cells run")
    p.add_argument("--jobs", type=int, default=None, help="parallel workers for --backend process")
    p.add_argument("--results", default="results", help="results root (default ./results)")
    p.add_argument("--out", help="write the report into this folder instead")
    p.add_argument("--note", help="a sentence added to the report's header (e.g. the machine's state)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_claims)
