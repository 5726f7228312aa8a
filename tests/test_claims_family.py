"""One error family per paper over all its scales and stages (theory/empirical/family.py), read from the
declarations; each judge decides at its unit's share; the sentence the claims report and the paper pages print
is generated from that same family, word for word (changing the code's alpha or a paper's split changes it); a
report judged before (0.3.0) keeps its recorded sentence when re-rendered, and the pages say what its code did;
one spelling per report field (theory/empirical/fields.py)."""
import dataclasses
import json
import shutil
import types
from pathlib import Path

import pytest

from benchmark import cli
from benchmark.runs.record import code_version
from theory import empirical, pages
from theory.empirical import paired
from theory.empirical import report as erep
from theory.empirical import paths as epaths
from theory.empirical import run as erun
from theory.empirical.claim import Budget, Claim, Comparison, Margin, arm
from theory.empirical.family import family_of, paper_statement, shares_line, statement
from theory.empirical.fields import read_claim, read_report
from theory.empirical.judge import Judge
from theory.empirical.scale import REPLICATION, CpuScale, FullScale, paper_scales, replication

ROOT = Path(__file__).resolve().parents[1]


def toy_paper(split=None):
    """Digits, two first-stage scales ("cpu", "cpu2") and a replication: FedAvg at lr 0.3 against a planted poor
    lr 0.003, decided at 5 seeds."""
    arms = {a.name: a for a in (arm("fedavg", "good"), arm("fedavg", "bad"))}
    claims = [Claim("toy.good_beats_bad", "toy", "s", "q", "s", "final_accuracy",
                    (Comparison("good", "bad", "superior", 0.0, "s"),), margin=Margin(0.01, "1 point (test)"))]
    cpu = CpuScale(settings={"s": dict(dataset="digits", model="logreg", partition="dirichlet:0.5", num_clients=10,
                                       clients_per_round=5, rounds=4, local_steps=5, batch_size=32, lr=0.3,
                                       eval_every=4)},
                   kept=("digits",), reductions=(), grids={"good": {"lr": [0.3]}, "bad": {"lr": [0.003]}},
                   validation=200, executor="sequential", grid_rule="one point", max_seeds=10)
    cpu2 = dataclasses.replace(cpu, name="cpu2", max_seeds=5)
    rep = replication(cpu, claims, cpu_minutes=60, why="test", seed_start=100, looks=(5, 10, 20))
    mod = types.SimpleNamespace(PAPER="toy", TITLE="Toy", ARMS=arms, CLAIMS=claims, CPU=cpu, SCALES=(cpu, cpu2),
                                REPLICATIONS=(rep,), FULL=FullScale("none", {"s": {}}),
                                BUDGET=Budget((5, 10), 60, "test"))
    if split:
        mod.ALPHA_SPLIT = split
    return mod


def test_a_papers_family_is_its_scales_and_stages_in_equal_shares_or_as_declared():
    fam = family_of(toy_paper())
    assert [(u.scale, u.stage, u.looks) for u in fam.units] == [
        ("cpu", "first stage", (5, 10)), ("cpu2", "first stage", (5,)), ("cpu-rep", "replication", (5, 10, 20))]
    assert [fam.alpha_at(s) for s in ("cpu", "cpu2", "cpu-rep")] == pytest.approx([0.05 / 3] * 3)
    assert fam.alpha_at("quick") == fam.alpha_at("cpu") and fam.alpha_at("full") == 0.05  # outside: said so
    with pytest.raises(ValueError, match="scale 'cpu8' is none of the paper's declared scales and stages"):
        fam.alpha_at("cpu8")
    fam = family_of(toy_paper({"cpu": 0.5, "cpu2": 0.25, "cpu-rep": 0.25}))
    assert fam.split == "declared" and fam.alpha_at("cpu") == 0.025 and fam.alpha_at("cpu-rep") == 0.0125
    fam = family_of(toy_paper({"cpu": 0.4, "cpu2": 0.2, "cpu-rep": 0.2, "full": 0.2}))
    assert fam.alpha_at("full") == pytest.approx(0.01) and fam.units[-1].scale == "full"
    assert "0.01 at full (the paper suites' cells, one look of their seeds)" in paper_statement(fam.describe())
    assert "is a family of its own" not in paper_statement(fam.describe())
    for bad, why in (({"cpu": 0.5, "cpu2": 0.5}, "missing: cpu-rep"), ({"cpu": 1, "cpu2": 1, "cpu-rep": 1}, "sum"),
                     ({"cpu": 0.5, "cpu2": 0.25, "cpu-rep": 0.25, "cpu8": 0.1}, "unknown: cpu8"),
                     ({"cpu": 0.5, "cpu2": 0.5, "cpu-rep": 0.0}, "positive")):
        with pytest.raises(ValueError, match=why):
            family_of(toy_paper(bad))


@pytest.mark.parametrize("name", empirical.PAPERS)
def test_every_paper_holds_alpha_over_everything_its_claims_are_judged_on(name):
    """The shares of each paper's declared scales and stages sum to its alpha: 0.05 per paper, not 0.05 per scale
    (0.3.0's family gave a paper with three scales and stages up to 0.15)."""
    mod = empirical.paper(name)
    fam = family_of(mod)
    declared = [sc.name for sc in paper_scales(mod, "cpu") + paper_scales(mod, "replication")]
    assert [u.scale for u in fam.units if u.scale != "full"] == declared
    total = sum(fam.alpha_at(u.scale) for u in fam.units)
    assert total <= paired.ALPHA + 1e-12 and (fam.split == "declared" or total == pytest.approx(paired.ALPHA))


@pytest.mark.parametrize("name", empirical.PAPERS)
def test_the_runner_runs_each_unit_at_the_looks_and_level_of_its_family(name, monkeypatch, tmp_path):
    """What ``run.run_paper`` hands to the looks (spied, nothing runs) is each unit's declared design, and the
    family it records is the family the calibration tests simulate."""
    mod, seen = empirical.paper(name), {}

    def fake(paper, sc, claims, folder, looks, *a, **k):
        seen[sc.name] = tuple(looks)
        return Judge(claims, looks, alpha=family_of(paper).alpha_at(sc.name)), {}, {"cell_seconds": 0.0}

    monkeypatch.setattr(erun, "run_cpu", fake)
    fam = family_of(mod)
    for stage in ("cpu", "replication"):
        for sc in erun.scales_of(mod, stage):
            # a replication declared for what its first stage leaves open reads that stage's report: here every
            # claim of the replicated scale is left INCONCLUSIVE
            first = {"claims": [{"id": c.id, "scale": sc.replicates, "verdict": "INCONCLUSIVE"}
                                for c in mod.CLAIMS]} if sc.replicates else None
            out = erun.run_paper(mod, sc, results_root=tmp_path, progress=False, first=first)
            assert out["family"]["units"] == fam.describe()["units"]
            assert out["family"]["judged_alpha"] == fam.alpha_at(sc.name)
    assert seen == {u.scale: u.looks for u in fam.units}


def test_the_judge_decides_at_its_share_and_the_report_states_it_word_for_word(tmp_path, monkeypatch):
    """End to end on digits: the claims' level is the unit's share of the paper's alpha; the report's sentence is
    ``family.statement`` of the recorded families; the paper alpha and a declared split both change the level and
    the sentence (the records are reused: the second and third runs run nothing)."""
    def report(mod, folder):
        out = erun.run_paper(mod, mod.SCALES[1], results_root=tmp_path, progress=False)
        meta = {"scale": "cpu", "quick": False, "wall_seconds": 0.0, "cpus": 1, "backend": "local", "jobs": None,
                "load_start": "?", "load_end": "?", "note": "", "looks": None}
        paths = erep.write_report([out], tmp_path / folder, meta)
        return out, json.loads(paths["json"].read_text()), paths["markdown"].read_text()

    out, js, md = report(toy_paper(), "equal")
    assert out["claims"][0]["verdict"] == "SUPPORTED" and out["claims"][0]["alpha"] == pytest.approx(0.05 / 3)
    assert js["method"]["errors"] == statement(js["method"]["families"]) and js["method"]["errors"] in md
    assert "at most 0.05 over all of the paper's claims at its 3 scales and stages, split in advance in equal " \
           "shares (Bonferroni): 0.0167 at cpu (first stage, looks 5, 10), 0.0167 at cpu2 (first stage, looks 5), " \
           "0.0167 at cpu-rep (replication, looks 5, 10, 20)" in md
    assert "Holm-adjusted repeated p-values" in md and "(a verdict needs <= 0.0167)." in md
    _, js2, md2 = report(toy_paper({"cpu": 0.5, "cpu2": 0.3, "cpu-rep": 0.2}), "declared")
    assert "split in advance as the paper declares (Bonferroni): 0.025 at cpu" in md2 and "0.015 at cpu2" in md2
    assert js2["papers"][0]["claims"][0]["alpha"] == pytest.approx(0.015)
    monkeypatch.setattr(paired, "ALPHA", 0.1)
    _, js3, md3 = report(toy_paper(), "alpha")
    assert "at most 0.1 over all of the paper's claims" in md3 and "0.0333 at cpu2" in md3
    assert js3["papers"][0]["claims"][0]["alpha"] == pytest.approx(0.1 / 3) and js3["method"]["alpha"] == 0.1


def test_the_sentence_says_what_a_single_unit_and_a_looks_override_are():
    fam = family_of(types.SimpleNamespace(**{**vars(toy_paper()), "SCALES": (toy_paper().CPU,),
                                             "REPLICATIONS": ()})).describe()
    text = paper_statement(fam)
    assert "judged at one scale and stage: 0.05 at cpu (first stage, looks 5, 10), with Holm's procedure" in text
    assert "The full scale (the paper suites' cells), where judged, is a family of its own at 0.05." in text
    assert "looks 5 by --looks instead of the declared 5, 10" in paper_statement(fam, {"cpu": [5]})
    assert "skewness allowance g = 3.4" in statement([fam]) and "Pocock-type" in statement([fam])


def _old_report(tmp_path, version: str = "0.3.0") -> Path:
    """The committed 0.3.0 claims report (judged with one family per scale and stage), copied into
    ``claims/<version>``."""
    folder = tmp_path / "claims" / version
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "results" / "claims" / "0.3.0" / "report.json", folder / "report.json")
    return folder


def test_a_report_judged_before_keeps_its_recorded_sentence_when_rerendered(tmp_path):
    # --rerender rewrites the report of the installed version: the 0.3.0 report stands in the folder it would read
    folder = _old_report(tmp_path, code_version()["package"])
    old = json.loads((folder / "report.json").read_text())
    assert "errors" not in old["method"] and "per paper at 0.05" in old["method"]["text"]
    assert cli.main(["claims", "--rerender", "--results", str(tmp_path)]) == 0
    md, new = (folder / "report.md").read_text(), json.loads((folder / "report.json").read_text())
    assert old["method"]["text"] in md and new["method"] == old["method"]
    assert "Error rates (theory/empirical/family.py)" not in md  # no sentence of the code that did not judge it
    assert [c["verdict"] for c in new["claims"]] == [c["verdict"] for c in old["claims"]]
    # the closest decisions are re-derived with the allowance it was judged with (g = 3), not today's
    p = next(p for p in old["papers"] if p["paper"] == "gradma")
    c = next(c for c in p["claims"] if c["verdict"] == "INCONCLUSIVE")
    again = next(x for q in new["papers"] if q["paper"] == "gradma" for x in q["claims"] if x["id"] == c["id"])
    assert again["closest"]["seeds_to_reach"] == c["closest"]["seeds_to_reach"]


def test_the_pages_state_the_error_rates_of_the_report_and_of_the_code(tmp_path):
    """A page states its report's error rates from the family recorded in it (a planted other split changes the
    page), or, for a report judged before the families, what its code did (0.3.0: up to 3 x 0.05 for FedBAT); and
    the code's family for the scales it runs now."""
    res = tmp_path / "results"
    folder = _old_report(res)
    text = pages.page("fedbat", res)
    assert "one Holm family per scale and stage, each kind of wrong verdict at 0.05 within each, so over this" in text
    assert "over this paper's 2 scales and stages (cpu, cpu4x) up to 2 x 0.05 = 0.1 per kind" in text
    assert "Error rates of the claims at these scales (theory/empirical/family.py): " \
           + paper_statement(family_of(empirical.paper("fedbat")).describe()) in text
    rep = json.loads((folder / "report.json").read_text())
    fam = family_of(empirical.paper("fedbat")).describe()
    fam["units"][0]["alpha"] = 0.04
    rep["method"]["families"] = [fam]
    (folder / "report.json").write_text(json.dumps(rep))
    text = pages.page("fedbat", res)
    assert paper_statement(fam, {"cpu": [5, 10], "cpu4x": [5]}) in text and "0.04 at cpu (first stage" in text


def test_the_replication_text_no_longer_claims_0_05_plus_0_05():
    assert "0.10" not in REPLICATION and "declared for it in advance" in REPLICATION


def test_one_spelling_per_field_and_older_names_are_read(tmp_path):
    claim = Claim("toy.x", "toy", "s", "q", "s", "final_accuracy", (Comparison("A", "B", "superior", 0.0, "s"),),
                  margin=Margin(0.01, "1 point (test)"))
    judge = Judge([claim], (5,))
    judge.look_values(0, [[0.1, 0.12, 0.09, 0.11, 0.1]])
    c = judge.results()[0]
    assert "seeds_used" not in c and "stop_reason" not in c and c["seeds"] == 5
    old = {"id": "x", "seeds_used": 7, "stop_reason": "decided at look 2", "stopped": "decided"}
    assert read_claim(old) == {"id": "x", "seeds": 7, "why_stopped": "decided at look 2", "stopped": "decided"}
    assert read_claim({"seeds": 3, "seeds_used": 9}) == {"seeds": 3}  # this version's name wins
    assert read_claim({"seeds_used": {"a vs b": 5}}) == {}  # a value that does not fit is dropped
    committed = json.loads((ROOT / "results" / "claims" / "0.3.0" / "report.json").read_text())
    for c in read_report(committed)["claims"] + [x for p in read_report(committed)["papers"] for x in p["claims"]]:
        assert "seeds_used" not in c and "stop_reason" not in c and isinstance(c["seeds"], int) and c["why_stopped"]


def test_dry_run_prints_each_papers_family(capsys):
    assert cli.main(["claims", "--dry-run", "--paper", "fedbat"]) == 0
    out = capsys.readouterr().out
    line = shares_line(family_of(empirical.paper("fedbat")).describe())
    assert line in out and line.startswith("error family: each kind of wrong verdict at most 0.05 per paper, ")


def test_a_family_changed_after_a_run_is_refused(tmp_path, monkeypatch):
    """The split is declared before any run: a replication whose paper's family is not the one its first stage
    recorded is refused, and so is a run that would replace a report judged under another family (unless
    --replace); an unchanged family gets to work."""
    from benchmark.campaign import tuning
    from theory.empirical import own

    class Started(Exception):
        pass

    def spy(*a, **k):
        raise Started

    monkeypatch.setattr(tuning, "tune_all", spy)
    monkeypatch.setattr(epaths, "code_version", lambda: {"package": "9.9.9", "git_commit": None, "git_dirty": False})
    monkeypatch.setitem(own.MODULES, "toy", toy_paper())
    first = tmp_path / "claims" / "9.9.9"
    first.mkdir(parents=True)
    recorded = {"meta": {"looks": None}, "method": {"families": [family_of(toy_paper()).describe()]}}
    (first / "report.json").write_text(json.dumps(recorded))
    with pytest.raises(Started):
        erun.run_claims("toy", scale="replication", results_root=tmp_path)
    monkeypatch.setitem(own.MODULES, "toy", toy_paper({"cpu": 0.8, "cpu2": 0.1, "cpu-rep": 0.1}))
    with pytest.raises(ValueError, match=r"toy: its error family is not the one its first stage \(the 9.9.9 report\) "
                                         r"was judged with \(0.0167 at cpu, .* then, 0.04 at cpu, .* now\)"):
        erun.run_claims("toy", scale="replication", results_root=tmp_path)
    mine = epaths.report_folder(tmp_path, "cpu", "toy")
    mine.mkdir(parents=True)
    (mine / "report.json").write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match="or give --replace to replace that report"):
        erun.run_claims("toy", results_root=tmp_path)
    with pytest.raises(Started):
        erun.run_claims("toy", results_root=tmp_path, replace=True)


def test_a_bad_split_is_refused_before_any_run(tmp_path, monkeypatch):
    from benchmark.campaign import tuning
    from theory.empirical import own

    def spy(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(tuning, "tune_all", spy)
    monkeypatch.setitem(own.MODULES, "toy", toy_paper({"cpu": 0.5}))
    with pytest.raises(ValueError, match="toy: ALPHA_SPLIT must give a weight to each of its scales and stages"):
        erun.run_claims("toy", results_root=tmp_path)
    with pytest.raises(ValueError, match="missing: cpu-rep, cpu2"):
        erun.run_paper(own.MODULES["toy"], own.MODULES["toy"].CPU, results_root=tmp_path, progress=False)
