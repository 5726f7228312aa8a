"""Reports that do not surprise: runs.csv says its units and keeps diverged runs out of a plain mean, wall time
without warm-up; a one-seed leaderboard shows no "± 0.00"; reports cite no file the repository does not ship."""
import csv
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmark.reports import compare, leaderboard as report
from benchmark.campaign import suite

ROOT = Path(__file__).resolve().parents[1]


def _rec(alg="fedavg", seed=0, status="ok", acc=0.8, partition="iid"):
    hist = [{"round": t, "bits_up": 100, "test_accuracy": acc, "test_loss": 0.5, "wall_time": 1.0 + 0.25 * t}
            for t in range(1, 5)]
    return {"config": {"algorithm": alg, "algorithm_args": {}, "dataset": "digits", "partition": partition,
                       "num_clients": 10, "clients_per_round": 5, "seed": seed, "rounds": 4, "model": "logreg"},
            "config_hash": f"{alg}{seed}{partition}", "status": status, "history": hist,
            "final": {"test_accuracy": acc, "test_loss": 0.5, "train_loss": 0.4, "bits_up_per_round": 100.0,
                      "wall_time": 2.5, "num_params": 10}, "message": "" if status == "ok" else "diverged at round 3",
            "execution": {"group_runs": 4}, "environment": {"device": "cpu"}, "code_version": {"git_commit": "abc"}}


def test_one_seed_shows_no_spread_and_several_seeds_do():
    one = report.leaderboard([_rec(), _rec("fedprox", acc=0.7)], title="t")
    assert "±" not in one.split("| method")[1] and "80.00" in one and "seed 0 only" in one
    many = report.leaderboard([_rec(seed=s, acc=a) for s, a in ((0, 0.8), (1, 0.9))], title="t")
    assert "85.00 ± 7.07" in many and "mean ± std over seeds [0, 1]" in many
    mixed = report.leaderboard([_rec(seed=0, acc=0.8), _rec(seed=1, status="diverged")], title="t")
    assert "**80.00** (1 diverged)" in mixed


def test_runs_csv_units_diverged_runs_and_warmup(tmp_path):
    recs = [_rec(seed=0, acc=0.8), _rec(seed=1, acc=0.9), _rec(seed=2, status="diverged", acc=0.1)]
    report.write_csv(recs, tmp_path / "runs.csv")
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert "test_accuracy" not in rows[0] and "wall_time" not in rows[0]
    assert {"test_accuracy_fraction", "warmup_s", "wall_time_excl_warmup_s"} <= set(rows[0])
    bad = [r for r in rows if r["status"] == "diverged"][0]
    assert bad["test_accuracy_fraction"] == bad["test_loss"] == bad["best_round"] == ""
    # a plain mean over the column's numbers is the mean over the runs that finished ok
    vals = [float(r["test_accuracy_fraction"]) for r in rows if r["test_accuracy_fraction"]]
    assert np.isclose(np.mean(vals), 0.85)
    ok = rows[0]
    # setup 2.5 - 2.0 = 0.5 s plus the first round's 1.25 s; rounds 2..4 took 2.0 - 1.25 s
    assert float(ok["warmup_s"]) == pytest.approx(1.75) and float(ok["wall_time_excl_warmup_s"]) == pytest.approx(0.75)
    assert ok["batched_runs"] == "4"


def test_compare_reads_runs_csv_of_both_column_names(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("cell,algorithm,status,test_accuracy\nc,fedavg,ok,0.5\nc,fedavg,ok,0.52\n")
    new = tmp_path / "new.csv"
    report.write_csv([_rec(seed=0, acc=0.9), _rec(seed=1, acc=0.91)], new)
    with open(new) as f:
        rows = list(csv.DictReader(f))
    with open(new, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=report.CSV_FIELDS)
        w.writeheader()
        w.writerows({**r, "cell": "c"} for r in rows)
    c = compare.compare_suite(old, new)
    assert c["matched"] == 1 and len(c["moved"]) == 1 and c["moved"][0]["new"]["mean"] == pytest.approx(90.5)


def _cited_paths(text: str) -> set[str]:
    """Files a report's text cites: ``x.md`` anywhere, and repository paths (``tests/test_lfl.py``)."""
    md = set(re.findall(r"(?<![\w/.-])([\w-]+\.md)\b", text))
    paths = set(re.findall(r"\b((?:algorithms|benchmark|theory|tests|results)/[\w/.-]+\.(?:py|md|toml|json))\b", text))
    return md | paths


def _shipped() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return set(files) | {Path(f).name for f in files}


@pytest.mark.parametrize("name", suite.suite_names())
def test_a_suite_report_cites_only_files_the_repository_ships(name):
    s = suite.load_suite(name)
    text = s.description + "\n".join(str(v) for v in s.notes.values())
    text += "\n".join(note for _, note in report.EQUIVALENCES)
    missing = _cited_paths(text) - _shipped()
    assert not missing, f"{name}'s leaderboard would cite files the repository does not ship: {sorted(missing)}"


def test_the_citation_check_catches_an_unshipped_file():
    # (a paper's own name, fedbat.md, is shipped since results/papers/fedbat.md is: plant an unshipped summary)
    assert _cited_paths("see fedbat_summary.md section 5.1 and tests/test_nope.py") - _shipped() == {
        "fedbat_summary.md", "tests/test_nope.py"}


@pytest.mark.parametrize("m,n", [(3, 3), (5, 5), (3, 5), (1, 4)])
def test_chance_of_disjoint_seed_ranges_matches_a_simulation(m, n):
    """``compare.chance_disjoint`` against 40,000 draws with nothing changed (one normal for both versions);
    the tolerance is 4 binomial standard errors. A planted 1 / C(m+n, m) (one side only) fails at (3, 3)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40_000, m)), rng.normal(size=(40_000, n))
    rate = np.mean((a.max(1) < b.min(1)) | (b.max(1) < a.min(1)))
    p = compare.chance_disjoint(m, n)
    assert abs(rate - p) <= 4 * np.sqrt(p * (1 - p) / 40_000)
    if (m, n) == (3, 3):
        planted = 1 / 20
        assert abs(rate - planted) > 4 * np.sqrt(planted * (1 - planted) / 40_000)


def test_compare_states_how_many_cells_move_by_chance(tmp_path):
    rows = "".join(f"c{i},fedavg,ok,{0.5 + 0.01 * s}\n" for i in range(10) for s in range(3))
    for name in ("old.csv", "new.csv"):
        (tmp_path / name).write_text("cell,algorithm,status,test_accuracy\n" + rows)
    c = compare.compare_suite(tmp_path / "old.csv", tmp_path / "new.csv")
    assert c["matched"] == 10 and c["expected_by_chance"] == pytest.approx(10 * 0.1)
    text = compare.markdown({"old": "a", "new": "b", "suites": {"s": c},
                             **{k: {"old_report": None, "new_report": None} for k in ("theory", "claims", "claims_full")}})
    assert "A change that only redrew the runs' randomness would move about 1.0 of these cells by chance" in text


def test_compare_of_one_seed_cells_says_there_is_no_spread(tmp_path):
    """With one seed per cell in both versions there is no spread to move beyond: the sentence says the cells
    differ or are equal, not that they moved beyond their seed spread; with several seeds it keeps that wording."""
    (tmp_path / "old.csv").write_text("cell,algorithm,status,test_accuracy\na,fedavg,ok,0.5\nb,fedavg,ok,0.6\n")
    (tmp_path / "new.csv").write_text("cell,algorithm,status,test_accuracy\na,fedavg,ok,0.5\nb,fedavg,ok,0.7\n")
    c = compare.compare_suite(tmp_path / "old.csv", tmp_path / "new.csv")
    assert c["one_seed"] == 2 and len(c["moved"]) == 1
    none = {k: {"old_report": None, "new_report": None} for k in ("theory", "claims", "claims_full")}
    text = compare.markdown({"old": "a", "new": "b", "suites": {"s": c}, **none})
    assert "1 differ, 1 is equal (one seed per cell in both versions: no spread" in text
    assert "beyond their seed spread" not in text.split("### s")[1]
    (tmp_path / "new.csv").write_text("cell,algorithm,status,test_accuracy\na,fedavg,ok,0.5\na,fedavg,ok,0.52\n"
                                      "b,fedavg,ok,0.7\n")
    c = compare.compare_suite(tmp_path / "old.csv", tmp_path / "new.csv")
    text = compare.markdown({"old": "a", "new": "b", "suites": {"s": c}, **none})
    assert "1 moved beyond their seed spread, 1 within it" in text


def test_compare_keeps_a_claim_at_two_scales_apart(tmp_path):
    """A claims report holds the main claim once per scale: the compare matches the first scale's row with the
    older version's row and lists the second scale as added, each verdict with its scale (keyed by id alone, the
    4x row overwrote the first: a CONTRADICTED claim showed as NEGLIGIBLE)."""
    def write(v, rows):
        (tmp_path / "claims" / v).mkdir(parents=True)
        (tmp_path / "claims" / v / "report.json").write_text(json.dumps(
            {"claims": [{"id": i, "verdict": verdict, "scale": scale} for i, verdict, scale in rows]}))
    write("1", [("p.a", "INCONCLUSIVE", "cpu"), ("p.b", "SUPPORTED", "cpu")])
    write("2", [("p.a", "CONTRADICTED", "cpu"), ("p.b", "SUPPORTED", "paper"), ("p.a", "NEGLIGIBLE", "cpu4x")])
    v = compare.compare(tmp_path, "1", "2")["claims"]
    assert [{k: x[k] for k in ("id", "old", "new")} for x in v["changed"]] == [
        {"id": "p.a", "old": "INCONCLUSIVE (cpu)", "new": "CONTRADICTED (cpu)"}]
    assert v["unchanged"] == 1 and v["added"] == ["p.a (cpu4x scale)"] and v["removed"] == []
