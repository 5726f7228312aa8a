"""The papers' empirical claims (theory/empirical/<paper>.py) are well formed at both scales with their margins
and budgets; the claims runner tunes through the one tuning pipeline, runs the final seeds look by look (each
look's new seeds in one call of the runner), stops when decided or when the CPU budget is spent, and resumes;
``fedrepro claims --quick`` runs end to end and writes its report; the fixed-5-seed records of 0.2.0 get a
clear answer; leaderboards of reduced suites stop comparing with full-scale numbers (benchmark/reports/leaderboard.py), and
``fedrepro report --compare`` lists what moved."""
import csv
import json
import math
import types
from pathlib import Path

import pytest

from benchmark import Experiment, cli
from benchmark.reports import leaderboard as report
from benchmark.campaign import runner, suite as campaign_suite
from theory import empirical
from theory.empirical import paths as epaths
from theory.empirical import run as erun
from theory.empirical.claim import METRICS, VERDICTS, Claim, Comparison, Margin, arm
from theory.empirical.judge import Judge
from theory.empirical.scale import CpuScale, FullScale, arm_matches


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
    # one rule for every arm (the learning rate over the same values, times the paper's other tuned knob where it
    # has one: tests/test_claims_protocol.py); every cell is a valid experiment; the final seeds pair the arms
    for (s, a), v in erun.cells(m, m.CPU).items():
        assert len(v) == math.prod(len(g) for g in m.CPU.grids[a].values()) * len(m.CPU.tune_seeds) >= 9, (s, a)
    assert not set(m.CPU.tune_seeds) & set(m.CPU.final_seeds)
    assert m.CPU.reductions and m.CPU.kept and m.CPU.grid_rule
    # every claim declares its smallest effect that matters (the Claim checks it against the paper's gaps)
    for c in m.CLAIMS:
        assert c.margin or all(x.test == "ratio" for x in c.comparisons)
        assert not c.margin or (c.margin.reason and 0 < c.margin.value <= 0.05)
    assert m.BUDGET.looks[0] >= 2 and m.BUDGET.cpu_minutes > 0 and m.BUDGET.reason
    assert not set(m.CPU.tune_seeds) & set(range(m.CPU.seed_start, m.CPU.seed_start + m.BUDGET.looks[-1]))


@pytest.mark.parametrize("version", empirical.PROTOCOL_VERSIONS)
def test_the_budgets_add_up_to_the_full_report(version):
    """Issue 43: the whole 0.4.0 protocol within 40 CPU-hours (tests/test_claims_protocol.py adds the replications),
    and under every protocol each paper's CPU budget covers the cost plan of its scales at the worst (every
    extension taken, every look run), so that at the measured costs its seeds, not its CPU minutes, are what run
    out."""
    from theory.empirical import declaration, paths
    from theory.empirical.scale import paper_scales

    with paths.judging(version):
        budgets = {n: declaration(empirical.paper(n), "BUDGET") for n in empirical.PAPERS}
        if empirical.PROTOCOLS[version] == "0.4.0":
            assert sum(b.cpu_minutes for b in budgets.values()) <= 40 * 60
        for n, b in budgets.items():
            m = empirical.paper(n)
            plan = sum(sc.cost_plan(erun.arms_of(erun.claims_at(sc, m.CLAIMS)))["cpu_minutes"]
                       for sc in paper_scales(m))
            assert plan <= b.cpu_minutes <= 1.1 * plan + 5, (n, plan, b.cpu_minutes)
            assert max(sc.max_seeds for sc in paper_scales(m)) <= b.looks[-1]


@pytest.mark.parametrize("name", empirical.PAPERS)
def test_full_scale_maps_every_arm_to_the_paper_suite(name):
    """The same claims run unchanged on the paper suite's cells (the GPU issue's suites): every (setting, arm)
    finds its cells there, one per seed, and those cells are the paper's setting."""
    m = empirical.paper(name)
    suite = campaign_suite.load_suite(m.FULL.suite)
    assert suite.scale == "paper" and suite.paper == name
    for s, a in erun.needed(erun.claims_at(m.FULL, m.CLAIMS)):
        found = [c.experiment for c in suite.cells
                 if campaign_suite.config_matches(m.FULL.settings[s], c.experiment.config())
                 and arm_matches(m.ARMS[a], c.experiment.config())]
        seeds = [e.seed for e in found]
        assert found and len(seeds) == len(set(seeds)), (s, a, seeds)
        assert len({e.config_hash() for e in found}) == len(found)


def test_full_scale_without_records_is_inconclusive(tmp_path):
    out = erun.run_paper(empirical.paper("lfl"), "full", results_root=tmp_path, progress=False, run_missing=False)
    assert {c["verdict"] for c in out["claims"]} == {"INCONCLUSIVE"}
    assert all(c["stopped"] == "no runs" for c in out["claims"])


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
        assert (folder / f"{c['id']}.quick.png").is_file()
        for x in c["comparisons"]:
            assert x["n"] == 3 and len(x["values"]) == 3 and not x["unpaired"]
    tuned = data["papers"][0]["tuning"]  # 4 tuned (setting, arm) pairs and 6 at the paper's fixed step
    assert len(tuned) == 10 and all(t["complete"] for t in tuned.values())
    assert sum("fixed" in t for t in tuned.values()) == 6
    assert all(t["steps"] for t in tuned.values() if "fixed" not in t)  # quick: every choice takes an extension step
    assert all(set(pt["status"]) == set(pt["validation_accuracy"]) for t in tuned.values() for pt in t["points"])
    assert "Reductions (paper -> here)" in md and "validation split" in md and "Strongest objection" in md
    assert "(+)" in md and "Not tuned: " in md
    assert "smoke test. These are not verdicts" in md and data["meta"]["quick"]
    # resuming runs nothing again
    rc = cli.main(["claims", "--quick", "--paper", "bherd", "--results", str(tmp_path), "--no-progress"])
    assert rc == 0
    again = json.loads((folder / "report.json").read_text())
    assert again["papers"][0]["cells"].get("ok", 0) == 0
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in data["claims"]]


def test_a_tuning_point_without_a_score_says_why():
    """The tuning table names a grid point's runs' status (diverged, failed) where the report kept it, and both
    where it did not (reports before 2026-11-27), never "failed" for a run that diverged."""
    from theory.empirical.report import _tuning_lines

    def paper(points):
        return {"scale": {"tuning": {"rule": "r", "validation": 10, "tune_seeds": [1000]}}, "budget": {"looks": [5]},
                "tuning": {"s / a": {"chosen_index": 0, "points": points}}}

    ok = {"point": {"lr": 0.1}, "mean": 0.5, "validation_accuracy": {"1000": 0.5}, "status": {"1000": "ok"}}
    bad = {"point": {"lr": 1.0}, "mean": None, "validation_accuracy": {"1000": None}}
    assert "lr=1.0: diverged" in "".join(_tuning_lines(paper([ok, dict(bad, status={"1000": "diverged"})])))
    assert "lr=1.0: failed" in "".join(_tuning_lines(paper([ok, dict(bad, status={"1000": "failed"})])))
    assert "lr=1.0: no score (diverged or failed)" in "".join(_tuning_lines(paper([ok, bad])))


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
    ref = campaign_suite.Reference({"algorithm": "fedavg"}, 88.9, 0.2, "Table 1")
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


# ---------------------------------------------------------------------------------------------- the runner


def toy_paper(cpu_minutes: float = 60.0):
    """A paper on digits: FedAvg at lr 0.3 ("good"), at a planted poor lr 0.003 ("bad", the same budget of one
    grid point), and FedProx(mu = 0), which computes FedAvg."""
    arms = {a.name: a for a in (arm("fedavg", "good"), arm("fedavg", "bad"), arm("fedprox", "prox0", mu=0.0))}
    point = Margin(0.01, "1 point (test)")
    claims = [Claim("toy.good_beats_bad", "toy", "s", "q", "s", "final_accuracy",
                    (Comparison("good", "bad", "superior", 0.0, "s"),), margin=point),
              Claim("toy.prox0_beats_avg", "toy", "s", "q", "s", "final_accuracy",
                    (Comparison("prox0", "good", "superior", 0.0, "s"),), margin=point)]
    cpu = CpuScale(settings={"s": dict(dataset="digits", model="logreg", partition="dirichlet:0.5", num_clients=10,
                                       clients_per_round=5, rounds=6, local_steps=5, batch_size=32, lr=0.3,
                                       eval_every=6)},
                   kept=("digits",), reductions=(), grids={"good": {"lr": [0.3]}, "bad": {"lr": [0.003]},
                                                           "prox0": {"lr": [0.3]}},
                   validation=200, final_seeds=(0, 1, 2), executor="sequential", grid_rule="one point")
    return types.SimpleNamespace(PAPER="toy", TITLE="Toy", ARMS=arms, CLAIMS=claims, CPU=cpu,
                                 FULL=FullScale("none", {"s": {}}),
                                 BUDGET=empirical.Budget((5, 10), cpu_minutes, "test"))


def test_claims_run_look_by_look_stop_when_decided_and_resume(tmp_path, monkeypatch):
    """Tuning in one call of the runner, then look 1: the 5 new seeds of every arm in one call; both claims are
    decided there (the planted worse lr SUPPORTED, FedProx(mu = 0) vs FedAvg NEGLIGIBLE), so look 2's seeds
    are never run. A rerun replays from the records and runs nothing."""
    calls = []
    real = runner.run_experiments

    def spy(exps, *a, **k):
        calls.append(sorted((e.algorithm, e.lr, e.seed) for e in exps))
        return real(exps, *a, **k)

    monkeypatch.setattr(runner, "run_experiments", spy)
    paper = toy_paper()
    out = erun.run_paper(paper, "cpu", results_root=tmp_path, progress=False)
    v = {c["id"]: c for c in out["claims"]}
    assert v["toy.good_beats_bad"]["verdict"] == "SUPPORTED" and v["toy.good_beats_bad"]["seeds"] == 5
    assert v["toy.prox0_beats_avg"]["verdict"] == "NEGLIGIBLE"
    assert len(calls) == 2 and len(calls[0]) == 9  # the tuning cells (3 tuning seeds each), then look 1 only
    assert calls[1] == sorted([("fedavg", 0.3, s) for s in range(5)] + [("fedavg", 0.003, s) for s in range(5)]
                              + [("fedprox", 0.3, s) for s in range(5)])
    folder = epaths.runs_folder(tmp_path, None, "cpu")
    n_records = len(list(Path(folder).glob("*.json")))
    again = erun.run_paper(paper, "cpu", results_root=tmp_path, progress=False)
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in out["claims"]]
    assert again["cells"].get("ok", 0) == 0 and len(list(Path(folder).glob("*.json"))) == n_records
    # a spent CPU budget closes the claims before the next look: INCONCLUSIVE, and the report says why
    spent = erun.run_paper(toy_paper(cpu_minutes=1e-9), "cpu", results_root=tmp_path, progress=False, looks=(5, 10))
    assert all(c["verdict"] == "INCONCLUSIVE" and c["stopped"] == "cpu" for c in spent["claims"])
    assert "CPU budget" in spent["claims"][0]["why_stopped"]


def test_the_fixed_five_seed_records_of_0_2_0_get_a_clear_answer():
    """results/claims/0.2.0 ran every claim at a fixed 5 seeds (BHerd 10): the procedure with that single look
    decides some claims and says, for every other one, that its seed budget is spent and which decision came
    closest."""
    rep = json.loads((Path(__file__).resolve().parents[1] / "results/claims/0.2.0/report.json").read_text())
    got = {}
    for p in rep["papers"]:
        old = {c["id"]: c for c in p["claims"]}
        # the claims as they are now, where 0.2.0 measured the same comparisons by the same metric (0.4.0 moved
        # BHerd's speed claims to the paper's step and an early metric: its 0.2.0 values are another quantity)
        claims = [c for c in empirical.paper(p["paper"]).CLAIMS if c.id in old and old[c.id]["metric"] == c.metric
                  and {(x.a, x.b, x.setting) for x in c.comparisons}
                  <= {(x["a"], x["b"], x["setting"]) for x in old[c.id]["comparisons"]}]
        values = []
        for c in claims:
            by = {(x["a"], x["b"], x["setting"]): x["values"] for x in old[c.id]["comparisons"]}
            values += [by[(x.a, x.b, x.setting)] for x in c.comparisons]
        judge = Judge(claims, (max(len(v) for v in values),))
        judge.look_values(0, values)
        got.update({r["id"]: r for r in judge.results()})
    assert len(got) == 13
    for r in got.values():
        assert r["verdict"] in VERDICTS
        if r["verdict"] == "INCONCLUSIVE":
            assert r["stopped"] == "seeds" and r["closest"]["text"].startswith(("closest to ", "no decision came closer"))
    assert got["lfl.eq16.downlink_bits"]["verdict"] == "SUPPORTED"
    # 0.2.0's 5 seeds decided 4 claims; BHerd's speed claims are judged since 0.4.0 at the paper's step and by an
    # early metric that 0.2.0 did not record, so of the 13 still comparable 2 are decided
    assert sum(r["verdict"] != "INCONCLUSIVE" for r in got.values()) == 2


def test_claims_cli_rejects_bad_looks(capsys):
    assert cli.main(["claims", "--paper", "bherd", "--looks", "5,x"]) == 2
    assert "--looks" in capsys.readouterr().err


def test_report_writes_every_documented_key_and_says_what_each_verdict_means(tmp_path):
    """The report writer (theory/empirical/report.py) on judged values: report.json has the keys its docstring
    documents (the paper pages and ``report --compare`` read them), and report.md says in words that a negligible
    advantage is not supported and which decision an INCONCLUSIVE claim came closest to."""
    from theory.empirical import report as erep

    point = Margin(0.01, "1 point (test)")
    claims = [Claim("toy.tiny", "toy", "src", "q", "s", "final_accuracy", (Comparison("A", "B", "superior", 0.0, "s"),),
                    margin=point),
              Claim("toy.open", "toy", "src", "q", "s", "final_accuracy", (Comparison("A", "C", "superior", 0.0, "s"),),
                    margin=point)]
    judge = Judge(claims, (6,))
    judge.look_values(0, [[0.002, 0.0021, 0.0019, 0.002, 0.0022, 0.0018], [0.01, -0.02, 0.03, 0.0, 0.02, -0.011]])
    res = judge.results()  # (-0.01 last would put the mean, +0.5 points, exactly halfway: a tie of two decisions)
    for r in res:
        r["scale"] = "cpu"
    paper = {"paper": "toy", "title": "Toy", "scale": {"scale": "cpu"}, "claims": res, "tuning": {},
             "budget": {"looks": [6], "cpu_minutes": 1, "reason": "test"}, "cells": {"cell_seconds": 0.0}, "seconds": 0}
    meta = {"scale": "cpu", "quick": False, "wall_seconds": 1.0, "cpus": 2, "backend": "local", "jobs": None,
            "load_start": "?", "load_end": "?", "note": ""}
    paths = erep.write_report([paper], tmp_path, meta)
    data = json.loads(paths["json"].read_text())
    assert set(data) == {"code_version", "environment", "meta", "counts", "method", "papers", "claims", "before"}
    assert set(data["claims"][0]) == {"id", "paper", "verdict", "scale", "metric", "key_number", "seeds", "stopped",
                                      "why_stopped", "margin", "closest"}
    x = data["papers"][0]["claims"][1]["comparisons"][0]
    for key in ("a", "b", "test", "setting", "boundary", "negligible", "paper_gap", "seeds", "values", "n", "mean",
                "sd", "lower", "upper", "levels", "side", "stop_look", "history", "p"):
        assert key in x
    assert [c["verdict"] for c in data["claims"]] == ["NEGLIGIBLE", "INCONCLUSIVE"]
    md = paths["markdown"].read_text()
    assert "**Not supported**: A's difference from B is shown to lie within +-1 point" in md
    assert "Closest decision: closest to " in md and "its seed budget is spent" in md
    assert "Smallest effect that matters: 1 point (test)." in md  # the margin once, not "1 point: 1 point (test)"
    # the spreads of an earlier report beside this one's (issue 22, "report the spread before and after")
    again = erep.write_report([paper], tmp_path / "v2", meta, before=("0.1.0", data))
    md2 = again["markdown"].read_text()
    assert "sd in 0.1.0" in md2 and json.loads(again["json"].read_text())["before"] == "0.1.0"
    row = next(line for line in md2.splitlines() if line.startswith("| A - C > 0 points"))
    sd = f"{100 * data['papers'][0]['claims'][1]['comparisons'][0]['sd']:.2f}"
    assert row.count(sd) == 2
    for v in ("0.1.0", "0.3.0"):
        (tmp_path / "r" / "claims" / v).mkdir(parents=True)
        (tmp_path / "r" / "claims" / v / "report.json").write_text(json.dumps(data))
    assert erep.previous_report(tmp_path / "r", "0.2.0")[0] == "0.1.0"
    assert erep.previous_report(tmp_path / "r", "0.1.0") is None


def test_a_claim_at_two_scales_has_two_sections_two_plots_and_links_to_each(tmp_path):
    """A paper's main claim runs at two scales (issue 22): each scale gets its own section, plot and summary link.
    The claim id alone named one plot, which the second scale overwrote under both sections."""
    import re

    from theory.empirical import report as erep

    claim = Claim("toy.main", "toy", "src", "q", "s", "final_accuracy", (Comparison("A", "B", "superior", 0.0, "s"),),
                  margin=Margin(0.01, "1 point (test)"))
    papers = []
    for scale, diffs in (("cpu", [0.03, 0.04, 0.05, 0.03, 0.04]), ("cpu4x", [-0.03, -0.04, -0.05, -0.03, -0.04])):
        judge = Judge([claim], (5,))
        judge.look_values(0, [diffs])
        res = judge.results()
        res[0]["scale"] = scale
        papers.append({"paper": "toy", "title": "Toy", "scale": {"scale": scale}, "claims": res, "tuning": {},
                       "budget": {"looks": [5], "cpu_minutes": 1, "reason": "test"}, "cells": {"cell_seconds": 0.0},
                       "seconds": 0})
    meta = {"scale": "cpu", "quick": False, "wall_seconds": 1.0, "cpus": 2, "backend": "local", "jobs": None,
            "load_start": "?", "load_end": "?", "note": ""}
    md = erep.write_report(papers, tmp_path, meta)["markdown"].read_text()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["toy.main.cpu.png", "toy.main.cpu4x.png"]
    headings = [line[4:] for line in md.splitlines() if line.startswith("### ")]
    assert headings == ["toy.main (cpu scale)", "toy.main (cpu4x scale)"]
    links = re.findall(r"\[toy\.main\]\(#([^)]+)\)", md)
    assert links == [erep.anchor(h) for h in headings] == ["toymain-cpu-scale", "toymain-cpu4x-scale"]
    assert md.index("(toy.main.cpu.png)") < md.index("### toy.main (cpu4x scale)") < md.index("(toy.main.cpu4x.png)")


def test_the_spreads_before_are_found_in_the_results_root_then_the_committed_results(tmp_path, monkeypatch):
    """``claims --before``: a named version is the committed report first (a user's ./runs may hold this very run's
    report of the same version), else the results root's; "previous" looks in the root, then the committed
    results; a version that is nowhere is an error naming where it looked."""
    committed, root = tmp_path / "committed", tmp_path / "runs"
    for base, v, tag in ((committed, "0.1.0", "committed"), (root, "0.1.0", "root"), (root, "0.0.9", "old")):
        (base / "claims" / v).mkdir(parents=True)
        (base / "claims" / v / "report.json").write_text(json.dumps({"tag": tag}))
    monkeypatch.setattr(report, "committed_results", lambda: committed)
    monkeypatch.setattr(epaths, "code_version", lambda: {"package": "0.2.0"})
    assert epaths.before_report(root, "0.1.0")[1]["tag"] == "committed"
    assert epaths.before_report(root, "0.0.9")[1]["tag"] == "old"
    assert epaths.before_report(root, "previous")[1]["tag"] == "root"
    assert epaths.before_report(tmp_path / "empty", "previous")[1]["tag"] == "committed"
    assert epaths.before_report(root, None) is None
    with pytest.raises(FileNotFoundError, match="no claims report 0.5.0 under"):
        epaths.before_report(root, "0.5.0")
    # a paper's partial report of a version serves for that paper only (its replication run alone)
    (root / "claims" / "0.5.0" / "partial" / "lfl").mkdir(parents=True)
    (root / "claims" / "0.5.0" / "partial" / "lfl" / "report.json").write_text(json.dumps({"tag": "partial"}))
    assert epaths.before_report(root, "0.5.0", "lfl")[1]["tag"] == "partial"
    with pytest.raises(FileNotFoundError):
        epaths.before_report(root, "0.5.0", "bherd")
    with pytest.raises(FileNotFoundError):
        epaths.before_report(root, "0.5.0")


def test_claims_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    from theory.empirical.scale import paper_scales

    assert cli.main(["claims", "--dry-run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    total = sum(sc.cost_plan(erun.arms_of(erun.claims_at(sc, empirical.paper(n).CLAIMS)))["cpu_minutes"]
                for n in empirical.PAPERS for sc in paper_scales(empirical.paper(n)))
    assert f"planned: {total:.0f} CPU-min" in out
    for n in empirical.PAPERS:
        m = empirical.paper(n)
        assert f"{n}: budget {m.BUDGET.cpu_minutes:g} CPU-min" in out
        assert all(f"  scale {sc.name}: looks " in out for sc in paper_scales(m))
    assert not any(tmp_path.iterdir())
    assert cli.main(["claims", "--dry-run", "--paper", "bherd", "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    assert plan["paper"] == "bherd" and plan["scales"][0]["looks"] == [5, 10]


def test_the_budget_counts_cpu_time_not_wall_time():
    """A run slowed by other jobs on the cores (wall time 3x its CPU time) costs its CPU time; a record made before
    cpu_time was recorded costs its wall time; a batched run costs its share of the batch."""
    from theory.empirical.run import cell_seconds

    a, b, c = (Experiment(dataset="digits", seed=s) for s in range(3))
    recs = {a.config_hash(): {"final": {"wall_time": 30.0, "cpu_time": 10.0}},
            b.config_hash(): {"final": {"wall_time": 8.0}},
            c.config_hash(): {"final": {"wall_time": 40.0, "cpu_time": 20.0}, "execution": {"group_runs": 4}}}
    assert cell_seconds(recs, [a, b, c]) == pytest.approx(10.0 + 8.0 + 5.0)


def test_a_run_records_its_cpu_time():
    from benchmark import run

    r = run(Experiment(dataset="digits", model="logreg", num_clients=4, rounds=2, local_steps=1))
    assert r.final["cpu_time"] > 0 and r.final["wall_time"] > 0


def test_a_plot_without_spread_names_one_mark_for_seeds_ci_and_mean(tmp_path, monkeypatch):
    """A deterministic ratio (every seed the same bit count): the dots and the zero-width CI lie under the mean
    diamond, so the legend names that one mark instead of two entries with nothing visible; with a spread, all
    three are named."""
    import matplotlib.figure

    from theory.empirical import report as erep

    labels = []
    real = matplotlib.figure.Figure.legend

    def spy(self, handles, names, *a, **k):
        labels.append(list(names))
        return real(self, handles, names, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "legend", spy)
    claim = Claim("toy.bits", "toy", "s", "q", "s", "bits_down_per_round", (Comparison("A", "B", "ratio", 10.0, "s"),))
    for values in ([11.0] * 5, [11.0, 11.5, 12.0, 11.2, 11.9]):
        judge = Judge([claim], (5,))
        judge.look_values(0, [values])
        c = judge.results()[0]
        c["scale"] = "cpu"
        erep.plot(c, tmp_path / "p.png")
    assert labels[0] == ["mean = every seed = the CI (no spread)"]
    assert labels[1] == ["per seed", "repeated CI (Holm levels)", "mean"]


def test_rerender_rewrites_a_report_from_its_json_alone(tmp_path, capsys):
    """``claims --rerender`` (report.rerender) on a written report with no run records: the markdown comes back
    the same but for the header's code line, which names the code that judged the records; a closest-decision
    sentence spoiled in report.json (standing in for an older wording) is recomputed from the comparisons; the
    verdicts and numbers are untouched. Without a report there it says what to do."""
    from theory.empirical import report as erep

    point = Margin(0.01, "1 point (test)")
    claims = [Claim("toy.open", "toy", "src", "q", "s", "final_accuracy", (Comparison("A", "C", "superior", 0.0, "s"),),
                    margin=point)]
    judge = Judge(claims, (6,))
    judge.look_values(0, [[0.01, -0.02, 0.03, 0.0, 0.02, -0.011]])
    res = judge.results()
    res[0]["scale"] = "cpu"
    paper = {"paper": "toy", "title": "Toy", "scale": {"scale": "cpu"}, "claims": res, "tuning": {},
             "budget": {"looks": [6], "cpu_minutes": 1, "reason": "test"}, "cells": {"cell_seconds": 0.0}, "seconds": 0}
    meta = {"scale": "cpu", "quick": False, "wall_seconds": 1.0, "cpus": 2, "backend": "local", "jobs": None,
            "load_start": "?", "load_end": "?", "note": "", "looks": None}
    folder = tmp_path / "claims" / epaths.version()  # where this version's report goes
    paths = erep.write_report([paper], folder, meta)
    md0, js0 = paths["markdown"].read_text(), json.loads(paths["json"].read_text())
    judged = dict(js0["code_version"], git_commit="0" * 40, git_dirty=False)
    spoiled = json.loads(json.dumps(js0))
    spoiled["code_version"], spoiled["environment"] = judged, {"platform": "the judging machine"}
    spoiled["papers"][0]["claims"][0]["closest"] = {"verdict": "SUPPORTED", "text": "an older wording", "p_holm": 1.0,
                                                    "seeds_to_reach": None}
    paths["json"].write_text(json.dumps(spoiled))
    assert cli.main(["claims", "--rerender", "--results", str(tmp_path)]) == 0
    md1, js1 = paths["markdown"].read_text(), json.loads(paths["json"].read_text())
    assert "an older wording" not in md1
    assert js1["papers"][0]["claims"][0]["closest"] == js0["papers"][0]["claims"][0]["closest"]
    assert js1["meta"]["judged_by"] == judged and f"Code {'0' * 40} judged the records" in md1
    assert md1.splitlines()[3:] == md0.splitlines()[3:] and md1.splitlines()[:2] == md0.splitlines()[:2]
    assert js1["claims"] == js0["claims"] and js1["environment"] == {"platform": "the judging machine"}
    capsys.readouterr()
    assert cli.main(["claims", "--rerender", "--results", str(tmp_path / "nothing")]) == 2
    assert "no claims report to re-render" in capsys.readouterr().err
    assert cli.main(["claims", "--rerender", "--paper", "nosuch", "--results", str(tmp_path)]) == 2
    assert "unknown paper 'nosuch'" in capsys.readouterr().err
