"""Leaderboards (tabulate), a CSV of all runs, plots (``report_plots``), paper-vs-measured deltas.

``fedrepro report --suite NAME`` reads ``<results>/<suite>/<version>/*.json`` and writes, beside them,
``leaderboard.md``, ``runs.csv``, ``accuracy_vs_rounds.png`` and ``accuracy_vs_uplink_bits.png`` (and, for
suites with many methods, ``*_all.png``); ``fedrepro report FOLDER`` does the same from a folder's records
alone (``write_records_report``). ``fedrepro report --compare OLD NEW`` sets two versions' results side by
side (``compare.py``).

A paper's number is set beside a measured one as a difference ("Δ") only in a suite that declares
``scale = "paper"`` (the paper's own setting). Any other suite (reduced presets) shows the paper's number
for orientation only, and the empirical claims' verdicts for that paper when a claims report exists for
the version. A cell where an algorithm is provably another one under the cell's setting (LFL under
partial participation is LB) says so (``EQUIVALENCES``).
"""
from __future__ import annotations

import csv
import json
import math
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
from tabulate import tabulate

from benchmark.campaign.suite import config_matches
from benchmark.reports.columns import column_keys, column_label, column_of, method_label
from benchmark.reports.plots import plot_curves
from benchmark.runs import store
from benchmark.runs.experiment import config_hash

__all__ = ["leaderboard", "write_csv", "write_report", "write_records_report", "claim_verdicts", "equivalence",
           "CSV_FIELDS", "cell_hash", "timing"]


def _per_client_bits(rec: dict) -> float | None:
    f, c = rec["final"], rec["config"]
    k = c.get("clients_per_round") or rec.get("partition", {}).get("num_clients") or c.get("num_clients")
    if not f.get("bits_up_per_round") or not k:
        return None
    return f["bits_up_per_round"] / k


def _arg(cfg: dict, name: str, default):
    return (cfg.get("algorithm_args") or {}).get(name, default)


def _partial(cfg: dict) -> bool:
    k, n = cfg.get("clients_per_round"), cfg.get("num_clients")
    return k is not None and n is not None and k < n


# (applies(cfg), note): an algorithm that is another one under a cell's setting, each proven by a test
EQUIVALENCES = [
    (lambda c: c["algorithm"] == "lfl" and _partial(c),
     "= LB here: with partial participation LFL resends the model every round (tests/test_lfl.py)"),
    (lambda c: c["algorithm"] == "mifa" and not _partial(c),
     "= FedAvg here: MIFA with every client every round (tests/test_drift_baselines.py)"),
    (lambda c: c["algorithm"] == "fedavgm" and _arg(c, "beta1", 0.9) == 0,
     "= FedAvg: beta1 = 0 (tests/test_drift_baselines.py)"),
    (lambda c: c["algorithm"] == "fedprox" and _arg(c, "mu", 0.01) == 0,
     "= FedAvg: mu = 0 (tests/test_drift_baselines.py)"),
    (lambda c: c["algorithm"] == "mimelite" and _arg(c, "beta", 0.9) == 0,
     "= FedAvg: beta = 0 (tests/test_drift_baselines.py)"),
    (lambda c: c["algorithm"] == "fednova" and c.get("local_steps") is not None and _arg(c, "mu", 0.0) == 0,
     "= FedAvg here: every client takes the same number of local steps (tests/test_drift_baselines.py)"),
    (lambda c: c["algorithm"] in ("bherd", "bherd_random", "bherd_closest") and _arg(c, "alpha", 0.5) == 1,
     "= FedAvg: alpha = 1 keeps every step (tests/test_bherd.py)"),
    (lambda c: c["algorithm"] == "fedswa" and _arg(c, "rho", 0.1) == 1 and _arg(c, "alpha", 1.5) == 1,
     "= FedAvg: rho = alpha = 1 (tests/test_fedswa.py)"),
]


def equivalence(cfg: dict) -> str | None:
    """The note for a config whose algorithm is provably another one under its setting, or None."""
    for applies, note in EQUIVALENCES:
        try:
            if applies(cfg):
                return note
        except (KeyError, TypeError):
            continue
    return None


def _fmt(values: list[float]) -> str:
    """A cell's mean, with the std over seeds when there are several (one seed has no spread to show)."""
    if not values:
        return "-"
    m = float(np.mean(values))
    return f"{m:.2f} ± {float(np.std(values, ddof=1)):.2f}" if len(values) > 1 else f"{m:.2f}"


def _cell_values(recs: list[dict], metric: str) -> tuple[list[float], str]:
    """A cell's metric values in percent (runs that finished ok) and a note counting the others by status."""
    vals = [100 * r["final"][metric] for r in recs if r["status"] == "ok" and r["final"].get(metric) is not None]
    bad: dict[str, int] = defaultdict(int)
    for r in recs:
        if r["status"] != "ok":
            bad[r["status"]] += 1
    return vals, ", ".join(f"{n} {s}" for s, n in bad.items())


def _reference_text(refs: list, vals: list[float], comparable: bool) -> str:
    ref = refs[0]
    paper = f"paper {ref.value:g}{'' if ref.std is None else f' ± {ref.std:g}'}"
    if not comparable:
        return f"<br>({paper} at full scale)"
    delta = float(np.mean(vals)) - ref.value
    if len(vals) == 1:
        return f"<br>{paper}, Δ {delta:+.2f} (one seed: no spread)"
    inside = min(vals) <= ref.value <= max(vals)
    return f"<br>{paper}, Δ {delta:+.2f}, {'inside' if inside else 'outside'} spread"


def _cell_text(recs: list[dict], vals: list[float], note: str, best, references, comparable: bool) -> tuple[str, bool]:
    """A leaderboard cell's markdown, and whether it shows a paper reference."""
    if not recs:
        return "", False
    text = _fmt(vals)
    if vals and best is not None and math.isclose(np.mean(vals), best):
        text = f"**{text}**"
    if note:
        text += f" ({note})"
    eq = equivalence(recs[0]["config"])
    if eq:
        text += f"<br>*{eq}*"
    refs = [ref for ref in references if config_matches(ref.match, recs[0]["config"])]
    if refs and vals:
        return text + _reference_text(refs, vals, comparable), True
    return text, False


def _preamble(records: list[dict], title: str, description: str, metric: str, refs: str) -> list[str]:
    seeds = sorted({r["config"]["seed"] for r in records})
    commits = sorted({(r.get("code_version") or {}).get("git_commit") or "?" for r in records})
    envs = sorted({(r.get("environment") or {}).get("gpu") or (r.get("environment") or {}).get("device", "?")
                   for r in records})
    per_cell = defaultdict(int)
    for r in records:
        per_cell[cell_hash(r["config"])] += 1
    lo, hi = min(per_cell.values()), max(per_cell.values())
    what = (f"seed {seeds[0]} only: one run per cell, no spread over seeds" if len(seeds) == 1 else
            f"mean ± std over seeds {seeds} (a cell with one finished run shows its value alone)" if lo == hi else
            f"mean ± std over {lo} to {hi} seeds per cell, of seeds {seeds}: the cells do not all have the same "
            "seeds (runs.csv lists each run; a cell with one finished run shows its value alone)")
    out = [f"# {title}", ""] + ([description.strip(), ""] if description else [])
    out += [f"Final {metric.replace('_', ' ')} (%) at the last round, {what} ({len(records)} runs); best per column in "
            f"bold. `up bits/param`: uplink bits per sampled client per round divided by the model's parameter count "
            f"(32 = fp32).",
            "Best-round accuracy is selected on the test set and is therefore not used here (see runs.csv)."]
    if refs == "comparable":
        out.append("Paper values are the paper's printed numbers; Δ = measured mean − paper; *inside spread* means "
                   "the paper's value lies within [min, max] of the measured seeds.")
    elif refs == "orientation":
        out.append("**Reduced scale: the paper's numbers are for its full setting and are shown for orientation only** "
                   "(no difference is computed: a reduced run is not expected to reach them). Whether the paper's "
                   "claims hold at this scale is what the empirical claims report decides (below).")
    return out + [f"Code: {', '.join(c[:10] for c in commits)}; device: {', '.join(map(str, envs))}.", ""]


def leaderboard(records: list[dict], references=(), title: str = "", description: str = "",
                metric: str = "test_accuracy", comparable: bool = True) -> str:
    """Markdown leaderboard: rows methods, columns dataset x partition (x N, S when they vary).

    ``comparable``: the suite runs the paper's own setting, so a paper number is shown with the difference
    and whether it lies in the measured spread; otherwise (a reduced suite) it is shown for orientation only.
    """
    if not records:
        return f"# {title}\n\nNo records yet.\n"
    col_names = column_keys(records)
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[column_of(r["config"], col_names)][method_label(r["config"])].append(r)
    cols = sorted(groups, key=lambda c: json.dumps(c))
    methods = sorted({m for g in groups.values() for m in g}, key=lambda m: (m != "fedavg", m))
    cells = {(col, m): _cell_values(groups[col].get(m, []), metric) for col in cols for m in methods}
    best = {col: max((np.mean(cells[(col, m)][0]) for m in methods if cells[(col, m)][0]), default=None)
            for col in cols}
    rows, any_ref = [], False
    for m in methods:
        bits = [b / max(r["final"].get("num_params") or 1, 1) for col in cols for r in groups[col].get(m, [])
                if (b := _per_client_bits(r)) is not None and r["final"].get("num_params")]
        row = [m, f"{np.mean(bits):.3g}" if bits else "-"]
        for col in cols:
            text, ref = _cell_text(groups[col].get(m, []), *cells[(col, m)], best[col], references, comparable)
            any_ref |= ref
            row.append(text)
        rows.append(row)
    refs = "" if not any_ref else "comparable" if comparable else "orientation"
    headers = ["method", "up bits/param"] + [column_label(c, col_names) for c in cols]
    return "\n".join(_preamble(records, title, description, metric, refs)
                     + [tabulate(rows, headers=headers, tablefmt="github"), ""])


# runs.csv: one row per run, units in the names (fraction: in [0, 1]; _s: seconds). Metrics of runs that did not
# finish ok (diverged, failed) are left empty, so that a plain mean over a group of rows cannot include them.
CSV_FIELDS = ["config_hash", "cell", "algorithm", "algorithm_args", "dataset", "partition", "num_clients",
              "clients_per_round", "seed", "rounds", "model", "status", "test_accuracy_fraction",
              "best_test_accuracy_selected_on_test_fraction", "best_round", "test_loss", "train_loss",
              "bits_up_per_round", "bits_down_per_round", "warmup_s", "wall_time_excl_warmup_s", "batched_runs",
              "git_commit", "device", "message"]
CSV_ABOUT = ("`runs.csv`: one row per run; accuracies as fractions in [0, 1] (`_fraction`), times in seconds (`_s`: "
             "`warmup_s` is the setup and the first round, `wall_time_excl_warmup_s` rounds 2 to T; a batched run's "
             "times are its job's, shared by its `batched_runs` runs); the metrics of a run that diverged or failed "
             "are empty (its `status` says which).")
_METRICS = {"test_accuracy_fraction": "test_accuracy",
            "best_test_accuracy_selected_on_test_fraction": "best_test_accuracy_selected_on_test",
            "best_round": "best_round", "test_loss": "test_loss", "train_loss": "train_loss"}


def cell_hash(cfg: dict) -> str:
    """The config hash without the seed: one leaderboard cell (its seeds share it); ``compare`` matches on it."""
    return config_hash({k: v for k, v in cfg.items() if k != "seed"})


def timing(rec: dict) -> dict:
    """A run's wall time split into warm-up (setup before the first round, and the first round, which pays
    one-time costs: data on the device, tracing, allocation) and the rounds after it, in seconds."""
    h, total = rec.get("history") or [], (rec.get("final") or {}).get("wall_time")
    batched = (rec.get("execution") or {}).get("group_runs") or 1
    if not h or total is None:
        return {"warmup_s": total, "wall_time_excl_warmup_s": None, "batched_runs": batched}
    first, last = h[0].get("wall_time", 0.0), h[-1].get("wall_time", 0.0)
    return {"warmup_s": max(total - last, 0.0) + first, "wall_time_excl_warmup_s": last - first,
            "batched_runs": batched}


def csv_row(r: dict) -> dict:
    c, fi, ok = r["config"], r["final"], r["status"] == "ok"
    return {"config_hash": r["config_hash"], "cell": cell_hash(c), "algorithm": c["algorithm"],
            "algorithm_args": json.dumps(c.get("algorithm_args") or {}, sort_keys=True),
            **{k: c.get(k) for k in ("dataset", "partition", "num_clients", "clients_per_round", "seed", "rounds",
                                     "model")},
            "status": r["status"], **{col: fi.get(k) if ok else None for col, k in _METRICS.items()},
            "bits_up_per_round": fi.get("bits_up_per_round"), "bits_down_per_round": fi.get("bits_down_per_round"),
            **timing(r), "git_commit": (r.get("code_version") or {}).get("git_commit"),
            "device": (r.get("environment") or {}).get("device"), "message": r.get("message", "")}


def write_csv(records: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in sorted(records, key=lambda r: (r["config"]["algorithm"], json.dumps(r["config"], sort_keys=True))):
            w.writerow(csv_row(r))


def write_report(suite, folder: Path) -> dict:
    """Leaderboard, CSV and plots for the records in ``folder`` that belong to ``suite``."""
    folder = Path(folder)
    hashes = {c.config_hash for c in suite.cells}
    records = [r for r in store.read_records(folder) if r.get("config_hash") in hashes]
    md = leaderboard(records, suite.references, f"Leaderboard: {suite.name} ({folder.name})", suite.description,
                     suite.metric, getattr(suite, "scale", "reduced") == "paper")
    missing = len(hashes) - len(records)
    if missing:
        md += f"\n{missing} of {len(hashes)} cells have no record yet: this leaderboard is partial.\n"
    md += claim_verdicts(suite.paper, folder)
    if suite.notes:
        md += "\n## Notes\n\n" + "\n\n".join(f"**{k}.** {v.strip()}" for k, v in suite.notes.items()) + "\n"
    return _write(records, folder, md, suite.metric, suite.paper, f"{suite.name} ({folder.name})")


def write_records_report(folder: Path, title: str | None = None, metric: str = "test_accuracy") -> dict:
    """Leaderboard, CSV and plots from the run records in ``folder`` alone (no suite file: every record counts,
    with no paper references or notes), e.g. a folder of ``fedrepro run --out`` records or a suite's results
    folder whose suite file is gone or changed. Raises ValueError when the folder holds no record."""
    folder = Path(folder)
    records = store.read_records(folder, any_name=True)
    if not records:
        raise ValueError(f"no run records (*.json) in {folder}")
    title = title or f"Leaderboard: {folder.parent.name + '/' if folder.parent.name else ''}{folder.name}"
    md = leaderboard(records, (), title, f"From the {len(records)} run records in this folder alone (no suite file).",
                     metric)
    return _write(records, folder, md, metric, None, title.removeprefix("Leaderboard: "))


def _write(records: list[dict], folder: Path, md: str, metric: str, paper: str | None, title: str = "") -> dict:
    paths = {"markdown": folder / "leaderboard.md", "csv": folder / "runs.csv"}
    folder.mkdir(parents=True, exist_ok=True)
    paths["markdown"].write_text(md + ("" if md.endswith("\n") else "\n") + "\n" + CSV_ABOUT + "\n")
    write_csv(records, paths["csv"])
    paths["plots"] = plot_curves(records, folder, metric, paper, title)
    return paths


def committed_results() -> Path | None:
    """The repository's committed ``results/`` folder when running from a source checkout, else None."""
    root = Path(__file__).resolve().parents[2] / "results"
    return root if (root / "README.md").is_file() else None


def claim_verdicts(paper: str | None, folder: Path) -> str:
    """A markdown section listing ``paper``'s empirical-claim verdicts from the claims report of the same
    version (``<root>/claims/<version>``, written by ``fedrepro claims``) for a leaderboard in ``folder``
    (``<root>/<suite>/<version>``), or '' when there is none. The root is the leaderboard's own, then the
    repository's committed ``results/``."""
    if not paper:
        return ""
    roots = [folder.parent.parent] + [r for r in (committed_results(),) if r is not None]
    for base in (r / "claims" / folder.name for r in roots):
        for sub, scale in (("", "cpu"), ("full", "full")):
            path = base / sub / "report.json"
            try:
                rows = [c for c in json.loads(path.read_text()).get("claims", []) if c.get("paper") == paper]
            except (OSError, json.JSONDecodeError):
                continue
            if not rows:
                continue
            link = os.path.relpath(path.with_name("report.md"), folder).replace(os.sep, "/")
            lines = [f"\n## Empirical claims of this paper ({scale} scale, [claims report]({link}))\n"]
            lines += [f"- `{c['id']}`: **{c['verdict']}** ({c.get('key_number', '')})" for c in rows]
            return "\n".join(lines) + "\n"
    return ""
