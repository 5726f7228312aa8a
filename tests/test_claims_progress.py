"""``fedrepro claims --dry-run`` with records: what each planned row has recorded and what is left
(``theory.empirical.progress``), the cost re-fitted from this version's own runs."""
import dataclasses
from pathlib import Path

import pytest

from theory.empirical import paper, progress
from theory.empirical.run import arms_of, claims_at
from theory.empirical.scale import paper_scales


def _record(exp, seed, cpu_s, **change):
    cfg = dataclasses.replace(exp, seed=seed, **change).config()
    return {"config": cfg, "config_hash": f"{exp.algorithm}-{cfg['lr']}-{seed}-{sorted(cfg['algorithm_args'].items())}",
            "final": {"cpu_time": cpu_s}}


def _plan(name, scale_name):
    m = paper(name)
    [sc] = [s for s in paper_scales(m, "cpu") if s.name == scale_name]
    return m, sc, sc.cost_plan(arms_of(claims_at(sc, m.CLAIMS)))


def test_rows_count_their_own_runs_and_refit_the_cost(monkeypatch):
    m, sc, plan = _plan("lfl", "cpu")
    lfl = sc.base("noniid_m40_full", m.ARMS["lfl"])
    lb = sc.base("noniid_m40_full", m.ARMS["lb"])
    t = sc.tune_seeds
    recs = ([_record(lfl, s, 60.0, lr=lr) for s in t for lr in (0.01, 0.03)]  # 6 tuning runs, 1 CPU-min each
            + [_record(lfl, s, 120.0, lr=0.03) for s in (sc.seed_start, sc.seed_start + 1)]  # 2 final seeds
            + [_record(lfl, 9999, 60.0)]  # not one of the row's seeds
            + [_record(lfl, t[0], 60.0, rounds=lfl.rounds + 1)]  # another setting
            + [_record(lb, t[0], 30.0)])  # another arm
    monkeypatch.setattr(progress, "read_records", lambda folder: recs)
    monkeypatch.setattr(progress.Path, "is_dir", lambda self: True)
    p = progress.recorded("x", sc, m.ARMS, plan)
    rows = {r["arm"]: r for r in p["rows"]}
    assert rows["lfl"]["done"] == 8 and rows["lfl"]["done_minutes"] == pytest.approx(10.0)
    assert rows["lfl"]["minutes_measured"] == pytest.approx(10.0 / 8)
    assert rows["lfl"]["left_minutes"] == pytest.approx((rows["lfl"]["runs"] - 8) * 10.0 / 8)
    assert rows["lb"]["done"] == 1 and rows["lb"]["minutes_measured"] is None  # under 3 records: the plan's cost
    assert rows["lb"]["left_minutes"] == pytest.approx((rows["lb"]["runs"] - 1) * rows["lb"]["minutes_per_run"])
    assert p["done"] == 9 and p["done_minutes"] == pytest.approx(10.5)
    lines = progress.progress_lines(p)
    assert lines[-1].startswith("recorded: 9 of ") and any(ln.startswith("noniid_m40_full / lfl: 8 of") for ln in lines)


def test_a_fixed_settings_run_is_counted_once(monkeypatch):
    """BHerd's speed claims fix eta = 1e-4 in their own settings, whose cells equal a tuned setting's final runs at
    that value: one cell, counted for the fixed row, not twice."""
    m, sc, plan = _plan("bherd", "paper")
    fixed = next(s for s in sc.fixed)
    arm = next(r["arm"] for r in plan["rows"] if r["setting"] == fixed)
    exp = sc.base(fixed, m.ARMS[arm])
    recs = [_record(exp, sc.seed_start + i, 60.0) for i in range(3)]
    monkeypatch.setattr(progress, "read_records", lambda folder: recs)
    monkeypatch.setattr(progress.Path, "is_dir", lambda self: True)
    p = progress.recorded("x", sc, m.ARMS, plan)
    assert p["done"] == 3 and p["done_minutes"] == pytest.approx(3.0)
    assert next(r for r in p["rows"] if r["setting"] == fixed and r["arm"] == arm)["done"] == 3


def _archive(root, version, scale_folder, records):
    """``records`` written as run records and packed as ``root/claims/<version>/records.tar.gz`` (members relative
    to the version's folder, as the published archives are); the unpacked files removed."""
    import shutil
    import tarfile

    from benchmark.runs.store import write_record

    base = root / "claims" / version
    folder = base / scale_folder / "runs" if scale_folder else base / "runs"
    folder.mkdir(parents=True)
    for r in records:
        write_record(folder, {**r, "status": "ok", "history": []})
    with tarfile.open(base / "records.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname=str(folder.relative_to(base)))
    shutil.rmtree(folder)


def test_the_dry_run_plans_at_the_newest_earlier_versions_recorded_costs(tmp_path):
    """Before this version has records, the plan is also given at the newest earlier version's recorded costs (its
    archive unpacked into a temporary folder, removed after): a row with 3 or more records at their mean, another at
    the declared cost; an older version, a newer one and a folder that is not a version are not read."""
    m, sc, plan = _plan("lfl", "cpu")
    lfl = sc.base("noniid_m40_full", m.ARMS["lfl"])
    lb = sc.base("noniid_m40_full", m.ARMS["lb"])
    t = sc.tune_seeds
    _archive(tmp_path, "0.4.0", None, [_record(lfl, s, 120.0, lr=0.03) for s in t] + [_record(lb, t[0], 30.0)])
    _archive(tmp_path, "0.3.0", None, [_record(lfl, s, 600.0, lr=0.03) for s in t])  # older: not read
    _archive(tmp_path, "0.9.0", None, [_record(lfl, s, 6.0, lr=0.03) for s in t])  # newer than this version
    (tmp_path / "claims" / "partial").mkdir()
    assert [v for v, _ in progress.earlier_versions([tmp_path], "0.5.0")] == ["0.4.0", "0.3.0"]
    unpacked = {}
    try:
        _check_measured_before(tmp_path, sc, m, plan, unpacked)
    finally:
        import shutil
        for folder in unpacked.values():
            shutil.rmtree(folder, ignore_errors=True)


def _check_measured_before(tmp_path, sc, m, plan, unpacked):
    got = progress.measured_before([tmp_path], "0.5.0", sc, m.ARMS, plan, unpacked)
    assert got["version"] == "0.4.0" and got["measured_rows"] == 1 and got["rows"] == len(plan["rows"])
    rows = {r["arm"]: (r, per) for r, per in zip(plan["rows"], got["minutes_per_run"])}
    assert rows["lfl"][1] == pytest.approx(2.0)  # 3 records of 2 CPU-min
    assert rows["lb"][1] == rows["lb"][0]["minutes_per_run"]  # 1 record: the declared cost
    assert got["cpu_minutes"] == pytest.approx(sum(r["runs"] * per for r, per in rows.values()))
    assert "0.4.0's recorded costs (1 of" in progress.measured_before_line(got)
    assert not (tmp_path / "claims" / "0.4.0" / "runs").exists()  # read from a temporary folder, not restored here
    assert all(p.is_dir() for p in unpacked.values())
    assert progress.measured_before([tmp_path], "0.3.0", sc, m.ARMS, plan, {}) is None  # nothing older


def test_the_dry_run_removes_its_temporary_folders(tmp_path, monkeypatch):
    """``plan_claims`` with a results root unpacks earlier archives into temporary folders and removes them."""
    from theory.empirical import run as erun

    made = []
    real = progress.earlier_folder

    def spy(root, version_, scale_name, unpacked):
        out = real(root, version_, scale_name, unpacked)
        made.extend(unpacked.values())
        return out

    m, sc, _ = _plan("lfl", "cpu")
    lfl = sc.base("noniid_m40_full", m.ARMS["lfl"])
    _archive(tmp_path, "0.0.1", None, [_record(lfl, s, 120.0, lr=0.03) for s in sc.tune_seeds])
    monkeypatch.setattr(progress, "earlier_folder", spy)
    monkeypatch.setattr("benchmark.reports.leaderboard.committed_results", lambda: None)
    [p] = erun.plan_claims("lfl", "cpu", root=tmp_path)
    assert p["scales"][0]["measured_before"]["version"] == "0.0.1"
    assert made and not any(Path(f).exists() for f in made)


def test_the_dry_run_says_finished_where_the_papers_report_judged_every_claim(tmp_path, capsys):
    """Once a run into a results root has judged every claim of a paper (no scale under way), the dry run says so and
    counts nothing left for it (the looks its claims did not need are never run); a report listing a scale as under
    way, another paper's report, or a report only in another root does not count."""
    import json

    from benchmark import cli
    from theory.empirical import paths

    folder = tmp_path / "claims" / paths.version() / "partial" / "lfl"
    folder.mkdir(parents=True)
    report = folder / "report.json"
    entry = {"paper": "lfl", "scale": {"scale": "cpu"}}
    claim = {"id": "lfl.fig1a.matches_lossless", "paper": "lfl", "verdict": "INCONCLUSIVE", "stopped": "seeds"}

    def dry_run():
        assert cli.main(["claims", "--paper", "lfl", "--dry-run", "--results", str(tmp_path)]) == 0
        return capsys.readouterr().out

    assert progress.finished_report(tmp_path, "lfl") is None and "finished" not in dry_run()
    report.write_text(json.dumps({"papers": [entry], "claims": [claim]}))
    assert progress.finished_report(tmp_path, "lfl") == report
    assert f"  finished: {report} judged every claim" in dry_run()
    assert progress.finished_report(tmp_path, "fedbat") is None
    assert progress.finished_report(tmp_path / "elsewhere", "lfl") is None
    report.write_text(json.dumps({"papers": [entry, {**entry, "under_way": "tuning: 3 of 45 runs recorded"}],
                                  "claims": [claim]}))
    assert progress.finished_report(tmp_path, "lfl") is None and "finished" not in dry_run()


def test_a_finished_scales_progress_has_nothing_left():
    p = {"rows": [{"setting": "s", "arm": "a", "done": 2, "runs": 5, "done_minutes": 1.0, "minutes_measured": None,
                   "minutes_per_run": 0.5, "left_minutes": 1.5}], "done": 2, "runs": 5, "done_minutes": 1.0,
         "folder": "f", "left_minutes": 1.5}
    assert progress.progress_lines(p)[-1].endswith("left at the worst: 2 CPU-min")
    assert "left at the worst" in progress.progress_lines(p)[0]
    lines = progress.progress_lines(p, finished=True)
    assert lines[-1].endswith("finished: nothing left to run") and not any("left at the worst" in x for x in lines)
