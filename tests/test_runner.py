"""Suites, the resumable runner, the atomic store and the reports."""
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.reports import leaderboard as report
from benchmark.campaign import runner, suite as campaign_suite
from benchmark.runs import store

SUITE = """
name = "{name}"
description = "test suite"
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 5
rounds = 2
batch_size = 64
eval_every = 1
[matrix]
algorithm = ["fedavg", "fedprox"]
partition = ["iid", "labelcnt:2"]
seed = [0, 1]
[[override]]
match = {{ algorithm = "fedprox" }}
set = {{ algorithm_args = {{ mu = 0.1 }} }}
[[reference]]
match = {{ algorithm = "fedavg", partition = "iid" }}
value = 90.0
std = 1.0
source = "made up for the test"
"""


def write_suite(tmp_path, name="mini", text=SUITE, **fmt):
    p = tmp_path / f"{name}.toml"
    p.write_text(text.format(name=name, **fmt))
    return p


def metrics(folder):
    return {r["config_hash"]: (r["status"], [(h["test_loss"], h["bits_up"]) for h in r["history"]])
            for r in store.read_records(folder)}


@pytest.mark.parametrize("name", campaign_suite.suite_names())
def test_every_shipped_suite_loads(name):
    s = campaign_suite.load_suite(name)
    assert s.cells and s.name == name


def test_suite_expands_matrix_and_overrides(tmp_path):
    s = campaign_suite.load_suite(str(write_suite(tmp_path)))
    assert len(s.cells) == 8
    prox = [c for c in s.cells if c.experiment.algorithm == "fedprox"]
    assert all(c.experiment.algorithm_args == {"mu": 0.1} for c in prox)
    assert sum(bool(c.references) for c in s.cells) == 2


@pytest.mark.parametrize("bad, msg", [
    ("[defaults]\nlearning_rate = 0.1\n[matrix]\nseed=[0]\n", "learning_rate"),
    ("[matrix]\nalgorithm = ['fedavgx']\n", "unknown algorithm"),
    ("[matrix]\nlr = [-1.0]\n", "lr must be"),
    ("[matrix]\nseed = 3\n", "non-empty list"),
    ("colour = 'red'\n[matrix]\nseed=[0]\n", "colour"),
    ("[matrix]\npartition = ['dirichlet:x']\n", "dirichlet"),
])
def test_invalid_suites_name_file_and_key(tmp_path, bad, msg):
    p = tmp_path / "bad.toml"
    p.write_text(bad)
    with pytest.raises(campaign_suite.SuiteError) as e:
        campaign_suite.load_suite(str(p))
    assert "bad.toml" in str(e.value) and msg in str(e.value)


def test_unknown_suite_name():
    with pytest.raises(campaign_suite.SuiteError, match="unknown suite"):
        campaign_suite.load_suite("smokey")


def test_run_then_resume_skips_finished(tmp_path):
    s = campaign_suite.load_suite(str(write_suite(tmp_path)))
    counts = runner.run_suite(s, results_root=str(tmp_path / "res"), progress=False)
    assert counts["ok"] == 8 and counts["skipped"] == 0
    folder = runner.results_dir(tmp_path / "res", "mini")
    assert len(list(folder.glob("*.json"))) == 8
    again = runner.run_suite(s, results_root=str(tmp_path / "res"), progress=False)
    assert again["skipped"] == 8 and again["ok"] == 0


def test_failing_cell_is_recorded_and_suite_goes_on(tmp_path):
    text = SUITE.replace('dataset = "digits"', 'dataset = "digits"\ndata_root = "{root}"').replace(
        'partition = ["iid", "labelcnt:2"]', 'partition = ["iid"]\ndataset = ["digits", "mnist"]')
    s = campaign_suite.load_suite(str(write_suite(tmp_path, text=text, root=str(tmp_path / "nodata"))))
    counts = runner.run_suite(s, results_root=str(tmp_path / "res"), progress=False)
    assert counts["failed"] == 4 and counts["ok"] == 4
    failed = [r for r in store.read_records(runner.results_dir(tmp_path / "res", "mini")) if r["status"] == "failed"]
    assert all("FileNotFoundError" in r["message"] for r in failed)
    assert all(r["config"]["dataset"] == "mnist" for r in failed)


def _stop_mid_suite(tmp_path, cmd, sig, at_least):
    """Start ``cmd`` (a suite of 8 cells) into tmp_path/stopped, send ``sig`` once ``at_least`` records exist,
    check that it landed mid-suite and left no partial record: (the process, its stderr, the records' folder)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    folder = runner.results_dir(tmp_path / "stopped", "mini")
    proc = subprocess.Popen(cmd + ["--results", str(tmp_path / "stopped")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and len(list(folder.glob("*.json"))) < at_least:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert at_least <= len(list(folder.glob("*.json"))) < 8, "the signal should land mid-suite"
    for p in folder.glob("*.json"):
        json.loads(p.read_text())  # no partial record
    return proc, err, folder


def _rerun_equals_uninterrupted(tmp_path, cmd, folder):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    subprocess.run(cmd + ["--results", str(tmp_path / "stopped")], env=env, check=True, capture_output=True)
    subprocess.run(cmd + ["--results", str(tmp_path / "clean")], env=env, check=True, capture_output=True)
    assert metrics(folder) == metrics(runner.results_dir(tmp_path / "clean", "mini"))
    assert not list(folder.glob(".*.tmp"))


def test_sigkill_then_rerun_equals_uninterrupted(tmp_path):
    suite = write_suite(tmp_path)
    # one cell at a time (--group-runs 1): a batched job writes its 8 records at once, leaving no moment to kill
    # mid-suite (the batched case has its own test: test_batched.py::test_kill_9_in_a_grouped_suite_then_resume)
    cmd = [sys.executable, "-m", "benchmark.cli", "run", "--suite", str(suite), "--no-progress", "--group-runs", "1"]
    _, _, folder = _stop_mid_suite(tmp_path, cmd, signal.SIGKILL, 2)
    _rerun_equals_uninterrupted(tmp_path, cmd, folder)


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX signals")
def test_sigterm_stops_workers_keeps_records_and_says_how_to_resume(tmp_path):
    """``kill`` (a scheduler's stop, ``timeout``) ends a suite as Ctrl-C does: exit 143, the resume hint, the
    process workers stopped, every finished record kept; the same command then finishes the suite to the
    uninterrupted one's numbers. (Before benchmark.cli.errors.stop_signals_as_interrupt, SIGTERM killed the
    parent outright: exit -15, no message, leaked semaphores.)"""
    suite = write_suite(tmp_path, text=SUITE.replace("rounds = 2", "rounds = 40"))
    cmd = [sys.executable, "-m", "benchmark.cli", "run", "--suite", str(suite), "--no-progress", "--group-runs", "1",
           "--backend", "process", "--jobs", "2"]
    proc, err, folder = _stop_mid_suite(tmp_path, cmd, signal.SIGTERM, 1)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err and "leaked" not in err, err
    _rerun_equals_uninterrupted(tmp_path, cmd, folder)


def test_process_backend_equals_local(tmp_path):
    s = campaign_suite.load_suite(str(write_suite(tmp_path)))
    runner.run_suite(s, backend="local", results_root=str(tmp_path / "a"), progress=False)
    runner.run_suite(s, backend="process", jobs=2, results_root=str(tmp_path / "b"), progress=False)
    assert metrics(runner.results_dir(tmp_path / "a", "mini")) == metrics(runner.results_dir(tmp_path / "b", "mini"))


def test_ray_backend_equals_local(tmp_path):
    pytest.importorskip("ray", reason="Ray is installed with the test extras in CI")
    text = SUITE.replace('partition = ["iid", "labelcnt:2"]', 'partition = ["iid"]')
    s = campaign_suite.load_suite(str(write_suite(tmp_path, text=text)))
    runner.run_suite(s, backend="local", results_root=str(tmp_path / "a"), progress=False)
    runner.run_suite(s, backend="ray", results_root=str(tmp_path / "b"), progress=False)
    assert metrics(runner.results_dir(tmp_path / "a", "mini")) == metrics(runner.results_dir(tmp_path / "b", "mini"))


def _writer(args):
    folder, i = args
    for k in range(20):
        store.write_record(folder, {"config_hash": f"{i:08x}{k:08x}", "payload": "x" * 20000, "status": "ok",
                                    "config": {}, "history": [], "final": {}})


def test_many_writers_never_lose_or_mix_records(tmp_path):
    with mp.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), i) for i in range(8)])
    recs = list(store.read_records(tmp_path))
    assert len(recs) == 160
    assert all(len(r["payload"]) == 20000 for r in recs)
    assert not list(Path(tmp_path).glob(".*.tmp"))


def test_stale_temp_of_dead_writer_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = tmp_path / f".abc.json.{pid}.xyz12345.tmp"
    stale.write_text("{partial")
    live = tmp_path / f".def.json.{os.getpid()}.abc12345.tmp"
    live.write_text("{partial")
    assert store.clean_stale_temps(tmp_path) == 1
    assert not stale.exists() and live.exists()


def test_report_writes_leaderboard_csv_and_plots(tmp_path):
    s = campaign_suite.load_suite(str(write_suite(tmp_path)))
    runner.run_suite(s, results_root=str(tmp_path / "res"), progress=False)
    paths = report.write_report(s, runner.results_dir(tmp_path / "res", "mini"))
    md = paths["markdown"].read_text()
    assert "fedprox(mu=0.1)" in md and "paper 90" in md and "**" in md
    assert "iid" in md and "labelcnt:2" in md
    lines = paths["csv"].read_text().strip().splitlines()
    assert len(lines) == 9
    assert all(p.exists() and p.stat().st_size > 1000 for p in paths["plots"])
