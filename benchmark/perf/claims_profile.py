"""Where a claims cell's CPU time goes (issue 45): ``fedrepro bench --profile-claims``.

One run of each given experiment (the CLI passes one cell of each paper's deciding scale, built by
``theory.empirical``), planned and executed as the claims run it alone (``benchmark.runs.plan``: one job, at one
torch thread), with a ``benchmark.sim.phases.Clock`` active: CPU seconds (``time.process_time``) per phase,
exclusive, so the phases add up to the run's CPU time. A cell may run fewer rounds than its scale (``rounds``):
the shares are then per round of the rounds run (the evaluations those of the shortened run: the claims' metrics
read its last rounds), and the record states the reduction; the run's full cost is
extrapolated as job + rounds x (CPU per round run), which understates algorithms whose rounds get dearer later
(GradMA's server memory fills over its first rounds).
"""
from __future__ import annotations

import datetime
import os
import time

from benchmark.sim import phases
from benchmark.runs import plan
from benchmark.runs.record import code_version

#: the phases as the profile names them (``benchmark.sim.phases``)
LABELS = {"local": "local steps", "evaluate": "evaluation", "server": "aggregation (server: broadcast, "
          "aggregate)", "data": "data movement", "client": "overhead per client", "round": "overhead per round",
          "job": "overhead per job"}


def profile_cell(exp, full: int | None = None, threads: int = 1, label: str = "") -> dict:
    """The CPU seconds of one run of ``exp`` by phase (module docstring); ``full``: the rounds of the scale it
    shortens (default: its own)."""
    full = full or exp.rounds
    run_exp = exp
    job = plan.plan_one(run_exp, threads=threads)
    with phases.measuring() as clock:
        c0 = time.process_time()
        [(_, result)] = list(plan.execute(job))
        total = time.process_time() - c0
    secs = {p: float(clock.seconds.get(p, 0.0)) for p in phases.PHASES}
    secs["job"] += max(0.0, total - clock.total())  # outside every phase: the generator's own bookkeeping
    n = run_exp.rounds
    per_round = {p: secs[p] / n for p in phases.PHASES if p != "job"}
    clients = sum(1 for _ in range(n)) * (exp.clients_per_round or exp.num_clients or 1)
    evals = sum(1 for h in result.history if h.get("test_accuracy") is not None or h.get("test_loss") is not None)
    return {"label": label, "algorithm": exp.algorithm, "model": exp.model, "executor": job.executor,
            "rounds_run": n, "rounds_full": full, "eval_every": exp.eval_every, "evaluations": evals,
            "config_hash": exp.config_hash(), "config": result.config, "status": result.status, "cpu_seconds": total, "seconds": secs,
            "calls": dict(clock.calls), "shares": {p: secs[p] / total for p in phases.PHASES},
            "per_round": per_round, "per_client": secs["client"] / max(1, clients),
            "per_evaluation": secs["evaluate"] / max(1, evals),
            "run_cpu_extrapolated": secs["job"] + full * sum(per_round.values())}


def profile_cells(cells: list[tuple[str, object, int]], threads: int = 1, log=None) -> dict:
    """``profile_cell`` of every (label, experiment, the scale's rounds) in ``cells``, with the machine's state and
    the code."""
    load0 = _load()
    out = []
    for label, exp, full in cells:
        if log:
            log(f"profiling {label} ({exp.algorithm}, {exp.rounds} of {full} rounds)")
        out.append(profile_cell(exp, full, threads, label))
    return {"schema": 2, "date": datetime.datetime.now().isoformat(timespec="seconds"), "code": code_version(),
            "threads": threads, "cpus": os.cpu_count(), "load_start": load0,
            "load_end": _load(), "cells": out}


def _load() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def markdown(result: dict) -> str:
    """The profile as tables: shares of the run's CPU time per phase, and seconds per round / client / job."""
    c = result["code"]
    lines = [f"CPU time by phase of one run per cell (`fedrepro bench --profile-claims`, {result['date']}, code "
             f"{(c.get('git_commit') or '?')[:10]}{' dirty' if c.get('git_dirty') else ''}, {result['threads']} torch "
             f"thread, load average {result['load_start']} -> {result['load_end']} on {result['cpus']} CPUs). CPU "
             "time (`time.process_time`), each phase exclusive of the phases inside it (benchmark/sim/phases.py).", "",
             "| cell | executor | rounds run (of) | evaluations | CPU s | " + " | ".join(LABELS[p] for p in phases.PHASES)
             + " |", "|---|---|---|---|---|" + "---|" * len(phases.PHASES)]
    for r in result["cells"]:
        lines.append(f"| {r['label']} | {r['executor']} | {r['rounds_run']} ({r['rounds_full']}) | {r['evaluations']} "
                     f"| {r['cpu_seconds']:.1f} | " + " | ".join(f"{100 * r['shares'][p]:.1f}%" for p in phases.PHASES)
                     + " |")
    lines += ["", "Seconds per round (by phase), per client, per evaluation and per job, and the run's CPU "
              "extrapolated to the scale's rounds (job + rounds x CPU per round):", "",
              "| cell | local | evaluation | server | data | client | round | per client | per evaluation | per job "
              "| run (extrapolated) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["cells"]:
        pr = r["per_round"]
        lines.append(f"| {r['label']} | " + " | ".join(f"{pr[p]:.4f}" for p in phases.PHASES if p != "job")
                     + f" | {r['per_client']:.4f} | {r['per_evaluation']:.3f} | {r['seconds']['job']:.2f} "
                       f"| {r['run_cpu_extrapolated'] / 60:.2f} min |")
    return "\n".join(lines) + "\n"
