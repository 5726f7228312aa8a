"""Tuning that is the same for every method: a declared grid, extended by a declared rule while the choice lies at
an end of it, selection on a validation split carved from the training data (never the test set), final runs on
fresh seeds (DESIGN.md, "Empirical claims").

Protocol (``tune``, ``tune_all``):

1. Tuning cells: the base experiment at every grid point (the cartesian product of ``plan.grid``, in the
   declared order) and every tuning seed, with the dataset option ``validation = n``: the run trains without
   those n training samples (or, with ``train_subset``, on exactly its subset) and evaluates on them; the test
   set is not loaded into the run at all (``datasets.holdout_validation``).
2. Selection: a point's score is the mean over the tuning seeds of ``plan.score`` of its runs (default: the final
   validation accuracy of a run that finished ok; a claim passes its own metric, evaluated on the validation
   split); a run that failed, or that the score function gives no finite value, scores -inf, so the point is never
   chosen while another trains. Ties go to the earlier point, so the choice is a deterministic function of the
   records.
3. Extension (``plan.extend``, key -> ``Extension``): while the choice lies at an end of a numeric key's values
   among the points that share its other keys (the line through it), the next value of that key in that
   direction is added with the choice's other keys (the paper's grid where the ``Extension`` lists one, beyond it
   a fixed ratio), its cells run and the selection is made again, until the choice is interior, or the new point
   did not train (diverged or failed) on most tuning seeds, or the key has ``cap`` values beyond the declared grid
   in that direction, or no further value exists (a bounded key): ``stop`` and ``edge`` in the tuning record say
   which. Every step's runs are cells like any other, so a rerun skips what is recorded and replays the steps
   from the records.
4. Final cells: the base experiment at the chosen point on ``final_seeds``, which must be disjoint from the
   tuning seeds (fresh partitions, initial models and minibatch orders), evaluated on the test set.

Every cell is an ordinary run record in ``out_dir`` (``runner.run_experiments``: resumable, a killed tuning
resumes where it stopped; planned by ``benchmark.runs.plan``, so the grid points and seeds of an arm whose varied
values can be batched tensors train as batched jobs), and the tuning record (grid, validation scores per point and
seed with their mean and spread, the extension steps, choice, split) is written atomically to
``out_dir/tuning/<key>.json``. Grid keys are ``Experiment`` fields (``lr``, ``momentum``, ``local_steps``...) or
hyperparameters of the algorithm (``beta1``, ``mu``...), which go into ``algorithm_args``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmark.campaign import runner
from benchmark.runs import store
from benchmark.runs.experiment import Experiment

_FIELDS = {f.name for f in dataclasses.fields(Experiment)}
# fields a grid may not vary: they define the comparison or the protocol itself
_NOT_TUNABLE = {"algorithm", "dataset", "seed", "dataset_args", "algorithm_args", "model_args", "executor",
                "device", "data_root", "download", "eval_every", "eval_train_samples"}
TRAINED = "ok"  # a tuning run that trained; "diverged" and "failed" did not


def _tidy(v: float) -> float:
    """A value computed by a ratio, to 6 significant digits (0.1 x 3 is 0.3, not 0.30000000000000004)."""
    return float(f"{v:.6g}")


@dataclass(frozen=True)
class Extension:
    """How a numeric grid key is extended when the choice lies at an end of its values (step 3 of the module
    docstring): ``ladder``, the values the paper's own grid gives the key (any order; the declared grid's values
    lie on it or inside its range), then, beyond the ladder's ends, the outermost value times or divided by
    ``ratio`` (None: the ladder's ends are the last values, e.g. a momentum in [0, 1)); at most ``cap`` values
    beyond the declared grid in each direction."""

    ladder: tuple = ()
    ratio: float | None = 3.0
    cap: int = 2

    def __post_init__(self):
        object.__setattr__(self, "ladder", tuple(sorted(float(v) for v in self.ladder)))
        if self.ratio is not None and not self.ratio > 1:
            raise ValueError(f"an extension ratio must exceed 1, got {self.ratio!r}")
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 0:
            raise ValueError(f"an extension cap must be a number of values >= 0, got {self.cap!r}")
        if not self.ladder and self.ratio is None:
            raise ValueError("an extension needs a ladder (the paper's grid), a ratio, or both")

    def next_value(self, tried: list, declared: list, up: bool) -> tuple[float | None, str]:
        """The next value beyond ``tried``'s end in the direction ``up`` and why there is none ("cap": ``cap``
        values beyond ``declared`` already; "no further value": the ladder ends and there is no ratio)."""
        beyond = [v for v in tried if (v > max(declared) if up else v < min(declared))]
        if len(beyond) >= self.cap:
            return None, "cap"
        end = max(tried) if up else min(tried)
        rungs = [v for v in self.ladder if (v > end * (1 + 1e-9) if up else v < end * (1 - 1e-9))]
        if rungs:
            return (min(rungs) if up else max(rungs)), ""
        if self.ratio is None:
            return None, "no further value"
        if end == 0:
            return None, "no further value"
        return _tidy(end * self.ratio if up else end / self.ratio), ""

    def describe(self) -> dict:
        return {"ladder": list(self.ladder), "ratio": self.ratio, "cap": self.cap}


def final_validation_accuracy(rec: dict) -> float:
    """A tuning run's validation accuracy (its final evaluation on the validation split), -inf when it did not
    finish ok: the default score of a tuning plan."""
    if rec is None or rec.get("status") != TRAINED:
        return -math.inf
    v = rec.get("final", {}).get("test_accuracy")  # on the validation split: the run never saw the test set
    return -math.inf if v is None else float(v)


score = final_validation_accuracy  # the name callers of 0.3.0 used


@dataclass(frozen=True)
class TuningPlan:
    """A declared tuning budget: ``grid`` (key -> values), the validation split size, the tuning seeds, the fresh
    seeds of the final runs, how keys are extended when the choice lies at an end of them (``extend``: key ->
    ``Extension``; none: the grid is all) and the score of one tuning run (``score``, a function of its record,
    named ``score_name``; default its final validation accuracy)."""

    grid: dict
    validation: int
    tune_seeds: tuple = (1000,)
    final_seeds: tuple = (0, 1, 2)
    extend: dict = field(default_factory=dict)
    score: Callable | None = None
    score_name: str = "final validation accuracy"

    def __post_init__(self):
        object.__setattr__(self, "tune_seeds", tuple(int(s) for s in self.tune_seeds))
        object.__setattr__(self, "final_seeds", tuple(int(s) for s in self.final_seeds))
        if not self.grid or any(not isinstance(v, (list, tuple)) or not v for v in self.grid.values()):
            raise ValueError(f"a tuning grid needs at least one key with a non-empty list of values, got "
                             f"{self.grid!r}")
        for k in self.grid:
            if k in _NOT_TUNABLE:
                raise ValueError(f"grid key {k!r} cannot be tuned: it defines the comparison or the protocol")
        for k, ext in self.extend.items():
            if k not in self.grid or not isinstance(ext, Extension):
                raise ValueError(f"extend: {k!r} must be a grid key mapped to an Extension; grid keys: "
                                 f"{sorted(self.grid)}")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.grid[k]):
                raise ValueError(f"extend: grid key {k!r} has non-numeric values {self.grid[k]}")
        if isinstance(self.validation, bool) or not isinstance(self.validation, int) or self.validation < 1:
            raise ValueError(f"validation must be a positive number of training samples, got {self.validation!r}")
        if not self.tune_seeds or not self.final_seeds:
            raise ValueError("tuning needs at least one tuning seed and one final seed")
        common = sorted(set(self.tune_seeds) & set(self.final_seeds))
        if common:
            raise ValueError(f"final seeds must be fresh (not used for tuning); both use {common}")

    @property
    def size(self) -> int:
        """Number of declared grid points (the budget per method before any extension, times the tuning seeds)."""
        return math.prod(len(v) for v in self.grid.values())

    @property
    def most_points(self) -> int:
        """The declared grid points and the most an extension can add (``cap`` per extended key of two or more
        values: one direction at most, since a choice beyond one end is never at the other)."""
        return self.size + sum(e.cap for k, e in self.extend.items() if len(self.grid[k]) >= 2)

    def points(self) -> list[dict]:
        keys = list(self.grid)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(self.grid[k] for k in keys))]

    def run_score(self, rec: dict | None) -> float:
        """One tuning run's score (-inf: none)."""
        if rec is None or rec.get("status") not in (TRAINED, "diverged"):
            return -math.inf
        v = (self.score or final_validation_accuracy)(rec)
        return float(v) if v is not None and math.isfinite(v) else -math.inf

    def describe(self) -> dict:
        return {"grid": {k: list(v) for k, v in self.grid.items()}, "size": self.size,
                "validation": self.validation, "tune_seeds": list(self.tune_seeds),
                "final_seeds": list(self.final_seeds), "score": f"mean {self.score_name} over tuning seeds",
                "ties": "the earlier grid point", **({"extend": {k: e.describe() for k, e in self.extend.items()}}
                                                     if self.extend else {})}


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


def tuning_cells(base: Experiment, plan: TuningPlan, points: list[dict] | None = None
                 ) -> list[tuple[int, int, Experiment]]:
    """(point index, tuning seed, experiment) for every tuning cell of ``points`` (default: the declared grid)."""
    base = with_validation(base, plan.validation)
    return [(i, s, dataclasses.replace(apply_point(base, p), seed=s))
            for i, p in enumerate(plan.points() if points is None else points) for s in plan.tune_seeds]


def final_cells(base: Experiment, point: dict, plan: TuningPlan, seeds=None) -> list[Experiment]:
    """The final runs at the chosen point: on ``plan.final_seeds``, or on ``seeds`` (e.g. one look of a
    sequential design), which must be fresh too."""
    seeds = plan.final_seeds if seeds is None else tuple(int(s) for s in seeds)
    common = sorted(set(seeds) & set(plan.tune_seeds))
    if common:
        raise ValueError(f"final seeds must be fresh (not used for tuning); both use {common}")
    chosen = apply_point(base, point)
    return [dataclasses.replace(chosen, seed=s) for s in seeds]


def _rows(base: Experiment, plan: TuningPlan, records: dict, points: list[dict]) -> list[dict]:
    """Per point: its runs' scores and statuses per tuning seed, their mean and spread."""
    cells = tuning_cells(base, plan, points)
    declared = len(plan.points())
    rows = []
    for i, p in enumerate(points):
        per_seed, status = {}, {}
        for j, s, e in cells:
            if j == i:
                rec = records.get(e.config_hash())
                per_seed[s] = plan.run_score(rec)
                status[s] = rec["status"] if rec else "missing"
        vals = list(per_seed.values())
        finite = not any(math.isinf(v) for v in vals)
        rows.append({"point": p, "validation_accuracy": {str(s): (None if math.isinf(v) else v)
                                                         for s, v in per_seed.items()},
                     "mean": statistics.fmean(vals) if finite else None,
                     "sd": statistics.stdev(vals) if finite and len(vals) > 1 else None,
                     "status": {str(s): v for s, v in status.items()},
                     "untrained": sum(v not in (TRAINED, "missing") for v in status.values()),
                     "extension": i >= declared, "cells": [e.config_hash() for j, _, e in cells if j == i]})
    return rows


def _best(rows: list[dict]) -> int:
    scores = [-math.inf if r["mean"] is None else r["mean"] for r in rows]
    # ties (up to float rounding of the means) go to the earlier point
    return max(range(len(rows)), key=lambda i: (round(scores[i], 12) if math.isfinite(scores[i]) else scores[i], -i))


def _line(points: list[dict], choice: dict, key: str) -> list:
    """The values of ``key`` among the points that share the choice's other keys."""
    return sorted({p[key] for p in points if all(p[k] == v for k, v in choice.items() if k != key)})


def _ends(plan: TuningPlan, points: list[dict], choice: dict) -> list[tuple[str, bool]]:
    """(key, up) for each extendable key whose value in ``choice`` is an end of its line (two or more values)."""
    out = []
    for k in plan.extend:
        vals = _line(points, choice, k)
        if len(vals) >= 2 and choice[k] in (vals[0], vals[-1]):
            out.append((k, choice[k] == vals[-1]))
    return out


def _beyond(points: list[dict], rows: list[dict], choice: dict, key: str, up: bool) -> dict | None:
    """The nearest point past the choice along ``key`` in direction ``up`` on its line, with its row."""
    near = [(p, r) for p, r in zip(points, rows) if all(p[k] == v for k, v in choice.items() if k != key)
            and (p[key] > choice[key] if up else p[key] < choice[key])]
    return min(near, key=lambda pr: abs(pr[0][key] - choice[key]), default=(None, None))[1]


def extension(base: Experiment, plan: TuningPlan, records: dict) -> tuple[list[dict], list[dict], bool]:
    """Step 3 of the module docstring, replayed from ``records``: (the points reached, the extension steps taken,
    whether the rule has settled: every cell of those points is recorded and no further step is due). A step
    waits for every cell of the points before it, so what is recorded always determines what comes next."""
    points, steps = plan.points(), []
    declared = {k: list(v) for k, v in plan.grid.items()}
    while True:
        rows = _rows(base, plan, records, points)
        if any(st == "missing" for r in rows for st in r["status"].values()):
            return points, steps, False
        if all(r["mean"] is None for r in rows):
            return points, steps, True  # nothing trained: there is no choice to extend from
        choice = points[_best(rows)]
        new = []
        # a point beyond the choice that did not train on most seeds leaves the choice inside its line: the rule
        # stops there (``edges`` names it)
        for key, up in _ends(plan, points, choice):
            value, _ = plan.extend[key].next_value(_line(points, choice, key), declared[key], up)
            if value is not None and {**choice, key: value} not in points:
                new.append({**choice, key: value})
                steps.append({"key": key, "direction": "up" if up else "down", "from": choice[key], "to": value})
        if not new:
            return points, steps, True
        points = points + new


def edges(plan: TuningPlan, points: list[dict], rows: list[dict], index: int | None) -> list[dict]:
    """Where the chosen point ``index`` still lies at an end of an extendable key, and why the rule stopped there:
    "cap" (the declared number of values beyond the grid is reached), "no further value" (a bounded key's last
    value), or "diverged beyond" (the next value did not train on most tuning seeds: an end of what trains, not
    of the grid). A key without an ``Extension`` is never extended and not listed here (``grid_end`` names a
    choice at an end of such a grid)."""
    if index is None or rows[index]["mean"] is None:
        return []
    choice, out = points[index], []
    declared = {k: list(v) for k, v in plan.grid.items()}
    for key in plan.extend:
        vals = _line(points, choice, key)
        for up in (True, False):
            past = _beyond(points, rows, choice, key, up)
            if past is not None and past["untrained"] * 2 > len(plan.tune_seeds):
                out.append({"key": key, "direction": "up" if up else "down", "why": "diverged beyond"})
            elif len(vals) >= 2 and choice[key] == (vals[-1] if up else vals[0]):
                _, why = plan.extend[key].next_value(vals, declared[key], up)
                out.append({"key": key, "direction": "up" if up else "down", "why": why or "pending"})
    return out


def select(base: Experiment, plan: TuningPlan, records: dict[str, dict], points: list[dict] | None = None,
           steps: list[dict] | None = None) -> dict:
    """The tuning record: every point's validation scores (per seed, mean, sd), the extension steps and the
    choice (see the module docstring). ``records`` maps config hashes to run records; missing cells count as not
    trained. ``points``/``steps``: those the extension reached (default: the declared grid, none)."""
    points = plan.points() if points is None else points
    rows = _rows(base, plan, records, points)
    best = _best(rows)
    complete = all(st != "missing" for r in rows for st in r["status"].values())
    all_failed = all(r["mean"] is None for r in rows)
    edge = [] if all_failed else edges(plan, points, rows, best)
    return {"base": _base_config(base), "key": tuning_key(base, plan), "plan": plan.describe(), "points": rows,
            "chosen_index": best, "choice": points[best], "complete": complete, "all_failed": all_failed,
            "steps": list(steps or []), "edge": edge,
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
    return {r["config_hash"]: r for r in store.read_records(folder)} if Path(folder).is_dir() else {}


def _add(counts: dict, more: dict) -> dict:
    return {k: counts.get(k, 0) + more.get(k, 0) for k in set(counts) | set(more)}


def pending(items: list[tuple[Experiment, TuningPlan]], records: dict) -> list[Experiment]:
    """The tuning cells the rule needs next that ``records`` lack (empty: every pair has settled)."""
    out = []
    for base, plan in items:
        points, _, _ = extension(base, plan, records)
        out += [e for _, _, e in tuning_cells(base, plan, points) if e.config_hash() not in records]
    return out


def tune_all(items: list[tuple[Experiment, TuningPlan]], out_dir, backend: str = "local", jobs: int | None = None,
             progress: bool = True, desc: str = "tuning", group_runs: int | None = None) -> tuple[list[dict], dict]:
    """Steps 1 to 3 of the protocol for several (base, plan) pairs at once: each round of cells goes to the runner
    in one call (so it can batch grid points, seeds and methods that share shapes): the declared grids first, then
    every extension step due, until each pair settles; then each pair's selection is made and its tuning record
    written. Returns the tuning records, in the order of ``items``, and the runner's cell counts (a cell recorded
    before counts once as skipped). ``group_runs``: as in ``runner.run_experiments`` (None: the planner's default)."""
    out_dir = Path(out_dir)
    counts, seen, step = {}, set(), 0
    recs = _records(out_dir)
    while True:
        reached = [extension(base, plan, recs) for base, plan in items]
        cells = [e for (base, plan), (points, _, _) in zip(items, reached) for _, _, e in
                 tuning_cells(base, plan, points) if e.config_hash() not in seen]
        if not cells:
            break
        seen |= {e.config_hash() for e in cells}
        counts = _add(counts, runner.run_experiments(cells, out_dir, backend, jobs, progress=progress, group_runs=group_runs,
                                                     desc=desc if not step else f"{desc} (extension {step})"))
        recs, step = _records(out_dir), step + 1
    out = []
    for (base, plan), (points, steps, _) in zip(items, reached):
        rec = select(base, plan, recs, points, steps)
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
        counts = _add(counts, c2)
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


def at_edge(t: dict) -> bool:
    """Whether a tuning record (or its summary) chose an end of its grid that the rule did not settle: a record
    with extension steps declared (``edge``) lists the keys where the choice still lies at an end and why; an
    earlier record (no ``edge``) is judged by ``grid_end``. A choice next to a point that diverged on most seeds
    is at the end of what trains, not at an edge."""
    if t.get("all_failed"):
        return False
    if "edge" in t:
        return any(e["why"] != "diverged beyond" for e in t["edge"])
    return grid_end([pt["point"] for pt in t["points"]], t["chosen_index"]) is not None


def chosen_at_end(tuned: dict) -> list[tuple[str, dict]]:
    """(key, chosen point) of each tuning record in ``tuned`` ({key: a ``select`` record, or its summary with
    ``points``, ``chosen_index`` and, since 0.4.0, ``edge``}) whose choice is at an edge (``at_edge``), in
    ``tuned``'s order."""
    return [(k, t["points"][t["chosen_index"]]["point"]) for k, t in tuned.items() if at_edge(t)]


def failed_runs(pt: dict) -> dict:
    """{tuning seed: status} of a tuning point's runs that did not end ``ok`` (diverged, failed)."""
    return {s: v for s, v in (pt.get("status") or {}).items() if v != "ok"}


def lost_to_failures(t: dict) -> list[dict]:
    """The points of a tuning record (or its summary) that lost to its choice only by runs that diverged or failed:
    each point whose mean over the tuning seeds where it trained beats the choice's score (the score counts such a
    run at the accuracy it ended with), in the record's order, as {"point": its record, "trained": that mean,
    "trained_on": those seeds, "seeds": its tuning seeds, "failed": the runs that did not end ok, "statuses": theirs,
    sorted}; [] for a fixed pair, one where nothing trained, or a choice without a score."""
    if "fixed" in t or not t.get("points") or t.get("all_failed"):
        return []
    pick = t["points"][t["chosen_index"]]
    if pick.get("mean") is None:
        return []
    out = []
    for pt in t["points"]:
        acc, bad = pt.get("validation_accuracy") or {}, failed_runs(pt)
        ok = [v for s, v in acc.items() if s not in bad and v is not None]
        if pt is pick or not bad or not ok or sum(ok) / len(ok) <= pick["mean"]:
            continue
        out.append({"point": pt, "trained": sum(ok) / len(ok), "trained_on": len(ok), "seeds": len(acc),
                    "failed": len(bad), "statuses": sorted(set(bad.values()))})
    return out


def point_label(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())
