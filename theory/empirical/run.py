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
import statistics
import time
from pathlib import Path

from benchmark.campaign import runner, tuning, suite as campaign_suite
from benchmark.runs import store
from benchmark.runs.record import code_version
from theory.stats.sequential import check_looks

from . import declaration, is_own, paired, paths, protocol
from .claim import Budget
from .family import alpha_at, described, family_of, scale_looks
from .judge import Judge
from .metrics import COMPANIONS, rounds_read
from .scale import CpuScale, FullScale, arm_matches, paper_scales, plan_lines


def needed(claims) -> list[tuple[str, str]]:
    """The (setting, arm name) pairs the claims compare, in first-use order."""
    out = []
    for c in claims:
        for comp in c.comparisons:
            for a in (comp.a, comp.b):
                if (comp.setting, a) not in out:
                    out.append((comp.setting, a))
    return out


def evaluating(base, claims):
    """``base`` evaluating the test set only at the rounds the claims' metrics (and their companions) read
    (``metrics.rounds_read``; issue 45): unchanged where they read every evaluated round."""
    import dataclasses

    metrics = {c.metric for c in claims} | {m for c in claims for m in getattr(c, "beside", ())}
    metrics |= {COMPANIONS[m] for m in metrics if m in COMPANIONS}
    return dataclasses.replace(base, eval_rounds=rounds_read(metrics, base.rounds, base.eval_every))


def arms_of(claims) -> dict:
    """{setting: [arm names]} the claims compare (the rows of a scale's cost plan)."""
    out = {}
    for s, a in needed(claims):
        out.setdefault(s, []).append(a)
    return out


def tuning_metrics(claims) -> dict:
    """{(setting, arm): the metric its tuning is scored by}: the (measured) metric of the claims that compare it,
    ratio comparisons aside (a bit count is no tuning score); the final accuracy where only ratios use it. Two
    claims that would tune one (setting, arm) by different metrics are an error: give one of them a setting of its
    own."""
    out, ratio_only = {}, []
    for c in claims:
        for comp in c.comparisons:
            for a in (comp.a, comp.b):
                if comp.test == "ratio":
                    ratio_only.append((comp.setting, a))
                    continue
                old = out.setdefault((comp.setting, a), c.metric)
                if old != c.metric:
                    raise ValueError(f"{comp.setting} / {a} enters claims measured by {old} and by {c.metric}: its "
                                     "tuning is scored by its claims' metric: put one claim in a setting of its own")
    for k in ratio_only:
        out.setdefault(k, "final_accuracy")
    return out


def plans(paper, scale: CpuScale, claims) -> dict:
    """{(setting, arm): (base experiment, tuning plan or None)} of ``claims`` at ``scale``; None where the setting
    is fixed (``CpuScale.fixed``: the arm runs at the setting's own hyperparameters)."""
    metric = tuning_metrics(claims)
    return {(s, a): (evaluating(scale.base(s, paper.ARMS[a]), claims),
                     None if s in scale.fixed else scale.plan(a, metric[(s, a)]))
            for s, a in needed(claims)}


def cells(paper, scale: CpuScale) -> dict:
    """The declared tuning cells of every tuned (setting, arm) of ``paper`` at ``scale`` (no runs, no extension):
    {(setting, arm): [exp]}."""
    return {k: [e for _, _, e in tuning.tuning_cells(base, plan)]
            for k, (base, plan) in plans(paper, scale, claims_at(scale, paper.CLAIMS)).items() if plan is not None}


def _records(folder: Path) -> dict[str, dict]:
    return {r["config_hash"]: r for r in store.read_records(folder)} if Path(folder).is_dir() else {}


def cell_seconds(recs: dict, exps) -> float:
    """Summed CPU time of the cells' runs as recorded (``final.cpu_time``; the wall time for records made before
    it was recorded), a batched run counting its share of the batch (its record holds the whole batch's time):
    what the claims cost, whenever the report is written. CPU time, not wall time: on a shared machine the wall
    time of a run grows with the load and would end the looks early for a budget the runs did not spend."""
    total = 0.0
    for h in {e.config_hash() for e in exps}:
        r = recs.get(h) or {}
        final = r.get("final") or {}
        spent = final.get("cpu_time", final.get("wall_time")) or 0.0
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


def _tuned(paper, scale: CpuScale, items: dict, folder: Path, backend: str, jobs, progress: bool,
           run_missing: bool) -> tuple[dict, dict, list]:
    """Tune every (setting, arm) with a plan (``tuning.tune_all``: the declared grids, then the extension steps
    due); a fixed one gets its setting's own hyperparameters. Returns {key: tuning record or a fixed stand-in},
    the runner's counts and the tuning cells."""
    tuned_keys = [k for k, (_, plan) in items.items() if plan is not None]
    pairs = [items[k] for k in tuned_keys]
    if not run_missing:  # every cell the rule has reached from the records, extension steps included
        recs = _records(folder)
        _require([e for base, plan in pairs for _, _, e in tuning.tuning_cells(
            base, plan, tuning.extension(base, plan, recs)[0])], folder, "tuning")
    recs_t, counts = tuning.tune_all(pairs, folder, backend, jobs, progress, desc=f"{paper.PAPER}: tuning")
    out = dict(zip(tuned_keys, recs_t))
    for k, (_, plan) in items.items():
        if plan is None:
            out[k] = {"choice": {}, "fixed": scale.fixed[k[0]], "points": []}
    cells_ = [e for k in tuned_keys for pt in [[p["point"] for p in out[k]["points"]]]
              for _, _, e in tuning.tuning_cells(items[k][0], items[k][1], pt)]
    return out, counts, cells_


def tuning_summary(tuned: dict) -> dict:
    """The report's view of the tuning records: per "setting / arm" the choice, every point's scores (per tuning
    seed, mean, sd, status), the extension steps, the edges and the score; a fixed one its reason."""
    out = {}
    for (s, a), t in tuned.items():
        if "fixed" in t:
            out[f"{s} / {a}"] = {"fixed": t["fixed"], "choice": {}, "points": [], "chosen_index": None,
                                 "complete": True, "all_failed": False, "edge": []}
            continue
        out[f"{s} / {a}"] = {
            "choice": t["choice"], "chosen_index": t["chosen_index"], "complete": t["complete"],
            "all_failed": t["all_failed"], "key": t["key"], "score": t["plan"]["score"],
            "steps": t.get("steps", []), "edge": t.get("edge", []),
            "points": [{"point": p["point"], "mean": p["mean"], "sd": p.get("sd"),
                        "validation_accuracy": p["validation_accuracy"], "status": p.get("status", {}),
                        "extension": p.get("extension", False)} for p in t["points"]]}
    return out


def run_cpu(paper, scale: CpuScale, claims: list, folder: Path, looks: tuple, seeds: tuple, cpu_seconds: float,
            backend: str, jobs, progress: bool, run_missing: bool = True) -> tuple[Judge, dict, dict]:
    """Tune, then run and judge the looks of ``claims`` (see the module docstring) while the cells take less than
    ``cpu_seconds``; returns the judge, the tuning summary and the cell counts (with "cell_seconds").
    ``run_missing=False``: judge the recorded runs only, raising ``UnderWay`` where a look's runs are missing."""
    alpha = alpha_at(paper, scale.name)  # the paper's family is checked before any run
    scale.checked_metrics(claims)  # an early metric needs its evaluations before any run
    items = plans(paper, scale, claims)
    pairs = list(items)
    tuned, counts, planned = _tuned(paper, scale, items, folder, backend, jobs, progress, run_missing)
    judge, prev = Judge(claims, looks, alpha=alpha, companions=_companions()), 0

    def finals(keys, chunk):  # a fixed setting's arm: its base experiment (its plan only checks the seeds are fresh)
        return [e for k in keys for e in tuning.final_cells(items[k][0], tuned[k]["choice"],
                                                             items[k][1] or scale.plan(k[1]), chunk)]

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
    return judge, tuning_summary(tuned), counts


def run_full(paper, scale: FullScale, results_root, version, backend: str, jobs, progress: bool,
             run_missing: bool) -> tuple[Judge, dict, dict]:
    suite = campaign_suite.load_suite(scale.suite)
    folder = runner.results_dir(results_root, suite.name, version)
    claims = claims_at(scale, paper.CLAIMS)
    pairs = needed(claims)
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
    judge = Judge(claims, (max(2, len(seeds)),), alpha=alpha_at(paper, "full"))
    judge.look(0, runs, seeds)
    summary = {f"{s} / {a}": {"suite": suite.name, "cells": len(picked[(s, a)]),
                             "with_records": len(runs[(s, a)])} for s, a in pairs}
    return judge, summary, counts


def claims_at(scale, claims) -> list:
    """The claims a scale runs: all of them, or the scale's own selection where it declares one
    (``claims_here``: its ``only`` claims, measured by its ``metrics``)."""
    return scale.claims_here(claims) if hasattr(scale, "claims_here") else list(claims)


def _companions() -> dict:
    """{metric measured: the claim's own metric, shown beside it} (``metrics.COMPANIONS``, where a scale declares
    a less noisy metric standing in for the claim's)."""
    return dict(COMPANIONS)


def design_looks(scale: str, looks) -> tuple | None:
    """``looks`` that replace the declared ones, checked before any run (``sequential.check_looks``), or None (the
    declared looks). Refused where a scale runs a design of its own: quick (one look of its seeds, a smoke test), a
    replication (the looks it declared before its runs) and full (one look of the paper suites' seeds)."""
    if looks is None:
        return None
    own = {"quick": "--quick is one look of a few seeds (a smoke test, never a verdict)",
           "replication": "a replication runs the looks it declared before its runs",
           "full": "--scale full judges one look of the paper suites' own seeds"}
    if scale in own:
        raise ValueError(f"{own[scale]}; --looks cannot replace them: drop --looks")
    return check_looks(looks, "--looks")


def refuse_another_design(folder, looks: tuple | None, replace: bool = False, mods=()) -> None:
    """A claims report written in ``folder`` for another design (its looks: the declared ones or a ``--looks``; or
    another error family of one of ``mods``, ``refuse_changed_family``) is not replaced silently: a ValueError
    naming the flag that replaces it (``--replace``; ``replace=True`` in Python) and ``--out``. The same design
    resumes and rewrites it, as always."""
    import json

    path = Path(folder) / "report.json"
    if replace or not path.is_file():
        return
    try:
        report = json.loads(path.read_text())
        old = (report.get("meta") or {}).get("looks")
    except (OSError, ValueError):
        report, old = None, "unreadable"
    new = list(looks) if looks else None
    if old != new:
        def design(lk):
            return ("each scale's declared looks" if lk is None else "a report.json that cannot be read"
                    if lk == "unreadable" else "--looks " + ",".join(map(str, lk)))
        raise ValueError(f"{path} holds a report judged with {design(old)}; this run asks for {design(new)} and "
                         "would replace it: give --replace to replace it (replace=True in Python), or --out DIR to "
                         "write this one elsewhere")
    refuse_changed_family(report, mods, str(path), "give --replace to replace that report, or --out DIR")


def refuse_changed_family(report: dict | None, mods, what: str, way_out: str = "") -> None:
    """A paper's error family is fixed before any of its runs (``family.py``): a paper of ``mods`` whose family now
    (its scales and stages and their shares) is not the one recorded in ``report`` (``method.families``: a written
    report this run would replace, or the first stage a replication follows) is refused, naming both."""
    recorded = {f["paper"]: f for f in ((report or {}).get("method") or {}).get("families") or []}

    def shares(f):
        return [(u["scale"], u["stage"], round(u["alpha"], 12)) for u in f["units"]] + [round(f["alpha"], 12)]

    def text(f):
        return ", ".join(f"{u['alpha']:.3g} at {u['scale']}" for u in f["units"])

    for m in mods:
        old, now = recorded.get(m.PAPER), family_of(m).describe()
        if old is not None and shares(old) != shares(now):
            raise ValueError(f"{m.PAPER}: its error family is not the one {what} was judged with ({text(old)} then, "
                             f"{text(now)} now); the split over a paper's scales and stages is declared before any "
                             "run: restore its SCALES, REPLICATIONS and ALPHA_SPLIT" + (f", or {way_out}" if way_out
                                                                                       else ""))


def open_claims(sc: CpuScale, claims: list, first: dict | None) -> list:
    """The claims a replication declared before its first stage runs (``inconclusive_only``): those of ``claims``
    that the first stage's report (``first``, its report.json) left INCONCLUSIVE at the replicated scale. Without
    that report it cannot know them, and says so."""
    if not sc.inconclusive_only:
        return claims
    if first is None:
        raise ValueError(f"scale {sc.name} repeats the claims the {sc.replicates} scale leaves INCONCLUSIVE: run and "
                         "write the first stage's report first (fedrepro claims, the same version)")
    left = {c["id"] for c in first.get("claims", []) if c.get("scale") == sc.replicates
            and c.get("verdict") == "INCONCLUSIVE"}
    return [c for c in claims if c.id in left]


def declared(judge: Judge, claims: list, results: list[dict]) -> None:
    """Add to each claim's result what its declaration says about its metric (``paper_metric``,
    ``metric_reason``, ``objection``) and the metrics it declares ``beside`` the deciding one, on the seeds each
    comparison used (as the judge's companion: never deciding)."""
    for i, (c, r) in enumerate(zip(claims, results)):
        for name in ("paper_metric", "metric_reason", "objection"):
            if getattr(c, name, ""):
                r[name] = getattr(c, name)
        js = [j for j, (ci, _) in enumerate(judge.comps) if ci == i]
        if getattr(c, "beside", ()):
            r["beside"] = [{"metric": m, "comparisons": [_on_seeds(judge, j, m, x) for j, x in zip(js, r["comparisons"])]}
                           for m in c.beside]


def _on_seeds(judge: Judge, j: int, metric: str, x: dict) -> dict:
    """Comparison j's per-seed values in ``metric`` on the seeds it used (x["seeds"])."""
    ra, rb = judge.runs.get(j, ({}, {}))
    used = set(x["seeds"])
    pr = paired.pair(judge.comps[j][1], metric, {s: r for s, r in ra.items() if s in used},
                     {s: r for s, r in rb.items() if s in used})
    v = [float(y) for y in pr["x"]]
    return {"seeds": pr["seeds"], "values": v, "n": len(v), "mean": statistics.fmean(v) if v else None,
            "sd": statistics.stdev(v) if len(v) > 1 else None}


def run_paper(paper, scale="cpu", results_root="results", version: str | None = None,
              backend: str = "local", jobs: int | None = None, progress: bool = True,
              run_missing: bool = True, looks: tuple | None = None, spent_before: float = 0.0,
              first: dict | None = None) -> dict | None:
    """Run (or resume) and judge ``paper``'s claims at ``scale``: "cpu" (the paper's first CPU scale), "quick"
    (its smoke test: one look), "full" (the paper suite's cells), or a ``CpuScale`` of the paper (which runs the
    claims it declares). ``looks`` replaces the budget's looks (e.g. (5,): one fixed look of 5 seeds);
    ``spent_before``: CPU seconds the paper's other scales took (its budget is shared); ``first``: the first
    stage's report.json, which a replication declared before it (``open_claims``) reads. The dict is
    ``report.py``'s paper entry; None for a replication with nothing left to repeat."""
    t0 = time.perf_counter()
    looks = design_looks(scale if isinstance(scale, str) else "replication" if scale.replicates else scale.name, looks)
    budget = declaration(paper, "BUDGET")
    claims = list(paper.CLAIMS)
    if scale == "full":
        sc = paper.FULL
        claims = claims_at(sc, paper.CLAIMS)
        judge, tuned, counts = run_full(paper, sc, results_root, version, backend, jobs, progress, run_missing)
    elif isinstance(scale, CpuScale) or scale in ("cpu", "quick"):
        cpu = declaration(paper, "CPU")
        sc = scale if isinstance(scale, CpuScale) else cpu if scale == "cpu" else cpu.quick()
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
            seeds = tuple(range(sc.seed_start, sc.seed_start + looks[-1]))  # from 0 unless declared fresh
            seconds = 60 * budget.cpu_minutes - spent_before
        claims = open_claims(sc, claims_at(sc, paper.CLAIMS), first)
        if not claims:
            return None
        folder = paths.runs_folder(results_root, version, sc.name)
        judge, tuned, counts = run_cpu(paper, sc, claims, folder, looks, seeds,
                                       seconds, backend, jobs, progress, run_missing or sc.name == "quick")
    else:
        raise ValueError(f"scale must be cpu, quick, full or a CpuScale, got {scale!r}")
    results = judge.results()
    declared(judge, claims, results)
    replicates = getattr(sc, "replicates", "")  # a FullScale has none
    for r in results:
        r["scale"] = sc.name
        if replicates:
            r["replicates"] = replicates
    if replicates:
        budget = Budget(sc.looks, sc.cpu_minutes, f"a replication of the {sc.replicates} scale: {sc.why}")
    desc = sc.describe()
    if isinstance(sc, CpuScale) and sc.cost:
        desc["plan"] = plan_lines(sc.cost_plan(arms_of(claims), strict=False))
    return {"paper": paper.PAPER, "title": paper.TITLE, "scale": desc, "claims": results,
            "budget": {"looks": list(judge.looks), "cpu_minutes": budget.cpu_minutes, "reason": budget.reason},
            "tuning": tuned, "cells": counts, "seconds": time.perf_counter() - t0,
            "family": described(paper, sc.name, judge)}


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


def plan_claims(paper: str | None = None, scale: str = "cpu", looks: tuple | None = None,
                root=None) -> list[dict]:
    """The full report's plan without running anything: per paper, its budget, its error family
    (``family.Family.describe``) and, per CPU scale (or per replication, ``scale="replication"``), the claims it
    runs, its looks (``looks`` where they replace the declared ones, checked by ``design_looks``) and its cost plan
    at the measured costs (``CpuScale.cost_plan``, up to the last look's seeds); with a results ``root``, also what
    its folder has recorded so far and what is left (``progress.recorded``), and the plan at the newest earlier
    version's recorded costs, from ``root`` or the committed results and their archives
    (``progress.measured_before``)."""
    import shutil

    from benchmark.reports.leaderboard import committed_results

    from . import papers as paper_modules
    roots = [] if root is None else list(dict.fromkeys(str(r) for r in (root, committed_results()) if r))
    unpacked: dict = {}  # archives unpacked into temporary folders for the earlier costs, removed here
    try:
        return _plan_papers(paper_modules(paper), scale, design_looks(scale, looks), root, roots, unpacked)
    finally:
        for folder in unpacked.values():
            shutil.rmtree(folder, ignore_errors=True)


def _plan_papers(modules, scale: str, looks, root, roots: list, unpacked: dict) -> list[dict]:
    """``plan_claims``'s loop over the papers."""
    from .progress import measured_before, recorded
    out, read = [], {}  # read: each folder's records, once (several papers' scales share one)
    for m in modules:
        scs = paper_scales(m, "replication" if scale == "replication" else "cpu")
        if not scs:
            continue
        bud, scales = declaration(m, "BUDGET"), []
        for sc in scs:
            plan = sc.cost_plan(arms_of(claims_at(sc, m.CLAIMS)), max_seeds=looks[-1] if looks else None,
                                strict=not is_own(m.PAPER))
            scales.append({"scale": sc.name, "claims": [c.id for c in claims_at(sc, m.CLAIMS)],
                           "inconclusive_only": sc.inconclusive_only,
                           "looks": list(looks or sc.looks or scale_looks(bud.looks, sc.max_seeds)), "plan": plan,
                           "seeds": [sc.seed_start, sc.seed_start + (looks[-1] if looks else sc.max_seeds) - 1],
                           **({} if root is None else {
                               "recorded": recorded(paths.runs_folder(root, None, sc.name), sc, m.ARMS, plan, read),
                               "measured_before": measured_before(roots, paths.version(), sc, m.ARMS, plan,
                                                                  unpacked, read)})})
        budget = ({"looks": list(scs[0].looks), "cpu_minutes": sum(sc.cpu_minutes for sc in scs),
                   "reason": "the replications' own budgets"} if scale == "replication" else
                  {"looks": list(bud.looks), "cpu_minutes": bud.cpu_minutes, "reason": bud.reason})
        out.append({"paper": m.PAPER, "budget": budget, "scales": scales, "family": family_of(m).describe(),
                    "cpu_minutes": sum(s["plan"]["cpu_minutes"] for s in scales)})
    return out


def _load() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def run_claims(paper: str | None = None, scale: str = "cpu", results_root="results", out=None,
               backend: str = "local", jobs: int | None = None, progress: bool = True, run_missing: bool = True,
               looks: tuple | None = None, note: str = "", before: str | None = "previous",
               replace: bool = False) -> dict:
    """Run (or resume) every paper's claims, or ``paper``'s, and write the report (``report.write_report``).
    ``before``: the claims report version whose spreads are shown beside the new ones ("previous": the newest
    older version under the results root, else under the committed results; a version: the committed one, else
    the results root's; None: none). ``looks`` (replacing the declared ones) are checked, and a report of another
    design in the target folder refused unless ``replace``, before any run (``design_looks``,
    ``refuse_another_design``). Returns {"papers": [...], "paths": {...}}."""
    from . import papers as paper_modules
    from .report import write_report

    looks = design_looks(scale, looks)
    again = paths.judged_version()
    if again and run_missing:
        raise ValueError(f"the records of claims {again} were run by that version's code; this code "
                         f"({code_version()['package']}) only judges them again: add --no-run")
    for m in paper_modules(paper):
        family_of(m)  # a bad ALPHA_SPLIT is refused before any run
    refuse_another_design(paths.report_folder(results_root, scale, paper, out), looks, replace, paper_modules(paper))

    if scale == "replication" and before == "previous":  # beside a replication: the first stage it repeats
        before = paths.version()
    if is_own(paper) and before == "previous":  # a claims file of the user's has no earlier report to set beside
        before = None
    if scale == "replication" and not any(paper_scales(m, "replication") for m in paper_modules(paper)):
        have = [m.PAPER for m in paper_modules() if paper_scales(m, "replication")]
        raise ValueError(f"{paper or 'no paper'} declares no replication; papers with one: {', '.join(have)}")
    prev = paths.before_report(results_root, before, paper)
    if scale == "replication" and prev:  # its share was declared with the first stage's
        refuse_changed_family(prev[1], paper_modules(paper), f"its first stage (the {prev[0]} report)")

    t0, load0 = time.time(), _load()
    results, decided = [], []
    for m in paper_modules(paper):
        spent = 0.0
        for sc in scales_of(m, scale):  # a paper's scales in turn, sharing its CPU budget (a replication: its own)
            try:
                first = paths.first_stage(results_root, m.PAPER) if getattr(sc, "inconclusive_only", False) else None
                got = run_paper(m, sc, results_root, None, backend, jobs, progress, run_missing, looks, spent, first)
                if got is None:  # a replication whose first stage decided every claim it would repeat
                    decided.append(f"{m.PAPER} ({sc.replicates} scale)")
                    continue
                results.append(got)
            except UnderWay as e:  # --no-run: a scale still running is listed, not judged
                bud = declaration(m, "BUDGET")
                results.append({"paper": m.PAPER, "title": m.TITLE, "scale": sc.describe(), "claims": [],
                                "under_way": str(e), "budget": {"looks": list(sc.looks or bud.looks),
                                                                "cpu_minutes": sc.cpu_minutes or bud.cpu_minutes,
                                                                "reason": "under way"},
                                "tuning": {}, "cells": {"cell_seconds": 0.0}, "seconds": 0.0,
                                "family": family_of(m).describe()})
            spent += results[-1]["cells"].get("cell_seconds", 0.0)
    meta = {"scale": scale, "quick": scale == "quick", "wall_seconds": time.time() - t0, "cpus": os.cpu_count(),
            "backend": backend, "jobs": jobs, "load_start": load0, "load_end": _load(), "note": note or "",
            "looks": list(looks) if looks else None}
    if not is_own(paper):  # the papers' declarations (a claims file of the user's declares its own)
        meta["protocol"] = protocol()
    if again:
        meta["judged_again"] = again
    if decided:
        meta["nothing_to_replicate"] = decided
    if is_own(paper):  # which file declared these claims, as a plugin's records name theirs
        from .own import provenance

        meta["claims_file"] = provenance(paper)
    written = write_report(results, paths.report_folder(results_root, scale, paper, out), meta, prev)
    return {"papers": results, "paths": written}
