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
from dataclasses import dataclass

from benchmark.runs.experiment import Experiment
from benchmark.campaign.tuning import Extension, TuningPlan
from theory.stats.sequential import check_looks

from .claim import Arm
from .metrics import METRICS, STANDS_FOR, check_early, check_tail


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
    ``grids``: arm name -> declared tuning grid: every arm tunes the learning rate ``lr`` over the same values,
    times the paper's other tuned knob where the paper tunes both (beta1, a server step size), so a grid may hold
    more points for one arm than for another, but never a learning rate another arm lacks. ``extend``: grid key ->
    ``benchmark.campaign.tuning.Extension``, the one rule that extends any arm's grid while its choice lies at an end
    (default: the learning rate by a ratio of 3, at most 2 values beyond the grid each way). ``tune_seeds``: the
    tuning seeds a point's score is averaged over (at least 3 outside quick mode). ``fixed``: setting -> why its
    arms run at the setting's own hyperparameters, untuned (a claim about the paper's fixed step, e.g. BHerd's
    speed at eta = 1e-4). ``weighting``: arm -> the aggregation weighting it runs with and whose it is (the
    paper's or its code's), stated in the report. ``final_seeds`` pair the arms (the first look); ``max_seeds`` is
    the most paired seeds the cost plan allows per comparison.

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
    tune_seeds: tuple = (1000, 1001, 1002)
    executor: str = "auto"
    grid_rule: str = ""
    name: str = "cpu"
    why: str = ""  # why this scale: what of the paper's regime it keeps within the budget
    only: tuple = ()
    metrics: dict = dataclasses.field(default_factory=dict)
    cost: dict = dataclasses.field(default_factory=dict)
    cost_note: str = ""
    max_seeds: int = 20
    extend: dict = dataclasses.field(default_factory=lambda: {"lr": LR_EXTENSION})
    fixed: dict = dataclasses.field(default_factory=dict)
    weighting: dict = dataclasses.field(default_factory=dict)
    # a replication (``replicates``: the name of the scale it repeats): fresh final seeds from ``seed_start``, its
    # own declared ``looks`` and CPU budget (``cpu_minutes``), fixed before its runs (see ``REPLICATION``)
    replicates: str = ""
    seed_start: int = 0
    looks: tuple = ()
    cpu_minutes: float = 0.0
    inconclusive_only: bool = False  # declared before its first stage ran: it repeats what that stage leaves open

    def __post_init__(self):
        if self.looks:
            object.__setattr__(self, "looks", check_looks(self.looks, f"scale {self.name}: looks"))
        if self.replicates and not (self.looks and self.cpu_minutes > 0 and self.seed_start > 0):
            raise ValueError(f"scale {self.name}: a replication declares its looks, its CPU minutes and fresh seeds "
                             "(seed_start > 0) before it runs")
        if self.looks and self.looks[-1] != self.max_seeds:
            raise ValueError(f"scale {self.name}: its last look ({self.looks[-1]}) must be its max_seeds "
                             f"({self.max_seeds})")
        lrs = {a: tuple(g.get("lr") or ()) for a, g in self.grids.items()}
        if any(len(v) > 1 for v in lrs.values()) and len(set(lrs.values())) > 1:  # a scale that tunes the lr
            raise ValueError(f"scale {self.name}: every arm tunes its learning rate over the same values (the grid "
                             f"key 'lr'; other keys may be added where the paper tunes them too); got {lrs}")
        unknown = set(self.fixed) - set(self.settings)
        if unknown:
            raise ValueError(f"scale {self.name}: fixed settings {sorted(unknown)} are not among its settings")
        for claimed, measured in self.metrics.items():
            if STANDS_FOR.get(measured) != claimed:
                raise ValueError(f"scale {self.name}: {measured!r} cannot stand for {claimed!r} (allowed: "
                                 f"{STANDS_FOR})")
            if measured == "tail_accuracy" and self.name != "quick":
                check_tail(self.settings, f"scale {self.name}")

    def checked_metrics(self, claims) -> None:
        """Raise where a claim measured here by ``early_accuracy`` has too few evaluations in its first 10%."""
        for c in self.claims_here(claims):
            if c.metric == "early_accuracy" and self.name != "quick":
                check_early({x.setting: self.settings[x.setting] for x in c.comparisons}, f"scale {self.name}")

    def plan(self, arm_name: str, metric: str | None = None) -> TuningPlan:
        """The arm's tuning plan: its grid, extended by the scale's rule, scored by ``metric`` (a ``METRICS`` key:
        the metric of the claims it enters, on the validation split; default the final validation accuracy)."""
        if arm_name not in self.grids:
            raise ValueError(f"no tuning grid for arm {arm_name!r}; grids: {sorted(self.grids)}")
        grid = self.grids[arm_name]
        extend = {k: e for k, e in self.extend.items() if k in grid}
        if metric is None:
            return TuningPlan(grid, self.validation, self.tune_seeds, self.final_seeds, extend)
        return TuningPlan(grid, self.validation, self.tune_seeds, self.final_seeds, extend, score=METRICS[metric][0],
                          score_name=f"{metric} ({METRICS[metric][1]}) on the validation split")

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
        """A smoke test of this scale's whole path (tuning with one extension step, selection, final runs on the test
        set, verdicts, report) in seconds: 2 rounds of at most 2 local steps or 2 local epochs (on at most 20 samples
        per client), CNNs at an eighth of their width, a validation split of 300, the first 2 learning rates of the
        grid and the first value of its other keys (so every choice lies at an end of the learning rates and takes
        one extension step: the cap is 1), 3 final seeds, 1 tuning seed; partitions, clients and participation as
        in the scale. Not a verdict."""
        settings = {name: _quick_setting(f) for name, f in self.settings.items()}
        grids = {a: {k: list(v)[:2 if k == "lr" else 1] for k, v in g.items()} for a, g in self.grids.items()}
        extend = {k: dataclasses.replace(e, cap=min(e.cap, 1)) for k, e in self.extend.items()}
        return dataclasses.replace(self, settings=settings, grids=grids, final_seeds=tuple(self.final_seeds[:3]),
                                   tune_seeds=tuple(self.tune_seeds[:1]), name="quick", validation=QUICK_VALIDATION,
                                   max_seeds=3, extend=extend, reductions=self.reductions + (Reduction(
                                       "quick mode", "-", "2 rounds of <= 2 local steps or 2 epochs, CNN width "
                                       "<= 1/8, 2 learning rates and 1 value of other grid keys (every "
                                       "choice lies at an end: one extension step each), 1 tuning seed, 3 seeds: a "
                                       "smoke test"),))

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
                tuning = 0 if setting in self.fixed else self.plan(a).most_points * len(self.tune_seeds)
                runs = tuning + n
                minutes = self.cost.get(a)
                rows.append({"setting": setting, "arm": a, "runs": runs, "tuning_runs": tuning,
                             "minutes_per_run": minutes, "cpu_minutes": None if minutes is None else runs * minutes})
                total += 0.0 if minutes is None else runs * minutes
        return {"rows": rows, "runs": sum(r["runs"] for r in rows), "max_seeds": n, "cpu_minutes": total,
                "wall_hours_2_workers": total / 60 / 2, "note": self.cost_note,
                "unknown": sum(r["runs"] for r in rows if r["minutes_per_run"] is None)}

    def describe(self) -> dict:
        d = {"scale": self.name, "why": self.why, "kept": list(self.kept),
             "reductions": [r.line() for r in self.reductions],
             "settings": {k: _jsonable(v) for k, v in self.settings.items()},
             "tuning": {"rule": self.grid_rule, "grids": self.grids, "validation": self.validation,
                        "tune_seeds": list(self.tune_seeds), "final_seeds": list(self.final_seeds),
                        "extend": {k: e.describe() for k, e in self.extend.items()}, "fixed": dict(self.fixed)},
             "executor": self.executor, "only": list(self.only), "metrics": dict(self.metrics)}
        if self.weighting:
            d["weighting"] = dict(self.weighting)
        if self.replicates:
            d["replication"] = {"replicates": self.replicates, "seeds": [self.seed_start, self.seed_start +
                                                                         self.max_seeds - 1],
                                "looks": list(self.looks), "cpu_minutes": self.cpu_minutes,
                                "inconclusive_only": self.inconclusive_only}
        if self.cost:
            d["plan"] = plan_lines(self.cost_plan(strict=False))
        return d


QUICK_VALIDATION = 300
MIN_TUNE_SEEDS = 3  # the papers' scales average a point's score over at least this many (tests/test_claims_protocol.py)
#: the rule that extends every arm's learning rate (issue 43): the next value beyond an end of the declared grid is
#: the paper's next grid value where an ``Extension`` of a paper lists it, else the end times or divided by 3; at
#: most 2 values beyond the grid in each direction (the declared cap, reported when reached)
LR_EXTENSION = Extension(ratio=3.0, cap=2)
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
    only: tuple = ()  # the claim ids the suite's cells can judge (empty: all)

    def claims_here(self, claims) -> list:
        return [c for c in claims if not self.only or c.id in self.only]

    def describe(self) -> dict:
        return {"scale": self.name, "suite": self.suite, "settings": self.settings, "tuning": self.tuning}


REPLICATION = (
    "A replication repeats, on fresh seeds, the claims that a scale left INCONCLUSIVE with its budget spent: the same "
    "scale (settings, tuning rule, metric; whether its arms are tuned again on tuning seeds of their own is stated "
    "with its seeds), a new group-sequential design declared before its runs "
    "(its looks, the calibrated 5, 10, 20, 40, and its own CPU budget) and final seeds that the first stage never "
    "used. Its verdicts are those of an independent experiment: its seeds share nothing with the first stage's, so "
    "given the first stage's outcome, whatever that was, its Holm family over the claims it repeats holds at the "
    "share of the paper's error rate declared for it in advance (the error rates above: one family per paper over "
    "both stages, theory/empirical/family.py). The first stage's runs are not pooled with it, since its looks were "
    "all spent and its share of the error with them.")


def paper_scales(mod, which: str = "cpu") -> list:
    """The CPU scales of paper module ``mod``: all of its ``SCALES`` ("cpu"; the first runs every claim, and is the
    module's ``CPU``), the first one's quick variant ("quick": a smoke test of the whole path), or its
    ``REPLICATIONS`` ("replication": the undecided claims again on fresh seeds, see ``REPLICATION``)."""
    from . import declaration  # the version being judged may have run an earlier protocol's declarations

    if which == "replication":
        return list(declaration(mod, "REPLICATIONS", ()))
    scales = list(declaration(mod, "SCALES", None) or (declaration(mod, "CPU"),))
    if which == "quick":
        return [scales[0].quick()]
    if which != "cpu":
        raise ValueError(f"which must be cpu, quick or replication, got {which!r}")
    return scales


def replication(scale: CpuScale, claims: list | None, cpu_minutes: float, why: str, seed_start: int = 100,
                looks: tuple = (5, 10, 20, 40), tune_seeds: tuple | None = None) -> CpuScale:
    """``scale`` again for ``claims`` (``claim.Claim``s) on fresh seeds ``seed_start``.. with its own ``looks`` and
    CPU budget (see ``REPLICATION``); named ``<scale>-rep``. ``claims=None``: declared before the first stage ran,
    it repeats the claims of ``scale`` that the first stage leaves INCONCLUSIVE (``inconclusive_only``: found in
    the first stage's report when it runs). ``tune_seeds``: the replication's own tuning seeds, disjoint from the
    scale's, so that its arms are tuned again (default: the scale's, whose tuning cells it then shares)."""
    own = tuple(int(s) for s in tune_seeds) if tune_seeds else tuple(scale.tune_seeds)
    if tune_seeds and set(own) & set(scale.tune_seeds):
        raise ValueError(f"a replication that tunes again needs fresh tuning seeds; {sorted(set(own) & set(scale.tune_seeds))} "
                         f"are the {scale.name} scale's")
    ids = tuple(c.id for c in claims) if claims is not None else tuple(scale.only)
    arms = set(scale.grids) if claims is None else {a for c in claims for a in c.arms}
    paper_seeds = next((r.paper for r in scale.reductions if r.what == "seeds"), "-")
    seeds = Reduction("seeds", paper_seeds, f"fresh paired seeds {seed_start}-{seed_start + looks[-1] - 1} in looks "
                      f"{', '.join(map(str, looks))} (a replication of the {scale.name} scale)"
                      + (f", tuned again on tuning seeds {', '.join(map(str, own))}" if tune_seeds else ""), "more")
    return dataclasses.replace(
        scale, name=f"{scale.name}-rep", only=ids, replicates=scale.name, inconclusive_only=claims is None,
        seed_start=seed_start, looks=tuple(looks), max_seeds=looks[-1], cpu_minutes=cpu_minutes, why=why,
        tune_seeds=own, grids={a: g for a, g in scale.grids.items() if a in arms},
        cost={a: v for a, v in scale.cost.items() if a in arms},
        reductions=tuple(r for r in scale.reductions if r.what != "seeds") + (seeds,))


def new_study(scale: CpuScale, seed_start: int, tune_seeds: tuple, looks: tuple, why: str) -> CpuScale:
    """``scale``'s claims as a new study (a later protocol's, e.g. GradMA's in 0.5.0, FedSWA's in 0.5.1): every arm
    tuned again on ``tune_seeds`` and the final runs on fresh seeds ``seed_start``.. in ``looks`` (up to its
    max_seeds), nothing else changed; ``why`` replaces the scale's, and its grid rule names the new tuning seeds where
    it named the old ones (a rule that does not name them is refused: it would state the wrong seeds)."""
    old, own = (", ".join(map(str, s)) for s in (scale.tune_seeds, tune_seeds))
    if old not in scale.grid_rule:
        raise ValueError(f"scale {scale.name}: its grid rule does not name its tuning seeds ({old}), so a new study "
                         "cannot restate them")
    last = seed_start + looks[-1] - 1
    seeds = Reduction("seeds", next((r.paper for r in scale.reductions if r.what == "seeds"), "-"),
                      f"fresh paired seeds {seed_start}-{last} in looks {', '.join(map(str, looks))} (a new study: no "
                      f"earlier version used them), tuned on tuning seeds {own}", "more")
    return dataclasses.replace(
        scale, why=why, grid_rule=scale.grid_rule.replace(old, own), tune_seeds=tuple(tune_seeds),
        seed_start=seed_start, final_seeds=tuple(range(seed_start, seed_start + looks[0])), max_seeds=looks[-1],
        reductions=tuple(r for r in scale.reductions if r.what != "seeds") + (seeds,))


def arm_matches(a: Arm, cfg: dict) -> bool:
    """Whether a suite cell's config is this arm: same algorithm, and the arm's fixed args agree."""
    if cfg.get("algorithm") != a.algorithm:
        return False
    args = cfg.get("algorithm_args") or {}
    return all(args.get(k) == v for k, v in a.args.items())


def _jsonable(d):
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}


