"""The fault table: real commands (subprocesses) on bad input, damaged results and real signals.

Every row runs ``python -m benchmark.cli ...`` beside a results folder that already holds finished records,
and asserts the exit code, the message, and that no finished record was lost. Then: a parent killed by
SIGKILL takes its process workers with it and nothing is written after; a suite killed at 5 random moments
(local and process backends) resumes to results identical to an uninterrupted run.
"""
from __future__ import annotations

import random
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from benchmark.campaign import runner, suite as campaign_suite
from benchmark.runs import store
from tests.faults import (alive, cmdline, descendants, fedrepro, metrics, popen_fedrepro,
                          read_only_dir_fixture, record_files, wait_gone, write_tiny_suite)  # noqa: F401

VERSION = runner.code_version()["package"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny suite and a results root where all its cells are finished (run once per test worker)."""
    base = tmp_path_factory.mktemp("finished")
    suite = write_tiny_suite(base)
    counts = runner.run_suite(campaign_suite.load_suite(str(suite)), results_root=str(base / "results"), progress=False)
    assert counts["ok"] == 4
    return suite, base / "results"


@dataclass
class Ctx:
    """One row's world: its own copy of the finished results, and the paths a row may use."""

    tmp: Path
    suite: Path
    results: Path
    data: Path = None
    out: Path = None
    damaged: str | None = None
    before: dict = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.results / "tiny" / VERSION


def _damage(how: Callable[[str], str]):
    def setup(c: Ctx):
        name = sorted(c.before)[1]
        p = c.folder / name
        p.write_text(how(p.read_text()))
        c.damaged = name
    return setup


def _idx_corrupt(c: Ctx):
    from tests.test_datasets import make_idx

    raw = c.data / "MNIST" / "raw"
    make_idx(raw)
    p = raw / "train-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-100])


@dataclass
class Row:
    what: str
    argv: Callable[[Ctx], list]
    code: int
    message: str  # a regex the stderr must match
    setup: Callable[[Ctx], None] | None = None
    check: Callable[[Ctx, object], None] | None = None
    healed: bool = False  # the damaged record is moved aside and its cell run again


def _healed(c: Ctx, out) -> None:
    moved = list(c.folder.glob(f"{c.damaged}.corrupt-*"))
    assert len(moved) == 1, "the damaged record is kept beside, renamed"
    assert store.load_record(c.folder / c.damaged)  # its cell ran again: a valid record
    assert c.damaged in out.stderr


def _report_skips(c: Ctx, out) -> None:
    assert (c.folder / c.damaged).exists() and not list(c.folder.glob("*.corrupt-*"))  # report touches nothing
    assert "1 of 4 cells have no record yet" in (c.folder / "leaderboard.md").read_text()


def _diverged(c: Ctx, out) -> None:
    recs = store.read_records(c.out)
    assert len(recs) == 1 and recs[0]["status"] == "diverged"
    assert "divergence_factor 100" in recs[0]["message"] and recs[0]["config"]["divergence_factor"] == 100


SUITE_RUN = ["run", "--no-progress", "--suite"]
ROWS = [
    # the table
    Row("record truncated, then report", lambda c: ["report", "--suite", c.suite, "--results", c.results], 0,
        r"unreadable run record.*not valid JSON", _damage(lambda t: t[: len(t) // 3]), _report_skips),
    Row("record truncated, then resume", lambda c: SUITE_RUN + [c.suite, "--results", c.results], 0,
        r"moved aside, and their cells will run again.*not valid JSON", _damage(lambda t: t[:-50]), _healed, True),
    Row("record edited, then resume", lambda c: SUITE_RUN + [c.suite, "--results", c.results], 0,
        r"checksum mismatch", _damage(lambda t: re.sub(r'"test_loss": [0-9.]+', '"test_loss": 0.001', t, count=1)),
        _healed, True),
    Row("record replaced by other JSON, then resume", lambda c: SUITE_RUN + [c.suite, "--results", c.results], 0,
        r"not a run record", _damage(lambda t: '{"hello": 1}'), _healed, True),
    Row("--out a read-only folder", lambda c: ["run", "--rounds", "2", "--out", c.tmp / "read_only"], 2,
        r"--out .*read_only is not writable"),
    Row("--out an existing file", lambda c: ["run", "--rounds", "2", "--out", c.suite], 2,
        r"--out .*tiny.toml exists and is not a folder"),
    Row("--results read-only", lambda c: SUITE_RUN + [c.suite, "--results", c.tmp / "read_only"], 2,
        r"results folder .*read_only/tiny/.* is not writable"),
    Row("--jobs 0", lambda c: SUITE_RUN + [c.suite, "--results", c.results, "--backend", "process", "--jobs", "0"],
        2, r"--jobs: must be an integer >= 1 or 'auto', got '0'"),
    Row("--jobs -1", lambda c: SUITE_RUN + [c.suite, "--results", c.results, "--backend", "process", "--jobs=-1"],
        2, r"--jobs: must be an integer >= 1 or 'auto', got '-1'"),
    Row("--jobs two", lambda c: SUITE_RUN + [c.suite, "--results", c.results, "--jobs", "two"], 2, r"--jobs"),
    Row("a corrupt MNIST idx file", lambda c: ["run", "--dataset", "mnist", "--data-root", c.data, "--rounds", "1",
                                               "--out", c.folder], 2,
        r"mnist: .*MNIST/raw/train-images-idx3-ubyte is not a valid IDX file.*delete it and load again with "
        r"`--download`", _idx_corrupt),
    Row("--arg mu=abc", lambda c: ["run", "--algorithm", "fedprox", "--arg", "mu=abc", "--out", c.folder], 2,
        r"fedprox: mu must be >= 0 and finite, got 'abc'"),
    Row("logreg at lr = 1e6", lambda c: ["run", "--lr", "1e6", "--rounds", "3", "--out", c.out], 1,
        r"diverged: training loss .* exceeds divergence_factor 100 x the initial training loss", None, _diverged),
    # earlier bad inputs
    Row("unknown algorithm", lambda c: ["run", "--algorithm", "fedavgx", "--out", c.folder], 2,
        r"unknown algorithm 'fedavgx'\. Did you mean fedavg"),
    Row("unknown dataset", lambda c: ["run", "--dataset", "cifar", "--out", c.folder], 2,
        r"unknown dataset 'cifar'\. Did you mean 'cifar10'"),
    Row("unknown suite", lambda c: ["run", "--suite", "smokey", "--results", c.results], 2, r"unknown suite 'smokey'"),
    Row("unknown partition", lambda c: ["run", "--partition", "foo:1", "--out", c.folder], 2,
        r"unknown partition kind 'foo'"),
    Row("invalid partition parameter", lambda c: ["run", "--partition", "dirichlet:-1", "--out", c.folder], 2,
        r"beta"),
    Row("unknown model", lambda c: ["run", "--model", "resnet9000", "--rounds", "1", "--out", c.folder], 2,
        r"unknown model 'resnet9000'"),
    Row("unknown hyperparameter", lambda c: ["run", "--algorithm", "fedprox", "--arg", "nu=1", "--out", c.folder], 2,
        r"unknown algorithm_args \['nu'\]; valid: \['eta_g', 'mu'"),
    Row("invalid hyperparameter", lambda c: ["run", "--algorithm", "fedprox", "--arg", "mu=-1", "--out", c.folder],
        2, r"fedprox: mu must be >= 0 and finite, got -1"),
    Row("--arg without =", lambda c: ["run", "--arg", "mu", "--out", c.folder], 2, r"expects KEY=VALUE, got 'mu'"),
    Row("missing data files", lambda c: ["run", "--dataset", "mnist", "--data-root", c.data, "--out", c.folder], 2,
        r"mnist not found: .*Get them with `--download`"),
    Row("unknown dataset option", lambda c: ["run", "--dataset-args", "foo=1", "--out", c.folder], 2,
        r"unknown option\(s\) for dataset 'digits': foo"),
    Row("negative lr", lambda c: ["run", "--lr", "-1", "--out", c.folder], 2, r"lr must be a positive number"),
    Row("zero rounds", lambda c: ["run", "--rounds", "0", "--out", c.folder], 2, r"rounds must be >= 1"),
    Row("more clients per round than clients", lambda c: ["run", "--clients-per-round", "20", "--out", c.folder], 2,
        r"clients_per_round=20 exceeds the number of clients \(10\)"),
    Row("bad divergence factor", lambda c: ["run", "--divergence-factor", "0.5", "--out", c.folder], 2,
        r"divergence_factor must be a number > 1"),
    Row("unknown device, suite", lambda c: SUITE_RUN + [c.suite, "--results", c.results, "--device", "tpu"], 2,
        r"device must be auto, cpu or cuda, got 'tpu'"),
    Row("unknown backend", lambda c: SUITE_RUN + [c.suite, "--results", c.results, "--backend", "spark"], 2,
        r"invalid choice: 'spark'"),
    Row("a suite file that is not TOML", lambda c: SUITE_RUN + [c.tmp / "broken.toml", "--results", c.results], 2,
        r"broken.toml: invalid TOML", lambda c: (c.tmp / "broken.toml").write_text("[matrix\nseed = [0]")),
    Row("report before any run", lambda c: ["report", "--suite", "smoke", "--results", c.results], 2,
        r"no results in .*smoke.*run `fedrepro run --suite smoke` first"),
]


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
def test_fault_table(row: Row, finished, tmp_path, request):
    suite, results = finished
    c = Ctx(tmp_path, suite, tmp_path / "results", tmp_path / "data", tmp_path / "out")
    shutil.copytree(results, c.results)
    c.data.mkdir()
    c.before = record_files(c.folder)
    assert len(c.before) == 4
    if "read-only" in row.what:
        request.getfixturevalue("read_only_dir")
    if row.setup:
        row.setup(c)
    out = fedrepro(*row.argv(c))
    assert out.returncode == row.code, out.stderr[-3000:]
    assert re.search(row.message, out.stderr, re.S), out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    # no finished record is lost: every record but a damaged one is still there, byte for byte
    after = record_files(c.folder)
    for name, blob in c.before.items():
        if name != c.damaged:
            assert after.get(name) == blob, f"finished record {name} lost or changed"
    if row.healed:  # the cell of the damaged record ran again, with the same numbers as before
        assert metrics(c.folder) == {h: m for h, m in metrics(results / "tiny" / VERSION).items()}
    if row.check:
        row.check(c, out)


# --------------------------------------------------------------------------------------------------- signals


def _wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.slow
def test_process_workers_die_with_their_parent_and_write_nothing_after(tmp_path):
    """kill -9 of `fedrepro run --backend process --jobs 2` mid-suite: its workers (and multiprocessing's
    resource tracker) end within seconds, and no record appears after the kill."""
    suite = write_tiny_suite(tmp_path, rounds=400, seeds=(0, 1, 2))
    folder = tmp_path / "results" / "tiny" / VERSION
    proc = popen_fedrepro("run", "--suite", suite, "--results", tmp_path / "results", "--backend", "process",
                          "--jobs", "2", "--no-progress")
    try:
        def workers():  # two spawned workers (and multiprocessing's resource tracker)
            tree = descendants(proc.pid)
            return tree if sum("spawn_main" in cmdline(p) for p in tree) == 2 else None

        kids = _wait_for(workers, 120, "two workers")
        time.sleep(4)  # they train (400 rounds: far from finishing)
        assert proc.poll() is None
        before = set(record_files(folder)) if folder.exists() else set()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        left = wait_gone(kids, timeout=10)
        assert not left, f"workers {left} still running 10 s after their parent was killed"
        time.sleep(1)
        after = set(record_files(folder)) if folder.exists() else set()
        assert after == before, "a record was written after the parent was gone"
        assert not list(folder.glob(".*.tmp")) or all(not alive(int(p.name.split(".")[-3]))
                                                      for p in folder.glob(".*.tmp"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The kill test's suite run once without interruption, and how long that took."""
    base = tmp_path_factory.mktemp("uninterrupted")
    suite = write_tiny_suite(base, name="killme", rounds=12, seeds=(0, 1))
    t0 = time.monotonic()
    out = fedrepro("run", "--suite", suite, "--results", base / "results", "--no-progress")
    assert out.returncode == 0, out.stderr
    return suite, metrics(base / "results" / "killme" / VERSION), time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "process"])
def test_kill_at_five_random_moments_then_resume_equals_uninterrupted(backend, uninterrupted, tmp_path):
    suite, clean, duration = uninterrupted
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    moments = sorted(rng.uniform(0.2, 1.0) * duration for _ in range(5))
    results = tmp_path / "results"
    folder = results / "killme" / VERSION
    args = ["run", "--suite", suite, "--results", results, "--backend", backend, "--no-progress"]
    if backend == "process":
        args += ["--jobs", "2"]
    progress = []
    for at in moments:
        proc = popen_fedrepro(*args)
        time.sleep(at)
        kids = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not wait_gone(kids, 10), f"seed {seed}: workers outlived their parent"
        for p in folder.glob("*.json"):
            store.load_record(p)  # never a partial or damaged record
        progress.append(len(list(folder.glob("*.json"))))
    out = fedrepro(*args)
    assert out.returncode == 0, out.stderr
    assert metrics(folder) == clean, f"seed {seed}, kills at {moments} s, records after each kill {progress}"
    assert not list(folder.glob(".*.tmp")) and not list(folder.glob("*.corrupt-*"))
