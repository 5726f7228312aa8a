"""The `fedrepro` command as a user types it."""
import json
import subprocess
import sys

import pytest

from benchmark.cli import main


def test_plain_run_is_the_smoke_suite(monkeypatch):
    from benchmark.cli import run as cli_run

    seen = {}
    monkeypatch.setattr(cli_run, "main_run_suite", lambda a: seen.setdefault("suite", a.suite) and 0)
    assert main(["run", "--no-progress"]) == 0
    assert seen["suite"] == "smoke"


def test_smoke_suite_runs_and_prints_its_leaderboard(tmp_path, monkeypatch, capsys):
    # the smoke suite itself, shortened to 2 rounds so the test stays fast
    import dataclasses

    from benchmark import runner

    real = runner.load_suite

    def short(name):
        s = real(name)
        for c in s.cells:
            c.experiment = dataclasses.replace(c.experiment, rounds=2, eval_every=1)
            c.config_hash = c.experiment.config_hash()
        return s

    monkeypatch.setattr(runner, "load_suite", short)
    assert main(["run", "--suite", "smoke", "--results", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Leaderboard: smoke" in out and "fedavg" in out and "dirichlet:0.3" in out and "labelcnt:2" in out


def test_single_run_writes_record(tmp_path, capsys):
    rc = main(["run", "--dataset", "digits", "--partition", "labelcnt:2", "--num-clients", "5", "--rounds", "2",
               "--out", str(tmp_path), "--no-progress", "--executor", "sequential"])
    assert rc == 0
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["config"]["partition"] == "labelcnt:2" and len(rec["history"]) == 2


def test_seeds_and_json(capsys):
    assert main(["run", "--rounds", "1", "--seeds", "0", "1", "--json", "--no-progress"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["config"]["seed"] for r in recs] == [0, 1]


@pytest.mark.parametrize("argv, msg", [
    (["run", "--algorithm", "fedavgx"], "unknown algorithm"),
    (["run", "--lr", "-1"], "lr"),
    (["run", "--arg", "eta_g=0"], "eta_g"),
    (["run", "--partition", "dirichlet:-1", "--rounds", "1"], "beta"),
])
def test_bad_input_is_a_clear_error(argv, msg, capsys):
    assert main(argv + ["--no-progress"]) == 2
    assert msg in capsys.readouterr().err


def test_list_and_help():
    out = subprocess.run([sys.executable, "-m", "benchmark.cli", "list"], capture_output=True, text=True)
    assert out.returncode == 0
    for word in ("fedavg", "digits", "dirichlet", "logreg"):
        assert word in out.stdout
    h = subprocess.run([sys.executable, "-m", "benchmark.cli", "run", "--help"], capture_output=True, text=True)
    assert "--clients-per-round" in h.stdout and "--executor" in h.stdout


def test_unknown_flag_exits_nonzero():
    out = subprocess.run([sys.executable, "-m", "benchmark.cli", "run", "--roundz", "3"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "unrecognized" in out.stderr
