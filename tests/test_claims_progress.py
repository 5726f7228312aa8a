"""``fedrepro claims --dry-run`` with records: what each planned row has recorded and what is left
(``theory.empirical.progress``), the cost re-fitted from this version's own runs."""
import dataclasses

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
