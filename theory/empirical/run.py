"""Run a paper's empirical claims at a scale: the cells through the benchmark's runner (resumable, records in
the store), then the paired verdicts.

CPU scale: for every (setting, arm) the claims need, the tuning cells of ``benchmark.tuning`` (all arms' at
once), the selection on the validation split, then the final cells on the scale's fresh seeds (all at once).
Full scale: the matching cells of the paper suite (``FullScale.suite``), run where missing unless told not to.
"""
from __future__ import annotations

import time
from pathlib import Path

from benchmark import runner, store, tuning
from benchmark.experiment import code_version

from . import paired
from .claim import INCONCLUSIVE
from .metrics import COMPANIONS
from .scale import CpuScale, FullScale, arm_matches


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
            for s, a in needed(scale.claims_here(paper.CLAIMS))}


def _records(folder: Path) -> dict[str, dict]:
    return {r["config_hash"]: r for r in store.read_records(folder)}


def run_cpu(paper, scale: CpuScale, folder: Path, backend: str, jobs, progress: bool) -> tuple[dict, dict, dict]:
    pairs = needed(scale.claims_here(paper.CLAIMS))
    bases = {(s, a): scale.base(s, paper.ARMS[a]) for s, a in pairs}
    plans = {(s, a): scale.plan(a) for s, a in pairs}
    tune_exps = [e for k in pairs for _, _, e in tuning.tuning_cells(bases[k], plans[k])]
    counts = runner.run_experiments(tune_exps, folder, backend, jobs, progress=progress,
                                    desc=f"{paper.PAPER}: tuning")
    recs = _records(folder)
    tuned = {}
    for k in pairs:
        rec = tuning.select(bases[k], plans[k], recs)
        store.write_json_atomic(folder / "tuning" / f"{rec['key']}.json", rec)
        tuned[k] = rec
    finals = {k: tuning.final_cells(bases[k], tuned[k]["choice"], plans[k]) for k in pairs}
    c2 = runner.run_experiments([e for k in pairs for e in finals[k]], folder, backend, jobs, progress=progress,
                                desc=f"{paper.PAPER}: final runs")
    counts = {s: counts.get(s, 0) + c2.get(s, 0) for s in set(counts) | set(c2)}
    recs = _records(folder)
    counts["cell_seconds"] = cell_seconds(recs, tune_exps + [e for k in pairs for e in finals[k]])
    runs = {k: {e.seed: recs.get(e.config_hash()) for e in finals[k]} for k in pairs}
    runs = {k: {s: r for s, r in v.items() if r is not None} for k, v in runs.items()}
    summary = {f"{s} / {a}": {"choice": t["choice"], "chosen_index": t["chosen_index"], "complete": t["complete"],
                             "all_failed": t["all_failed"], "key": t["key"],
                             "points": [{"point": p["point"], "mean": p["mean"],
                                         "validation_accuracy": p["validation_accuracy"]} for p in t["points"]]}
               for (s, a), t in tuned.items()}
    return runs, summary, counts


def run_full(paper, scale: FullScale, results_root, version, backend: str, jobs, progress: bool,
             run_missing: bool) -> tuple[dict, dict, dict]:
    suite = runner.load_suite(scale.suite)
    folder = runner.results_dir(results_root, suite.name, version)
    pairs = needed(paper.CLAIMS)
    picked = {}
    for s, a in pairs:
        match = scale.settings[s]
        picked[(s, a)] = [c.experiment for c in suite.cells
                          if runner._matches(match, c.experiment.config())
                          and arm_matches(paper.ARMS[a], c.experiment.config())
                          and (scale.seeds is None or c.experiment.seed in scale.seeds)]
    counts = {}
    if run_missing:
        counts = runner.run_experiments([e for k in pairs for e in picked[k]], folder, backend, jobs,
                                        progress=progress, desc=f"{paper.PAPER}: {suite.name} cells")
    recs = _records(folder) if folder.is_dir() else {}
    counts = {**counts, "cell_seconds": cell_seconds(recs, [e for k in pairs for e in picked[k]])}
    runs = {k: {e.seed: recs[e.config_hash()] for e in picked[k] if e.config_hash() in recs} for k in pairs}
    summary = {f"{s} / {a}": {"suite": suite.name, "cells": len(picked[(s, a)]),
                             "with_records": len(runs[(s, a)])} for s, a in pairs}
    return runs, summary, counts


def cell_seconds(recs: dict, exps) -> float:
    """Summed wall time of the cells' runs as recorded (each in one process): what the claims cost, whenever the
    report is written (a resumed run skips finished cells)."""
    return float(sum((recs.get(e.config_hash()) or {}).get("final", {}).get("wall_time") or 0.0
                     for e in {e.config_hash(): e for e in exps}.values()))


def run_paper(paper, scale: str = "cpu", results_root="results", version: str | None = None,
              backend: str = "local", jobs: int | None = None, progress: bool = True,
              run_missing: bool = True) -> dict:
    """Run (or resume) and judge ``paper``'s claims at ``scale``: "cpu" (the paper's first CPU scale), "quick" (its
    smoke test), "full", or one of the paper's ``SCALES`` (a ``CpuScale``), which runs the claims it names."""
    t0 = time.perf_counter()
    claims = paper.CLAIMS
    if isinstance(scale, CpuScale) or scale in ("cpu", "quick"):
        sc = scale if isinstance(scale, CpuScale) else paper.CPU if scale == "cpu" else paper.CPU.quick()
        claims = sc.claims_here(paper.CLAIMS)
        folder = runs_folder(results_root, version, sc.name)
        runs, tuned, counts = run_cpu(paper, sc, folder, backend, jobs, progress)
    elif scale == "full":
        sc = paper.FULL
        runs, tuned, counts = run_full(paper, sc, results_root, version, backend, jobs, progress, run_missing)
    else:
        raise ValueError(f"scale must be cpu, quick or full, got {scale!r}")
    results = judge(claims, runs)
    for r in results:
        r["scale"] = sc.name
    return {"paper": paper.PAPER, "title": paper.TITLE, "scale": sc.describe(), "claims": results,
            "tuning": tuned, "cells": counts, "seconds": time.perf_counter() - t0}


def judge(claims, runs: dict) -> list[dict]:
    """Verdicts for ``claims`` from the final records ``runs[(setting, arm)] = {seed: record}``."""
    pr = {c.id: [paired.pair(comp, c.metric, runs.get((comp.setting, comp.a), {}),
                             runs.get((comp.setting, comp.b), {})) for comp in c.comparisons] for c in claims}
    decided = paired.decide(claims, pr)
    out = []
    for c, d in zip(claims, decided):
        row = {"id": c.id, "paper": c.paper, "source": c.source, "quote": c.quote, "statement": c.statement,
               "metric": c.metric, "direction": c.direction, **d}
        shown = COMPANIONS.get(c.metric)
        if shown:  # the claim's own metric beside the less noisy one that decides it
            row["companion"] = {"metric": shown, "comparisons": [
                _summary(paired.pair(comp, shown, runs.get((comp.setting, comp.a), {}),
                                     runs.get((comp.setting, comp.b), {}))) for comp in c.comparisons]}
        if all(not comp["n"] for comp in d["comparisons"]):
            row["verdict"], row["reason"] = INCONCLUSIVE, "no paired runs"
        out.append(row)
    return out


def _summary(pr: dict) -> dict:
    """Seeds, per-seed values, mean and standard deviation of a paired comparison (``paired.pair``)."""
    x = pr["x"]
    mean = sum(x) / len(x) if x else None
    sd = (sum((v - mean) ** 2 for v in x) / (len(x) - 1)) ** 0.5 if len(x) > 1 else None
    return {"seeds": pr["seeds"], "values": x, "n": len(x), "mean": mean, "sd": sd}
