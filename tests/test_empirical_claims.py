"""The papers' empirical claims (theory/empirical/<paper>.py) are well formed at both scales, ``fedrepro claims
--quick`` runs end to end and writes its report, and leaderboards of reduced suites stop comparing with
full-scale numbers (benchmark/report.py), and ``fedrepro report --compare`` lists what moved."""
import csv
import json
import math

import pytest

from benchmark import cli, report, runner
from theory import empirical
from theory.empirical import run as erun
from theory.empirical.claim import METRICS, VERDICTS
from theory.empirical.scale import arm_matches


@pytest.mark.parametrize("name", empirical.PAPERS)
def test_paper_claims_are_well_formed(name):
    m = empirical.paper(name)
    assert m.PAPER == name and m.CLAIMS
    ids = [c.id for c in m.CLAIMS]
    assert len(set(ids)) == len(ids) and all(i.startswith(name + ".") for i in ids)
    for c in m.CLAIMS:
        assert c.source and c.quote and c.statement and c.metric in METRICS
        for comp in c.comparisons:
            assert comp.a in m.ARMS and comp.b in m.ARMS and comp.a != comp.b
            assert comp.setting in m.CPU.settings and comp.setting in m.FULL.settings
    # the same tuning budget for every arm; every cell is a valid experiment; the final seeds pair the arms
    sizes = {math.prod(len(v) for v in m.CPU.grids[a].values()) for _, a in erun.needed(m.CLAIMS)}
    assert len(sizes) == 1
    budget = sizes.pop() * len(m.CPU.tune_seeds)
    assert all(len(v) == budget for v in erun.cells(m, m.CPU).values())
    assert not set(m.CPU.tune_seeds) & set(m.CPU.final_seeds)
    assert m.CPU.reductions and m.CPU.kept and m.CPU.grid_rule


@pytest.mark.parametrize("name", empirical.PAPERS)
def test_full_scale_maps_every_arm_to_the_paper_suite(name):
    """The same claims run unchanged on the paper suite's cells (the GPU issue's suites): every (setting, arm)
    finds its cells there, one per seed, and those cells are the paper's setting."""
    m = empirical.paper(name)
    suite = runner.load_suite(m.FULL.suite)
    assert suite.scale == "paper" and suite.paper == name
    for s, a in erun.needed(m.CLAIMS):
        found = [c.experiment for c in suite.cells if runner._matches(m.FULL.settings[s], c.experiment.config())
                 and arm_matches(m.ARMS[a], c.experiment.config())]
        seeds = [e.seed for e in found]
        assert found and len(seeds) == len(set(seeds)), (s, a, seeds)
        assert len({e.config_hash() for e in found}) == len(found)


def test_full_scale_without_records_is_inconclusive(tmp_path):
    out = erun.run_paper(empirical.paper("lfl"), "full", results_root=tmp_path, progress=False, run_missing=False)
    assert {c["verdict"] for c in out["claims"]} == {"INCONCLUSIVE"}
    assert all(c["reason"] == "no paired runs" for c in out["claims"])


def test_claims_quick_writes_the_report(tmp_path, capsys):
    rc = cli.main(["claims", "--quick", "--paper", "bherd", "--results", str(tmp_path), "--no-progress"])
    assert rc == 0
    folder = next((tmp_path / "claims").glob("*/quick/partial/bherd"))
    data = json.loads((folder / "report.json").read_text())
    md = (folder / "report.md").read_text()
    claims = empirical.paper("bherd").CLAIMS
    assert [c["id"] for c in data["claims"]] == [c.id for c in claims]
    for c in data["papers"][0]["claims"]:
        assert c["verdict"] in VERDICTS and c["scale"] == "quick"
        assert (folder / f"{c['id']}.png").is_file()
        for x in c["comparisons"]:
            assert x["n"] == 3 and len(x["values"]) == 3 and not x["unpaired"]
    tuned = data["papers"][0]["tuning"]
    assert len(tuned) == 6 and all(t["complete"] for t in tuned.values())
    assert "Reductions (paper -> here)" in md and "validation split" in md
    # resuming runs nothing again
    rc = cli.main(["claims", "--quick", "--paper", "bherd", "--results", str(tmp_path), "--no-progress"])
    assert rc == 0
    again = json.loads((folder / "report.json").read_text())
    assert again["papers"][0]["cells"].get("ok", 0) == 0
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in data["claims"]]


def test_claims_rejects_an_unknown_paper(capsys):
    assert cli.main(["claims", "--paper", "nope"]) == 2
    assert "unknown paper" in capsys.readouterr().err


def _rec(alg, acc, seed, partition="iid", **cfg):
    c = {"algorithm": alg, "algorithm_args": {}, "dataset": "digits", "partition": partition, "num_clients": 10,
         "clients_per_round": None, "seed": seed, "rounds": 5, "model": "logreg", **cfg}
    return {"config": c, "config_hash": f"{alg}{seed}{partition}{c['clients_per_round']}", "status": "ok",
            "final": {"test_accuracy": acc, "bits_up_per_round": 1.0, "num_params": 1},
            "history": [], "environment": {"device": "cpu"}, "code_version": {"git_commit": "abc"}}


def test_reduced_leaderboards_show_paper_numbers_for_orientation_only():
    ref = runner.Reference({"algorithm": "fedavg"}, 88.9, 0.2, "Table 1")
    recs = [_rec("fedavg", 0.7, s) for s in range(2)]
    md = report.leaderboard(recs, [ref], "t", comparable=False)
    assert "paper 88.9 ± 0.2 at full scale" in md and "Δ" not in md and "orientation only" in md
    md = report.leaderboard(recs, [ref], "t", comparable=True)
    assert "Δ -18.90, outside spread" in md


def test_equivalent_algorithms_are_named_in_their_cells():
    recs = [_rec("lfl", 0.5, 0, clients_per_round=5), _rec("lfl", 0.6, 0, partition="labelcnt:1")]
    md = report.leaderboard(recs, title="t")
    assert md.count("= LB here") == 1  # the partial-participation column only
    assert report.equivalence({"algorithm": "fedprox", "algorithm_args": {"mu": 0}}).startswith("= FedAvg")
    assert report.equivalence({"algorithm": "fedprox", "algorithm_args": {}}) is None


def test_reduced_suite_report_lists_the_claim_verdicts(tmp_path):
    folder = tmp_path / "results" / "fedbat_reduced" / "9.9.9"
    folder.mkdir(parents=True)
    (tmp_path / "results" / "claims" / "9.9.9").mkdir(parents=True)
    (tmp_path / "results" / "claims" / "9.9.9" / "report.json").write_text(json.dumps({"claims": [
        {"id": "fedbat.table1.matches_fedavg", "paper": "fedbat", "verdict": "SUPPORTED", "scale": "cpu",
         "key_number": "+0.5"}, {"id": "lfl.x", "paper": "lfl", "verdict": "INCONCLUSIVE", "scale": "cpu"}]}))
    text = report.claim_verdicts("fedbat", folder)
    assert "fedbat.table1.matches_fedavg`: **SUPPORTED**" in text and "lfl.x" not in text
    assert "(../../claims/9.9.9/report.md)" in text
    assert report.claim_verdicts("fedbat", tmp_path / "results" / "fedbat_reduced" / "1.0.0") == ""


def _csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=report.CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in report.CSV_FIELDS})


def test_compare_lists_moved_cells_and_changed_verdicts(tmp_path, capsys):
    def rows(accs, alg="fedavg", status="ok"):
        return [{"cell": alg, "algorithm": alg, "algorithm_args": "{}", "dataset": "digits", "seed": s,
                 "status": status, "test_accuracy_fraction": a} for s, a in enumerate(accs)]
    _csv(tmp_path / "s1" / "1.0" / "runs.csv", rows([0.80, 0.82, 0.81]) + rows([0.5, 0.6], "fedprox"))
    _csv(tmp_path / "s1" / "2.0" / "runs.csv", rows([0.90, 0.91, 0.92]) + rows([0.55, 0.58], "fedprox"))
    for v, verdict in (("1.0", "HOLDS"), ("2.0", "VIOLATED")):
        (tmp_path / "theory" / v).mkdir(parents=True)
        (tmp_path / "theory" / v / "report.json").write_text(json.dumps({"claims": [
            {"id": "p.t1", "verdict": verdict}, {"id": "p.t2", "verdict": "HOLDS"}]}))
    rc = cli.main(["report", "--compare", "1.0", "2.0", "--results", str(tmp_path), "--out", str(tmp_path / "c.md")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "1 moved beyond their seed spread, 1 within it" in out
    theory = out.split("## Theory verdicts")[1].split("##")[0]
    assert [line.split("|")[1:4] for line in theory.splitlines() if "p.t1" in line] == [[" p.t1    ", " HOLDS ",
                                                                                         " VIOLATED "]]
    assert "1 changed, 1 unchanged" in out and "No report for 1.0 and 2.0" in out
    assert (tmp_path / "c.md").read_text().strip() == out.strip()
    assert cli.main(["report", "--compare", "1.0", "3.0", "--results", str(tmp_path)]) == 2


def test_runs_csv_has_a_cell_column_without_the_seed(tmp_path):
    recs = [_rec("fedavg", 0.7, s) for s in range(2)]
    report.write_csv(recs, tmp_path / "runs.csv")
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert rows[0]["cell"] == rows[1]["cell"] and rows[0]["config_hash"] != rows[1]["config_hash"]


def test_model_width_option_keeps_the_paper_default():
    from benchmark import models

    assert models.param_count(models.build("fedbat_cnn", (1, 28, 28), 10)) == 390_880
    assert models.param_count(models.build("lfl_cnn_mnist", (1, 28, 28), 10)) == 130_890
    assert models.param_count(models.build("fedbat_cnn", (1, 28, 28), 10, width=0.25)) == 25_144
    with pytest.raises(ValueError, match="width"):
        models.build("fedbat_cnn", (1, 28, 28), 10, width=0)
