"""Claims of the user's own (``fedrepro claims --claims FILE``, theory/empirical/own.py): a file declared like a paper
module runs through the same tuning, looks and verdicts; a planted worse learning rate is CONTRADICTED where it is
claimed better and two arms that compute the same thing are NEGLIGIBLE; a broken file is an error naming the file
and what to fix; the example in examples/ runs from the command line as the README shows."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.runs.record import code_version
from theory import empirical
from theory.empirical import own

ROOT = Path(__file__).resolve().parents[1]

PLANTED = '''
from theory.empirical import Budget, Claim, Comparison, Margin
from theory.empirical.claim import arm
from theory.empirical.scale import CpuScale

PAPER = "{name}"
ARMS = {{a.name: a for a in [arm("fedavg"), arm("fedavg", name="fedavg_slow"), arm("fedavg", name="fedavg_copy")]}}
M = Margin(0.01, "1 point (test)")
CLAIMS = [
    Claim("{name}.slow_is_better", PAPER, "planted", "q", "a 30x smaller learning rate is better (false)",
          "final_accuracy", (Comparison("fedavg_slow", "fedavg", "superior", 0.0, "s"),), margin=M),
    Claim("{name}.copy_is_better", PAPER, "planted", "q", "the same algorithm is better than itself",
          "final_accuracy", (Comparison("fedavg_copy", "fedavg", "superior", 0.0, "s"),), margin=M),
]
BUDGET = Budget(looks=(5, 10), cpu_minutes=5, reason="test")
CPU = CpuScale(settings={{"s": dict(dataset="digits", model="logreg", partition="iid", num_clients=5, rounds=8,
                                   local_epochs=1, batch_size=32, eval_every=4)}},
               kept=(), reductions=(), grids={{"fedavg": {{"lr": [0.3]}}, "fedavg_copy": {{"lr": [0.3]}},
                                              "fedavg_slow": {{"lr": [0.01]}}}},
               validation=200, final_seeds=(0, 1, 2, 3, 4), max_seeds=10)
'''


@pytest.fixture(autouse=True)
def no_loaded_files():
    """Every test starts and ends with no claims file loaded (``own.MODULES`` is per process)."""
    saved = dict(own.MODULES)
    own.MODULES.clear()
    yield
    own.MODULES.clear()
    own.MODULES.update(saved)


def _file(tmp_path, text: str, name: str = "mine.py") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_claims_file_runs_like_a_paper_and_catches_planted_differences(tmp_path, capsys):
    path = _file(tmp_path, PLANTED.format(name="planted"))
    rc = main(["claims", "--claims", str(path), "--results", str(tmp_path / "r"), "--no-progress", "--json"])
    assert rc == 0
    folder = tmp_path / "r" / "claims" / code_version()["package"] / "own" / "planted"
    rep = json.loads((folder / "report.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in rep["claims"]}
    assert verdicts == {"planted.slow_is_better": "CONTRADICTED", "planted.copy_is_better": "NEGLIGIBLE"}
    assert rep["before"] is None and (folder / "planted.slow_is_better.cpu.png").is_file()
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert rep["meta"]["claims_file"] == {"path": str(path.resolve()), "sha256": sha}
    md = (folder / "report.md").read_text()
    assert f"Claims declared in {path.resolve()} (sha256 {sha[:16]})." in md
    assert "## planted" in md and "**Not supported**" in md
    # the papers' registry is untouched: the file is found by its name, the papers' list is the same
    assert empirical.paper("planted").PAPER == "planted" and "planted" not in empirical.PAPERS


@pytest.mark.parametrize("text, words", [
    ('PAPER = "x"\n', "it must define ARMS, CLAIMS, BUDGET, CPU (or SCALES)"),
    (PLANTED.format(name="gradma"), "PAPER 'gradma' is one of the papers' names"),
    (PLANTED.format(name="Bad Name"), "PAPER must be a lowercase name"),
    (PLANTED.format(name="p").replace('arm("fedavg", name="fedavg_copy")', 'arm("nosuchalg", name="fedavg_copy")'),
     "arm 'fedavg_copy': unknown algorithm 'nosuchalg' (an algorithm of your own needs --plugin FILE;"),
    (PLANTED.format(name="p").replace('"fedavg_copy", "fedavg", "superior"', '"fedprox", "fedavg", "superior"'),
     "compares arm 'fedprox', which ARMS does not define"),
    (PLANTED.format(name="p").replace('0.0, "s"),), margin=M),\n]', '0.0, "t"),), margin=M),\n]'),
     "setting 't' is not one of scale 'cpu''s settings (s)"),
    (PLANTED.format(name="p").replace('"fedavg_copy": {"lr": [0.3]},', ''),
     "scale 'cpu' has no tuning grid for arm 'fedavg_copy'"),
    ("import math\n\nx = math.nosuch\n", "line 3: AttributeError"),
])
def test_a_broken_claims_file_says_which_file_and_what_to_fix(tmp_path, capsys, text, words):
    path = _file(tmp_path, text)
    assert main(["claims", "--claims", str(path), "--results", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"claims file {path}" in err and words in err, err
    assert not own.MODULES


def test_a_claims_file_that_registers_algorithms_is_told_to_use_a_plugin(tmp_path, capsys):
    """Algorithms belong in a plugin file (--plugin): one registered by the claims file itself would reach no worker
    process and no record's provenance. The refused registration is undone (a library caller keeps no stray name)."""
    import algorithms

    example = (ROOT / "examples" / "my_fedavg_variant.py").read_text()
    path = _file(tmp_path, example + "\n" + PLANTED.format(name="mine"))
    assert main(["claims", "--claims", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "registers algorithms (fedavg_clip): put them in a plugin file and pass it with --plugin FILE" in err
    assert "fedavg_clip" not in algorithms.names()


def test_claims_flags_that_do_not_fit_a_file_of_ones_own(tmp_path, capsys):
    path = _file(tmp_path, PLANTED.format(name="mine"))
    for extra, words in ((["--publish"], "--results (default ./runs), in claims/<version>/own/mine"),
                         (["--paper", "gradma"], "name two things to run"),
                         (["--scale", "full"], "declares no FULL scale"),
                         (["--scale", "replication"], "mine declares no replication")):
        assert main(["claims", "--claims", str(path), *extra]) == 2
        assert words in capsys.readouterr().err
    assert main(["claims", "--claims", str(tmp_path / "none.py")]) == 2
    assert "no claims file" in capsys.readouterr().err


def test_the_example_runs_from_the_command_line(tmp_path):
    """README's command for examples/my_claims.py (its plugin algorithm from examples/my_fedavg_variant.py), in a
    fresh process as a user runs it; --looks 5 keeps it to one look here."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FEDREPRO_PLUGINS", None)
    cmd = [sys.executable, "-m", "benchmark.cli", "claims", "--plugin", str(ROOT / "examples" / "my_fedavg_variant.py"),
           "--claims", str(ROOT / "examples" / "my_claims.py"), "--results", str(tmp_path), "--looks", "5",
           "--no-progress"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (report,) = tmp_path.glob("claims/*/own/clip_example/report.json")
    rep = json.loads(report.read_text())
    assert [c["id"] for c in rep["claims"]] == ["clip_example.costs_at_most_a_point",
                                                "clip_example.helps_skewed_clients"]
    assert all(c["seeds"] == 5 for c in rep["claims"])
    # --tuning-noise compares with a report tuned on one seed (claims 0.3.0): a file tuned on 3 is told so
    out = subprocess.run(cmd[:-3] + ["--tuning-noise", "1003", "--no-progress"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "tunes on seeds [1000, 1001, 1002]" in out.stderr
    assert "| dir0.3 / fedavg_clip |" in (report.parent / "report.md").read_text()


def test_the_plan_of_a_file_without_measured_costs_counts_its_runs(tmp_path, capsys):
    """--dry-run on a claims file with no ``cost``: the runs per arm, said to have no measured cost, not an error
    (the papers' scales must declare theirs: ``CpuScale.cost_plan`` is strict for them)."""
    path = _file(tmp_path, PLANTED.format(name="mine"))
    assert main(["claims", "--claims", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "s / fedavg_slow: 13 runs (no measured cost" in out  # one grid point on 3 tuning seeds, 10 final seeds
    assert "not counting 39 runs of arms without a measured cost" in out
    with pytest.raises(ValueError, match="no measured cost for arm"):
        empirical.paper("mine").CPU.cost_plan()
