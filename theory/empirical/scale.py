"""Where a paper's claims are run: its CPU scales (``SCALES``: the paper's own setting where a CPU affords it,
named "paper", else the paper's regime with less data, a narrower model or fewer rounds, every reduction stated
with its factor; a second scale runs the main claim again with at least 4x the work, "cpu4x") or the full scale
(the paper suites' own cells, e.g. on a GPU). Each CPU scale says why it was chosen, which claims it runs, which
less noisy metric stands in for a claim's own (``metrics``), and what a run costs, from which ``cost_plan``
plans the full report.

The claims themselves do not change between scales: a scale only says which experiments stand for each
(setting, arm) of a claim, how their hyperparameters are chosen, and which seeds pair them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from benchmark.runs.experiment import Experiment
from benchmark.campaign.tuning import TuningPlan

from .claim import Arm
from .metrics import METRICS, STANDS_FOR, check_tail


@dataclass(frozen=True)
class Reduction:
    """One way the CPU scale departs from the paper: ``what``, the paper's value, ours, and the factor."""

    what: str
    paper: str
    here: str
    factor: str = ""

    def line(self) -> str:
        f = f" ({self.factor})" if self.factor else ""
        return f"{self.what}: paper {self.paper}, here {self.here}{f}"


@dataclass(frozen=True)
class CpuScale:
    """The paper's regime at CPU size, with the tuning protocol of ``benchmark.campaign.tuning``.

    ``settings``: setting name -> Experiment fields without algorithm and seed. ``kept``: what is the paper's
    (local work per round, participation, clients, partition, model family...). ``reductions``: what is not.
    ``grids``: arm name -> tuning grid (the same size for every arm of a paper). ``final_seeds`` pair the arms
    (the first look); ``max_seeds`` is the most paired seeds the cost plan allows per comparison.

    ``name``: "cpu" for a paper's main CPU scale, "paper" where the scale is the paper's own setting in every
    respect but the reductions listed (GradMA, BHerd), "cpu4x" for the second scale of a main claim (at least
    four times the compute per run, towards the paper's setting). ``only``: the claim ids run at this scale
    (empty: all the paper's claims). ``metrics``: {claim metric: metric measured here} where a less noisy
    estimate of the same quantity stands in (``metrics.STANDS_FOR``; the claim's own metric is shown beside
    it). ``cost``: arm -> measured CPU minutes of one run at one torch thread (how: ``cost_note``), from which
    ``cost_plan`` computes the plan of the full report.
    """

    settings: dict
    kept: tuple
    reductions: tuple
    grids: dict
    validation: int
    final_seeds: tuple = (0, 1, 2, 3, 4)
    tune_seeds: tuple = (1000,)
    executor: str = "auto"
    grid_rule: str = ""
    name: str = "cpu"
    why: str = ""  # why this scale: what of the paper's regime it keeps within the budget
    only: tuple = ()
    metrics: dict = dataclasses.field(default_factory=dict)
    cost: dict = dataclasses.field(default_factory=dict)
    cost_note: str = ""
    max_seeds: int = 20
    # a replication (``replicates``: the name of the scale it repeats): fresh final seeds from ``seed_start``, its
    # own declared ``looks`` and CPU budget (``cpu_minutes``), fixed before its runs (see ``REPLICATION``)
    replicates: str = ""
    seed_start: int = 0
    looks: tuple = ()
    cpu_minutes: float = 0.0

    def __post_init__(self):
        if self.replicates and not (self.looks and self.cpu_minutes > 0 and self.seed_start > 0):
            raise ValueError(f"scale {self.name}: a replication declares its looks, its CPU minutes and fresh seeds "
                             "(seed_start > 0) before it runs")
        if self.looks and self.looks[-1] != self.max_seeds:
            raise ValueError(f"scale {self.name}: its last look ({self.looks[-1]}) must be its max_seeds "
                             f"({self.max_seeds})")
        sizes = {a: math.prod(len(v) for v in g.values()) for a, g in self.grids.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"every arm must get the same tuning budget; grid sizes {sizes}")
        for claimed, measured in self.metrics.items():
            if STANDS_FOR.get(measured) != claimed:
                raise ValueError(f"scale {self.name}: {measured!r} cannot stand for {claimed!r} (allowed: "
                                 f"{STANDS_FOR})")
            if measured == "tail_accuracy" and self.name != "quick":
                check_tail(self.settings, f"scale {self.name}")

    def plan(self, arm_name: str) -> TuningPlan:
        if arm_name not in self.grids:
            raise ValueError(f"no tuning grid for arm {arm_name!r}; grids: {sorted(self.grids)}")
        return TuningPlan(self.grids[arm_name], self.validation, self.tune_seeds, self.final_seeds)

    def base(self, setting: str, a: Arm) -> Experiment:
        fields = dict(self.settings[setting])
        fields["algorithm_args"] = {**fields.get("algorithm_args", {}), **a.args}
        return Experiment(algorithm=a.algorithm, executor=self.executor, **fields)

    def claims_here(self, claims) -> list:
        """The claims this scale runs (``only``), each measured by this scale's metric (``metrics``): the
        statement says which, and ``claimed_metric`` keeps the claim's own."""
        out = []
        for c in claims:
            if self.only and c.id not in self.only:
                continue
            m = self.metrics.get(c.metric)
            if m:
                c = dataclasses.replace(c, metric=m, statement=f"{c.statement} Measured here by the "
                                        f"{METRICS[m][1]} (less seed noise than the last evaluation alone; the "
                                        f"{METRICS[c.metric][1]} is shown beside it).")
            out.append(c)
        return out

    def quick(self) -> "CpuScale":
        """A smoke test of this scale's whole path (tuning, selection, final runs on the test set, verdicts,
        report) in seconds: 2 rounds of at most 2 local steps or 2 local epochs (on at most 20 samples per client),
        CNNs at an eighth of their width, a validation split of 300, the first 2 values of each grid key, 3 final
        seeds, 1 tuning seed; partitions, clients and participation as in the scale. Not a verdict."""
        settings = {name: _quick_setting(f) for name, f in self.settings.items()}
        grids = {a: {k: list(v)[:2] for k, v in g.items()} for a, g in self.grids.items()}
        return dataclasses.replace(self, settings=settings, grids=grids, final_seeds=tuple(self.final_seeds[:3]),
                                   tune_seeds=tuple(self.tune_seeds[:1]), name="quick", validation=QUICK_VALIDATION,
                                   max_seeds=3, reductions=self.reductions + (Reduction(
                                       "quick mode", "-", "2 rounds of <= 2 local steps or 2 epochs, CNN width "
                                       "<= 1/8, 2 grid values per key, 3 seeds: a smoke test"),))

    def cost_plan(self, arms=None, max_seeds: int | None = None, strict: bool = True) -> dict:
        """The full report's runs at this scale and their CPU time: per (setting, arm), the tuning cells (grid
        points x tuning seeds) and up to ``max_seeds`` final seeds, at the measured minutes per run (one torch
        thread). ``arms``: {setting: [arm names]} (default: every arm with a grid, in every setting). An arm
        without a measured cost is an error, or with ``strict=False`` (a claims file of the user's) a row with
        its runs and no minutes, left out of the total (``unknown`` counts them)."""
        n = self.max_seeds if max_seeds is None else max_seeds
        arms = arms or {s: sorted(self.grids) for s in self.settings}
        rows, total = [], 0.0
        for setting, names in arms.items():
            for a in names:
                if a not in self.cost and strict:
                    raise ValueError(f"scale {self.name}: no measured cost for arm {a!r}; measured: "
                                     f"{sorted(self.cost)} (a plan needs CpuScale(cost={{arm: CPU minutes per "
                                     "run}))")
                runs = self.plan(a).size * len(self.tune_seeds) + n
                minutes = self.cost.get(a)
                rows.append({"setting": setting, "arm": a, "runs": runs, "minutes_per_run": minutes,
                             "cpu_minutes": None if minutes is None else runs * minutes})
                total += 0.0 if minutes is None else runs * minutes
        return {"rows": rows, "runs": sum(r["runs"] for r in rows), "max_seeds": n, "cpu_minutes": total,
                "wall_hours_2_workers": total / 60 / 2, "note": self.cost_note,
                "unknown": sum(r["runs"] for r in rows if r["minutes_per_run"] is None)}

    def describe(self) -> dict:
        d = {"scale": self.name, "why": self.why, "kept": list(self.kept),
             "reductions": [r.line() for r in self.reductions],
             "settings": {k: _jsonable(v) for k, v in self.settings.items()},
             "tuning": {"rule": self.grid_rule, "grids": self.grids, "validation": self.validation,
                        "tune_seeds": list(self.tune_seeds), "final_seeds": list(self.final_seeds)},
             "executor": self.executor, "only": list(self.only), "metrics": dict(self.metrics)}
        if self.replicates:
            d["replication"] = {"replicates": self.replicates, "seeds": [self.seed_start, self.seed_start +
                                                                         self.max_seeds - 1],
                                "looks": list(self.looks), "cpu_minutes": self.cpu_minutes}
        if self.cost:
            d["plan"] = plan_lines(self.cost_plan(strict=False))
        return d


QUICK_VALIDATION = 300
QUICK_PER_CLIENT = 20  # samples per client where local work is counted in epochs
QUICK_MIN_TRAIN = 600
QUICK_STEPS, QUICK_EPOCHS, QUICK_WIDTH = 2, 2, 0.125


def _quick_setting(f: dict) -> dict:
    q = {**f, "rounds": 2, "eval_every": 2, "eval_train_samples": min(300, f.get("eval_train_samples") or 300)}
    if f.get("local_steps"):
        q["local_steps"] = min(f["local_steps"], QUICK_STEPS)
    else:  # epochs: the cost grows with the data, so the data shrinks too
        q["local_epochs"] = min(f.get("local_epochs") or 1, QUICK_EPOCHS)
        n = max(QUICK_MIN_TRAIN, QUICK_PER_CLIENT * int(f.get("num_clients") or 10))
        args = dict(f.get("dataset_args") or {})
        args["train_subset"] = min(n, args.get("train_subset") or n)
        q["dataset_args"] = args
    if "width" in (f.get("model_args") or {}):
        q["model_args"] = {**f["model_args"], "width": min(f["model_args"]["width"], QUICK_WIDTH)}
    return q


def plan_lines(plan: dict) -> list[str]:
    """The cost plan as sentences: one per (setting, arm), then the total."""
    lines = [f"{r['setting']} / {r['arm']}: {r['runs']} runs x {r['minutes_per_run']:.2f} min = "
             f"{r['cpu_minutes']:.0f} CPU-min" if r["minutes_per_run"] is not None else
             f"{r['setting']} / {r['arm']}: {r['runs']} runs (no measured cost: CpuScale(cost={{arm: minutes}}))"
             for r in plan["rows"]]
    unknown = plan.get("unknown") or 0
    lines.append(f"total: {plan['runs']} runs (tuning grid points + up to {plan['max_seeds']} paired seeds per "
                 f"arm), {plan['cpu_minutes']:.0f} CPU-min at one thread per run, about "
                 f"{plan['wall_hours_2_workers']:.1f} h on this 2-core CPU with 2 workers"
                 + (f", not counting {unknown} runs of arms without a measured cost" if unknown else "")
                 + (f" ({plan['note']})" if plan["note"] else ""))
    return lines


@dataclass(frozen=True)
class FullScale:
    """The claims on the paper suites' own cells: ``suite`` and, per setting, the ``match`` that picks its cells.
    Hyperparameters are the suite's (the paper's tuned values where it reports them): no tuning runs."""

    suite: str
    settings: dict
    seeds: tuple | None = None  # None: the suite's seeds
    tuning: str = "the suite's hyperparameters (the paper's reported values); no tuning runs"
    name: str = "full"

    def describe(self) -> dict:
        return {"scale": self.name, "suite": self.suite, "settings": self.settings, "tuning": self.tuning}


REPLICATION = (
    "A replication repeats, on fresh seeds, the claims that a scale left INCONCLUSIVE with its budget spent: the same "
    "scale (settings, tuning cells, tuning seed, metric), a new group-sequential design declared before its runs "
    "(its looks, the calibrated 5, 10, 20, 40, and its own CPU budget) and final seeds that the first stage never "
    "used. Its verdicts are those of an independent experiment: its seeds share nothing with the first stage's, so "
    "its error control (Holm over the claims it repeats, each kind of wrong verdict at 0.05 per paper) holds given "
    "the first stage's outcome, whatever that was. The first stage's runs are not pooled with it, since its looks "
    "were all spent and its error already spent with them. Over both stages, a claim's chance of a wrong verdict is "
    "at most 0.05 + 0.05 = 0.10 per kind (Bonferroni over the two stages), against 0.05 for a claim decided in one.")


def paper_scales(mod, which: str = "cpu") -> list:
    """The CPU scales of paper module ``mod``: all of its ``SCALES`` ("cpu"; the first runs every claim, and is the
    module's ``CPU``), the first one's quick variant ("quick": a smoke test of the whole path), or its
    ``REPLICATIONS`` ("replication": the undecided claims again on fresh seeds, see ``REPLICATION``)."""
    if which == "replication":
        return list(getattr(mod, "REPLICATIONS", ()))
    scales = list(getattr(mod, "SCALES", (mod.CPU,)))
    if which == "quick":
        return [scales[0].quick()]
    if which != "cpu":
        raise ValueError(f"which must be cpu, quick or replication, got {which!r}")
    return scales


def replication(scale: CpuScale, claims: list, cpu_minutes: float, why: str, seed_start: int = 100,
                looks: tuple = (5, 10, 20, 40)) -> CpuScale:
    """``scale`` again for ``claims`` (``claim.Claim``s) on fresh seeds ``seed_start``.. with its own ``looks`` and
    CPU budget (see ``REPLICATION``); named ``<scale>-rep``. Its tuning cells are the scale's own (same settings,
    grids and tuning seed), so they select the same hyperparameters; only the claims' arms are tuned and run."""
    arms = {a for c in claims for a in c.arms}
    paper_seeds = next((r.paper for r in scale.reductions if r.what == "seeds"), "-")
    seeds = Reduction("seeds", paper_seeds, f"fresh paired seeds {seed_start}-{seed_start + looks[-1] - 1} in looks "
                      f"{', '.join(map(str, looks))} (a replication of the {scale.name} scale)", "more")
    return dataclasses.replace(
        scale, name=f"{scale.name}-rep", only=tuple(c.id for c in claims), replicates=scale.name,
        seed_start=seed_start, looks=tuple(looks), max_seeds=looks[-1], cpu_minutes=cpu_minutes, why=why,
        grids={a: g for a, g in scale.grids.items() if a in arms},
        cost={a: v for a, v in scale.cost.items() if a in arms},
        reductions=tuple(r for r in scale.reductions if r.what != "seeds") + (seeds,))


def arm_matches(a: Arm, cfg: dict) -> bool:
    """Whether a suite cell's config is this arm: same algorithm, and the arm's fixed args agree."""
    if cfg.get("algorithm") != a.algorithm:
        return False
    args = cfg.get("algorithm_args") or {}
    return all(args.get(k) == v for k, v in a.args.items())


def _jsonable(d):
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}


