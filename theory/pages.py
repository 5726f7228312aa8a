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
  (for orientation only at a reduced scale);
* the commands that reproduce the paper's tables on a GPU (``results/perf/README.md`` has the session recipe).

``version`` picks the results folders (default: the newest version present for each kind of result).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .paper_notes import NOTES

PAPERS = ("bherd", "fedbat", "fedswa", "gradma", "lfl")
STOP_KEYS = ("stop_reason", "stopped_because", "stopped", "why_stopped")
SEED_KEYS = ("seeds_used", "n_seeds")


def newest(folder: Path, holding: str | None = None) -> str | None:
    """The newest version folder name under ``folder`` (numeric order), or None; with ``holding``, the newest
    that holds that file (a version whose run is still under way has records but no report yet)."""
    names = [p.name for p in folder.glob("*") if p.is_dir() and re.fullmatch(r"\d+(\.\d+)*", p.name)
             and (holding is None or (p / holding).is_file())]
    return max(names, key=lambda v: tuple(int(x) for x in v.split("."))) if names else None


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


def short_answer(paper: str, claims_report: dict | None, theory_report: dict | None,
                 replication: tuple | None = None) -> list[str]:
    emp = [(c["verdict"], c.get("scale", p["scale"].get("scale"))) for p in (claims_report or {}).get("papers", [])
           if p.get("paper") == paper for c in p["claims"]]
    theo = [c["verdict"] for c in (theory_report or {}).get("claims", []) if c.get("paper") == paper]
    scales = sorted({s for _, s in emp})
    where = ""
    if scales and "full" not in scales:
        how = ("the paper scale is the paper's setting but for the reductions listed below" if "paper" in scales
               else "none at the paper's full setting")
        where = f" (scale {', '.join(scales)}; {how})"
    rep = _replication_claims(replication, paper)
    again = (f" Repeated on fresh seeds (the undecided claims' replication, scale "
             f"{', '.join(sorted({c['scale'] for c in rep}))}): " + _counts(c["verdict"] for c in rep) + "."
             ) if rep else ""
    return ["**In short.** Empirical claims: " + _counts(v for v, _ in emp) + where + "." + again + " Theory checks: "
            + _counts(theo) + ". Details, deviations and how to reproduce below.", ""]


def seeds_used(c: dict) -> int:
    for k in SEED_KEYS:
        if isinstance(c.get(k), int):
            return c[k]
    return max((x.get("n") or 0 for x in c.get("comparisons", [])), default=0)


def stop_reason(c: dict) -> str:
    """Why a claim's seeds stopped: the report's own words where it has them (and, for an undecided claim, the
    decision that came closest)."""
    why = next((str(c[k]) for k in STOP_KEYS if c.get(k)), None) or (str(c["reason"]) if c.get("reason") else None)
    if why is None:
        return f"a fixed {seeds_used(c)} paired seeds (this report has no sequential stopping)"
    closest = c.get("closest") if isinstance(c.get("closest"), dict) else None
    return why + (f"; closest: {closest['text']}" if closest and closest.get("text") else "")


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
    md = ["### Replication on fresh seeds", "", REPLICATION, ""]
    busy = [p for p in _replication_blocks(replication, paper) if p.get("under_way")]
    if busy:
        md += [f"Under way ({'; '.join(p['under_way'] for p in busy)}; from `{replication[0]}`): "
               f"`fedrepro claims --scale replication --paper {paper}` resumes it.", ""]
    if not rep and not busy:
        return md + ["Declared and not run yet: " + "; ".join(
            f"{', '.join(sc.only)} at the {sc.replicates} scale, seeds {sc.seed_start}-{sc.seed_start + sc.max_seeds - 1}"
            f" in looks {', '.join(map(str, sc.looks))}, {sc.cpu_minutes:g} CPU-min" for sc in declared)
            + f" (`fedrepro claims --scale replication --paper {paper}`).", ""]
    if not rep:
        return md
    keys = {(c["id"], c.get("scale")): c.get("key_number", "") for c in replication[1].get("claims", [])}
    rows = [[c["id"], f"**{c['verdict']}**", c["scale"], seeds_used(c), stop_reason(c), keys.get((c["id"], c["scale"]), "")]
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
            rows.append([c["id"], c["statement"], f"**{c['verdict']}**", scale, seeds_used(c), stop_reason(c),
                         keys.get((c["id"], scale), "")])
    md += _table(["claim", "tested", "verdict", "scale", "seeds", "why it stopped", "key number"], rows) + [""]
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
    for p in blocks:
        sc = p["scale"]
        md += [f"Scale **{sc.get('scale')}** of this report: kept from the paper: " + "; ".join(sc.get("kept", []))
               + ".", "", "Reductions (paper -> here): " + "; ".join(sc.get("reductions", [])) + ".", ""]
    return md + replication_section(paper, replication)


def theory_section(paper: str, theory_report: dict | None, where: str) -> list[str]:
    md = ["## Theory verdicts", ""]
    claims = [c for c in (theory_report or {}).get("claims", []) if c.get("paper") == paper]
    if not claims:
        return md + [f"No theory claims for this paper in `{where}`.", ""]
    counts = {}
    for c in claims:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    md += [f"From `{where}` ({', '.join(f'{n} {v}' for v, n in sorted(counts.items()))}). HOLDS / VIOLATED: a "
           "calibrated test on convex problems with a known optimum or on real training; UNINFORMATIVE: an "
           "algorithm that never moves would pass too.", ""]
    rows = [[c["id"], c.get("kind", ""), c.get("source", ""), f"**{c['verdict']}**", c.get("key_number", "")]
            for c in claims]
    return md + _table(["claim", "kind", "source", "verdict", "key number"], rows) + [""]


# ------------------------------------------------------------------------------------------------ scales


def scales_section(paper: str) -> list[str]:
    from . import empirical
    from .empirical.scale import paper_scales

    mod = empirical.paper(paper)
    md = ["## Scales the claims run at now", "",
          f"`theory/empirical/{paper}.py`; `fedrepro claims --paper {paper}` runs them on a CPU, resumable. The "
          "cost plan counts the tuning runs and up to the most paired seeds the plan allows, at the measured "
          "minutes per run.", ""]
    for sc in paper_scales(mod) + paper_scales(mod, "replication"):
        d = sc.describe()
        only = ", ".join(d["only"]) if d["only"] else "all claims"
        md += [f"### `{d['scale']}` ({only})", "", d["why"] or "", ""]
        if d.get("replication"):
            r = d["replication"]
            md += [f"A replication of `{r['replicates']}` (`fedrepro claims --scale replication --paper {paper}`): "
                   f"fresh seeds {r['seeds'][0]}-{r['seeds'][1]}, looks {r['looks']}, its own budget of "
                   f"{r['cpu_minutes']:g} CPU-min.", ""]
        if d["metrics"]:
            md += ["Metric: " + "; ".join(f"`{a}` measured by `{b}`" for a, b in d["metrics"].items()) + ".", ""]
        md += ["Reductions (paper -> here):", ""] + [f"- {r}" for r in d["reductions"]] + [""]
        if d.get("plan"):
            md += ["Plan: " + d["plan"][-1] + ".", ""]
    return md


# ------------------------------------------------------------------------------------------------ leaderboards


def leaderboard_table(text: str) -> list[str]:
    """The first markdown table of a leaderboard.md."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if start is None:
        return []
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def leaderboards_section(paper: str, results: Path) -> list[str]:
    from benchmark.campaign import suite as campaign_suite

    md = ["## Leaderboards beside the paper's numbers", ""]
    suites = NOTES[paper]["suites"]
    for kind in ("reduced", "paper"):
        for name in suites[kind]:
            suite = campaign_suite.load_suite(name)
            v = newest(results / name, "leaderboard.md")
            if v is None:
                md += [f"- `{name}` ({suite.scale} scale, {len(suite.cells)} cells, needs {suite.requires}): no "
                       "committed leaderboard yet; the commands below produce it.", ""]
                continue
            comparable = suite.scale == "paper"
            md += [f"### `{name}` ({v})", "",
                   ("The paper's own setting: the paper's numbers are comparable." if comparable else
                    "A reduced setting: the paper's numbers, where shown, are for orientation only; a reduced run "
                    "is not expected to reach them."),
                   f"From [results/{name}/{v}/leaderboard.md](../{name}/{v}/leaderboard.md):", ""]
            md += leaderboard_table((results / name / v / "leaderboard.md").read_text()) + [""]
    return md


# ------------------------------------------------------------------------------------------------ GPU


def gpu_section(paper: str) -> list[str]:
    from benchmark.campaign import suite as campaign_suite

    md = ["## Reproduce the paper's tables on a GPU", "",
          "From the repository root on a machine with a CUDA GPU and the datasets under `.data` (Fashion-MNIST "
          "ships offline; MNIST, SVHN and CIFAR need `--download` once where there is a network). Each command "
          "resumes where it stopped; `results/perf/README.md` (\"For the GPU session\") has the recipe for "
          "machines that allow 10 minutes per call.", "", "```bash", "export PYTHONPATH=.  # or pip install -e ."]
    for name in NOTES[paper]["suites"]["paper"]:
        n = len(campaign_suite.load_suite(name).cells)
        md += [f"python3 -m benchmark.cli run --suite {name} --device cuda --data-root .data --dry-run   "
               f"# {n} cells: batched jobs, estimated time",
               f"python3 -m benchmark.cli run --suite {name} --device cuda --data-root .data",
               f"python3 -m benchmark.cli report --suite {name}   # leaderboard beside the paper's numbers"]
    md += [f"python3 -m benchmark.cli claims --scale full --paper {paper} --no-run   # the claims on those cells",
           "```", "", "On a CPU, the claims at the scales above:", "", "```bash",
           f"fedrepro claims --paper {paper}            # the full report's scales (see the plan above)",
           f"fedrepro claims --quick --paper {paper}    # a smoke test in seconds, not a verdict"]
    from . import empirical
    from .empirical.scale import paper_scales

    if paper_scales(empirical.paper(paper), "replication"):
        md += [f"fedrepro claims --scale replication --paper {paper}   # the undecided claims on fresh seeds"]
    md += [f"fedrepro report --paper {paper} --publish  # regenerate this page", "```", ""]
    return md


# ------------------------------------------------------------------------------------------------ page


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
        first = " ".join(doc.split("\n\n")[0].split())
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
         claims_version: str | None = None) -> str:
    """The markdown page of ``paper`` from the committed results under ``results``."""
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
          ""] + short_answer(paper, claims, theory, replication) + ["## What the paper claims", ""] + [
              f"- {c}" for c in n["claims"]] + [""]
    noise = f"results/claims/{cv}/tuning-noise.md"
    md += empirical_section(paper, claims, f"results/claims/{cv}/report.json", replication,
                            noise if cv and (results / "claims" / str(cv) / "tuning-noise.md").is_file() else None)
    md += theory_section(paper, theory, f"results/theory/{tv}/report.json")
    md += implementation_section(paper)
    md += scales_section(paper)
    md += leaderboards_section(paper, results)
    md += gpu_section(paper)
    return "\n".join(md).rstrip() + "\n"


def write_pages(papers, results="results", out: str | None = None) -> list[Path]:
    """Write ``<out>/<paper>.md`` (default ``<results>/papers``) for each paper; ``papers``: names or "all"."""
    results = Path(results)
    names = list(PAPERS) if papers in ("all", ["all"], ("all",)) else [papers] if isinstance(papers, str) else papers
    folder = Path(out) if out else results / "papers"
    texts = {p: page(p, results) for p in names}  # an unknown paper fails before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for p, text in texts.items():
        path = folder / f"{p}.md"
        path.write_text(text)
        paths.append(path)
    return paths
