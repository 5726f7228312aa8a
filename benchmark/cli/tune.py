"""``fedrepro tune``: the tuning protocol of ``benchmark.campaign.tuning`` from the command line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .args import RUNS_DIR
from .errors import resume_hint


def _parse_grid(items: list[str] | None) -> dict:
    grid = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--grid expects KEY=V1,V2,..., got {item!r}")
        k, vals = item.split("=", 1)
        out = []
        for v in vals.split(","):
            v = v.strip()
            if not v:
                continue
            try:
                out.append(json.loads(v))
            except json.JSONDecodeError:
                out.append(v)
        if not out:
            raise ValueError(f"--grid {k}: no values")
        if k.strip() in grid:
            raise ValueError(f"--grid {k.strip()} given twice")
        grid[k.strip()] = out
    if not grid:
        raise ValueError("give at least one --grid KEY=V1,V2,... (e.g. --grid lr=0.01,0.1)")
    return grid


def cmd_tune(a) -> int:
    import numpy as np
    from tabulate import tabulate

    from .args import experiments_from_args
    from benchmark.runs.record import code_version
    from benchmark.campaign.tuning import TuningPlan, grid_end, point_label, tune

    grid = _parse_grid(a.grid)
    exps, _ = experiments_from_args(a)
    base = exps[0]
    plan = TuningPlan(grid, a.validation, tuple(a.tune_seeds), tuple(a.seeds or (0, 1, 2)))
    base.validate()
    out = Path(a.out) if a.out else Path(a.results) / "tune" / code_version()["package"]
    resume_hint(a, f"finished cells are kept in {out}; run the same command again to resume")
    res = tune(base, plan, out, a.backend, a.jobs, progress=not a.no_progress, run_final=not a.no_final)
    rec = res.record
    if a.json:
        print(json.dumps({"tuning": rec, "final": [{"seed": r["config"]["seed"], "status": r["status"],
                                                     "test_accuracy": r["final"].get("test_accuracy")}
                                                    for r in res.final]}, indent=1, default=str))
        return 0
    rows = []
    for i, p in enumerate(rec["points"]):
        accs = [("-" if v is None else f"{100 * v:.2f}") for v in p["validation_accuracy"].values()]
        rows.append(["*" if i == rec["chosen_index"] else "", point_label(p["point"]), " ".join(accs),
                     "-" if p["mean"] is None else f"{100 * p['mean']:.2f}"])
    print(f"Tuning {base.algorithm}: {plan.size} grid points x {len(plan.tune_seeds)} tuning seed(s) "
          f"{list(plan.tune_seeds)}, selected on a validation split of {plan.validation} training samples "
          f"(the test set is not used)")
    print(tabulate(rows, headers=["", "grid point", "validation acc % per seed", "mean"], tablefmt="github"))
    end = None if rec["all_failed"] else grid_end([p["point"] for p in rec["points"]], rec["chosen_index"])
    print(f"chosen: {point_label(rec['choice'])}" + (" (no grid point trained without diverging or failing)"
                                                     if rec["all_failed"] else "")
          + (f" ({end}: a better point may lie beyond it; widen the grid to see)" if end else ""))
    if res.final:
        accs = [r["final"].get("test_accuracy") for r in res.final if r["status"] == "ok"]
        frows = [[r["config"]["seed"], r["status"], "-" if r["final"].get("test_accuracy") is None
                  else f"{100 * r['final']['test_accuracy']:.2f}"] for r in res.final]
        print(f"\nFinal runs at the chosen point on fresh seeds {list(plan.final_seeds)} (test set):")
        print(tabulate(frows, headers=["seed", "status", "test acc %"], tablefmt="github"))
        if len(accs) > 1:
            print(f"mean {100 * float(np.mean(accs)):.2f} ± {100 * float(np.std(accs, ddof=1)):.2f} over "
                  f"{len(accs)} runs")
        elif accs:
            print(f"{100 * accs[0]:.2f} (one run: no spread)")
    print(f"wrote {res.path} (runs in {res.path.parent.parent})", file=sys.stderr)
    return 0 if not rec["all_failed"] else 1


def add_parser(sub) -> None:
    from .args import experiment_flags

    p = sub.add_parser("tune", help="tune one method on a validation split, then run it on fresh seeds",
                       description="The tuning protocol of the empirical claims: every grid point (--grid, the "
                                   "cartesian product) runs on the tuning seeds with a validation split of "
                                   "--validation training samples as its evaluation set (never the test set); the "
                                   "point with the best mean final validation accuracy is chosen (ties: the "
                                   "earlier point); the final runs use it on the fresh seeds --seeds and the test "
                                   "set. Cells are ordinary run records (resumable); the tuning record (grid, "
                                   "validation scores, choice) goes to OUT/tuning/<key>.json.")
    experiment_flags(p)
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2,...", required=True,
                   help="a tuned key and its values, repeatable: Experiment fields (lr, momentum, local_steps) or "
                        "algorithm hyperparameters (beta1, mu, ...)")
    p.add_argument("--validation", type=int, required=True,
                   help="training samples held out as the validation split (stratified, fixed seed; from outside "
                        "train_subset when it is set)")
    p.add_argument("--tune-seeds", type=int, nargs="+", default=[1000], help="tuning seeds (default 1000)")
    p.add_argument("--no-final", action="store_true", help="only tune and select; do not run the final seeds")
    p.add_argument("--backend", choices=["local", "process", "ray"], default="local")
    p.add_argument("--jobs", type=int, default=None, help="parallel workers for --backend process")
    p.add_argument("--results", default=RUNS_DIR, help=f"results root (default ./{RUNS_DIR}, git-ignored; runs go "
                                                       "to RESULTS/tune/<version>)")
    p.add_argument("--out", help="folder for the runs and the tuning record (instead of RESULTS/tune/<version>)")
    p.add_argument("--json", action="store_true", help="print the tuning record and final metrics as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_tune)
