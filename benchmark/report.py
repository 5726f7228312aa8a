"""Leaderboards (tabulate), a CSV of all runs, plots (matplotlib), paper-vs-measured deltas.

``fedrepro report --suite NAME`` reads ``results/<suite>/<version>/*.json`` and writes, beside them,
``leaderboard.md``, ``runs.csv``, ``accuracy_vs_rounds.png`` and ``accuracy_vs_uplink_bits.png``.
``fedrepro report --compare OLD NEW`` sets two versions' results side by side (``compare.py``).

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

from . import store

# keys that name a column of the leaderboard when they vary across a suite
# Config fields that make a leaderboard column, in label order; any other varying field (lr, optimizer,
# rounds, ...) joins them only when it separates runs these do not (see ``column_keys``).
COLUMN_KEYS = ("dataset", "model", "partition", "num_clients", "clients_per_round", "dataset_args", "model_args")
NOT_COLUMN_KEYS = {"algorithm", "algorithm_args", "seed", "executor", "executor_used", "device", "data_root",
                   "download"}


def column_keys(records: list[dict]) -> tuple[str, ...]:
    """The config fields that tell the leaderboard's columns apart: rows are methods and the seeds of a
    cell are averaged, so every other field that varies must be a column, or different experiments
    (two models, two learning rates) would be averaged together. A field enters only if it splits
    runs that the fields before it do not (a learning rate set per model adds no column)."""
    extra = sorted({k for r in records for k in r["config"]} - set(COLUMN_KEYS) - NOT_COLUMN_KEYS)
    chosen: list[str] = []
    seen = 1
    for k in (*COLUMN_KEYS, *extra):
        n = len({json.dumps([r["config"].get(c) for c in (*chosen, k)], sort_keys=True) for r in records})
        if n > seen:
            chosen.append(k)
            seen = n
    return tuple(chosen) or ("dataset",)


def method_label(cfg: dict) -> str:
    args = cfg.get("algorithm_args") or {}
    if not args:
        return cfg["algorithm"]
    return cfg["algorithm"] + "(" + ", ".join(f"{k}={v}" for k, v in sorted(args.items())) + ")"


def column_of(cfg: dict, names: tuple) -> tuple:
    """A record's column key (hashable: dict fields as sorted JSON)."""
    return tuple(json.dumps(v, sort_keys=True) if isinstance(v := cfg.get(k), dict) else v for k in names)


def _column_label(key: tuple, names: tuple) -> str:
    short = {"num_clients": "N", "clients_per_round": "S"}

    def one(n, v):
        if n in short:
            return f"{short[n]}={v}"
        if n in ("dataset", "model", "partition"):
            return str(v)
        if n in ("dataset_args", "model_args", "algorithm_args") and isinstance(v, str):
            v = json.loads(v)
            return ", ".join(f"{a}={b}" for a, b in sorted(v.items())) or f"{n} default"
        return f"{n}={v}"
    return " / ".join(one(n, v) for n, v in zip(names, key))


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
    if not values:
        return "-"
    m = float(np.mean(values))
    s = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{m:.2f} ± {s:.2f}"


def _matches(match: dict, cfg: dict) -> bool:
    from .runner import _matches as m

    return m(match, cfg)


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
        col = column_of(r["config"], col_names)
        groups[col][method_label(r["config"])].append(r)
    cols = sorted(groups, key=lambda c: json.dumps(c))
    methods = sorted({m for g in groups.values() for m in g}, key=lambda m: (m != "fedavg", m))

    cell_vals: dict[tuple, list[float]] = {}
    notes_of: dict[tuple, str] = {}
    for col in cols:
        for m in methods:
            recs = groups[col].get(m, [])
            vals = [100 * r["final"][metric] for r in recs
                    if r["status"] == "ok" and r["final"].get(metric) is not None]
            cell_vals[(col, m)] = vals
            bad = defaultdict(int)
            for r in recs:
                if r["status"] != "ok":
                    bad[r["status"]] += 1
            notes_of[(col, m)] = ", ".join(f"{n} {s}" for s, n in bad.items())
    best = {col: max((np.mean(cell_vals[(col, m)]) for m in methods if cell_vals[(col, m)]), default=None)
            for col in cols}

    headers = ["method", "up bits/param"] + [_column_label(c, col_names) for c in cols]
    rows = []
    any_ref = False
    for m in methods:
        bits = [b / max(r["final"].get("num_params") or 1, 1) for col in cols for r in groups[col].get(m, [])
                if (b := _per_client_bits(r)) is not None and r["final"].get("num_params")]
        row = [m, f"{np.mean(bits):.3g}" if bits else "-"]
        for col in cols:
            vals = cell_vals[(col, m)]
            text = _fmt(vals)
            if vals and best[col] is not None and math.isclose(np.mean(vals), best[col]):
                text = f"**{text}**"
            if notes_of[(col, m)]:
                text += f" ({notes_of[(col, m)]})"
            recs = groups[col].get(m, [])
            eq = equivalence(recs[0]["config"]) if recs else None
            if eq:
                text += f"<br>*{eq}*"
            refs = [ref for ref in references if recs and _matches(ref.match, recs[0]["config"])]
            if refs and vals:
                any_ref = True
                ref = refs[0]
                paper = f"paper {ref.value:g}{'' if ref.std is None else f' ± {ref.std:g}'}"
                if comparable:
                    delta = float(np.mean(vals)) - ref.value
                    inside = min(vals) <= ref.value <= max(vals)
                    text += f"<br>{paper}, Δ {delta:+.2f}, {'inside' if inside else 'outside'} spread"
                else:
                    text += f"<br>({paper} at full scale)"
            row.append(text if recs else "")
        rows.append(row)

    from tabulate import tabulate

    seeds = sorted({r["config"]["seed"] for r in records})
    commits = sorted({(r.get("code_version") or {}).get("git_commit") or "?" for r in records})
    envs = sorted({(r.get("environment") or {}).get("gpu") or (r.get("environment") or {}).get("device", "?")
                   for r in records})
    out = [f"# {title}", ""]
    if description:
        out += [description.strip(), ""]
    out += [f"Final {metric.replace('_', ' ')} (%) at the last round, mean ± std over seeds {seeds} "
            f"({len(records)} runs); best per column in bold. `up bits/param`: uplink bits per sampled client per "
            f"round divided by the model's parameter count (32 = fp32).",
            "Best-round accuracy is selected on the test set and is therefore not used here (see runs.csv)."]
    if any_ref and comparable:
        out.append("Paper values are the paper's printed numbers; Δ = measured mean − paper; *inside spread* means "
                   "the paper's value lies within [min, max] of the measured seeds.")
    elif any_ref:
        out.append("**Reduced scale: the paper's numbers are for its full setting and are shown for orientation only** "
                   "(no difference is computed: a reduced run is not expected to reach them). Whether the paper's "
                   "claims hold at this scale is what the empirical claims report decides (below).")
    out += [f"Code: {', '.join(c[:10] for c in commits)}; device: {', '.join(map(str, envs))}.", "",
            tabulate(rows, headers=headers, tablefmt="github"), ""]
    return "\n".join(out)


CSV_FIELDS = ["config_hash", "cell", "algorithm", "algorithm_args", "dataset", "partition", "num_clients",
              "clients_per_round", "seed", "rounds", "model", "status", "test_accuracy",
              "best_test_accuracy_selected_on_test", "best_round", "test_loss", "train_loss",
              "bits_up_per_round", "bits_down_per_round", "wall_time", "git_commit", "device", "message"]


def cell_hash(cfg: dict) -> str:
    """The config hash without the seed: one leaderboard cell (its seeds share it); ``compare`` matches on it."""
    from .experiment import config_hash

    return config_hash({k: v for k, v in cfg.items() if k != "seed"})


def write_csv(records: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in sorted(records, key=lambda r: (r["config"]["algorithm"], json.dumps(r["config"], sort_keys=True))):
            c, fi = r["config"], r["final"]
            w.writerow({"config_hash": r["config_hash"], "cell": cell_hash(c), "algorithm": c["algorithm"],
                        "algorithm_args": json.dumps(c.get("algorithm_args") or {}, sort_keys=True),
                        **{k: c.get(k) for k in ("dataset", "partition", "num_clients", "clients_per_round",
                                                 "seed", "rounds", "model")},
                        "status": r["status"],
                        **{k: fi.get(k) for k in ("test_accuracy", "best_test_accuracy_selected_on_test",
                                                  "best_round", "test_loss", "train_loss", "bits_up_per_round",
                                                  "bits_down_per_round", "wall_time")},
                        "git_commit": (r.get("code_version") or {}).get("git_commit"),
                        "device": (r.get("environment") or {}).get("device"), "message": r.get("message", "")})


def plot_curves(records: list[dict], folder: Path, metric: str = "test_accuracy") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    varying = column_keys(records)
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] == "ok" and r["history"]:
            groups[column_of(r["config"], varying)][method_label(r["config"])].append(r)
    cols = sorted(groups, key=lambda c: json.dumps(c))
    paths = []
    for kind in ("rounds", "uplink_bits"):
        if not cols:
            break
        n = len(cols)
        ncol = min(n, 3)
        nrow = math.ceil(n / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.6 * nrow), squeeze=False)
        for ax, col in zip(axes.flat, cols):
            for m, recs in sorted(groups[col].items()):
                curves = []
                for r in recs:
                    h = [e for e in r["history"] if e.get(metric) is not None]
                    if kind == "rounds":
                        x = [e["round"] for e in h]
                    else:
                        cum = np.cumsum([e["bits_up"] for e in r["history"]])
                        x = [cum[e["round"] - 1] for e in h]
                    curves.append((x, [100 * e[metric] for e in h]))
                length = min(len(c[1]) for c in curves)
                if length == 0:
                    continue
                x = curves[0][0][:length]
                y = np.mean([c[1][:length] for c in curves], axis=0)
                ax.plot(x, y, label=m)
            ax.set_title(_column_label(col, varying), fontsize=9)
            ax.set_xlabel("round" if kind == "rounds" else "cumulative uplink bits")
            if kind == "uplink_bits":
                ax.set_xscale("log")
            ax.set_ylabel(f"{metric.replace('_', ' ')} (%)")
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
        fig.tight_layout(rect=(0, 0.08 + 0.02 * math.ceil(len(labels) / 5), 1, 1))
        p = folder / ("accuracy_vs_rounds.png" if kind == "rounds" else "accuracy_vs_uplink_bits.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def write_report(suite, folder: Path) -> dict:
    """Leaderboard, CSV and plots for the records in ``folder`` that belong to ``suite``."""
    folder = Path(folder)
    hashes = {c.config_hash for c in suite.cells}
    records = [r for r in store.read_records(folder) if r.get("config_hash") in hashes]
    comparable = getattr(suite, "scale", "reduced") == "paper"
    md = leaderboard(records, suite.references, f"Leaderboard: {suite.name} ({folder.name})", suite.description,
                     suite.metric, comparable)
    missing = len(hashes) - len(records)
    if missing:
        md += f"\n{missing} of {len(hashes)} cells have no record yet: this leaderboard is partial.\n"
    md += claim_verdicts(suite.paper, folder)
    if suite.notes:
        md += "\n## Notes\n\n" + "\n\n".join(f"**{k}.** {v.strip()}" for k, v in suite.notes.items()) + "\n"
    paths = {"markdown": folder / "leaderboard.md", "csv": folder / "runs.csv"}
    folder.mkdir(parents=True, exist_ok=True)
    paths["markdown"].write_text(md)
    write_csv(records, paths["csv"])
    paths["plots"] = plot_curves(records, folder, suite.metric)
    return paths


def claim_verdicts(paper: str | None, folder: Path) -> str:
    """A markdown section listing ``paper``'s empirical-claim verdicts from the claims report of the same
    version (``results/claims/<version>``, written by ``fedrepro claims``) for a leaderboard in ``folder``
    (``results/<suite>/<version>``), or '' when there is none."""
    if not paper:
        return ""
    base = folder.parent.parent / "claims" / folder.name
    for sub, scale in (("", "cpu"), ("full", "full")):
        path = base / sub / "report.json"
        if not path.is_file():
            continue
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


