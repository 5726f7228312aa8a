"""How far along is a results folder, and what failed? (``fedrepro status``)

For each ``<results root>/<suite>/<version>/`` folder: the cells done (ok / diverged), running (claimed by
a live runner, ``benchmark.campaign.cell_claims``: which runner, where, since when), stalled (claimed by a runner
that is gone: the next runner takes them over), failed (with the last error of each), pending (the suite's
cells with no record and no claim, known where the suite file is: a shipped suite by its folder's name, or
the one given), the unfinished runs that saved a checkpoint (``benchmark.runs.checkpoint``: the round each
reached), and the time left, estimated by the cost model (``benchmark.runs.cost``, fitted to ``fedrepro bench``
results) for the pending cells (less the rounds a checkpoint holds) and what is left of the running ones.
Reads only: it writes, moves and claims nothing.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from benchmark.campaign import cell_claims, suite as suites
from benchmark.runs import checkpoint, cost, plan, store
from benchmark.runs.record import code_version


#: where ``fedrepro run``'s single runs (no suite) write their records without --out: <results>/single/<version>/
SINGLE_RUNS = "single"


def version_folders(root: Path, suite: str | None = None) -> list[Path]:
    """The folders under ``root`` (``root`` itself included, and down the tree: ``store.record_folders``) holding
    records, claims or checkpoints: ``<root>/<suite>/<version>``, and ``--out`` folders wherever they are (of
    ``suite`` only, if given: by the folder's mark, ``suite.folder_suite``, else its name; ``root`` itself when it
    holds records and no mark of another suite, e.g. an ``--out`` folder written before marks existed)."""
    root = Path(root)
    also = (cell_claims.CLAIMS_DIR, checkpoint.FOLDER)
    found = [f for f in store.record_folders(root, also=also)
             if any((f / d).is_dir() for d in also) or suites.folder_suite(f) or store.holds_a_record(f)]
    if suite is None:
        return found
    mark = suites.folder_suite(root)
    return [f for f in found if suite_and_version(f)[0] == suite
            or (f == root and (mark is None or mark["suite"] == suite))]


def _is_version(name: str) -> bool:
    return re.fullmatch(r"\d+(\.\d+)*([.+-]\w+)*", name) is not None


def suite_and_version(folder: Path) -> tuple[str, str]:
    """Which suite and version a results folder holds: its mark's (``suite.bind_folder``), else its place,
    ``<suite>/<version>``; a folder of another name (a ``--out`` folder with no mark) is named for itself."""
    mark = suites.folder_suite(folder)
    version = folder.name if _is_version(folder.name) else (mark or {}).get("version") or "?"
    if mark is not None:
        return mark["suite"], version
    return (folder.parent.name, version) if _is_version(folder.name) else (folder.name, version)


def suite_of(folder: Path):
    """The suite whose cells a results folder holds: the one its mark names (``suite.bind_folder``), else the
    shipped suite its place names (``<suite>/<version>``), else None."""
    folder = Path(folder)
    name = suite_and_version(folder)[0]
    try:
        return suites.load_folder_suite(folder) or (suites.load_suite(name) if name in suites.suite_names() else None)
    except (ValueError, OSError):
        return None


def folder_status(folder: Path, suite=None, model: cost.CostModel | None = None, ttl: float | None = None,
                  device: str | None = None) -> dict:
    """The state of one results folder (module docstring); ``suite``: its cells, for the pending ones."""
    folder = Path(folder)
    ttl = cell_claims.claim_ttl() if ttl is None else ttl
    cells = {c.config_hash: c.experiment for c in suite.cells} if suite is not None else None
    # a suite's folder is read as its runner reads it (a record by its config hash's name); any other folder's
    # records under any name (saved by hand from the Python API), as `fedrepro report` reads them
    records, unreadable = store.scan(folder, any_name=cells is None)
    by_hash = {r["config_hash"]: r for r in records}
    if cells is not None:
        by_hash = {h: r for h, r in by_hash.items() if h in cells}
    now = time.time()
    running, stalled = [], []
    for c in cell_claims.read_claims(folder):
        if by_hash.get(c.key, {}).get("status") in store.FINISHED:
            continue  # written, the claim not yet removed
        why = c.expired(ttl, now)
        (stalled if why else running).append({"cell": c.key, "runner": c.runner, "host": c.host, "pid": c.pid,
                                              "since_s": now - c.started, "heartbeat_s": now - c.heartbeat,
                                              "why": why})
    status = {h: r["status"] for h, r in by_hash.items()}
    claimed = {c["cell"] for c in running + stalled}
    failed = [{"cell": h, "config": _short(r["config"]), "message": _last_line(r.get("message", ""))}
              for h, r in sorted(by_hash.items()) if r["status"] == "failed" and h not in claimed]
    name, version = suite_and_version(folder)
    name = suite.name if suite is not None else name
    out = {"folder": str(folder), "suite": name, "version": version,
           "current_version": version == code_version()["package"], "suite_known": cells is not None,
           "cells": len(cells) if cells is not None else None,
           "ok": sum(s == "ok" for s in status.values()), "diverged": sum(s == "diverged" for s in status.values()),
           "failed": len(failed), "running": running, "stalled": stalled, "failed_cells": failed,
           "unreadable": [f"{u.path.name}: {u.reason}" for u in unreadable], "pending": None, "seconds_left": None, "pace": None,
           "runners": sorted({c["runner"] for c in running})}
    out["done"] = out["ok"] + out["diverged"]
    out["checkpointed"] = _checkpointed(folder, status, cells, now)
    if cells is not None:
        todo = [h for h in cells if status.get(h) not in store.FINISHED and h not in claimed]
        out["pending"] = len([h for h in todo if status.get(h) != "failed"])
        reached = {c["cell"]: c["round"] / c["rounds"] for c in out["checkpointed"] if c["rounds"]}
        out["seconds_left"] = _seconds_left([cells[h] for h in todo], [cells[c["cell"]] for c in running + stalled
                                                                      if c["cell"] in cells],
                                            [c["since_s"] for c in running + stalled if c["cell"] in cells],
                                            model, device, [reached.get(h, 0.0) for h in todo])
        out["pace"] = _pace([r for r in by_hash.values() if r["status"] in store.FINISHED], cells, model, device)
    return out


def _pace(done: list[dict], cells: dict, model, device) -> float | None:
    """How many times longer than the cost model's estimate (each cell alone, as the time left is estimated) this
    folder's finished cells took: their wall time, a batched run's share of its job's (a loaded machine, a slower
    device); None without a model or a finished cell."""
    if model is None or not done:
        return None
    shares = [(r["final"]["wall_time"] / max(1, (r.get("execution") or {}).get("group_runs") or 1), cells[r["config_hash"]])
              for r in done if r["final"].get("wall_time")]
    est = plan.estimate_cells([e for _, e in shares], device, model)["seconds"] if shares else None
    wall = sum(w for w, _ in shares)
    return wall / est if est and wall else None


def _checkpointed(folder: Path, status: dict, cells: dict | None, now: float) -> list[dict]:
    """The unfinished runs with a checkpoint: the round each reached (of the cell's rounds, where the suite is
    known) and how long ago it was saved."""
    out = []
    for f in sorted((folder / checkpoint.FOLDER).glob("*.pt")):
        if status.get(f.stem) in store.FINISHED:
            continue  # its record is written; the checkpoint goes with the next save
        try:
            reached = checkpoint.saved_round(f)
        except Exception:  # noqa: BLE001 - being written, or damaged: the run says so when it resumes
            continue
        rounds = cells[f.stem].rounds if cells is not None and f.stem in cells else None
        out.append({"cell": f.stem, "round": reached, "rounds": rounds, "saved_s": now - f.stat().st_mtime})
    return out


def _seconds_left(todo: list, running: list, elapsed: list, model, device,
                  reached: list | None = None) -> float | None:
    """Seconds of work left by the cost model: the cells to run (less the fraction of its rounds ``reached[i]``
    that a cell's checkpoint holds), and what is left of those running."""
    if model is None:
        return None
    reached = reached or [0.0] * len(todo)
    fresh = [e for e, r in zip(todo, reached) if not r]
    total = plan.estimate_cells(fresh, device, model)["seconds"] if fresh else 0.0
    for exp, r in zip(todo, reached):
        if r:
            est = plan.estimate_cells([exp], device, model)["seconds"]
            total = None if est is None or total is None else total + est * (1.0 - r)
    if total is None:
        return None
    for exp, spent in zip(running, elapsed):
        est = plan.estimate_cells([exp], device, model)["seconds"]
        if est is None:
            return None
        total += max(0.0, est - spent)
    return total


def _short(cfg: dict) -> str:
    args = cfg.get("algorithm_args") or {}
    extra = "".join(f" {k}={v}" for k, v in sorted(args.items()))
    return f"{cfg.get('algorithm')}{extra} on {cfg.get('dataset')} {cfg.get('partition')} seed {cfg.get('seed')}"


def _last_line(message: str) -> str:
    lines = [ln for ln in str(message).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def status(root: str | Path, suite=None, device: str | None = None, ttl: float | None = None) -> dict:
    """Every results folder under ``root`` (of ``suite`` only, if given), with the cost model in use."""
    dev = plan.device_type(device)
    bench = cost.latest_bench(dev)
    model = cost.cost_model_from_bench(bench) if bench else None
    folders = version_folders(Path(root), suite.name if suite is not None else None) if Path(root).is_dir() else []
    if suite is not None and not any(suite_and_version(f)[1] in (code_version()["package"], "?") for f in folders):
        folders.append(Path(root) / suite.name / code_version()["package"])  # nothing run yet: all pending
    files = bench["_path"].split(", ") if bench else []
    source = f"{Path(files[0]).name}" + (f" and {len(files) - 1} more in {Path(files[0]).parent}" if len(files) > 1 else "") \
        if files else None
    return {"root": str(root), "device": dev, "cost_model": source,
            "folders": [folder_status(f, suite if suite is not None else suite_of(f), model, ttl, device)
                        for f in folders]}  # with --suite, version_folders kept that suite's folders only


def render(st: dict) -> str:
    """``status`` as text."""
    if not st["folders"]:
        return (f"no results under {st['root']} (no run records in it or in its folders: a suite writes to "
                "<root>/<suite>/<version>/ or to its --out folder)")
    return "\n\n".join(_render_folder(f, st) for f in st["folders"])


def _render_folder(f: dict, st: dict) -> str:
    if f["version"] == "?":  # a folder of records with no suite mark and no <suite>/<version> place
        head = (f"{f['suite']}: {f['cells']} cells (version not known: the folder keeps no suite mark)  "
                f"[{f['folder']}]" if f["suite_known"] else
                f"{f['folder']}: run records of no known suite (pending cells not known)")
    else:
        what = (f": {f['cells']} cells" if f["suite_known"] else ": single runs (`fedrepro run` without --suite)"
                if f["suite"] == SINGLE_RUNS else ": suite file unknown, pending cells not known")
        head = f"{f['suite']} {f['version']}" + ("" if f["current_version"] else " (not this version)") + what + \
            f"  [{f['folder']}]"
    parts = [f"done {f['done']} (ok {f['ok']}, diverged {f['diverged']})", f"running {len(f['running'])}"]
    if f["stalled"]:
        parts.append(f"stalled {len(f['stalled'])}")
    parts += [f"failed {f['failed']}", f"pending {'?' if f['pending'] is None else f['pending']}"]
    lines = [head, "  " + " | ".join(parts)]
    by_runner: dict = {}
    for c in f["running"]:
        by_runner.setdefault((c["runner"], c["host"], c["pid"]), []).append(c)
    for (runner, host, pid), cs in sorted(by_runner.items()):
        beat = max(c["heartbeat_s"] for c in cs)
        lines.append(f"  running: {len(cs)} cell(s) by runner {runner} (host {host}, pid {pid}; last heartbeat "
                     f"{beat:.0f} s ago)")
    for c in f["stalled"]:
        lines.append(f"  stalled: cell {c['cell']}: {c['why']}; the next runner takes it over")
    for c in f["failed_cells"]:
        lines.append(f"  failed: {c['cell']} {c['config']}: {c['message']}")
    if f.get("checkpointed"):
        cs = f["checkpointed"]
        shown = ", ".join(f"{c['cell']} at round {c['round']}" + (f"/{c['rounds']}" if c["rounds"] else "")
                          + f" (saved {cost.human_seconds(c['saved_s'])} ago)" for c in cs[:5])
        lines.append(f"  resumable: {len(cs)} unfinished run(s) with a checkpoint: {shown}"
                     + (f", and {len(cs) - 5} more" if len(cs) > 5 else "") + "; the next run continues them")
    if f["unreadable"]:
        lines.append(f"  unreadable records: {len(f['unreadable'])} ({'; '.join(f['unreadable'][:3])})")
    if f["suite_known"]:
        n = max(1, len(f["runners"]))
        left = f["seconds_left"]
        lines.append("  time left: " + ("unknown (no `fedrepro bench` results for " + st["device"] + ")" if left is None
                                        else f"{cost.human_seconds(left)} of work on {st['device']}"
                                        + (f", about {cost.human_seconds(left / n)} with the {n} runners now at work"
                                           if n > 1 else "") + f" (cost model: {st['cost_model']})"))
        if left and f["pace"]:
            lines.append(f"  at the pace of the {f['done']} finished cells ({f['pace']:.1f} x the cost model's "
                         f"estimate): about {cost.human_seconds(left * f['pace'] / n)} left")
    return "\n".join(lines)
