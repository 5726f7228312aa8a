"""A researcher's first hour (issue 47): every input that was once accepted silently, or ended in a traceback or a
misleading answer, with the one-line message it gets now or the documented behaviour it has now.

``CLI`` is the table of bad command lines: each row is what was typed, the exit code and the message (a regular
expression) it must print on stderr, in one line, with no traceback. ``API`` is the same for the Python API: what
was called and the ``ValueError`` it must raise. The tests after them check the behaviours the README documents
(a record for every run, ``status`` and ``report`` reading ``--out`` folders and the folders below, one suite per
folder, records saved by hand readable by ``report``). Every row failed at aa98dfe: the input was accepted (and
ran), or the message was another.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

from benchmark import Experiment, FederatedDataset
from benchmark.campaign import runner
from benchmark.cli import main

VERSION = runner.code_version()["package"]

TINY = """name = "{name}"
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 4
rounds = 1
eval_every = 1
{extra}
[matrix]
algorithm = {algs}
seed = {seeds}
"""


def tiny_suite(folder: Path, name: str = "grid", algs=("fedavg", "fedprox"), seeds=(0, 1), extra: str = "") -> Path:
    p = Path(folder) / f"{name}.toml"
    p.write_text(TINY.format(name=name, algs=json.dumps(list(algs)), seeds=list(seeds), extra=extra))
    return p


PLUGIN_HEAD = """from dataclasses import dataclass
from algorithms import Algorithm, Message, register
from algorithms.core import optim
from algorithms.core.hyper import POSITIVE, param
"""
PLUGIN_BODY = """
    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        return Message.dense(w0 - self.sgd_loop(ctx, w0), "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return self.server_step(server_state, self.weighted_mean(uplinks["d"], weights))
"""


def plugin(folder: Path, file: str, name: str, hyper: str = "eta_g: float = param(1.0, POSITIVE)",
           decorate: bool = True) -> Path:
    p = Path(folder) / file
    p.write_text(PLUGIN_HEAD + ("@register\n" if decorate else "") + f"class Alg(Algorithm):\n    name = {name!r}\n"
                 f"    server_optimizer = optim.ServerSGD\n\n    @dataclass(frozen=True)\n    class Hyper:\n"
                 f"        {hyper or 'pass'}\n" + PLUGIN_BODY)
    return p


@dataclass
class Row:
    what: str
    argv: Callable[[Path], list]
    code: int
    message: str


CLI = [
    Row("--eval-train-samples 0 (recorded train_loss 0.0 and switched divergence detection off: --lr 1e6 was 'ok')",
        lambda t: ["run", "--eval-train-samples", "0", "--lr", "1e6"], 2,
        r"eval_train_samples must be >= 1 \(an integer, or None\), got 0"),
    Row("--momentum 1.5", lambda t: ["run", "--momentum", "1.5"], 2, r"momentum must be in \[0, 1\)"),
    Row("--optimizer adam --momentum 0.9 (the momentum was dropped)",
        lambda t: ["run", "--optimizer", "adam", "--momentum", "0.9"], 2,
        r"momentum=0.9 is SGD's heavy-ball momentum; optimizer 'adam' has its own moments"),
    Row("--local-steps 5 --local-epochs 2 (the epochs were dropped)",
        lambda t: ["run", "--local-steps", "5", "--local-epochs", "2"], 2,
        r"--local-steps 5 and --local-epochs 2 are both given: local steps replace local epochs, give one of them"),
    Row("--seed 3 --seeds 0 1 (the seed was dropped)", lambda t: ["run", "--seed", "3", "--seeds", "0", "1"], 2,
        r"--seed 3 and --seeds 0 1 are both given"),
    Row("--results for single runs beside --out (--results was ignored)",
        lambda t: ["run", "--rounds", "1", "--out", t / "o", "--results", t / "r"], 2,
        r"--out .*o holds the records itself, while --results/--publish put them in RESULTS/single/<version>/: give "
        r"one of them, not both"),
    Row("--publish for a single run", lambda t: ["run", "--rounds", "1", "--publish"], 2,
        r"single runs are not committed: give --out DIR or --results DIR"),
    Row("a suite's dry run with clients_per_round > num_clients (it planned them)",
        lambda t: ["run", "--suite", tiny_suite(t, extra="clients_per_round = 9"), "--dry-run"], 2,
        r"grid.toml: invalid cell .*clients_per_round=9 exceeds the number of clients \(4\)"),
    Row("an empty suite file (it ran one cell of the defaults)",
        lambda t: ["run", "--suite", _empty(t / "empty.toml"), "--dry-run"], 2,
        r"empty.toml: no \[matrix\]"),
    Row("a plugin that registers nothing (a missing @register)",
        lambda t: ["list", "--plugin", plugin(t, "nothing.py", "nothing_alg", decorate=False)], 2,
        r"nothing.py registers nothing: decorate its Algorithm subclass with @register"),
    Row("a plugin algorithm named in capitals",
        lambda t: ["list", "--plugin", plugin(t, "upper.py", "MyAlg")], 2,
        r"registers the algorithm 'MyAlg': registry names are lowercase .* \(e.g. 'myalg'\); rename it"),
    Row("a plugin stepping with ServerSGD without eta_g (AttributeError in round 1)",
        lambda t: ["list", "--plugin", plugin(t, "noeta.py", "noeta_alg", hyper="")], 2,
        r"algorithm 'noeta_alg' steps with server_optimizer = ServerSGD, which reads eta_g .* its Hyper has no such "
        r"field: add eta_g to Hyper"),
    Row("an unknown flag of a subcommand (the top-level usage, no hint)", lambda t: ["run", "--roundz", "3"], 2,
        r"fedrepro run: error: unrecognized arguments: --roundz 3 \(--roundz: did you mean --rounds\?\)"),
    Row("an unknown subcommand", lambda t: ["stauts"], 2, r"invalid choice: 'stauts' .*Did you mean status\?"),
    Row("status of a folder that does not exist ('no results', exit 0)", lambda t: ["status", t / "nope"], 2,
        r"no folder .*nope: nothing has run into it"),
    Row("status --watch 0 (a busy loop)", lambda t: ["status", t, "--watch", "0"], 2,
        r"--watch takes a refresh period in seconds > 0"),
    Row("report of a suite run from a file whose file is gone, by name ('unknown suite')",
        lambda t: ["report", "--suite", "gone", "--results", _gone_suite(t)], 2,
        r"unknown suite 'gone', and its suite file is gone; .*gone/.* holds its records: `fedrepro report"),
]


def _empty(path: Path) -> Path:
    path.write_text("")
    return path


def _gone_suite(t: Path) -> Path:
    """A results root holding the folder of a suite whose file was deleted after its run (no run needed)."""
    s = tiny_suite(t, name="gone")
    folder = runner.results_dir(t / "res", "gone")
    folder.mkdir(parents=True)
    (folder / ".suite").write_text(json.dumps({"suite": "gone", "file": str(s), "shipped": False}))
    s.unlink()
    return t / "res"


@pytest.mark.parametrize("row", CLI, ids=[r.what for r in CLI])
def test_a_bad_command_line_gets_one_clear_line(row: Row, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of a row lands in the repository

    def no_sleep(seconds):  # a bad input is refused before any work: a row never waits (--watch 0 looped for ever)
        raise AssertionError(f"{row.what}: slept {seconds} s instead of refusing the input")

    monkeypatch.setattr("time.sleep", no_sleep)
    try:
        code = main([str(x) for x in row.argv(tmp_path)])
    except SystemExit as e:  # argparse's errors
        code = e.code
    err = capsys.readouterr().err
    assert code == row.code, err
    assert re.search(row.message, err), err
    assert "Traceback" not in err and len([ln for ln in err.splitlines() if "error" in ln or ":" in ln]) >= 1
    assert not list(tmp_path.rglob("*.json")) or row.what.startswith("report"), "no run was made"


def _clients(widths=(4, 4), n=6, labels=None):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(n, w, generator=g), labels if labels is not None else torch.randint(0, 3, (n,), generator=g))
            for w in widths]


API = [
    ("model=None (a TypeError inside torch)", lambda: Experiment(model=None).validate(),
     r"model must be a registered name \(see `fedrepro list models`\) or a callable"),
    ("momentum 1.5", lambda: Experiment(momentum=1.5).validate(), r"momentum must be in \[0, 1\)"),
    ("clients of different feature widths (failed inside torch.cat, no client named)",
     lambda: FederatedDataset.from_tensors(_clients((4, 5)), _clients()[0]),
     r"client 1: inputs of shape \(5,\), but client 0's are \(4,\)"),
    ("a test set of another width (failed in the first evaluation)",
     lambda: FederatedDataset.from_tensors(_clients(), _clients((3,))[0]),
     r"test inputs have shape \(3,\) per sample, the training inputs \(4,\)"),
    ("an empty test set (accuracy and loss 0.0)",
     lambda: FederatedDataset.from_tensors(_clients(), (torch.zeros(0, 4), torch.zeros(0))),
     r"the test set is empty"),
    ("float labels for classification (0.7 became class 0)",
     lambda: FederatedDataset.from_tensors(_clients(labels=torch.full((6,), 0.7)), _clients()[0]),
     r"classification labels must be integers .*\(e.g. 0.7\); for real-valued targets give task=\"regression\""),
]


@pytest.mark.parametrize("what, call, message", API, ids=[a[0] for a in API])
def test_a_bad_python_call_raises_a_clear_value_error(what, call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_an_algorithm_registered_in_a_script_without_eta_g_is_refused_before_round_1():
    """Registered by code, not a plugin file (no loader to check it): Experiment.validate names the field."""
    from dataclasses import dataclass

    from algorithms import Algorithm
    from algorithms.core import optim, registry

    class NoEta(Algorithm):
        name = "script_noeta"
        server_optimizer = optim.ServerSGD

        @dataclass(frozen=True)
        class Hyper:
            pass

    registry.register(NoEta)
    try:
        with pytest.raises(ValueError, match=r"steps with ServerSGD, which reads eta_g from its hyperparameters, but "
                                             r"its Hyper has no such field"):
            Experiment(algorithm="script_noeta").validate()
    finally:
        registry._REGISTRY.pop("script_noeta", None)


# -------------------------------------------------------------------------------- behaviours the README documents


def test_a_dataset_of_your_own_gets_its_natural_clients_without_num_clients():
    data = FederatedDataset.from_tensors(_clients((4, 4, 4)), _clients()[0])
    exp = Experiment(dataset=data, model="logreg", rounds=1)
    assert exp.num_clients == 3
    exp.validate()
    assert Experiment(dataset=data, model="logreg", num_clients=None).num_clients is None


def test_every_run_writes_a_record_also_without_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--rounds", "1", "--num-clients", "3", "--no-progress"]) == 0
    [rec] = (tmp_path / "runs" / "single" / VERSION).glob("*.json")
    assert f"wrote runs/single/{VERSION}/{rec.name}" in capsys.readouterr().err


@pytest.fixture
def out_suite(tmp_path):
    """A finished suite (2 algorithms x 2 seeds) run from a file with --out DIR."""
    s = tiny_suite(tmp_path)
    assert main(["run", "--suite", str(s), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    return s, tmp_path / "out"


def test_status_reads_an_out_folder_and_the_folders_below(out_suite, capsys):
    s, out = out_suite
    capsys.readouterr()
    for argv in (["status", str(out)], ["status", str(out), "--suite", str(s)], ["status", str(out.parent)]):
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert f"grid {VERSION}: 4 cells" in text and "done 4 (ok 4, diverged 0)" in text and "pending 0" in text, text
    (out / ".suite").unlink()  # an --out folder written before folders kept their suite's mark
    assert main(["status", str(out), "--suite", str(s)]) == 0
    text = capsys.readouterr().out
    assert ": 4 cells" in text and "done 4 (ok 4, diverged 0)" in text and "pending 0" in text, text


def test_a_folder_holds_one_suite(out_suite, tmp_path, capsys):
    _, out = out_suite
    other = tiny_suite(tmp_path, name="other", algs=("fedavg",), seeds=(0, 1, 2))
    before = sorted(p.name for p in out.iterdir())
    for extra in ([], ["--dry-run"]):
        assert main(["run", "--suite", str(other), "--out", str(out), "--no-progress"] + extra) == 2
        assert "holds the records of suite 'grid'" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before, "nothing written, the leaderboard kept"


def test_report_recurses_and_finds_a_suite_run_from_a_file_by_its_name(tmp_path, capsys):
    s = tiny_suite(tmp_path)
    assert main(["run", "--suite", str(s), "--results", str(tmp_path / "runs"), "--no-progress"]) == 0
    assert main(["run", "--rounds", "1", "--num-clients", "3", "--results", str(tmp_path / "runs"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err
    assert f"runs/grid/{VERSION}/leaderboard.md" in err and f"runs/single/{VERSION}/leaderboard.md" in err
    assert main(["report", "--suite", "grid", "--results", str(tmp_path / "runs")]) == 0
    assert "# Leaderboard: grid" in capsys.readouterr().out


def test_a_record_saved_by_hand_from_python_is_read_by_report(tmp_path, capsys):
    from benchmark import run

    res = run(Experiment(rounds=1, num_clients=3), progress=False)
    (tmp_path / "run.json").write_text(res.to_json())  # the README's example, in any folder
    (tmp_path / "again.json").write_text(res.to_json())  # the same run twice is one run
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "From the 1 run records in this folder alone" in out and "fedavg" in out


def test_a_leaderboard_says_when_its_cells_have_different_seeds(tmp_path):
    from benchmark.reports import leaderboard as report

    recs = []
    for alg, seeds in (("fedavg", (0, 1, 2)), ("fedprox", (0, 1))):
        for s in seeds:
            recs.append({"config": {"algorithm": alg, "dataset": "digits", "partition": "iid", "seed": s},
                         "config_hash": f"{alg}{s}", "status": "ok", "history": [],
                         "final": {"test_accuracy": 0.5 + 0.01 * s}})
    md = report.leaderboard(recs, title="t")
    assert "mean ± std over 2 to 3 seeds per cell, of seeds [0, 1, 2]" in md


def test_a_gpu_suite_dry_run_says_it_is_meant_for_a_gpu_and_which_data_are_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDREPRO_DATA", str(tmp_path / "data"))
    s = tiny_suite(tmp_path, name="big", algs=("fedavg",), seeds=(0,))
    s.write_text(s.read_text().replace('dataset = "digits"', 'dataset = "cifar10"').replace(
        'model = "logreg"', 'model = "logreg"\n').replace('name = "big"', 'name = "big"\nrequires = "gpu"'))
    assert main(["run", "--suite", str(s), "--dry-run", "--device", "cpu", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert 'note: big is meant for a gpu (requires = "gpu" in big.toml)' in out
    assert "note: no data here for the 1 cifar10 cell(s) of 1: cifar10 not found" in out
    assert "give --data-root DIR where they are, or add --download" in out


def test_the_claims_table_keeps_the_reason_for_a_ratio_verdict():
    """10.882 against ">= 10.9x" was printed "10.9x [10.9x, 10.9x]": the rounding hid why the claim failed."""
    from theory.empirical import report as erep

    x = {"a": "lfl", "b": "lb", "setting": "s", "mean": 10.882, "lower": 10.880, "upper": 10.884, "boundary": 10.9,
         "values": [10.880, 10.884]}
    assert erep.key_number({"metric": "bits_down_per_round", "comparisons": [x]}) == \
        "lfl vs lb: 10.88x [10.88x, 10.88x]"
    close = dict(x, mean=10.90001, lower=10.9, upper=10.90002)
    assert "10.90001x [10.90000x, 10.90002x]" in erep.key_number({"metric": "bits_down_per_round",
                                                                   "comparisons": [close]})


def test_status_help_describes_a_command_that_only_reads(capsys):
    """`status --help` described --results and --publish as where results are written ('checked writable')."""
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Reads only" in text and "writable" not in text and "write into" not in text


def test_a_walk_for_records_passes_folders_of_other_json(tmp_path, capsys):
    """results/ holds bench results (perf/*.json) beside the suites' folders: status and report pass them by."""
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "cpu-bench.json").write_text('{"rows": []}')
    assert main(["report", str(tmp_path)]) == 2
    assert "no run records (*.json) in" in capsys.readouterr().err
    assert main(["status", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("no results under")
