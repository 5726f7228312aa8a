"""Flags shared by the commands: every ``Experiment`` field as a flag, and their parsing into plain values."""
from __future__ import annotations

import argparse
import dataclasses
import json


def parse_kv(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        for part in item.split(","):
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"{flag} expects KEY=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = json.loads(v)
            except json.JSONDecodeError:
                out[k.strip()] = v
    return out


def int_or_none(s: str):
    if s.lower() in ("none", "all", "full"):
        return None
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {s!r}") from None


def jobs(s: str):
    """``--jobs``: an integer >= 1 or "auto"."""
    if s.lower() == "auto":
        return "auto"
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or 'auto', got {s!r}")
    return n


def factor_or_none(s: str):
    if s.lower() in ("none", "off"):
        return "none"  # not None: None means "flag not given"
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {s!r}") from None


RUNS_DIR = "runs"  # where user runs write by default: git-ignored in a checkout (.gitignore: runs/)


def results_flags(p: argparse.ArgumentParser, what: str) -> None:
    """``--results DIR`` and ``--publish``: where ``what`` goes. By default a user's results go to ./runs/
    (git-ignored), never into the committed results/ of the repository; ``--publish`` regenerates a committed
    report there."""
    p.add_argument("--results", metavar="DIR", help=f"results root: {what} (default ./{RUNS_DIR}, git-ignored in a "
                   "checkout); checked writable before any work")
    p.add_argument("--publish", action="store_true",
                   help="write into the repository's committed results/ folder instead (regenerates a committed "
                        "report; needs a source checkout); the same as --results <checkout>/results")


def results_root(a) -> str:
    """The results root the flags of ``results_flags`` ask for."""
    if not getattr(a, "publish", False):
        return a.results or RUNS_DIR
    from benchmark.reports.leaderboard import committed_results

    root = committed_results()
    if a.results:
        raise ValueError("--publish writes into the committed results/ folder: give --publish or --results, not both")
    if root is None:
        raise ValueError("--publish needs a source checkout of fedrepro (its committed results/ folder was not found "
                         "beside the package); give --results DIR instead")
    return str(root)


def experiment_flags(p: argparse.ArgumentParser) -> None:
    from benchmark.runs.experiment import Experiment

    d = Experiment()
    g = p.add_argument_group("experiment (every Experiment field; unset flags keep the defaults)")
    g.add_argument("--algorithm", help=f"registered algorithm (default {d.algorithm}); see `fedrepro list`")
    g.add_argument("--dataset", help=f"dataset name (default {d.dataset})")
    g.add_argument("--partition", help="auto | natural | iid | dirichlet:<beta> | labelcnt:<k> | shards:<s> | "
                                       "quantity:<beta> | gradma_dirichlet:<omega> (default auto: the dataset's "
                                       "natural clients if it has them, else iid)")
    g.add_argument("--num-clients", type=int_or_none, help=f"number of clients N (default {d.num_clients})")
    g.add_argument("--clients-per-round", type=int_or_none,
                   help="clients sampled per round (default: all)")
    g.add_argument("--rounds", type=int, help=f"communication rounds (default {d.rounds})")
    g.add_argument("--local-epochs", type=int, help=f"local epochs (default {d.local_epochs})")
    g.add_argument("--local-steps", type=int, help="local steps (replaces --local-epochs)")
    g.add_argument("--batch-size", type=int_or_none, help=f"local batch size, or 'full' (default {d.batch_size})")
    g.add_argument("--lr", type=float, help=f"local learning rate (default {d.lr})")
    g.add_argument("--momentum", type=float, help="local SGD momentum (default 0)")
    g.add_argument("--weight-decay", type=float, help="local weight decay (default 0)")
    g.add_argument("--optimizer", choices=["sgd", "adam"], help="local optimizer (default sgd)")
    g.add_argument("--lr-decay", type=float, help="multiplicative learning-rate decay per round (default 1)")
    g.add_argument("--seed", type=int, help="seed (default 0); several runs: --seeds")
    g.add_argument("--seeds", type=int, nargs="+", help="run once per seed")
    g.add_argument("--model", help=f"model name (default {d.model}); see `fedrepro list`")
    g.add_argument("--algorithm-args", "--arg", dest="algorithm_args", action="append", metavar="K=V",
                   help="algorithm hyperparameter, repeatable (e.g. --arg mu=0.01)")
    g.add_argument("--dataset-args", action="append", metavar="K=V", help="dataset option, repeatable")
    g.add_argument("--model-args", action="append", metavar="K=V", help="model option, repeatable")
    g.add_argument("--eval-every", type=int, help="evaluate every k rounds (default 1)")
    g.add_argument("--eval-train-samples", type=int_or_none,
                   help="training samples used for the training objective (default 10000; 'all')")
    g.add_argument("--divergence-factor", type=factor_or_none,
                   help=f"record a run as diverged when its training loss exceeds this factor times the initial "
                        f"model's (default {d.divergence_factor:g}; 'none': only NaN/inf)")
    g.add_argument("--executor", choices=["auto", "sequential", "vectorized"],
                   help="how local updates run (default auto: the faster one for this model, batch and device, "
                        "by the rule of benchmark/runs/cost.py; the run record says which and why)")
    g.add_argument("--compile", nargs="?", const=True, default=None, choices=["graph"], metavar="graph",
                   help="torch.compile the vectorized local update (results equal to float tolerance; the record "
                        "gives the compile time; the sequential executor is never compiled); `--compile graph`: "
                        "compiled whole and replayed as a CUDA graph on a GPU (on a CPU the same code as --compile)")
    g.add_argument("--device", help="auto | cpu | cuda (default auto)")
    g.add_argument("--data-root", help="folder with real datasets (default $FEDREPRO_DATA or ~/.cache/fedrepro/data)")
    g.add_argument("--download", action="store_true", default=None, help="download real datasets if missing")


def experiments_from_args(a) -> tuple[list, bool]:
    """Experiments the flags ask for, and whether any experiment flag was given at all."""
    from benchmark.runs.experiment import DICT_FIELDS, Experiment

    fields = {f.name for f in dataclasses.fields(Experiment)}
    given = {}
    for name in fields:
        v = getattr(a, name, None)
        if v is None:
            continue
        if name in DICT_FIELDS:
            v = parse_kv(v, "--" + name.replace("_", "-"))
        given[name] = v
    if a.local_steps is not None and a.local_epochs is not None:
        raise ValueError(f"--local-steps {a.local_steps} and --local-epochs {a.local_epochs} are both given: "
                         "local steps replace local epochs, give one of them")
    if a.seed is not None and a.seeds is not None:
        raise ValueError(f"--seed {a.seed} and --seeds {' '.join(map(str, a.seeds))} are both given: one run is "
                         "--seed S, several are --seeds S1 S2 ...; give one of them")
    if a.local_steps is not None:
        given["local_epochs"] = None
    if given.get("divergence_factor") == "none":
        given["divergence_factor"] = None
    if a.seeds is not None and len(set(a.seeds)) < len(a.seeds):
        twice = sorted({s for s in a.seeds if a.seeds.count(s) > 1})
        raise ValueError(f"--seeds lists {', '.join(map(str, twice))} more than once: each seed is one run, and the "
                         "same seed twice is the same run")
    seeds = a.seeds or [given.pop("seed", 0)]
    given.pop("seed", None)
    # flags that say how to run (not what) do not turn the offline default into a single run
    any_flag = bool(set(given) - {"device", "executor", "data_root", "download"}) or a.seeds is not None \
        or a.seed is not None
    return [Experiment(seed=s, **given) for s in seeds], any_flag
