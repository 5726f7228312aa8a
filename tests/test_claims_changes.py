"""``fedrepro report --compare``'s empirical-claims section (benchmark/reports/claims_changes.py, issue 43): each
claim's standing (the replication's verdict where the first stage left it INCONCLUSIVE), and every changed standing
explained from the two reports: stage, seeds, metric, margin, paired differences, each compared arm's tuning."""
from __future__ import annotations

import json

from benchmark import cli
from benchmark.reports import claims_changes


def _pt(lr, accs, status=None):
    acc = {str(1000 + i): a for i, a in enumerate(accs)}
    st = status or {s: "ok" for s in acc}
    return {"point": {"lr": lr}, "mean": sum(accs) / len(accs), "validation_accuracy": acc, "status": st}


def _row(cid, verdict, scale, **kw):
    return {"id": cid, "paper": "p", "verdict": verdict, "scale": scale, "metric": kw.get("metric", "final_accuracy"),
            "margin": {"value": kw.get("margin", 0.01), "reason": "one point"}, "seeds_used": kw.get("seeds", 10),
            "why_stopped": kw.get("why", "decided"), "key_number": kw.get("key", "x vs y: +1.00 points [+0.20, +2.00]")}


def _paper(scale, claims, tuning):
    return {"paper": "p", "scale": {"scale": scale}, "tuning": tuning,
            "claims": [{"id": c, "comparisons": [{"a": "x", "b": "y", "setting": "s"}], **extra}
                       for c, extra in claims]}


def _write(root, version, first, replication=None):
    d = root / "claims" / version
    d.mkdir(parents=True)
    (d / "report.json").write_text(json.dumps(first))
    if replication is not None:
        (d / "replication").mkdir()
        (d / "replication" / "report.json").write_text(json.dumps(replication))


def _versions(tmp_path):
    # 1.0: one tuning seed, y's choice at the end of a 3-point grid (no extension recorded: judged by the grid);
    # c1 INCONCLUSIVE in the first stage and SUPPORTED in the replication; c2 SUPPORTED
    old_tuning = {"s / x": {"points": [_pt(0.001, [0.5]), _pt(0.01, [0.7]), _pt(0.1, [0.6])], "chosen_index": 1},
                  "s / y": {"points": [_pt(0.001, [0.4]), _pt(0.01, [0.5]), _pt(0.1, [0.6])], "chosen_index": 2}}
    _write(tmp_path, "1.0",
           {"claims": [_row("p.c1", "INCONCLUSIVE", "cpu", why="its seed budget is spent"),
                       _row("p.c2", "SUPPORTED", "cpu")],
            "papers": [_paper("cpu", [("p.c1", {}), ("p.c2", {})], old_tuning)]},
           {"claims": [_row("p.c1", "SUPPORTED", "cpu-rep", seeds=40, key="x vs y: +7.71 points [+3.04, +14.71]")],
            "papers": [_paper("cpu-rep", [("p.c1", {})], old_tuning)]})
    # 2.0: three tuning seeds; x's best rate diverged on one of them, so the rule chose the next; y still at an edge
    # (the declared cap); c1 on another metric and margin: CONTRADICTED; c2 unchanged
    new_tuning = {"s / x": {"points": [_pt(0.1, [0.1, 0.74, 0.72], {"1000": "diverged", "1001": "ok", "1002": "ok"}),
                                       _pt(0.01, [0.6, 0.62, 0.64])], "chosen_index": 1, "edge": []},
                  "s / y": {"points": [_pt(0.1, [0.7, 0.72, 0.74]), _pt(0.3, [0.71, 0.73, 0.75])], "chosen_index": 1,
                            "edge": [{"key": "lr", "direction": "up", "why": "cap"}]}}
    _write(tmp_path, "2.0",
           {"claims": [_row("p.c1", "CONTRADICTED", "cpu", metric="tail_accuracy", margin=0.005,
                            key="x vs y: -9.30 points [-14.64, -2.21]"),
                       _row("p.c2", "SUPPORTED", "cpu"), _row("p.c3", "NEGLIGIBLE", "cpu")],
            "papers": [_paper("cpu", [("p.c1", {"metric_reason": "less seed noise"}), ("p.c2", {}), ("p.c3", {})],
                              new_tuning)]})


def test_a_claims_standing_is_its_replications_verdict_where_the_first_stage_left_it_inconclusive(tmp_path):
    _versions(tmp_path)
    old = claims_changes.standings(tmp_path, "1.0")
    assert claims_changes.shown(old["p.c1"]) == "SUPPORTED (cpu-rep, replication)"
    assert claims_changes.shown(old["p.c2"]) == "SUPPORTED (cpu)"
    assert claims_changes.standings(tmp_path, "9.9") is None


def test_a_changed_verdict_is_explained_by_the_two_protocols(tmp_path):
    _versions(tmp_path)
    c = claims_changes.compare_standings(tmp_path, "1.0", "2.0")
    assert (c["unchanged"], c["added"], c["removed"]) == (1, ["p.c3"], [])
    [x] = c["changed"]
    assert (x["id"], x["old"], x["new"]) == ("p.c1", "SUPPORTED (cpu-rep, replication)", "CONTRADICTED (cpu)")
    why = "\n".join(x["why"])
    assert "1.0: **SUPPORTED** at the cpu-rep scale (replication), 40 paired seeds" in why
    assert "Deciding metric: `final_accuracy` in 1.0, `tail_accuracy` in 2.0 (2.0's reason: less seed noise)" in why
    assert "0.01 in 1.0, 0.005 in 2.0" in why
    assert "Paired differences in 1.0: x vs y: +7.71 points" in why and "in 2.0: x vs y: -9.30 points" in why
    tuning_x = next(line for line in x["why"] if "`s / x`" in line)
    assert "1.0: lr=0.01, validation 70.0 on 1 tuning seed, interior (3 points tried)" in tuning_x
    assert "2.0: lr=0.01, validation 62.0 on 3 tuning seeds, interior" in tuning_x
    assert "but lr=0.1 reached 73.0 on the 2 of 3 tuning seeds where it trained (diverged on the other)" in tuning_x
    tuning_y = next(line for line in x["why"] if "`s / y`" in line)
    assert "1.0: lr=0.1, validation 60.0 on 1 tuning seed, at an edge of its grid" in tuning_y
    assert "2.0: lr=0.3, validation 73.0 on 3 tuning seeds, at an edge of its grid" in tuning_y


def test_report_compare_prints_each_changed_claim_with_its_explanation(tmp_path, capsys):
    _versions(tmp_path)
    assert cli.main(["report", "--compare", "1.0", "2.0", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out.split("## Empirical-claim verdicts (CPU scales)")[1].split("## Empirical-claim")[0]
    assert "1 changed, 1 unchanged, 1 added, 0 removed." in out
    assert "### p.c1: SUPPORTED (cpu-rep, replication) -> CONTRADICTED (cpu)" in out
    assert "- Tuning of `s / x`:" in out and "### p.c2" not in out
    assert "Added: `p.c3`" in out


def test_a_choice_is_shown_with_its_lead_over_the_runner_up_and_a_tie_reads_as_one(tmp_path):
    _versions(tmp_path)
    c = claims_changes.compare_standings(tmp_path, "1.0", "2.0")
    why = "\n".join(c["changed"][0]["why"])
    assert "ahead of lr=0.1 by 10.00 points (one tuning seed: no spread)" in why  # 1.0's x
    # 2.0's y: lr=0.3 beat lr=0.1 by one point on each of the 3 seeds: a lead the seeds agree on, not a tie
    tuning_y = next(line for line in c["changed"][0]["why"] if "`s / y`" in line)
    assert tuning_y.endswith("ahead of lr=0.1 by 1.00 +- 0.00 points (paired over the 3 tuning seeds both scored)")
    # 2.0's x: ahead by 10 points on average, but only through the seed where lr=0.1 diverged (+50, -12, -8)
    tuning_x = next(line for line in c["changed"][0]["why"] if "`s / x`" in line)
    assert "ahead of lr=0.1 by 10.00 +- 20.03 points (paired over the 3 tuning seeds both scored): a tie" in tuning_x


def _tie_versions(tmp_path, new_scores):
    row = [_row("p.c1", "SUPPORTED", "cpu")]
    old = {"s / x": {"points": [_pt(0.03, [0.74, 0.70, 0.78]), _pt(0.1, [0.78, 0.68, 0.75])], "chosen_index": 0},
           "s / y": {"points": [_pt(0.03, [0.5, 0.5, 0.5]), _pt(0.1, [0.6, 0.6, 0.6])], "chosen_index": 1}}
    new = {"s / x": {"points": [_pt(0.03, new_scores[0]), _pt(0.1, new_scores[1])], "chosen_index": 1},
           "s / y": old["s / y"]}
    _write(tmp_path, "1.0", {"claims": row, "papers": [_paper("cpu", [("p.c1", {})], old)]})
    _write(tmp_path, "2.0", {"claims": row, "papers": [_paper("cpu", [("p.c1", {})], new)]})


def test_tuning_choices_that_changed_are_listed_and_a_flip_within_the_seeds_noise_is_a_tie(tmp_path, capsys):
    # x flips from lr=0.03 to lr=0.1 on the same tuning seeds while the seeds disagree on which is better (+5,
    # -1, -4 points): a tie, as FedSWA's dir0.1 choice was from 0.4.0 to 0.5.0; y keeps its choice
    _tie_versions(tmp_path, ([0.73, 0.70, 0.78], [0.78, 0.69, 0.745]))
    t = claims_changes.compare_standings(tmp_path, "1.0", "2.0")["tuning"]
    assert t["both"] == 2 and [x["tuning"] for x in t["changed"]] == ["s / x"]
    [x] = t["changed"]
    assert x["same_seeds"] and x["tie"]
    assert x["new"].startswith("lr=0.1, ahead of lr=0.03 by 0.17 +- ") and x["new"].endswith(": a tie")
    assert cli.main(["report", "--compare", "1.0", "2.0", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 of the 2 tunings that both versions ran chose another point in 2.0 (1 of them a tie in 2.0" in out
    assert "| p       | cpu     | s / x    |" in out


def test_a_flip_that_every_tuning_seed_agrees_on_is_not_a_tie(tmp_path):
    _tie_versions(tmp_path, ([0.70, 0.66, 0.74], [0.78, 0.75, 0.81]))  # lr=0.1 ahead by 7-9 points on each seed
    [x] = claims_changes.compare_standings(tmp_path, "1.0", "2.0")["tuning"]["changed"]
    assert not x["tie"] and "a tie" not in x["new"]
