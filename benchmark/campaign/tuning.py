"""Tuning that is the same for every method: a declared grid, selection on a validation split carved from the
training data (never the test set), final runs on fresh seeds (DESIGN.md, "Empirical claims").

Protocol (``tune``):

1. Tuning cells: the base experiment at every grid point (the cartesian product of ``plan.grid``, in the
   declared order) and every tuning seed, with the dataset option ``validation = n``: the run trains without
   those n training samples (or, with ``train_subset``, on exactly its subset) and evaluates on them; the test
   set is not loaded into the run at all (``datasets.holdout_validation``).
2. Selection: a grid point's score is the mean over tuning seeds of the final validation accuracy; a seed that
   diverged or failed scores -inf (never chosen while another point trains). Ties go to the earlier grid point,
   so the choice is a deterministic function of the records.
3. Final cells: the base experiment at the chosen point on ``final_seeds``, which must be disjoint from the
   tuning seeds (fresh partitions, initial models and minibatch orders), evaluated on the test set.

Every cell is an ordinary run record in ``out_dir`` (``runner.run_experiments``: resumable, a killed tuning
resumes where it stopped; planned by ``benchmark.runs.plan``, so the grid points and seeds of an arm whose varied
values can be batched tensors train as batched jobs), and the tuning record (grid, validation scores per point and seed, choice, split)
is written atomically to ``out_dir/tuning/<key>.json``. Grid keys are ``Experiment`` fields (``lr``,
``momentum``, ``local_steps``...) or hyperparameters of the algorithm (``beta1``, ``mu``...), which go into
``algorithm_args``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.campaign import runner
from benchmark.runs import store
from benchmark.runs.experiment import Experiment

_FIELDS = {f.name for f in dataclasses.fields(Experiment)}
# fields a grid may not vary: they define the comparison or the protocol itself
_NOT_TUNABLE = {"algorithm", "dataset", "seed", "dataset_args", "algorithm_args", "model_args", "executor",
                "device", "data_root", "download", "eval_every", "eval_train_samples"}


@dataclass(frozen=True)
class TuningPlan:
    """A declared tuning budget: ``grid`` (key -> values), the validation split size, the tuning seeds and the
    fresh seeds of the final runs."""

    grid: dict
    validation: int
    tune_seeds: tuple = (1000,)
    final_seeds: tuple = (0, 1, 2)

    def __post_init__(self):
        object.__setattr__(self, "tune_seeds", tuple(int(s) for s in self.tune_seeds))
        object.__setattr__(self, "final_seeds", tuple(int(s) for s in self.final_seeds))
        if not self.grid or any(not isinstance(v, (list, tuple)) or not v for v in self.grid.values()):
            raise ValueError(f"a tuning grid needs at least one key with a non-empty list of values, got "
                             f"{self.grid!r}")
        for k in self.grid:
            if k in _NOT_TUNABLE:
                raise ValueError(f"grid key {k!r} cannot be tuned: it defines the comparison or the protocol")
        if isinstance(self.validation, bool) or not isinstance(self.validation, int) or self.validation < 1:
            raise ValueError(f"validation must be a positive number of training samples, got {self.validation!r}")
        if not self.tune_seeds or not self.final_seeds:
            raise ValueError("tuning needs at least one tuning seed and one final seed")
        common = sorted(set(self.tune_seeds) & set(self.final_seeds))
        if common:
            raise ValueError(f"final seeds must be fresh (not used for tuning); both use {common}")

    @property
    def size(self) -> int:
        """Number of grid points (the budget per method, times the tuning seeds)."""
        return math.prod(len(v) for v in self.grid.values())

    def points(self) -> list[dict]:
        keys = list(self.grid)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(self.grid[k] for k in keys))]

    def describe(self) -> dict:
        return {"grid": {k: list(v) for k, v in self.grid.items()}, "size": self.size,
                "validation": self.validation, "tune_seeds": list(self.tune_seeds),
                "final_seeds": list(self.final_seeds), "score": "mean final validation accuracy over tuning seeds",
                "ties": "the earlier grid point"}


def apply_point(exp: Experiment, point: dict) -> Experiment:
    """``exp`` with the grid point's values: Experiment fields replaced, anything else as an algorithm
    hyperparameter (validated against the algorithm)."""
    fields, args = {}, dict(exp.algorithm_args)
    for k, v in point.items():
        if k in _FIELDS:
            fields[k] = v
        else:
            args[k] = v
    out = dataclasses.replace(exp, **fields, algorithm_args=args)
    try:
        out.validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"grid point {point} is not valid for {exp.algorithm}: {e}") from None
    return out


def with_validation(exp: Experiment, n: int) -> Experiment:
    if "validation" in exp.dataset_args:
        raise ValueError("the base experiment already sets dataset_args.validation; the tuning plan sets it")
    return dataclasses.replace(exp, dataset_args={**exp.dataset_args, "validation": n})


def tuning_cells(base: Experiment, plan: TuningPlan) -> list[tuple[int, int, Experiment]]:
    """(grid index, tuning seed, experiment) for every tuning cell."""
    base = with_validation(base, plan.validation)
    return [(i, s, dataclasses.replace(apply_point(base, p), seed=s))
            for i, p in enumerate(plan.points()) for s in plan.tune_seeds]


def final_cells(base: Experiment, point: dict, plan: TuningPlan, seeds=None) -> list[Experiment]:
    """The final runs at the chosen point: on ``plan.final_seeds``, or on ``seeds`` (e.g. one look of a
    sequential design), which must be fresh too."""
    seeds = plan.final_seeds if seeds is None else tuple(int(s) for s in seeds)
    common = sorted(set(seeds) & set(plan.tune_seeds))
    if common:
        raise ValueError(f"final seeds must be fresh (not used for tuning); both use {common}")
    chosen = apply_point(base, point)
    return [dataclasses.replace(chosen, seed=s) for s in seeds]


def score(rec: dict | None) -> float:
    """A tuning run's validation accuracy (its final evaluation on the validation split), -inf when it did not
    finish ok."""
    if rec is None or rec.get("status") != "ok":
        return -math.inf
    v = rec.get("final", {}).get("test_accuracy")  # on the validation split: the run never saw the test set
    return -math.inf if v is None else float(v)


def select(base: Experiment, plan: TuningPlan, records: dict[str, dict]) -> dict:
    """The tuning record: every point's validation scores and the choice (see the module docstring).
    ``records`` maps config hashes to run records; missing cells count as not trained."""
    cells = tuning_cells(base, plan)
    pts = plan.points()
    rows = []
    for i, p in enumerate(pts):
        per_seed, status = {}, {}
        for j, s, e in cells:
            if j != i:
                continue
            rec = records.get(e.config_hash())
            per_seed[s] = score(rec)
            status[s] = rec["status"] if rec else "missing"
        vals = list(per_seed.values())
        mean = -math.inf if any(math.isinf(v) for v in vals) else sum(vals) / len(vals)
        rows.append({"point": p, "validation_accuracy": {str(s): (None if math.isinf(v) else v)
                                                         for s, v in per_seed.items()},
                     "mean": None if math.isinf(mean) else mean, "status": {str(s): v for s, v in status.items()},
                     "cells": [e.config_hash() for j, _, e in cells if j == i]})
    scores = [-math.inf if r["mean"] is None else r["mean"] for r in rows]
    # ties (up to float rounding of the means) go to the earlier point
    best = max(range(len(rows)), key=lambda i: (round(scores[i], 12) if math.isfinite(scores[i]) else scores[i], -i))
    complete = all(st != "missing" for r in rows for st in r["status"].values())
    return {"base": _base_config(base), "key": tuning_key(base, plan), "plan": plan.describe(), "points": rows,
            "chosen_index": best, "choice": pts[best], "complete": complete,
            "all_failed": all(math.isinf(v) for v in scores),
            "validation": {"dataset_args.validation": plan.validation,
                           "drawn": "stratified, seed datasets.VALIDATION_SEED, from the training samples outside "
                                    "train_subset when it is set, else held out of the training data"}}


def _base_config(base: Experiment) -> dict:
    cfg = base.config()
    cfg.pop("seed", None)
    return cfg


def tuning_key(base: Experiment, plan: TuningPlan) -> str:
    blob = json.dumps({"base": _base_config(base), "plan": plan.describe()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class TuneResult:
    record: dict  # the tuning record (see ``select``)
    final: list[dict] = field(default_factory=list)  # the final runs' records, in seed order
    path: Path | None = None
    counts: dict = field(default_factory=dict)


def _records(folder: Path) -> dict[str, dict]:
    return {r["config_hash"]: r for r in store.read_records(folder)}


def tune_all(items: list[tuple[Experiment, TuningPlan]], out_dir, backend: str = "local", jobs: int | None = None,
             progress: bool = True, desc: str = "tuning", group_runs: int | None = None) -> tuple[list[dict], dict]:
    """Steps 1 and 2 of the protocol for several (base, plan) pairs at once: every tuning cell goes to the runner
    in one call (so it can batch grid points, seeds and methods that share shapes), then each pair's selection
    is made and its tuning record written. Returns the tuning records, in the order of ``items``, and the
    runner's cell counts. ``group_runs``: as in ``runner.run_experiments`` (None: the planner's default)."""
    out_dir = Path(out_dir)
    exps = [e for base, plan in items for _, _, e in tuning_cells(base, plan)]
    counts = runner.run_experiments(exps, out_dir, backend, jobs, progress=progress, desc=desc,
                                    group_runs=group_runs)
    recs = _records(out_dir)
    out = []
    for base, plan in items:
        rec = select(base, plan, recs)
        store.write_json_atomic(out_dir / "tuning" / f"{rec['key']}.json", rec)
        out.append(rec)
    return out, counts


def tune(base: Experiment, plan: TuningPlan, out_dir, backend: str = "local", jobs: int | None = None,
         progress: bool = True, run_final: bool = True, group_runs: int | None = None) -> TuneResult:
    """Run the tuning cells, select on the validation split, run the final cells (see the module docstring).
    ``group_runs``: as in ``runner.run_experiments`` (None: the planner's default; 1: one cell after another)."""
    out_dir = Path(out_dir)
    recs, counts = tune_all([(base, plan)], out_dir, backend, jobs, progress, desc=f"tune {base.algorithm}",
                            group_runs=group_runs)
    rec, path = recs[0], out_dir / "tuning" / f"{recs[0]['key']}.json"
    finals = []
    if run_final:
        fin = final_cells(base, rec["choice"], plan)
        c2 = runner.run_experiments(fin, out_dir, backend, jobs, progress=progress, desc=f"final {base.algorithm}",
                                    group_runs=group_runs)
        counts = {k: counts.get(k, 0) + c2.get(k, 0) for k in set(counts) | set(c2)}
        recs = _records(out_dir)
        finals = [recs[e.config_hash()] for e in fin if e.config_hash() in recs]
    return TuneResult(rec, finals, path, counts)


def grid_end(points: list[dict], index: int | None) -> str | None:
    """Where point ``index`` lies when it is an end of a one-key numeric grid of three or more values: "the largest
    lr of the grid" or "the smallest ..." (by value, whatever the declared order), else None. A choice there may
    have a better point beyond the grid, which the grid did not try."""
    if index is None or len(points) < 3 or not all(len(p) == 1 for p in points):
        return None
    keys = {next(iter(p)) for p in points}
    vals = [next(iter(p.values())) for p in points]
    if len(keys) != 1 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return None
    v, key = vals[index], keys.pop()
    if v == max(vals):
        return f"the largest {key} of the grid"
    return f"the smallest {key} of the grid" if v == min(vals) else None


def chosen_at_end(tuned: dict) -> list[tuple[str, dict]]:
    """(key, chosen point) of each tuning record in ``tuned`` ({key: a ``select`` record, or its summary with
    ``points`` and ``chosen_index``}) whose choice is an end of its grid (``grid_end``), in ``tuned``'s order."""
    return [(k, t["points"][t["chosen_index"]]["point"]) for k, t in tuned.items()
            if grid_end([pt["point"] for pt in t["points"]], t["chosen_index"])]


def point_label(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())
