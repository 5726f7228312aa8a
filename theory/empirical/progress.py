"""How far a claims run has come (``fedrepro claims --dry-run`` with records under the results root): per planned
(setting, arm) of a scale's cost plan (``CpuScale.cost_plan``), the runs recorded so far in the scale's folder
(``paths.runs_folder``) and the CPU minutes they took, and what is left at the worst (every planned run not yet
recorded) at this version's own measured minutes per run where an arm has at least ``MEASURED_AT_LEAST`` records,
else at the plan's declared cost: the cost model re-fitted from the runs as they come in (issue 45).

A record belongs to a row when it trains the row's arm in the row's setting: the same algorithm, data, model,
partition, clients, rounds, local work and optimizer, and the same algorithm arguments except the arm's tuned
keys (a tuning point, a final seed at the chosen value); the learning rate counts too where the setting fixes it,
and the seed is one of the row's: a tuning seed (tuned rows) or one of the planned final seeds.
A fixed setting's final run at the value another row's tuning chose is one cell, run once: it counts for the fixed
row only, so a tuned row's count may fall short (what is left is then overstated, never understated); the recorded
CPU is summed over distinct records.
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmark.runs.store import read_records

MEASURED_AT_LEAST = 3
KEYS = ("algorithm", "dataset", "model", "model_args", "partition", "num_clients", "clients_per_round", "rounds",
        "local_steps", "local_epochs", "batch_size", "optimizer", "momentum", "weight_decay", "lr_decay")


def row_key(config: dict, tuned: set) -> str:
    """What makes a run one of a row's cells: ``KEYS`` and the algorithm arguments (and the learning rate) not tuned."""
    args = {k: v for k, v in (config.get("algorithm_args") or {}).items() if k not in tuned}
    fixed_lr = None if "lr" in tuned else config.get("lr")
    return json.dumps([config.get(k) for k in KEYS] + [args, fixed_lr], sort_keys=True, default=str)


def recorded(folder: Path, sc, arms: dict, plan: dict, read: dict | None = None) -> dict:
    """``plan`` (``sc.cost_plan``) with, per row, ``done`` (records, at most the planned runs), ``done_minutes``,
    ``minutes_measured`` (this version's mean per run, None under ``MEASURED_AT_LEAST``) and ``left_minutes``; and
    totals. ``arms``: {name: Arm} of the paper; ``read``: {folder: its records}, kept by a caller that asks for
    several scales, so that a folder several papers' scales share is read once."""
    read = {} if read is None else read
    if folder not in read:
        read[folder] = read_records(folder) if Path(folder).is_dir() else []
    records = read[folder]
    by_key: dict[frozenset, dict] = {}  # the records by row_key, once per set of tuned keys

    def keyed(tuned: set, key: str) -> list[dict]:
        if frozenset(tuned) not in by_key:
            index: dict[str, list] = {}
            for r in records:
                index.setdefault(row_key(r["config"], tuned), []).append(r)
            by_key[frozenset(tuned)] = index
        return by_key[frozenset(tuned)].get(key, [])

    finals = set(range(sc.seed_start, sc.seed_start + plan["max_seeds"]))
    rows, used, taken = {}, {}, set()
    # the fixed settings' rows first: their final runs are theirs; a tuned row's final seeds matching one of them (its
    # tuning chose the fixed value: one cell) are left to the fixed row, so a tuned row may count short, never double
    for i, row in sorted(enumerate(plan["rows"]), key=lambda x: x[1]["setting"] not in sc.fixed):
        fixed = row["setting"] in sc.fixed
        tuned = set() if fixed else set(sc.grids.get(row["arm"], {}))
        seeds = finals if fixed else finals | set(sc.tune_seeds)
        key = row_key(sc.base(row["setting"], arms[row["arm"]]).config(), tuned)
        mine = [r for r in keyed(tuned, key) if r["config"].get("seed") in seeds and r["config_hash"] not in taken]
        if fixed:
            taken |= {r["config_hash"] for r in mine}
        secs = [float((r.get("final") or {}).get("cpu_time") or 0.0) for r in mine]
        for r, s in zip(mine, secs):
            used[r["config_hash"]] = s
        measured = sum(secs) / 60 / len(secs) if len(secs) >= MEASURED_AT_LEAST else None
        per_run = measured if measured is not None else row["minutes_per_run"]
        left = max(0, row["runs"] - len(mine))
        rows[i] = {**row, "done": min(len(mine), row["runs"]), "done_minutes": sum(secs) / 60,
                   "minutes_measured": measured, "left_minutes": None if per_run is None else left * per_run}
    rows = [rows[i] for i in range(len(plan["rows"]))]
    return {"folder": str(folder), "rows": rows, "done": sum(r["done"] for r in rows), "runs": plan["runs"],
            "done_minutes": sum(used.values()) / 60,
            "left_minutes": sum(r["left_minutes"] or 0.0 for r in rows)}


def progress_lines(p: dict, finished: bool = False) -> list[str]:
    """The recorded runs and what is left, one line per row that has records, then the scale's total. ``finished``:
    the paper's report judged every claim (:func:`finished_report`), so nothing is left: the runs the plan holds
    beyond the records are looks its claims never needed."""
    out = []
    for r in p["rows"]:
        if r["done"]:
            m = r["minutes_measured"]
            left = "" if finished else f", {r['left_minutes']:.0f} CPU-min left at the worst"
            out.append(f"{r['setting']} / {r['arm']}: {r['done']} of {r['runs']} runs recorded "
                       f"({r['done_minutes']:.0f} CPU-min" + ("" if m is None else f", {m:.2f} per run against "
                       f"{r['minutes_per_run']:.2f} planned") + f"){left}")
    out.append(f"recorded: {p['done']} of {p['runs']} planned runs, {p['done_minutes']:.0f} CPU-min as recorded "
               f"({p['folder']}); " + ("finished: nothing left to run" if finished else
                                       f"left at the worst: {p['left_minutes']:.0f} CPU-min"))
    return out


def finished_report(results_root, paper: str) -> Path | None:
    """The first-stage report of this version under the results root itself (its whole report, else the paper's
    partial one: where a run into that root writes) that judged ``paper``'s claims with none of its scales listed as
    under way: each claim decided or INCONCLUSIVE with its budget spent, so that no planned run is left to make in
    that root. None otherwise (a run into another root makes its own cells, whatever the committed report says)."""
    from . import paths

    found = paths.first_stage_file(results_root, paper, committed=False)
    if found is None or any(e.get("under_way") for e in found[1].get("papers", []) if e.get("paper") == paper):
        return None
    return found[0]


def earlier_versions(roots, this: str) -> list[tuple[str, Path]]:
    """The claims versions older than ``this`` that hold records (a ``claims/<version>`` folder or its archives)
    under any of ``roots``, newest first, each with the first root that has it."""
    found: dict[str, Path] = {}
    now = _release(this)
    for root in roots:
        base = Path(root) / "claims" if root and now else None
        for d in sorted(base.iterdir()) if base is not None and base.is_dir() else []:
            if d.is_dir() and _release(d.name) and _release(d.name) < now:
                found.setdefault(d.name, Path(root))
    return sorted(found.items(), key=lambda kv: _release(kv[0]), reverse=True)


def _release(name: str) -> tuple | None:
    """A release's numbers ("0.4.0" -> (0, 4, 0)), or None for a folder that is not one."""
    parts = name.split(".")
    return tuple(int(x) for x in parts) if all(x.isdigit() for x in parts) else None


def earlier_folder(root: Path, version_: str, scale_name: str, unpacked: dict) -> Path:
    """The folder of ``version_``'s records of one scale under ``root``: its runs folder where the records are
    there, else that folder in its archives (``archive.archives``) unpacked once into a temporary folder
    (``unpacked``: {(root, version): folder}, the caller's, removed by it)."""
    import tempfile

    from . import archive, paths

    folder = paths.runs_folder(root, version_, scale_name)
    if not folder.is_dir():
        key = (str(root), version_)
        if key not in unpacked:
            unpacked[key] = Path(tempfile.mkdtemp(prefix="fedrepro-costs-"))
            archive.restore(unpacked[key], version_, archive.archives(root, version_))
        folder = paths.runs_folder(unpacked[key], version_, scale_name)
    return folder


def measured_before(roots, this: str, sc, arms: dict, plan: dict, unpacked: dict,
                    read: dict | None = None) -> dict | None:
    """The newest earlier version's measured cost of ``plan`` (a scale's ``cost_plan``): per row its mean CPU
    minutes per run where that version recorded at least ``MEASURED_AT_LEAST`` of the row's runs (the same
    protocol's cells, run by older code: an upper bound where this version is faster, as 0.5.0 is), else the
    plan's declared cost; None where no earlier version recorded this scale. For the dry run, before this version
    has records of its own. ``read``: {folder: its records}, as ``recorded`` keeps it (the papers' cpu scales share
    one folder, read once)."""
    read = {} if read is None else read
    for v, root in earlier_versions(roots, this):
        folder = earlier_folder(root, v, sc.name, unpacked)
        rows = recorded(folder, sc, arms, plan, read)["rows"]
        per_run = [r["minutes_measured"] if r["minutes_measured"] is not None else r["minutes_per_run"] for r in rows]
        if all(r["minutes_measured"] is None for r in rows):
            continue
        return {"version": v, "measured_rows": sum(r["minutes_measured"] is not None for r in rows),
                "rows": len(rows), "cpu_minutes": sum(r["runs"] * (m or 0.0) for r, m in zip(rows, per_run)),
                "minutes_per_run": per_run}
    return None


def measured_before_line(m: dict) -> str:
    """One sentence for the dry run: the scale's plan at the earlier version's recorded costs."""
    rest = ", the others at the declared cost" if m["measured_rows"] < m["rows"] else ""
    return (f"at {m['version']}'s recorded costs ({m['measured_rows']} of {m['rows']} rows with "
            f"{MEASURED_AT_LEAST} or more of their runs recorded there{rest}): {m['cpu_minutes']:.0f} CPU-min at "
            "the worst")
