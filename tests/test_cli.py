"""The `fedrepro` command as a user types it."""
import json
import signal
import subprocess
import sys

import pytest

from benchmark.cli import main

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_plain_run_is_the_smoke_suite(monkeypatch):
    from benchmark.cli import run as cli_run

    seen = {}
    monkeypatch.setattr(cli_run, "main_run_suite", lambda a: seen.setdefault("suite", a.suite) and 0)
    assert main(["run", "--no-progress"]) == 0
    assert seen["suite"] == "smoke"


def test_smoke_suite_runs_and_prints_its_leaderboard(tmp_path, monkeypatch, capsys):
    # the smoke suite itself, shortened to 2 rounds so the test stays fast
    import dataclasses

    from benchmark.campaign import suite

    real = suite.load_suite

    def short(name):
        s = real(name)
        for c in s.cells:
            c.experiment = dataclasses.replace(c.experiment, rounds=2, eval_every=1)
            c.config_hash = c.experiment.config_hash()
        return s

    monkeypatch.setattr(suite, "load_suite", short)
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


def test_seeds_and_json(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the records go to ./runs/single/<version>/
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


# ------------------------------------------------------------------------------------ outputs that do not surprise


def test_run_help_says_what_plain_run_does(capsys):
    from benchmark.campaign.suite import load_suite

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    s = load_suite("smoke")
    algs = {c.experiment.algorithm for c in s.cells}
    parts = {c.experiment.partition for c in s.cells}
    assert "Plain `fedrepro run`, with no experiment flag, runs the smoke suite" in text
    assert f"{len(s.cells)} cells ({len(algs)} algorithms x {len(parts)} partitions" in text
    assert f"{s.cells[0].experiment.rounds} rounds" in text and "./runs/smoke/<version>/" in text


def test_duplicate_seeds_are_refused(capsys):
    assert main(["run", "--rounds", "1", "--seeds", "0", "0", "--no-progress"]) == 2
    assert "--seeds lists 0 more than once" in capsys.readouterr().err


def test_a_suite_by_path_and_the_default_results_folder(tmp_path, monkeypatch, capsys):
    """--suite takes a path; a user's suite writes under ./runs (git-ignored), never into the committed results/."""
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\n[defaults]\ndataset = "digits"\nmodel = "logreg"\nnum_clients = 4\nrounds = 1\n'
                 '[matrix]\nseed = [0, 1]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--suite", str(p), "--no-progress"]) == 0
    folder = tmp_path / "runs" / "mine"
    assert len(list(folder.glob("*/*.json"))) == 2 and list(folder.glob("*/leaderboard.md"))
    assert main(["run", "--suite", str(tmp_path / "nope.toml")]) == 2
    assert "no suite file" in capsys.readouterr().err


def test_a_suite_with_out_writes_its_records_and_report_there(tmp_path, monkeypatch, capsys):
    """`run --suite X --out DIR`: the records, leaderboard and runs.csv go to DIR itself (as `theory --out` and
    `claims --out` put their report in DIR), nothing to the default ./runs; the same --out resumes; --out with
    --results or --publish is a clear error naming both."""
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\n[defaults]\ndataset = "digits"\nmodel = "logreg"\nnum_clients = 4\nrounds = 1\n'
                 '[matrix]\nseed = [0, 1]\n')
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "here"
    assert main(["run", "--suite", str(p), "--out", str(out), "--no-progress"]) == 0
    assert len(list(out.glob("*.json"))) == 2 and (out / "leaderboard.md").is_file() and (out / "runs.csv").is_file()
    assert not (tmp_path / "runs").exists()
    capsys.readouterr()
    assert main(["run", "--suite", str(p), "--out", str(out), "--dry-run"]) == 0
    assert "2 cells, 2 finished, 0 to run" in capsys.readouterr().out
    for extra in (["--results", str(tmp_path / "r")], ["--publish"]):
        assert main(["run", "--suite", str(p), "--out", str(out), "--no-progress"] + extra) == 2
        err = capsys.readouterr().err
        assert f"--out {out} holds the suite's records" in err and "--results/--publish" in err and "not both" in err
    assert not (tmp_path / "r").exists()


def test_publish_is_the_committed_results_folder(tmp_path):
    from benchmark.cli import args, build_parser

    a = build_parser().parse_args(["run", "--publish"])
    assert args.results_root(a) == str(ROOT / "results")
    assert args.results_root(build_parser().parse_args(["run"])) == "runs"
    with pytest.raises(ValueError, match="not both"):
        args.results_root(build_parser().parse_args(["run", "--publish", "--results", str(tmp_path)]))


def test_report_from_a_folder_of_records_alone(tmp_path, capsys):
    out = tmp_path / "recs"
    assert main(["run", "--rounds", "2", "--num-clients", "4", "--seeds", "0", "1", "--out", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "from the 2 run records in this folder alone" in text.lower() and "fedavg" in text
    assert (out / "leaderboard.md").is_file() and (out / "runs.csv").is_file()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no run records" in capsys.readouterr().err


def test_validate_writes_nothing_unless_asked(tmp_path, monkeypatch, capsys):
    from benchmark.cli import validate as cli_validate

    fake = {"device": "cpu", "ok": True, "comparisons": [], "wall_seconds": 0.0}
    monkeypatch.setattr(cli_validate, "validate", lambda *a, **k: fake)
    monkeypatch.setattr(cli_validate, "table", lambda r: "table")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--algorithms", "fedavg"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert main(["validate", "--algorithms", "fedavg", "--out", "v.json"]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["ok"]


# ------------------------------------------------------------------------------- one error wrapper for all commands


COMMANDS = {"run": ("run", "cmd_run"), "list": ("listing", "cmd_list"), "theory": ("theory", "cmd_theory"),
            "bench": ("bench", "cmd_bench"), "report": ("report", "cmd_report"),
            "validate": ("validate", "cmd_validate"), "tune": ("tune", "cmd_tune"), "claims": ("claims", "cmd_claims")}
MINIMAL = {"tune": ["--grid", "lr=0.1", "--validation", "10"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("raised, code, text", [
    (KeyboardInterrupt(), 130, "interrupted"),
    (ValueError("unknown thing 'x'. Did you mean 'y'?"), 2, "fedrepro {command}: unknown thing 'x'"),
    (FileNotFoundError("no such folder"), 2, "fedrepro {command}: no such folder"),
])
def test_every_command_ends_the_same_way(command, raised, code, text, monkeypatch, capsys):
    import importlib

    module, func = COMMANDS[command]
    mod = importlib.import_module(f"benchmark.cli.{module}")

    def boom(a):
        raise raised
    monkeypatch.setattr(mod, func, boom)
    assert main([command] + MINIMAL.get(command, [])) == code
    err = capsys.readouterr().err
    assert text.format(command=command) in err and "Traceback" not in err


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_stop_signals_are_caught_only_where_not_ignored_and_restored(monkeypatch):
    """A command turns SIGTERM and SIGHUP into an interrupt while it runs (tests/test_runner.py sends a real
    SIGTERM), but leaves an ignored signal ignored (``nohup`` ignores SIGHUP) and restores every handler after."""
    from benchmark.cli import errors, listing

    seen = {}

    def look(a):
        seen.update({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)})
        return 0
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        monkeypatch.setattr(listing, "cmd_list", look)
        assert main(["list"]) == 0
        assert seen == {signal.SIGTERM: errors._stop, signal.SIGHUP: signal.SIG_IGN}
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_interrupt_and_a_dead_worker_print_the_resume_hint(monkeypatch, capsys, tmp_path):
    from concurrent.futures.process import BrokenProcessPool

    from benchmark.campaign import runner

    for raised, code in ((KeyboardInterrupt(), 130), (BrokenProcessPool("gone"), 1)):
        def stop(*a, raised=raised, **k):
            raise raised
        monkeypatch.setattr(runner, "run_suite", stop)
        assert main(["run", "--suite", "smoke", "--results", str(tmp_path), "--no-progress"]) == code
        err = capsys.readouterr().err
        assert "run the same command again to resume" in err and str(tmp_path) in err


def test_a_programming_error_keeps_its_traceback(monkeypatch):
    from benchmark.cli import listing

    def bug(a):
        raise KeyError("a bug")
    monkeypatch.setattr(listing, "cmd_list", bug)
    with pytest.raises(KeyError):
        main(["list"])


def test_a_suite_takes_data_root_and_refuses_flags_that_change_its_cells(tmp_path, monkeypatch, capsys):
    """`run --suite X --data-root D` finds the data in D for every cell (the flag was once dropped for suites, so
    a GPU machine with the files in D failed every cell); a flag that changes what a cell computes (--rounds,
    --lr, --seeds) is refused with the way to do it, instead of being ignored; the cells keep their hashes."""
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\n[defaults]\ndataset = "digits"\nmodel = "logreg"\nnum_clients = 4\nrounds = 1\n'
                 '[matrix]\nseed = [0, 1]\n')
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "here"
    assert main(["run", "--suite", str(p), "--out", str(out), "--data-root", str(data), "--no-progress"]) == 0
    recs = [json.loads(f.read_text()) for f in out.glob("*.json")]
    assert len(recs) == 2 and {r["config"]["data_root"] for r in recs} == {str(data)}
    from benchmark.campaign.suite import load_suite

    assert {r["config_hash"] for r in recs} == {c.config_hash for c in load_suite(str(p)).cells}
    capsys.readouterr()
    for extra, named in ((["--rounds", "5"], "--rounds"), (["--lr", "0.5", "--seeds", "3"], "--lr, --seeds")):
        assert main(["run", "--suite", str(p), "--out", str(out), "--no-progress"] + extra) == 2
        err = capsys.readouterr().err
        assert f"{named} cannot be combined with --suite" in err and "--only" in err
    assert main(["run", "--suite", str(p), "--out", str(out), "--dry-run", "--data-root", str(data)]) == 0
    assert "2 cells, 2 finished, 0 to run" in capsys.readouterr().out
