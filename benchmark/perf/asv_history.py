"""The asv performance history: record past commits, and plot the main ratios over commits.

``python -m benchmark.perf.asv_history record`` checks out, one at a time in a temporary git worktree, every
commit of ``--branch`` (default: HEAD) that touched ``algorithms/`` or ``benchmark/`` and has no result
yet for this machine, and runs today's asv benchmarks (``benchmark/asv``) against that commit's code
(``ASV_PYTHONPATH`` = the worktree: asv drops PYTHONPATH; ``FEDREPRO_ASV_ISOLATE`` makes the benchmarks
drop an editable install's import hooks, which would fill in modules the commit lacks from the installed
tree) with ``asv run --python=same --set-commit-hash``. Results go to
``results/asv/<machine>/`` (committed). A benchmark that needs an API a commit does not have yet is
recorded as failed for it (asv's way), not faked. New commits that change the engine add their point
by running ``record`` again: only the missing commits are run.

``python -m benchmark.perf.asv_history plot`` draws the ratio benchmarks (``track_*``) of every recorded
commit, in commit order, to ``results/perf/asv-history.png``.

One process at a time, torch pinned to one thread (the benchmarks do it), so a recording takes about
a minute or two per commit on a 2-core CPU. Nothing here runs in the tests beyond ``--dry-run``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("algorithms", "benchmark")
DEFAULT_MACHINE = "epyc-2cpu"
PLOTTED = {  # benchmark name -> label
    "Speedup.track_vectorized_over_sequential": "digits logreg: vectorized / sequential",
    "SpeedupCNN.track_vectorized_over_sequential": "FedBAT CNN: vectorized / sequential",
    "AutoChoice.track_auto_over_best": "FedBAT CNN: auto / faster executor",
    "BatchedRuns.track_batched_over_one_after_another": "digits logreg: 6 batched runs / one after another",
}


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def commits(branch: str = "HEAD") -> list[str]:
    """Commits of ``branch`` that touched algorithms/ or benchmark/, oldest first."""
    return _git("rev-list", "--reverse", branch, "--", *PATHS).split()


def results_dir(machine: str) -> Path:
    return ROOT / "results" / "asv" / machine


def recorded(machine: str) -> dict[str, Path]:
    """commit hash -> result file, for this machine."""
    out = {}
    for p in results_dir(machine).glob("*.json"):
        if p.name == "machine.json":
            continue
        try:
            out[json.loads(p.read_text())["commit_hash"]] = p
        except (OSError, ValueError, KeyError):
            continue
    return out


def _config(tmp: Path) -> Path:
    """asv.conf.json with absolute paths: today's benchmarks, results under results/asv."""
    text = "\n".join(line for line in (ROOT / "asv.conf.json").read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    conf = json.loads(text)
    conf.update({"repo": str(ROOT), "benchmark_dir": str(ROOT / "benchmark" / "asv"),
                 "results_dir": str(ROOT / "results" / "asv"), "env_dir": str(tmp / "env"),
                 "html_dir": str(ROOT / ".asv" / "html")})
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def _asv(*args: str, env: dict | None = None, cwd: Path = ROOT) -> int:
    cmd = [sys.executable, "-m", "asv", *args]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=cwd, env=env).returncode


def ensure_machine(machine: str, conf: Path) -> None:
    """Describe this machine to asv once (``~/.asv-machine.json``)."""
    path = Path.home() / ".asv-machine.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    if machine not in known:
        _asv("machine", "--yes", "--machine", machine, "--config", str(conf))


def spread(items: list, n: int) -> list:
    """``n`` items evenly spaced over ``items`` (first and last included), in order."""
    if n >= len(items):
        return list(items)
    if n <= 1:
        return items[-1:]
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]


def record(branch: str, machine: str, limit: int | None, dry_run: bool, bench: str | None,
           sample: int | None = None) -> int:
    todo = [c for c in commits(branch) if c not in recorded(machine)]
    if limit is not None:
        todo = todo[-limit:]
    if sample is not None:
        todo = spread(todo, sample)
    print(f"{len(todo)} commit(s) to record for machine {machine!r}"
          + (f": {' '.join(c[:8] for c in todo)}" if todo else ""), flush=True)
    if dry_run or not todo:
        return 0
    failures = 0
    with tempfile.TemporaryDirectory(prefix="fedrepro-asv-") as tmp_s:
        tmp = Path(tmp_s)
        conf = _config(tmp)
        ensure_machine(machine, conf)
        for i, c in enumerate(todo):
            wt = tmp / f"wt-{c[:12]}"
            _git("worktree", "add", "--detach", "--force", str(wt), c)
            try:
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                env.update({"ASV_PYTHONPATH": str(wt), "FEDREPRO_ASV_ISOLATE": "1", "OMP_NUM_THREADS": "1",
                            "MKL_NUM_THREADS": "1"})
                args = ["run", "--python=same", "--set-commit-hash", c, "--machine", machine, "--config",
                        str(conf), "--show-stderr", "-a", "processes=1", "-a", "repeat=5"]  # asv: 2 processes, up to 10 repeats
                if bench:
                    args += ["--bench", bench]
                print(f"[{i + 1}/{len(todo)}] {c[:8]} {_git('log', '-1', '--format=%s', c).strip()[:80]}",
                      flush=True)
                failures += _asv(*args, env=env) != 0
            finally:
                _git("worktree", "remove", "--force", str(wt))
    return 1 if failures else 0


def series(machine: str, branch: str = "HEAD") -> tuple[list[str], dict[str, list]]:
    """Commits in order and, per plotted benchmark, its value at each (None where not recorded)."""
    from asv.results import Results  # lazy: asv is an optional dependency (the perf extra)

    order = commits(branch)
    files = recorded(machine)
    shown = [c for c in order if c in files]
    values: dict[str, list] = {k: [] for k in PLOTTED}
    for c in shown:
        res = Results.load(str(files[c]))
        keys = list(res.get_all_result_keys())
        for name in PLOTTED:
            full = next((k for k in keys if k.endswith("." + name)), None)
            v = None if full is None else res.get_result_value(full, res.get_result_params(full))
            if isinstance(v, list):
                v = v[0] if v else None
            values[name].append(v if isinstance(v, (int, float)) else None)
    return shown, values


def plot(machine: str, branch: str, out: Path) -> Path:
    import matplotlib  # lazy: only the plot needs it (0.5 s CPU with pyplot, measured)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown, values = series(machine, branch)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = list(range(len(shown)))
    for name, label in PLOTTED.items():
        pts = [(i, v) for i, v in zip(x, values[name]) if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xticklabels([c[:7] for c in shown], rotation=70, fontsize=7)
    ax.set_ylabel("ratio (one process, median of interleaved repeats)")
    ax.set_xlabel("commit (oldest left) touching algorithms/ or benchmark/")
    ax.set_title(f"fedrepro asv history on {machine} (1 torch thread)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmark.perf.asv_history", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record the commits that have no result for this machine")
    r.add_argument("--branch", default="HEAD")
    r.add_argument("--machine", default=DEFAULT_MACHINE)
    r.add_argument("--limit", type=int, help="only the newest N missing commits")
    r.add_argument("--sample", type=int, help="only N of the missing commits, evenly spaced over the history "
                   "(the oldest and the newest included): a coarse history first, filled in by later calls")
    r.add_argument("--bench", help="only benchmarks matching this regular expression")
    r.add_argument("--dry-run", action="store_true", help="list the commits that would be recorded")
    g = sub.add_parser("plot", help="plot the ratio benchmarks over the recorded commits")
    g.add_argument("--branch", default="HEAD")
    g.add_argument("--machine", default=DEFAULT_MACHINE)
    g.add_argument("--out", default=str(ROOT / "results" / "perf" / "asv-history.png"))
    a = p.parse_args(argv)
    if a.cmd == "record":
        return record(a.branch, a.machine, a.limit, a.dry_run, a.bench, a.sample)
    print(plot(a.machine, a.branch, Path(a.out)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
