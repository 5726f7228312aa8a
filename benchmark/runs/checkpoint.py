"""Checkpoints inside a run: a long run that is stopped resumes at the round it had reached, not at round 0.

Why: on the GPU machines this project is lent, one command may run 10 minutes and a session has 15, while one
FedBAT Table 1 cell at the paper's scale takes 19 minutes on an H100 (26 for a batched group of 5 seeds;
``results/perf/README.md``, issue 25): without checkpoints no paper cell could ever finish there. On a CPU
the same holds for the empirical claims' long runs (GradMA at T = 500), stopped with Ctrl-C.

What is saved (:func:`state`): everything a run carries from round to round (``engine.RunState``): the server
state, the BatchNorm buffers, the client states, the client-sampling generator's state, the history so far,
the next round, the divergence reference (the initial training loss) and the wall time spent. Every other
random choice of a round is derived from (seed, round, client) (``benchmark.sim.engine``: minibatch order,
algorithm noise), so a run resumed at round k has the same history and parameters as one that never stopped,
bit for bit (``tests/test_checkpoint.py``, with a planted defect that forgets the sampling state).

When: after a round, at most every ``every_s`` seconds (``benchmark.runs.plan.Job.checkpoint_every_s``, default
:data:`EVERY_SECONDS`), never after a run's last round nor for a run that diverged (its record follows at
once). The runs of a batched job are saved together, at the same round (one clock per job), and resume
together: the runs of a job advance in lockstep, so a job whose runs' checkpoints are not all at one round
(regrouped differently, or some missing) starts again from round 0, and says so.

Where: ``<results folder>/.checkpoints/<config_hash>.pt`` (git-ignored), written atomically (a stop during a
write leaves the previous checkpoint); the runner removes it once the run's record is written. A checkpoint is
used only by the same cell (config hash) with the same code (``experiment.run_code_version``: package, git
commit and dirty flag, plugins; two edits of a dirty tree cannot be told apart, as in the records); any other
is ignored, and the run starts from round 0, except a checkpoint of an earlier clean commit whose code folders
(``record.CODE_DIRS``, less ``record.NOT_RUN_CODE``) git shows unchanged (a commit of results, reports or
documents between: the same runs, bit for bit). The record of a resumed
run says ``execution.resumed_from_round`` and counts the wall time of every piece.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from algorithms.core import tree_map

from benchmark.runs import record

FORMAT = 1
FOLDER = ".checkpoints"  # inside a results folder
EVERY_SECONDS = 60.0  # at most one save per job per minute: a stop loses at most a minute of work


def path(folder: str | os.PathLike, config_hash: str) -> Path:
    return Path(folder) / f"{config_hash}.pt"


def _own(tree):
    """``tree`` with every tensor in it a compact copy: a batched job's states are views into the job's stacked
    tensors (``unstack_tree``), and ``torch.save`` of a view writes its whole storage (every run's states in each
    run's file: 2.7x the size of a run alone for SCAFFOLD in a group of 3, measured)."""
    return tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, tree)


def state(run, config_hash: str, code: dict) -> dict:
    """What ``run`` (an ``engine.RunState`` after a round) carries into its next round."""
    return {"format": FORMAT, "config_hash": config_hash, "code_version": code, "round": run.round,
            "server": _own(run.server), "buffers": _own(run.buffers), "client_states": _own(run.client_states),
            "sample_rng": run.sample_rng.bit_generator.state if run.sample_rng is not None else None,
            "history": run.history, "initial_train_loss": run.initial_train_loss,
            "elapsed": time.perf_counter() - run.t_start}


def restore(run, st: dict) -> None:
    """Put a saved ``state`` back into a freshly started ``run`` (``engine.start``)."""
    run.server, run.buffers, run.client_states = st["server"], st["buffers"], st["client_states"]
    if st["sample_rng"] is not None:
        run.sample_rng.bit_generator.state = st["sample_rng"]
    run.history, run.round = list(st["history"]), int(st["round"])
    run.initial_train_loss = st["initial_train_loss"]
    run.t_start = time.perf_counter() - float(st["elapsed"])


def write(file: Path, st: dict) -> None:
    """Atomically: a temporary file beside it, then renamed over it."""
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        torch.save(st, tmp)
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)


def read(file: Path, config_hash: str, code: dict, device: torch.device) -> dict | None:
    """The checkpoint in ``file`` if it is this cell's, with this code, readable; else None."""
    if not file.is_file():
        return None
    try:
        st = torch.load(file, map_location=device, weights_only=False)  # our own file: pytrees of any class
    except Exception as e:  # noqa: BLE001 - a damaged checkpoint costs only the rounds it held
        print(f"fedrepro: checkpoint {file} is unreadable ({type(e).__name__}: {e}); the run starts from round 0",
              file=sys.stderr)
        return None
    if not isinstance(st, dict) or st.get("format") != FORMAT or st.get("config_hash") != config_hash:
        return None
    if st.get("code_version") != code:
        if not record.same_run_code(st.get("code_version"), code):
            print(f"fedrepro: checkpoint {file} was written by other code ({st.get('code_version')}); the run "
                  "starts from round 0", file=sys.stderr)
            return None
        print(f"fedrepro: checkpoint {file} was written at commit {st['code_version']['git_commit'][:12]}, whose "
              f"{', '.join(record.CODE_DIRS)} are those of {code['git_commit'][:12]}: resumed", file=sys.stderr)
    return st


def resume(runs: Sequence, hashes: Sequence[str], codes: Callable[[], list[dict]],
           folder: str | os.PathLike) -> list[int]:
    """Restore the runs of one job from their checkpoints when all of them have one at the same round; return
    each run's round to resume at (0: from the start). ``codes()``: each run's code version (asked only when a
    checkpoint exists: it runs git)."""
    if not any(path(folder, h).is_file() for h in hashes):
        return [0] * len(runs)
    found = [read(path(folder, h), h, c, run.device) for run, h, c in zip(runs, hashes, codes())]
    if not any(found):
        return [0] * len(runs)
    rounds = {st["round"] if st else 0 for st in found}
    if len(rounds) > 1:
        print(f"fedrepro: the checkpoints of this batched job's {len(runs)} runs are at rounds "
              f"{sorted(rounds)}, not one round (its runs advance together): it starts again from round 0",
              file=sys.stderr)
        return [0] * len(runs)
    for run, st in zip(runs, found):
        restore(run, st)
    return [st["round"] for st in found]


class Saver:
    """``engine.run_rounds``' ``after_round``: saves the job's unfinished runs together, at most every
    ``every_s`` seconds. A failed write is reported once and ends saving for this job; the runs go on."""

    def __init__(self, folder: str | os.PathLike, runs: Sequence, hashes: Sequence[str],
                 codes: Callable[[], list[dict]], every_s: float = EVERY_SECONDS):
        self.folder, self.every_s, self.last, self.broken = Path(folder), float(every_s), time.perf_counter(), False
        self.runs, self.hashes, self.codes, self.keys = list(runs), list(hashes), codes, None

    def __call__(self, runs: Sequence) -> None:
        now = time.perf_counter()
        if self.broken or now - self.last < self.every_s:
            return
        if self.keys is None:  # the code versions, once, at the first save
            self.keys = {id(r): (h, c) for r, h, c in zip(self.runs, self.hashes, self.codes())}
        for run in runs:
            if run.status != "ok" or run.round >= run.cfg.rounds:
                continue
            h, code = self.keys[id(run)]
            try:
                write(path(self.folder, h), state(run, h, code))
            except OSError as e:
                self.broken = True
                print(f"fedrepro: could not write a checkpoint to {self.folder} ({e}); the runs go on without "
                      "checkpoints (a stop restarts them from round 0)", file=sys.stderr)
                return
        self.last = time.perf_counter()


def saved_round(file: Path) -> int:
    """The round a checkpoint resumes at (``fedrepro status``, the contract check; loads it on the CPU)."""
    return int(torch.load(file, map_location="cpu", weights_only=False)["round"])


def remove(folder: str | os.PathLike, config_hash: str) -> None:
    """A run's checkpoint, once its record is written."""
    path(folder, config_hash).unlink(missing_ok=True)
