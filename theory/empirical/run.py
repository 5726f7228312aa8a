"""Run a paper's empirical claims at a scale, look by look, until each claim is decided or the paper's budget is
spent: the cells through the benchmark's runner (resumable: records keyed by config hash, so a rerun replays
the finished looks from their records and goes on), the verdicts through ``judge``.

CPU scale: every (setting, arm) the claims need is tuned by ``benchmark.campaign.tuning`` (all tuning cells in one
call of the runner), then the final seeds run in looks (``paper.BUDGET.looks``, e.g. 5, 10, 20, 40 paired
seeds): at each look the arms of the comparisons still open get their next seeds, all in one call of the
runner (which batches one arm's seeds into one job), and the comparisons and claims that are decided stop.
Before each look the paper's CPU time so far (its cells' wall times as recorded, a batched run counting its
share of the batch) is checked against ``paper.BUDGET.cpu_minutes``; a look that starts is finished. Quick
scale: one look of the quick scale's seeds, a smoke test. Full scale: the matching cells of the paper suite
(``FullScale.suite``), run where missing unless told not to, judged in one look of the suite's seeds.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from benchmark.campaign import runner, tuning, suite as campaign_suite
from benchmark.runs import store
from benchmark.runs.record import code_version

from . import is_own
from .claim import Budget
from .judge import Judge
from .metrics import COMPANIONS
from .scale import CpuScale, FullScale, arm_matches, paper_scales


def needed(claims) -> list[tuple[str, str]]:
    """The (setting, arm name) pairs the claims compare, in first-use order."""
    out = []
    for c in claims:
        for comp in c.comparisons:
            for a in (comp.a, comp.b):
                if (comp.setting, a) not in out:
                    out.append((comp.setting, a))
    return out


def runs_folder(results_root, version: str | None, scale_name: str) -> Path:
    v = version or code_version()["package"]
    base = Path(results_root) / "claims" / v
    return base / "runs" if scale_name == "cpu" else base / scale_name / "runs"


def cells(paper, scale: CpuScale) -> dict:
    """The tuning cells of every (setting, arm) of ``paper`` at ``scale`` (no runs): {(setting, arm): [exp]}."""
    return {(s, a): [e for _, _, e in tuning.tuning_cells(scale.base(s, paper.ARMS[a]), scale.plan(a))]
            for s, a in needed(claims_at(scale, paper.CLAIMS))}


def _records(folder: Path) -> dict[str, dict]:
    return {r["config_hash"]: r for r in store.read_records(folder)}


def cell_seconds(recs: dict, exps) -> float:
    """Summed CPU time of the cells' runs as recorded (``final.cpu_time``; the wall time for records made before
    it was recorded), a batched run counting its share of the batch (its record holds the whole batch's time):
    what the claims cost, whenever the report is written. CPU time, not wall time: on a shared machine the wall
    time of a run grows with the load and would end the looks early for a budget the runs did not spend."""
    total = 0.0
    for h in {e.config_hash() for e in exps}:
        r = recs.get(h) or {}
        f = r.get("final") or {}
        spent = f.get("cpu_time", f.get("wall_time")) or 0.0
        total += spent / max(1, int((r.get("execution") or {}).get("group_runs") or 1))
    return float(total)


def _add(counts: dict, more: dict) -> dict:
    return {k: counts.get(k, 0) + more.get(k, 0) for k in set(counts) | set(more)}


class UnderWay(Exception):
    """A CPU scale judged without running (``run_missing=False``) whose next cells are not all recorded yet: its
    verdicts would be premature. The message says how far it got."""


def _require(exps, folder: Path, what: str) -> None:
    recs = _records(folder) if folder.is_dir() else {}
    have = sum(e.config_hash() in recs for e in exps)
    if have < len(exps):
        raise UnderWay(f"{what}: {'not started, ' if have == 0 else ''}{have} of {len(exps)} runs recorded")


def run_cpu(paper, scale: CpuScale, claims: list, folder: Path, looks: tuple, seeds: tuple, cpu_seconds: float,
            backend: str, jobs, progress: bool, run_missing: bool = True) -> tuple[Judge, dict, dict]:
    """Tune, then run and judge the looks of ``claims`` (see the module docstring) while the cells take less than
    ``cpu_seconds``; returns the judge, the tuning summary and the cell counts (with "cell_seconds").
    ``run_missing=False``: judge the recorded runs only, raising ``UnderWay`` where a look's runs are missing."""
    pairs = needed(claims)
    bases = {(s, a): scale.base(s, paper.ARMS[a]) for s, a in pairs}
    plans = {(s, a): scale.plan(a) for s, a in pairs}
    if not run_missing:
        _require([e for k in pairs for _, _, e in tuning.tuning_cells(bases[k], plans[k])], folder, "tuning")
    recs_t, counts = tuning.tune_all([(bases[k], plans[k]) for k in pairs], folder, backend, jobs, progress,
                                     desc=f"{paper.PAPER}: tuning")
    tuned = dict(zip(pairs, recs_t))
    planned = [e for k in pairs for _, _, e in tuning.tuning_cells(bases[k], plans[k])]
    judge, prev = Judge(claims, looks, companions=_companions()), 0

    def finals(keys, chunk):
        return [e for k in keys for e in tuning.final_cells(bases[k], tuned[k]["choice"], plans[k], chunk)]

    for k, n in enumerate(looks):
        if cell_seconds(_records(folder), planned) >= cpu_seconds:
            judge.finish("cpu")
            break
        exps = finals(judge.needed(), seeds[prev:n])
        if not run_missing:
            _require(exps, folder, f"look {k + 1} ({n} seeds)")
        counts = _add(counts, runner.run_experiments(exps, folder, backend, jobs, progress=progress,
                                                     desc=f"{paper.PAPER}: look {k + 1} ({n} seeds)"))
        planned += exps
        recs = _records(folder)
        judge.look(k, {key: {e.seed: recs[e.config_hash()] for e in finals([key], seeds[:n])
                             if e.config_hash() in recs} for key in pairs}, seeds[:n])
        prev = n
        if judge.tracker.done:
            break
    counts["cell_seconds"] = cell_seconds(_records(folder), planned)
    summary = {f"{s} / {a}": {"choice": t["choice"], "chosen_index": t["chosen_index"], "complete": t["complete"],
                             "all_failed": t["all_failed"], "key": t["key"],
                             "points": [{"point": p["point"], "mean": p["mean"],
                                         "validation_accuracy": p["validation_accuracy"],
                                         "status": p.get("status", {})} for p in t["points"]]}
               for (s, a), t in tuned.items()}
    return judge, summary, counts


def run_full(paper, scale: FullScale, results_root, version, backend: str, jobs, progress: bool,
             run_missing: bool) -> tuple[Judge, dict, dict]:
    suite = campaign_suite.load_suite(scale.suite)
    folder = runner.results_dir(results_root, suite.name, version)
    pairs = needed(paper.CLAIMS)
    picked = {}
    for s, a in pairs:
        match = scale.settings[s]
        picked[(s, a)] = [c.experiment for c in suite.cells
                          if campaign_suite.config_matches(match, c.experiment.config())
                          and arm_matches(paper.ARMS[a], c.experiment.config())
                          and (scale.seeds is None or c.experiment.seed in scale.seeds)]
    counts = {}
    if run_missing:
        counts = runner.run_experiments([e for k in pairs for e in picked[k]], folder, backend, jobs,
                                        progress=progress, desc=f"{paper.PAPER}: {suite.name} cells")
    recs = _records(folder) if folder.is_dir() else {}
    counts = {**counts, "cell_seconds": cell_seconds(recs, [e for k in pairs for e in picked[k]])}
    runs = {k: {e.seed: recs[e.config_hash()] for e in picked[k] if e.config_hash() in recs} for k in pairs}
    seeds = sorted({e.seed for k in pairs for e in picked[k]})
    judge = Judge(paper.CLAIMS, (max(2, len(seeds)),))
    judge.look(0, runs, seeds)
    summary = {f"{s} / {a}": {"suite": suite.name, "cells": len(picked[(s, a)]),
                             "with_records": len(runs[(s, a)])} for s, a in pairs}
    return judge, summary, counts


def claims_at(scale, claims) -> list:
    """The claims a scale runs: all of them, or the scale's own selection where it declares one
    (``claims_here``: its ``only`` claims, measured by its ``metrics``)."""
    return scale.claims_here(claims) if hasattr(scale, "claims_here") else list(claims)


def scale_looks(looks: tuple, max_seeds: int | None = None) -> tuple:
    """The budget's looks up to a scale's seed maximum, which becomes the last look."""
    if not max_seeds:
        return tuple(looks)
    out = tuple(n for n in looks if n < max_seeds)
    return out + (int(max_seeds),)


def _companions() -> dict:
    """{metric measured: the claim's own metric, shown beside it} (``metrics.COMPANIONS``, where a scale declares
    a less noisy metric standing in for the claim's)."""
    return dict(COMPANIONS)


def run_paper(paper, scale="cpu", results_root="results", version: str | None = None,
              backend: str = "local", jobs: int | None = None, progress: bool = True,
              run_missing: bool = True, looks: tuple | None = None, spent_before: float = 0.0) -> dict:
    """Run (or resume) and judge ``paper``'s claims at ``scale``: "cpu" (the paper's first CPU scale), "quick"
    (its smoke test: one look), "full" (the paper suite's cells), or a ``CpuScale`` of the paper (which runs the
    claims it declares). ``looks`` replaces the budget's looks (e.g. (5,): one fixed look of 5 seeds);
    ``spent_before``: CPU seconds the paper's other scales took (its budget is shared). The dict is
    ``report.py``'s paper entry."""
    t0 = time.perf_counter()
    budget = paper.BUDGET
    if scale == "full":
        sc = paper.FULL
        judge, tuned, counts = run_full(paper, sc, results_root, version, backend, jobs, progress, run_missing)
    elif isinstance(scale, CpuScale) or scale in ("cpu", "quick"):
        sc = scale if isinstance(scale, CpuScale) else paper.CPU if scale == "cpu" else paper.CPU.quick()
        if sc.name == "quick":
            looks, seeds, seconds = (len(sc.final_seeds),), tuple(sc.final_seeds), float("inf")
        elif sc.replicates:  # its own declared design, seeds and budget (scale.REPLICATION)
            if looks:
                raise ValueError(f"{paper.PAPER}: scale {sc.name} is a replication with declared looks "
                                 f"{sc.looks}; --looks cannot replace them")
            looks, seconds = tuple(sc.looks), 60 * sc.cpu_minutes
            seeds = tuple(range(sc.seed_start, sc.seed_start + looks[-1]))
        else:
            looks = tuple(looks) if looks else scale_looks(budget.looks, getattr(sc, "max_seeds", None))
            seeds, seconds = tuple(range(looks[-1])), 60 * budget.cpu_minutes - spent_before
        judge, tuned, counts = run_cpu(paper, sc, claims_at(sc, paper.CLAIMS), runs_folder(results_root, version,
                                                                                            sc.name),
                                       looks, seeds, seconds, backend, jobs, progress, run_missing or sc.name == "quick")
    else:
        raise ValueError(f"scale must be cpu, quick, full or a CpuScale, got {scale!r}")
    results = judge.results()
    replicates = getattr(sc, "replicates", "")  # a FullScale has none
    for r in results:
        r["scale"] = sc.name
        if replicates:
            r["replicates"] = replicates
    if replicates:
        budget = Budget(sc.looks, sc.cpu_minutes, f"a replication of the {sc.replicates} scale: {sc.why}")
    return {"paper": paper.PAPER, "title": paper.TITLE, "scale": sc.describe(), "claims": results,
            "budget": {"looks": list(judge.looks), "cpu_minutes": budget.cpu_minutes, "reason": budget.reason},
            "tuning": tuned, "cells": counts, "seconds": time.perf_counter() - t0}


def judge(claims, runs: dict, looks: tuple | None = None) -> list[dict]:
    """Verdicts for ``claims`` from final records ``runs[(setting, arm)] = {seed: record}``, looking at the
    first n seeds for each n in ``looks`` (default: one look of all the seeds there are)."""
    seeds = sorted({s for v in runs.values() for s in v})
    looks = tuple(looks or (max(2, len(seeds)),))
    j = Judge(claims, looks, companions=_companions())
    for k, n in enumerate(looks):
        j.look(k, runs, seeds[:n])
        if j.tracker.done:
            break
    return j.results()


def scales_of(paper, scale: str) -> list:
    """What ``run_claims`` runs for ``paper``: "full"; the quick variant of its first CPU scale; every CPU
    scale it declares (``scale.paper_scales``: its ``SCALES``, the first running every claim, else its ``CPU``);
    or its replications ("replication": none for a paper that declares none)."""
    if scale == "full":
        return ["full"]
    if scale not in ("cpu", "quick", "replication"):
        raise ValueError(f"scale must be cpu, quick, replication or full, got {scale!r}")
    return paper_scales(paper, scale)


def report_folder(results_root, scale: str, paper: str | None = None, out=None) -> Path:
    """Where ``fedrepro claims`` writes: results/claims/<version>[/<scale>][/partial/<paper>], or ``out``; a
    claims file of the user's (``own``) in .../own/<its PAPER>. One paper never overwrites the whole report, nor
    another paper's."""
    if out:
        return Path(out)
    base = Path(results_root) / "claims" / code_version()["package"]
    folder = base if scale == "cpu" else base / scale
    return folder / ("own" if is_own(paper) else "partial") / paper if paper else folder


def _report_roots(results_root) -> list:
    """Where an earlier claims report is looked for: the results root, then the repository's committed results."""
    from benchmark.reports.leaderboard import committed_results

    committed = committed_results()
    same = committed is not None and Path(results_root).resolve() == committed.resolve()
    return [Path(results_root)] + ([committed] if committed is not None and not same else [])


def plan_claims(paper: str | None = None, scale: str = "cpu") -> list[dict]:
    """The full report's plan without running anything: per paper, its budget and, per CPU scale (or per
    replication, ``scale="replication"``), the claims it runs, its looks and its cost plan at the measured costs
    (``CpuScale.cost_plan``)."""
    from . import papers as paper_modules

    out = []
    for m in paper_modules(paper):
        scs = paper_scales(m, "replication" if scale == "replication" else "cpu")
        if not scs:
            continue
        scales = [{"scale": sc.name, "claims": [c.id for c in claims_at(sc, m.CLAIMS)],
                   "looks": list(sc.looks or scale_looks(m.BUDGET.looks, sc.max_seeds)),
                   "plan": sc.cost_plan(strict=not is_own(m.PAPER)), "seeds": [sc.seed_start, sc.seed_start + sc.max_seeds - 1]} for sc in scs]
        budget = ({"looks": list(scs[0].looks), "cpu_minutes": sum(sc.cpu_minutes for sc in scs),
                   "reason": "the replications' own budgets"} if scale == "replication" else
                  {"looks": list(m.BUDGET.looks), "cpu_minutes": m.BUDGET.cpu_minutes, "reason": m.BUDGET.reason})
        out.append({"paper": m.PAPER, "budget": budget, "scales": scales,
                    "cpu_minutes": sum(s["plan"]["cpu_minutes"] for s in scales)})
    return out


def before_report(results_root, before: str | None) -> tuple[str, dict] | None:
    """The claims report whose spreads are shown beside a new one: ``before`` = "previous" (the newest version
    older than this code's under the results root, else under the committed results), a version (the committed
    one, else the results root's: the root may hold this very run's report) or None. A named version that is
    nowhere is an error."""
    import json

    from .report import previous_report

    if not before:
        return None
    prev, roots = None, _report_roots(results_root)
    if before != "previous":
        roots = roots[::-1]  # a named version: the committed one first (the root may hold this run's own report)
    for root in roots:
        if before == "previous":
            prev = previous_report(root, code_version()["package"])
        elif (Path(root) / "claims" / before / "report.json").is_file():
            prev = (before, json.loads((Path(root) / "claims" / before / "report.json").read_text()))
        if prev:
            break
    if before != "previous" and not prev:
        raise FileNotFoundError(f"no claims report {before} under {' or '.join(map(str, roots))}/claims to compare "
                                "spreads with; give an existing version")
    return prev


def _load() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def run_claims(paper: str | None = None, scale: str = "cpu", results_root="results", out=None,
               backend: str = "local", jobs: int | None = None, progress: bool = True, run_missing: bool = True,
               looks: tuple | None = None, note: str = "", before: str | None = "previous") -> dict:
    """Run (or resume) every paper's claims, or ``paper``'s, and write the report (``report.write_report``).
    ``before``: the claims report version whose spreads are shown beside the new ones ("previous": the newest
    older version under the results root, else under the committed results; a version: the committed one, else
    the results root's; None: none). Returns {"papers": [...], "paths": {...}}."""
    from . import papers as paper_modules
    from .report import write_report

    if scale == "replication" and before == "previous":  # beside a replication: the first stage it repeats
        before = code_version()["package"]
    if is_own(paper) and before == "previous":  # a claims file of the user's has no earlier report to set beside
        before = None
    if scale == "replication" and not any(paper_scales(m, "replication") for m in paper_modules(paper)):
        have = [m.PAPER for m in paper_modules() if paper_scales(m, "replication")]
        raise ValueError(f"{paper or 'no paper'} declares no replication; papers with one: {', '.join(have)}")
    prev = before_report(results_root, before)

    t0, load0 = time.time(), _load()
    results = []
    for m in paper_modules(paper):
        spent = 0.0
        for sc in scales_of(m, scale):  # a paper's scales in turn, sharing its CPU budget (a replication: its own)
            try:
                results.append(run_paper(m, sc, results_root, None, backend, jobs, progress, run_missing, looks,
                                         spent))
            except UnderWay as e:  # --no-run: a scale still running is listed, not judged
                results.append({"paper": m.PAPER, "title": m.TITLE, "scale": sc.describe(), "claims": [],
                                "under_way": str(e), "budget": {"looks": list(sc.looks or m.BUDGET.looks),
                                                                "cpu_minutes": sc.cpu_minutes or m.BUDGET.cpu_minutes,
                                                                "reason": "under way"},
                                "tuning": {}, "cells": {"cell_seconds": 0.0}, "seconds": 0.0})
            spent += results[-1]["cells"].get("cell_seconds", 0.0)
    meta = {"scale": scale, "quick": scale == "quick", "wall_seconds": time.time() - t0, "cpus": os.cpu_count(),
            "backend": backend, "jobs": jobs, "load_start": load0, "load_end": _load(), "note": note or "",
            "looks": list(looks) if looks else None}
    if is_own(paper):  # which file declared these claims, as a plugin's records name theirs
        from .own import provenance

        meta["claims_file"] = provenance(paper)
    paths = write_report(results, report_folder(results_root, scale, paper, out), meta, prev)
    return {"papers": results, "paths": paths}
