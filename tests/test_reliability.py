"""Divergence beyond NaN, threads that fit the machine, jobs, and records that survive a failed write."""
import csv
import errno
import json
import os
from pathlib import Path

import pytest

from benchmark import Experiment, run
from benchmark.sim import engine
from benchmark.runs import experiment, plan, store
from benchmark.campaign import runner, suite as campaign_suite
from benchmark.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """`fedrepro run` sets torch's threads; give the next test in this process what it had."""
    import torch

    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------------------------------------- divergence


def test_loss_growth_rule():
    assert engine.loss_growth(231.0, 2.3, 100.0).startswith("training loss 231 exceeds divergence_factor 100")
    assert engine.loss_growth(229.0, 2.3, 100.0) is None
    assert engine.loss_growth(1e9, 2.3, None) is None  # off
    assert engine.loss_growth(1e9, 0.0, 100.0) is None  # no positive reference


def test_huge_lr_is_diverged_not_ok_and_the_rule_is_in_the_record():
    exp = Experiment(lr=1e6, rounds=3, device="cpu")
    r = run(exp)
    assert r.status == "diverged" and "divergence_factor 100 x the initial training loss" in r.message
    assert r.config["divergence_factor"] == 100.0
    assert len(r.history) == 1  # stopped at the first evaluation past the factor
    off = run(Experiment(lr=1e6, rounds=3, device="cpu", divergence_factor=None))
    assert off.status == "ok" and off.final["train_loss"] > 1e3  # finite: only the factor flags it


def test_sane_run_is_not_flagged():
    r = run(Experiment(rounds=3, device="cpu", divergence_factor=1.5))
    assert r.status == "ok"


def test_divergence_factor_keeps_committed_cell_hashes():
    """The field joined the config after results were published: at its default it is left out of the hash, so
    every committed leaderboard still names its cells; another value is a different cell."""
    for name in ("smoke", "fedbat_reduced"):
        committed = {row["config_hash"] for row in csv.DictReader(open(ROOT / "results" / name / "0.1.0" / "runs.csv"))}
        assert {c.config_hash for c in campaign_suite.load_suite(name).cells} == committed
    e = Experiment()
    assert e.config()["divergence_factor"] == experiment.DIVERGENCE_FACTOR
    assert Experiment(divergence_factor=10.0).config_hash() != e.config_hash()
    assert Experiment(divergence_factor=None).config_hash() != e.config_hash()


@pytest.mark.parametrize("bad", [1.0, 0.5, -3, float("inf"), "big"])
def test_invalid_divergence_factor(bad):
    with pytest.raises(ValueError, match="divergence_factor must be a number > 1"):
        Experiment(divergence_factor=bad).validate()


# ----------------------------------------------------------------------------------------------- threads


@pytest.mark.parametrize("cpus, load, workers, n", [
    (2, 0.1, 1, 2), (2, 1.2, 1, 1), (2, 9.5, 1, 1), (16, 3.0, 1, 13), (16, 0.0, 4, 4), (16, 0.0, 16, 1),
    (8, 7.9, 2, 1),
])
def test_threads_come_from_free_cores(cpus, load, workers, n):
    t = plan.choose_threads(workers, cpus=cpus, load=load)
    assert t.n == n and t.n * workers <= max(cpus, workers)
    assert f"of {cpus} CPUs" in t.rule


def test_threads_without_a_load_average_use_every_cpu(monkeypatch):
    monkeypatch.setattr(plan, "machine_load", lambda: None)
    assert plan.choose_threads(1, cpus=4).n == 4 and plan.load_warning(cpus=4) is None


def test_run_states_its_threads():
    r = run(Experiment(rounds=1, device="cpu"), threads=plan.Threads(1, "1 = test"))
    assert r.environment["threads"] == 1 and r.environment["threads_rule"] == "1 = test"


def test_process_plan_never_more_workers_than_cpus(monkeypatch):
    monkeypatch.setattr(runner, "usable_cpus", lambda: 2)
    monkeypatch.setattr(plan, "machine_load", lambda: 0.0)
    workers, threads, note = runner.process_plan(8, cells=10)
    assert workers == 2 and threads.n == 1 and "more than the 2 CPUs" in note
    assert runner.process_plan("auto", cells=10)[:2] == (2, plan.Threads(1, threads.rule))
    assert runner.process_plan(2, cells=1)[0] == 1  # no idle workers
    assert runner.process_plan(1, cells=5)[1].n == 2  # one worker gets both free cores


@pytest.mark.parametrize("jobs", [0, -1, 1.5, "two", True])
def test_check_jobs(jobs):
    with pytest.raises(campaign_suite.SuiteError, match="jobs must be an integer >= 1 or 'auto'"):
        runner.check_jobs(jobs)


def test_run_warns_when_the_machine_is_loaded(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(plan, "machine_load", lambda: 7.5)
    monkeypatch.setattr(plan, "usable_cpus", lambda: 2)
    assert main(["run", "--rounds", "1", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "warning: load average 7.5 on 2 CPUs" in capsys.readouterr().err
    rec = store.read_records(tmp_path)[0]
    assert rec["environment"]["threads"] == 1 and "(1-min load 7.5)" in rec["environment"]["threads_rule"]
    monkeypatch.setattr(plan, "machine_load", lambda: 0.5)
    monkeypatch.chdir(tmp_path)  # the record goes to ./runs/single/<version>/
    assert main(["run", "--rounds", "1", "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- failed writes


def _disk_full_in(folder, code=errno.ENOSPC):
    real = store.write_record

    def write(f, rec, *a, **kw):
        if Path(f).resolve() == Path(folder).resolve():
            raise OSError(code, os.strerror(code))
        return real(f, rec, *a, **kw)
    return write


def test_run_whose_record_cannot_be_written_is_rescued(monkeypatch, capsys, tmp_path):
    out, rescue = tmp_path / "out", tmp_path / "rescue"
    monkeypatch.setenv(store.RESCUE_ENV, str(rescue))
    monkeypatch.setattr(store, "write_record", _disk_full_in(out))
    assert main(["run", "--rounds", "2", "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    saved = list(rescue.glob("*.json"))
    assert len(saved) == 1 and f"it is saved in {saved[0]}" in err and "No space left" in err
    assert store.load_record(saved[0])["status"] == "ok"


def test_suite_cell_whose_record_cannot_be_written_is_rescued_and_the_suite_goes_on(monkeypatch, capsys, tmp_path):
    from tests.faults import write_tiny_suite

    suite = campaign_suite.load_suite(str(write_tiny_suite(tmp_path, rounds=1, seeds=(0,))))
    folder = runner.results_dir(tmp_path / "res", "tiny")
    monkeypatch.setenv(store.RESCUE_ENV, str(tmp_path / "rescue"))
    monkeypatch.setattr(store, "write_record", _disk_full_in(folder, errno.EROFS))  # a full disk stops the suite
    counts = runner.run_suite(suite, results_root=str(tmp_path / "res"), progress=False)
    assert counts["ok"] == 2
    assert len(list((tmp_path / "rescue").glob("*.json"))) == 2 and not list(folder.glob("*.json"))
    assert capsys.readouterr().err.count("it is saved in") == 2


def test_cli_record_is_json_with_checksum(tmp_path, capsys):
    assert main(["run", "--rounds", "1", "--no-progress", "--out", str(tmp_path)]) == 0
    p = next(tmp_path.glob("*.json"))
    rec = json.loads(p.read_text())
    assert rec["checksum"] == store.checksum(rec)
