"""The measured CPU cost of a claims run (issue 45): one run's CPU seconds at one torch thread, from the profile of
``fedrepro bench --profile-claims`` (``results/perf/profile-claims-*.json``, the newest), for the claims' dry run.

A run is matched with the profiled cell of the same dataset, model and model options (the papers' scales), and its
cost is that cell's, scaled by the work (``benchmark.runs.cost.cell_work``): local training, data movement and the
per-client and per-round overhead by sampled clients x local steps per round, evaluation by evaluated samples (test
and training objective), the server by rounds where the algorithm is the cell's own (another algorithm's server is
taken as FedAvg's: negligible), the job as measured. Another algorithm's local steps are taken as the cell's (one
cell per paper is profiled): GradMA's QP_l makes its baselines' estimates 5-8x too high, FedBAT's and LFL's
quantizers add about 10-20%; the source says so. Without a matching cell: ``benchmark.runs.cost``'s FLOPs model
(``estimate_cell``), which does not know an algorithm's own arithmetic and underestimates small CNNs several-fold.
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmark.runs import cost


def latest_profile(dirs: list[Path] | None = None) -> dict | None:
    """The newest claims profile (by its date) in the perf folders, with its path; None if none."""
    found = []
    for d in dirs if dirs is not None else cost.perf_dirs():
        for p in sorted(Path(d).glob("profile-claims-*.json")) if Path(d).is_dir() else []:
            try:
                rec = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(rec, dict) and rec.get("cells") and all("config" in c for c in rec["cells"]):
                found.append({**rec, "_path": str(p)})
    return max(found, key=lambda r: str(r.get("date", ""))) if found else None


def _key(cfg: dict) -> tuple:
    return (cfg.get("dataset"), json.dumps(cfg.get("dataset_args") or {}, sort_keys=True), cfg.get("model"),
            json.dumps(cfg.get("model_args") or {}, sort_keys=True))


def run_seconds(exp, profile: dict | None = None, device_type: str = "cpu", model: cost.CostModel | None = None,
                executor: str = "sequential") -> dict:
    """{"seconds", "source"}: the CPU seconds of one run of ``exp`` alone (module docstring)."""
    from benchmark.runs.experiment import Experiment

    profile = latest_profile() if profile is None else profile
    cfg = exp.config()
    cells = [c for c in (profile or {}).get("cells", []) if _key(c["config"]) == _key(cfg)]
    if not cells:
        est = cost.estimate_cell(exp, device_type, model, executor)
        return {"seconds": est["seconds"], "source": "FLOPs model (no profiled cell of this dataset and model)"}
    c = cells[0]
    fields = {k: v for k, v in c["config"].items() if k in Experiment.__dataclass_fields__}
    ref = cost.cell_work(Experiment(**{**fields, "rounds": c["rounds_run"], "model": c["config"]["model"],
                                       "dataset": c["config"]["dataset"]}))
    work = cost.cell_work(exp)
    per = c["per_round"]
    scale = (work["clients_per_round"] * work["steps"]) / (ref["clients_per_round"] * ref["steps"])
    train = exp.rounds * scale * sum(per[p] for p in ("local", "data", "client", "round"))
    server = exp.rounds * per["server"] if exp.algorithm == c["algorithm"] else 0.0
    evaluation = c["seconds"]["evaluate"] * work["eval_forwards"] / max(1.0, ref["eval_forwards"])
    other = "" if exp.algorithm == c["algorithm"] else \
        f"; {c['algorithm']}'s local steps stand for {exp.algorithm}'s (an overestimate where {c['algorithm']} adds work)"
    return {"seconds": train + server + evaluation + c["seconds"]["job"],
            "source": f"profiled cell {c['label']} ({profile.get('_path', 'profile')}){other}"}
