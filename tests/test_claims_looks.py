"""Claims designs checked up front (issue 47 item 2): looks are strictly increasing whole numbers of at least 2,
checked by one function (``theory.stats.sequential.check_looks``) that ``fedrepro claims --looks``, the Python API
(``run_claims``, ``run_paper``), a paper's or claims file's ``Budget``, a replication's declared looks and every
``Design`` use, before any tuning run; a written report of another design is never replaced silently; ``--dry-run``
honours ``--looks`` and ``--quick`` refuses it. Until 0.4.0, ``--looks 5,3`` ran and replaced an earlier report,
``--looks 0`` / ``-2`` were refused only after the tuning runs, and ``--dry-run`` and ``--quick`` ignored
``--looks``: each test below fails on that behaviour (a spy on the tuning and the runner stands for "work")."""
import json

import pytest

from benchmark import cli
from benchmark.campaign import runner, tuning
from theory.empirical import own
from theory.empirical import paths as epaths
from theory.empirical import run as erun
from theory.empirical.claim import Budget, Claim, Comparison, Margin
from theory.empirical.scale import CpuScale, replication
from theory.stats.sequential import Design, check_looks


class Started(Exception):
    """Work began (tuning or a run) where it must not have."""


@pytest.fixture
def no_work(monkeypatch):
    def spy(*a, **k):
        raise Started("work started")

    monkeypatch.setattr(tuning, "tune_all", spy)
    monkeypatch.setattr(runner, "run_experiments", spy)


def test_one_check_of_a_designs_looks():
    assert check_looks((5, 10, 20, 40)) == (5, 10, 20, 40) and check_looks([2]) == (2,)
    for bad, why in (((5, 3), "strictly increasing"), ((5, 5), "strictly increasing"), ((0,), "at least 2"),
                     ((-2,), "at least 2"), ((1, 5), "at least 2"), ((), "at least one look"),
                     ((2.5,), "whole numbers"), ((True, 5), "whole numbers")):
        with pytest.raises(ValueError, match=why) as e:
            check_looks(bad, "--looks")
        assert str(e.value).startswith("--looks must") and "\n" not in str(e.value)
    for make in (lambda lk: Design(lk), lambda lk: Budget(lk, 1, "r")):
        with pytest.raises(ValueError, match="strictly increasing"):
            make((10, 5))


def test_a_replication_declares_valid_looks():
    """Before 0.4.0 a replication declaring looks (10, 5) was accepted and failed only when judged."""
    claims = [Claim("toy.c", "toy", "s", "q", "s", "final_accuracy", (Comparison("a", "b", "superior", 0.0, "s"),),
                    margin=Margin(0.01, "1 point (test)"))]
    cpu = CpuScale(settings={"s": {}}, kept=(), reductions=(), grids={"a": {"lr": [0.1]}, "b": {"lr": [0.1]}},
                   validation=100)
    with pytest.raises(ValueError, match="scale cpu-rep: looks must be strictly increasing"):
        replication(cpu, claims, cpu_minutes=1, why="test", seed_start=100, looks=(10, 5))


@pytest.mark.parametrize("looks, why", [("5,3", "strictly increasing"), ("0", "at least 2"), ("-2", "at least 2"),
                                        ("5,x", "whole numbers")])
def test_bad_looks_are_refused_in_one_line_before_any_work(looks, why, no_work, tmp_path, capsys):
    assert cli.main(["claims", "--paper", "bherd", "--looks", looks, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedrepro claims: --looks must") and why in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("looks", [(5, 3), (0,), (-2,)])
def test_the_python_api_checks_the_looks_before_any_work(looks, no_work, tmp_path):
    with pytest.raises(ValueError, match="--looks must"):
        erun.run_claims("bherd", looks=looks, results_root=tmp_path)
    from theory import empirical

    with pytest.raises(ValueError, match="--looks must"):
        erun.run_paper(empirical.paper("bherd"), "cpu", results_root=tmp_path, looks=looks)


def test_a_claims_file_with_bad_looks_is_refused_when_it_loads(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text("from theory.empirical import Budget\nPAPER = 'mine'\n"
                    "BUDGET = Budget(looks=(5, 3), cpu_minutes=1, reason='r')\n")
    with pytest.raises(own.ClaimsFileError, match="line 3: ValueError: a Budget's looks must be strictly increasing"):
        own.load(path)
    assert cli.main(["claims", "--claims", str(path), "--results", str(tmp_path)]) == 2
    assert "a Budget's looks must be strictly increasing" in capsys.readouterr().err


def _written(folder, looks):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps({"meta": {"looks": looks}, "papers": [], "claims": []}))


def test_a_report_of_another_design_is_never_replaced_silently(no_work, tmp_path, capsys):
    folder = epaths.report_folder(tmp_path, "cpu", "bherd")
    _written(folder, None)  # judged with the declared looks
    assert cli.main(["claims", "--paper", "bherd", "--looks", "5", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "judged with each scale's declared looks; this run asks for --looks 5" in err
    assert "--replace" in err and "--out DIR" in err and len(err.strip().splitlines()) == 1
    _written(folder, [5])
    assert cli.main(["claims", "--paper", "bherd", "--results", str(tmp_path)]) == 2
    assert "judged with --looks 5; this run asks for each scale's declared looks" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--replace"):
        erun.run_claims("bherd", looks=(5, 10), results_root=tmp_path)
    # the same design resumes, and --replace (replace=True) replaces: both get to work
    with pytest.raises(Started):
        erun.run_claims("bherd", looks=(5,), results_root=tmp_path)
    with pytest.raises(Started):
        cli.main(["claims", "--paper", "bherd", "--looks", "5,10", "--replace", "--results", str(tmp_path)])


def test_dry_run_honours_looks_and_quick_refuses_them(no_work, tmp_path, capsys):
    assert cli.main(["claims", "--dry-run", "--paper", "bherd", "--looks", "5", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    sc = plan[0]["scales"][0]
    assert sc["looks"] == [5] and sc["plan"]["max_seeds"] == 5
    assert cli.main(["claims", "--dry-run", "--paper", "bherd", "--looks", "5,3"]) == 2
    assert "--looks must be strictly increasing" in capsys.readouterr().err
    for flags in (["--quick"], ["--scale", "replication"], ["--scale", "full"], ["--rerender"],
                  ["--tuning-noise", "1001"]):
        assert cli.main(["claims", "--paper", "gradma", "--looks", "5", "--results", str(tmp_path)] + flags) == 2, flags
        err = capsys.readouterr().err
        assert "drop --looks" in err and len(err.strip().splitlines()) == 1, (flags, err)
