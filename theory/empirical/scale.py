"""Where a paper's claims are run: the CPU scale (the paper's regime with less data and fewer rounds, every
reduction stated with its factor) or the full scale (the paper suites' own cells, e.g. on a GPU).

The claims themselves do not change between scales: a scale only says which experiments stand for each
(setting, arm) of a claim, how their hyperparameters are chosen, and which seeds pair them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from benchmark.experiment import Experiment
from benchmark.tuning import TuningPlan

from .claim import Arm


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
    """The paper's regime at CPU size, with the tuning protocol of ``benchmark.tuning``.

    ``settings``: setting name -> Experiment fields without algorithm and seed. ``kept``: what is the paper's
    (local work per round, participation, clients, partition, model family...). ``reductions``: what is not.
    ``grids``: arm name -> tuning grid (the same size for every arm of a paper). ``final_seeds`` pair the arms.
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

    def __post_init__(self):
        sizes = {a: math.prod(len(v) for v in g.values()) for a, g in self.grids.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"every arm must get the same tuning budget; grid sizes {sizes}")

    def plan(self, arm_name: str) -> TuningPlan:
        if arm_name not in self.grids:
            raise ValueError(f"no tuning grid for arm {arm_name!r}; grids: {sorted(self.grids)}")
        return TuningPlan(self.grids[arm_name], self.validation, self.tune_seeds, self.final_seeds)

    def base(self, setting: str, a: Arm) -> Experiment:
        fields = dict(self.settings[setting])
        fields["algorithm_args"] = {**fields.get("algorithm_args", {}), **a.args}
        return Experiment(algorithm=a.algorithm, executor=self.executor, **fields)

    def quick(self) -> "CpuScale":
        """A few-minutes variant for CI and a first look: a tenth of the rounds (at least 2), the first 2 values
        of each grid key, 3 final seeds, 1 tuning seed. Its verdicts are not the report's."""
        settings = {}
        for name, f in self.settings.items():
            rounds = max(2, math.ceil(f["rounds"] / 10))
            every = max(1, rounds // 2)
            settings[name] = {**f, "rounds": rounds, "eval_every": every}
        grids = {a: {k: list(v)[:2] for k, v in g.items()} for a, g in self.grids.items()}
        return dataclasses.replace(self, settings=settings, grids=grids, final_seeds=tuple(self.final_seeds[:3]),
                                   tune_seeds=tuple(self.tune_seeds[:1]), name="quick",
                                   reductions=self.reductions + (Reduction(
                                       "quick mode", "-", "rounds / 10, 2 grid values per key, 3 seeds"),))

    def describe(self) -> dict:
        return {"scale": self.name, "kept": list(self.kept), "reductions": [r.line() for r in self.reductions],
                "settings": {k: _jsonable(v) for k, v in self.settings.items()},
                "tuning": {"rule": self.grid_rule, "grids": self.grids, "validation": self.validation,
                           "tune_seeds": list(self.tune_seeds), "final_seeds": list(self.final_seeds)},
                "executor": self.executor}


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


def arm_matches(a: Arm, cfg: dict) -> bool:
    """Whether a suite cell's config is this arm: same algorithm, and the arm's fixed args agree."""
    if cfg.get("algorithm") != a.algorithm:
        return False
    args = cfg.get("algorithm_args") or {}
    return all(args.get(k) == v for k, v in a.args.items())


def _jsonable(d):
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}


