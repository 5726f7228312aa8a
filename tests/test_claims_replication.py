"""Replications of undecided claims (theory/empirical/scale.py, ``REPLICATION``): the same scale on fresh seeds
with its own declared looks and CPU budget. The papers' replications are declared before their first stage runs
(0.4.0): they repeat what it leaves INCONCLUSIVE, on seeds it never used, tuned again on tuning seeds of their own;
the runner uses those seeds, that design and its own folder, tunes with the scale's own cells where a replication
declares no tuning seeds of its own, and the report sets the first stage's verdict beside the replication's."""
import json
import types
from pathlib import Path

import pytest

from benchmark import cli
from benchmark.campaign import runner
from theory import empirical
from theory.empirical import paths as epaths
from theory.empirical import run as erun
from theory.empirical.claim import Budget, Claim, Comparison, Margin, arm
from theory.empirical.scale import CpuScale, FullScale, paper_scales, replication

ROOT = Path(__file__).resolve().parents[1]
CALIBRATED_LOOKS = (5, 10, 20, 40)  # tests/test_empirical_calibration.py's LOOKS


def toy_paper():
    """Digits: FedAvg at lr 0.3 ("good") against a planted poor lr 0.003 ("bad"); the claim is replicated."""
    arms = {a.name: a for a in (arm("fedavg", "good"), arm("fedavg", "bad"))}
    claims = [Claim("toy.good_beats_bad", "toy", "s", "q", "s", "final_accuracy",
                    (Comparison("good", "bad", "superior", 0.0, "s"),), margin=Margin(0.01, "1 point (test)"))]
    cpu = CpuScale(settings={"s": dict(dataset="digits", model="logreg", partition="dirichlet:0.5", num_clients=10,
                                       clients_per_round=5, rounds=6, local_steps=5, batch_size=32, lr=0.3,
                                       eval_every=6)},
                   kept=("digits",), reductions=(), grids={"good": {"lr": [0.3]}, "bad": {"lr": [0.003]}},
                   validation=200, executor="sequential", grid_rule="one point", max_seeds=10)
    rep = replication(cpu, claims, cpu_minutes=60, why="test", seed_start=100, looks=(5, 10))
    return types.SimpleNamespace(PAPER="toy", TITLE="Toy", ARMS=arms, CLAIMS=claims, CPU=cpu, SCALES=(cpu,),
                                 REPLICATIONS=(rep,), FULL=FullScale("none", {"s": {}}),
                                 BUDGET=Budget((5, 10), 60, "test"))


def test_a_replication_runs_fresh_seeds_in_its_own_design_and_folder(tmp_path, monkeypatch):
    calls = []
    real = runner.run_experiments

    def spy(exps, *a, **k):
        calls.append(sorted((e.lr, e.seed) for e in exps))
        return real(exps, *a, **k)

    monkeypatch.setattr(runner, "run_experiments", spy)
    paper = toy_paper()
    (rep,) = paper_scales(paper, "replication")
    assert rep.name == "cpu-rep" and rep.replicates == "cpu" and rep.looks == (5, 10)
    # no tuning seeds of its own: the same tuning cells as the scale it repeats, so the same choices
    assert ({e.config_hash() for v in erun.cells(paper, rep).values() for e in v}
            == {e.config_hash() for v in erun.cells(paper, paper.CPU).values() for e in v})
    out = erun.run_paper(paper, rep, results_root=tmp_path, progress=False)
    (c,) = out["claims"]
    assert c["verdict"] == "SUPPORTED" and c["scale"] == "cpu-rep" and c["replicates"] == "cpu"
    assert calls[1] == sorted([(0.3, s) for s in range(100, 105)] + [(0.003, s) for s in range(100, 105)])
    assert out["budget"]["looks"] == [5, 10] and out["budget"]["cpu_minutes"] == 60
    assert list(epaths.runs_folder(tmp_path, None, "cpu-rep").glob("*.json"))
    assert not epaths.runs_folder(tmp_path, None, "cpu").exists()
    assert out["scale"]["replication"] == {"replicates": "cpu", "seeds": [100, 109], "looks": [5, 10],
                                           "cpu_minutes": 60, "inconclusive_only": False}
    with pytest.raises(ValueError, match="--looks cannot replace"):
        erun.run_paper(paper, rep, results_root=tmp_path, progress=False, looks=(5,))


def test_the_report_sets_the_first_stage_beside_the_replication(tmp_path):
    from theory.empirical import report as erep

    paper = toy_paper()
    first = erun.run_paper(paper, "cpu", results_root=tmp_path, progress=False, looks=(5,))
    rep = erun.run_paper(paper, paper.REPLICATIONS[0], results_root=tmp_path, progress=False)
    meta = {"scale": "replication", "quick": False, "wall_seconds": 1.0, "cpus": 2, "backend": "local", "jobs": None,
            "load_start": "?", "load_end": "?", "note": ""}
    first_json = {"papers": [first]}
    md = erep.write_report([rep], tmp_path / "rep", meta, ("0.9.0", first_json))["markdown"].read_text()
    assert erep.REPLICATION in md
    assert "First stage (the 0.9.0 report, cpu scale, seeds from 0): **SUPPORTED** with 5 paired seeds" in md
    assert "fresh paired seeds 100-109 in looks 5, 10" in md
    report_json = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report_json["method"]["replication"] == erep.REPLICATION
    # without the first stage's report there is nothing to set beside it, and no claim to it either
    assert "First stage" not in erep.write_report([rep], tmp_path / "alone", meta)["markdown"].read_text()


def test_a_replication_declares_its_design_and_fresh_seeds():
    cpu = toy_paper().CPU
    for bad in (dict(seed_start=0), dict(looks=()), dict(cpu_minutes=0.0)):
        fields = dict(replicates="cpu", seed_start=100, looks=(5, 10), cpu_minutes=10.0, max_seeds=10, **{})
        fields.update(bad)
        with pytest.raises(ValueError, match="declares its looks"):
            CpuScale(**{**cpu.__dict__, **fields})
    with pytest.raises(ValueError, match="last look"):
        CpuScale(**{**cpu.__dict__, "looks": (5, 10), "max_seeds": 20})


@pytest.mark.parametrize("name", [n for n in empirical.PAPERS if paper_scales(empirical.paper(n), "replication")])
def test_the_papers_replications_are_declared_before_their_first_stage_on_fresh_seeds(name):
    """What a 0.4.0 replication repeats: the claims of its scale that the first stage leaves INCONCLUSIVE (known only
    once that stage is judged), at the same settings, grids and validation split, tuned again on tuning seeds of its
    own; final seeds disjoint from that stage's and from every tuning seed; looks among the calibrated ones; a
    budget that covers its cost plan at the worst."""
    mod = empirical.paper(name)
    scales = {sc.name: sc for sc in paper_scales(mod)}
    for rep in paper_scales(mod, "replication"):
        orig = scales[rep.replicates]
        assert rep.inconclusive_only and rep.only == orig.only
        assert rep.settings == orig.settings and not set(rep.tune_seeds) & set(orig.tune_seeds)
        assert rep.validation == orig.validation and all(rep.grids[a] == orig.grids[a] for a in rep.grids)
        assert set(rep.grids) == set(orig.grids) and rep.extend == orig.extend
        seeds = set(range(rep.seed_start, rep.seed_start + rep.max_seeds))
        assert not seeds & set(range(orig.max_seeds)) and not seeds & (set(rep.tune_seeds) | set(orig.tune_seeds))
        assert rep.looks == CALIBRATED_LOOKS[:len(rep.looks)]
        assert rep.cost_plan()["cpu_minutes"] <= rep.cpu_minutes


def test_a_paper_without_a_replication_is_refused_with_the_ones_that_have_one(capsys, tmp_path):
    assert cli.main(["claims", "--scale", "replication", "--paper", "bherd", "--results", str(tmp_path)]) == 2
    assert "bherd declares no replication; papers with one: lfl" in capsys.readouterr().err
    assert cli.main(["claims", "--scale", "replication", "--paper", "lfl", "--looks", "5", "--results",
                     str(tmp_path)]) == 2
    assert "--looks cannot replace them" in capsys.readouterr().err


def test_claims_dry_run_of_the_replications(capsys, tmp_path):
    assert cli.main(["claims", "--scale", "replication", "--dry-run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ("scale cpu-rep: seeds 100-119, looks [5, 10, 20], claims those the first stage leaves INCONCLUSIVE among "
            "lfl.fig1a.matches_lossless, lfl.eq16.downlink_bits, lfl.fig1a.beats_lgm_ltgm") in out
    assert "bherd" not in out and "gradma" not in out
    assert not any(tmp_path.iterdir())


def test_no_run_judges_what_is_recorded_and_lists_a_paper_still_running(tmp_path, monkeypatch, capsys):
    """``claims --no-run``: nothing runs; a paper whose next look is not all recorded is listed as under way (its
    verdicts would be premature), one whose runs are all there is judged as if it had run."""
    from theory.empirical import report as erep

    paper = toy_paper()
    rep = paper.REPLICATIONS[0]
    with pytest.raises(erun.UnderWay, match="tuning: not started, 0 of 6 runs recorded"):
        erun.run_paper(paper, rep, results_root=tmp_path, progress=False, run_missing=False)
    done = erun.run_paper(paper, rep, results_root=tmp_path, progress=False)
    folder = epaths.runs_folder(tmp_path, None, "cpu-rep")
    unrecorded = []  # cells handed to the runner that have no record: --no-run must hand it none

    def no_new_runs(exps, *a, **k):
        have = {json.loads(p.read_text())["config_hash"] for p in folder.glob("*.json")}
        unrecorded.extend(e for e in exps if e.config_hash() not in have)
        return {}

    monkeypatch.setattr(runner, "run_experiments", no_new_runs)
    again = erun.run_paper(paper, rep, results_root=tmp_path, progress=False, run_missing=False)
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in done["claims"]]
    assert not unrecorded
    victim = next(p for p in folder.glob("*.json") if json.loads(p.read_text())["config"]["seed"] == 103)
    victim.unlink()
    with pytest.raises(erun.UnderWay, match=r"look 1 \(5 seeds\): 9 of 10 runs recorded"):
        erun.run_paper(paper, rep, results_root=tmp_path, progress=False, run_missing=False)
    monkeypatch.setattr(empirical, "papers", lambda name=None: [paper])
    out = erun.run_claims(None, "replication", tmp_path, backend="local", progress=False, run_missing=False,
                          before=None)
    assert out["papers"][0]["under_way"] == "look 1 (5 seeds): 9 of 10 runs recorded"
    md = out["paths"]["markdown"].read_text()
    assert "**Under way, not judged yet:** toy (cpu-rep scale: look 1 (5 seeds): 9 of 10 runs recorded)." in md
    assert erep.REPLICATION not in md  # no replicated claim was judged
    assert cli.main(["claims", "--scale", "replication", "--no-run", "--results", str(tmp_path), "--before", "none",
                     "--no-progress"]) == 0
    assert "toy (cpu-rep scale): under way, not judged (look 1 (5 seeds): 9 of 10 runs" in capsys.readouterr().err
    assert out["paths"]["markdown"].parent == tmp_path / "claims" / epaths.version() / "replication"
    assert not unrecorded
