"""Issue 45's re-measurement: the CPU time per run of one cell of every 0.3.0 claims deciding scale (BHerd paper,
FedBAT cpu, FedSWA cpu, GradMA paper, LFL cpu), at the code before the issue (aa98dfe) and after (this tree), on
the same machine in one invocation, alternating A B A B per paper; then each paper's ratio of medians and the
geometric mean over the five papers (target >= 2x).

One command, from the repository root, for the integrator to rerun on a quiet machine:

    python results/perf/remeasure.py [--pairs 2] [--rounds N] [--before DIR] [--out results/perf/remeasure.json]

``--before`` is a source tree of the before code (default: ``git archive aa98dfe`` unpacked into a temporary folder).
Each run is its own process at one torch thread (the claims' workers run one cell at a time per process) and its CPU
time is the run's own (``final.cpu_time`` of its record: ``time.process_time`` over the run, data loading included,
the interpreter's start and imports not). The cell: the first comparison of the paper's first claim, its measured
arm, seed 0, built by each tree's own ``theory.empirical`` (after: with the evaluation rounds the claims set,
``run.evaluating``). ``--rounds N`` caps every cell at N rounds (a provisional measurement; the metrics' rounds are
those of the shortened run), the reduction stated in the output. ``--as-claims``: each side runs its cell as its
claims would run it; where a tree's planner batches the runs of a look that differ only in their seeds (0.5.0: under
the process backend, bit for bit as alone), the cell runs with the first look's 5 seeds as that job and its CPU per
run is the job's over 5.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("bherd", "fedbat", "fedswa", "gradma", "lfl")
BEFORE = "aa98dfe"

_CELL = r"""
import dataclasses, json, sys, torch
torch.set_num_threads(1)
from theory.empirical import paper
from theory.empirical.scale import paper_scales
from theory.empirical import run as runmod
try:
    from benchmark.runs.plan import run  # the layout since the benchmark/ folders
except ImportError:
    from benchmark.plan import run  # aa98dfe
m = paper(sys.argv[1]); rounds = int(sys.argv[2]); as_claims = sys.argv[3] == "claims"
sc = paper_scales(m, "cpu")[0]
claims = runmod.claims_at(sc, m.CLAIMS)
comp = m.CLAIMS[0].comparisons[0]
e = sc.base(comp.setting, m.ARMS[comp.a])
e = dataclasses.replace(e, seed=0, **({"rounds": min(rounds, e.rounds)} if rounds else {}))
if hasattr(runmod, "evaluating"):
    e = runmod.evaluating(e, claims)
group = 1
try:
    from benchmark.runs import plan as planmod
except ImportError:
    planmod = None
if as_claims and planmod is not None and hasattr(planmod, "_seed_key"):  # the first look's 5 seeds, as planned
    job = planmod.plan([dataclasses.replace(e, seed=s) for s in range(5)], backend="process", workers=2, threads=1)[0]
    group = len(job)
if group > 1:
    r = dict(planmod.execute(job))[0]
else:
    r = run(e, threads=1)
print(json.dumps({"cpu": r.final["cpu_time"] / group, "wall": r.final["wall_time"], "rounds": e.rounds,
                  "evaluations": sum(h["test_accuracy"] is not None for h in r.history),
                  "executor": r.execution.get("executor"), "status": r.status, "group_runs": group,
                  "test_accuracy": r.final["test_accuracy"]}))
"""


def one(tree: Path, paper: str, rounds: int, as_claims: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", _CELL, paper, str(rounds), "claims" if as_claims else "alone"],
                       capture_output=True, text=True, env=env, cwd=str(tree))
    if r.returncode != 0:
        raise RuntimeError(f"{paper} at {tree}: {r.stderr.strip()[-600:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def before_tree(path: str | None) -> Path:
    if path:
        return Path(path)
    d = Path(tempfile.mkdtemp(prefix="fedrepro-before-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(d)], input=archive, check=True)
    return d


def measure(trees: dict, papers, pairs: int, rounds: int, log, as_claims: bool = False) -> dict:
    runs = {p: {side: [] for side in trees} for p in papers}
    for k in range(pairs):
        for p in papers:
            for side in trees:  # A B, then A B again: before and after alternate within each paper
                runs[p][side].append(one(trees[side], p, rounds, as_claims))
                log(f"pair {k + 1}/{pairs} {p} {side}: {runs[p][side][-1]['cpu']:.1f} CPU-s")
    rows = {}
    for p in papers:
        med = {s: statistics.median(r["cpu"] for r in runs[p][s]) for s in trees}
        rows[p] = {"median_cpu_seconds": med, "ratio": med["before"] / med["after"]}
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows.values()) / len(rows))
    return {"runs": runs, "papers": rows, "geometric_mean_ratio": geo}


def markdown(res: dict) -> str:
    lines = [f"CPU seconds per run, before ({res.get('before', BEFORE)}) and after ({res['after_commit']}), medians of {res['pairs']} "
             f"alternating pair(s) per paper, one torch thread, {'at most ' + str(res['rounds']) + ' rounds per cell' if res['rounds'] else 'the scales full rounds'}; "
             f"load average {res['load_start']} -> {res['load_end']} on {os.cpu_count()} CPUs.", "",
             "| paper | rounds | evaluations before / after | runs per job before / after | CPU s per run before | "
             "CPU s per run after | before / after |",
             "|---|---|---|---|---|---|---|"]
    for p, r in res["papers"].items():
        b, a = res["runs"][p]["before"][0], res["runs"][p]["after"][0]
        lines.append(f"| {p} | {a['rounds']} | {b['evaluations']} / {a['evaluations']} | {b.get('group_runs', 1)} / "
                     f"{a.get('group_runs', 1)} | {r['median_cpu_seconds']['before']:.1f} "
                     f"| {r['median_cpu_seconds']['after']:.1f} | {r['ratio']:.2f}x |")
    lines.append(f"| geometric mean | | | | | | **{res['geometric_mean_ratio']:.2f}x** |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=0, help="cap every cell at this many rounds (0: the scale's)")
    ap.add_argument("--before", help=f"a source tree of the before code (default: git archive {BEFORE})")
    ap.add_argument("--papers", default=",".join(PAPERS))
    ap.add_argument("--as-claims", action="store_true",
                    help="each side runs its cell as its claims would: where its planner batches the first look's 5 "
                         "seeds under the process backend (0.5.0), the CPU per run is that job's over 5")
    ap.add_argument("--out", default=str(ROOT / "results" / "perf" / "remeasure.json"))
    a = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    trees = {"before": before_tree(a.before), "after": ROOT}
    load0 = [round(v, 2) for v in os.getloadavg()]
    res = measure(trees, [p for p in a.papers.split(",") if p], a.pairs, a.rounds, log, a.as_claims)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    before = BEFORE
    if a.before:  # another tree: its commit where it is a git checkout, else its path
        before = subprocess.run(["git", "-C", a.before, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or a.before
    res.update({"pairs": a.pairs, "rounds": a.rounds, "as_claims": a.as_claims, "after_commit": commit, "before": before,
                "load_start": load0,
                "load_end": [round(v, 2) for v in os.getloadavg()], "cpus": os.cpu_count()})
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    Path(a.out).with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
