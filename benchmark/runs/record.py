"""The record of one run (DESIGN.md, "Results and reports"): ``RunResult`` and its JSON, the final metrics, and
provenance (the package version, the git commit and dirty flag, plugins' sources, the environment).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import version

import numpy as np
import torch

from algorithms.core import plugins

from benchmark.runs import store
from benchmark.sim import numerics

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

RECORD_SCHEMA = 1


def package_version() -> str:
    """fedrepro's version: the source tree's pyproject.toml when running from one (``PYTHONPATH=.``, no
    install, or an editable install), else the installed distribution's metadata."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pyproject = os.path.join(root, "pyproject.toml")
    if os.path.isfile(pyproject):
        try:
            with open(pyproject, "rb") as f:
                meta = tomllib.load(f).get("project", {})
            if meta.get("name") == "fedrepro" and meta.get("version"):
                return str(meta["version"])
        except (OSError, ValueError):
            pass
    try:
        return version("fedrepro")
    except Exception:  # noqa: BLE001 - neither a source tree nor an install
        return "0+unknown"


#: the folders whose code computes a run's numbers: a change elsewhere (results, tests, documents) changes none
CODE_DIRS = ("algorithms", "benchmark", "theory")
#: what under :data:`CODE_DIRS` no run reads, so that a commit touching only these resumes a checkpoint: the
#: reports (tables, plots and comparisons drawn from finished records) and documents, as git's exclude pathspecs
NOT_RUN_CODE = (":(exclude)benchmark/reports", ":(exclude,glob)**/*.md")


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@lru_cache(maxsize=1)
def code_version() -> dict:
    pkg = package_version()
    root = _root()
    commit, dirty = None, None
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        if commit:
            # untracked (not ignored) files count: a new algorithm module changes results too
            st = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", *CODE_DIRS],
                                capture_output=True, text=True, timeout=10).stdout
            dirty = bool(st.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package": pkg, "git_commit": commit, "git_dirty": dirty}


def same_run_code(a: dict | None, b: dict | None, root: str | None = None) -> bool:
    """Whether two ``code_version``s (or ``run_code_version``s) compute the same runs although their commits
    differ: the same package version and plugins, both trees clean, and git shows no difference between the
    two commits under :data:`CODE_DIRS` outside :data:`NOT_RUN_CODE` (the later commit touched only results, tests,
    reports or documents). False
    wherever git cannot tell (a commit it does not have, no git): a checkpoint is then not resumed."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ca, cb = a.get("git_commit"), b.get("git_commit")
    rest = lambda v: {k: x for k, x in v.items() if k != "git_commit"}  # noqa: E731
    if not ca or not cb or rest(a) != rest(b) or a.get("git_dirty") is not False:
        return False
    try:
        rc = subprocess.run(["git", "-C", root or _root(), "diff", "--quiet", ca, cb, "--", *CODE_DIRS, *NOT_RUN_CODE],
                            capture_output=True, timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return False
    return rc == 0


def run_code_version(algorithm: str) -> dict:
    """``code_version()`` and, when plugins are loaded or the algorithm is not a built-in, ``plugins``: the
    provenance of each (origin, sha256 of its source, the names it registered; ``algorithms.core.plugins``)."""
    loaded = [p.provenance() for p in plugins.loaded()]
    own = plugins.algorithm_provenance(algorithm) if isinstance(algorithm, str) else None
    if own is not None and own not in loaded:
        loaded.append(own)
    return {**code_version(), "plugins": loaded} if loaded else code_version()


def environment(device: torch.device) -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
           "numpy": np.__version__, "device": str(device), "threads": torch.get_num_threads(),
           "numerics": numerics.in_force()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


# --------------------------------------------------------------------------------------------------
# The record


@dataclass
class RunResult:
    config: dict
    config_hash: str
    code_version: dict
    environment: dict
    partition: dict
    history: list[dict]
    final: dict
    status: str
    message: str = ""
    model: torch.nn.Module | None = None
    #: how the run was executed: the executor and why it was chosen (``benchmark.runs.cost``)
    execution: dict = field(default_factory=dict)
    initial_model: dict | None = None  # {"fingerprint": ...} of the parameters before round 1

    def record(self) -> dict:
        rec = {"schema": RECORD_SCHEMA, "config": self.config, "config_hash": self.config_hash,
               "code_version": self.code_version, "environment": self.environment,
               "partition": self.partition, "history": self.history, "final": self.final,
               "status": self.status, "message": self.message, "execution": self.execution}
        if self.initial_model is not None:
            rec["initial_model"] = self.initial_model
        return rec

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.record(), indent=indent, default=_json_default)

    def save(self, folder: str | os.PathLike) -> tuple[str, str | None]:
        """Write the record as ``<folder>/<config_hash>.json``; if that fails, to a fallback folder.

        Returns the path written and, for a fallback, why ``folder`` failed: a finished run is never lost.
        """
        rec = json.loads(self.to_json(indent=None))
        path, why = store.write_record_or_rescue(folder, rec)
        return str(path), why


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    return str(o)


def final_metrics(history: list[dict], wall: float, cpu: float | None = None) -> dict:
    """The run's summary: last evaluated metrics, bits, ``wall_time`` (seconds since the job started) and, when
    measured, ``cpu_time`` (the process's CPU seconds over the same span: unlike the wall time it does not grow
    when other jobs share the cores, so CPU budgets count it)."""
    evaluated = [h for h in history if h["test_accuracy"] is not None or h["test_loss"] is not None]
    last = evaluated[-1] if evaluated else {}
    out = {"test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
           "train_loss": last.get("train_loss"), "rounds_completed": len(history),
           "bits_up_total": int(sum(h["bits_up"] for h in history)),
           "bits_down_total": int(sum(h["bits_down"] for h in history)),
           "bits_up_per_round": float(np.mean([h["bits_up"] for h in history])) if history else 0.0,
           "bits_down_per_round": float(np.mean([h["bits_down"] for h in history])) if history else 0.0,
           "wall_time": wall, **({} if cpu is None else {"cpu_time": cpu})}
    accs = [(h["test_accuracy"], h["round"]) for h in evaluated if h["test_accuracy"] is not None]
    if accs:
        best = max(accs)
        # selected on the test set: an optimistic number, reported apart from the headline
        out["best_test_accuracy_selected_on_test"] = best[0]
        out["best_round"] = best[1]
    return out


def chance_level(rec: dict) -> float:
    """The accuracy of guessing: 1 / the number of classes of the run's training labels (its partition
    statistics), 0.0 when unknown (regression). The one source of this rule (diverged runs count at it)."""
    k = (rec.get("partition") or {}).get("statistics", {}).get("num_classes")
    return 1.0 / k if k else 0.0
