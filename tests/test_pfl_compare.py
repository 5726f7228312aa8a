"""fedrepro against pfl-research (benchmark/perf/pfl/compare.py): the fedrepro side runs the work, and where pfl cannot be
installed the comparison is skipped with the reason (no timed test: the ratio is measured, never asserted)."""
from __future__ import annotations

import subprocess

from benchmark.perf.pfl import compare


def test_fedrepro_side_runs_the_work():
    out = compare.fedrepro_side(repeats=1, rounds=2, threads=1)
    assert len(out["repeats"]) == 1 and out["repeats"][0]["cpu"] > 0 and 0 <= out["final_test_accuracy"] <= 1


def test_skipped_with_the_reason_when_pip_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDREPRO_PFL_VENV", str(tmp_path / "venv"))
    real = subprocess.run

    def fake(cmd, *a, **k):
        if "pip" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for pfl")
        if "venv" in cmd:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return real(cmd, *a, **k)

    monkeypatch.setattr(compare.subprocess, "run", fake)
    res = compare.compare(repeats=1, rounds=1)
    assert set(res) == {"skipped"} and "could not install pfl" in res["skipped"] and "No matching" in res["skipped"]
