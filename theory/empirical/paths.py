"""Where a version's claims runs and reports are, and which earlier report a new one is set beside.

A version's folder is results/claims/<version>, this code's package version unless :func:`judging` names an
earlier one (``fedrepro claims --version V --no-run``: V's archived records judged again, never run by this
code): its first stage's runs in runs/ (a scale other than "cpu" in <scale>/runs/), the whole report at its top,
one paper's report in partial/<paper>/ (a claims file of the user's in own/<paper>/), a replication's under
replication/. An earlier report is looked for under the results root, then under the repository's committed
results.
"""
from __future__ import annotations

import contextlib
import json
from contextvars import ContextVar
from pathlib import Path

from benchmark.runs.record import code_version

from . import is_own


_JUDGED: ContextVar[str | None] = ContextVar("judged_version", default=None)


def version() -> str:
    """The claims folder's version that runs and reports go to: this code's package version, or the earlier one
    that :func:`judging` names."""
    return _JUDGED.get() or code_version()["package"]


def judged_version() -> str | None:
    """The earlier version whose records :func:`judging` judges again, or None (this code's own version)."""
    return _JUDGED.get()


@contextlib.contextmanager
def judging(version_: str | None):
    """Within it, :func:`version` is ``version_`` (None or this code's own version: no change): the claims folder
    of an earlier version, whose records this code judges again and re-renders but never adds to (its runs were
    made by that version's code; ``fedrepro claims --version``)."""
    own = code_version()["package"]
    token = _JUDGED.set(version_ if version_ and version_ != own else None)
    try:
        yield
    finally:
        _JUDGED.reset(token)


def runs_folder(results_root, version_: str | None, scale_name: str) -> Path:
    base = Path(results_root) / "claims" / (version_ or version())
    return base / "runs" if scale_name == "cpu" else base / scale_name / "runs"


def report_folder(results_root, scale: str, paper: str | None = None, out=None) -> Path:
    """Where ``fedrepro claims`` writes: results/claims/<version>[/<scale>][/partial/<paper>], or ``out``; a
    claims file of the user's (``own``) in .../own/<its PAPER>. One paper never overwrites the whole report, nor
    another paper's."""
    if out:
        return Path(out)
    base = Path(results_root) / "claims" / version()
    folder = base if scale == "cpu" else base / scale
    return folder / ("own" if is_own(paper) else "partial") / paper if paper else folder


def report_roots(results_root) -> list:
    """Where an earlier claims report is looked for: the results root, then the repository's committed results."""
    from benchmark.reports.leaderboard import committed_results

    committed = committed_results()
    same = committed is not None and Path(results_root).resolve() == committed.resolve()
    return [Path(results_root)] + ([committed] if committed is not None and not same else [])


def report_files(root, version_: str, paper: str | None = None) -> list[Path]:
    """A version's first-stage report files under ``root`` that can stand for ``paper``'s, those present, in the
    order they serve: the whole report, then (with ``paper``) the paper's partial report."""
    base = Path(root) / "claims" / version_
    paths = [base / "report.json"] + ([base / "partial" / paper / "report.json"] if paper else [])
    return [p for p in paths if p.is_file()]


def before_report(results_root, before: str | None, paper: str | None = None) -> tuple[str, dict] | None:
    """The claims report whose spreads are shown beside a new one: ``before`` = "previous" (the newest older
    version under the results root, else the committed results), a version (committed first: the root may hold
    this run's own; with ``paper``, else its partial report: its replication run alone) or None; a version nowhere
    is an error."""
    from .report import previous_report

    if not before:
        return None
    prev, roots = None, report_roots(results_root)
    if before != "previous":
        roots = roots[::-1]  # a named version: the committed one first (the root may hold this run's own report)
    for root in roots:
        if before == "previous":
            prev = previous_report(root, version())
        else:
            found = report_files(root, before, paper)
            prev = (before, json.loads(found[0].read_text())) if found else None
        if prev:
            break
    if before != "previous" and not prev:
        raise FileNotFoundError(f"no claims report {before} under {' or '.join(map(str, roots))}/claims to compare "
                                "spreads with; give an existing version")
    return prev


def first_stage(results_root, paper: str) -> dict | None:
    """The first-stage claims report (report.json) of this version that judged ``paper``: the whole report, else
    the paper's partial one, under the results root, then under the committed results; None if there is none."""
    found = first_stage_file(results_root, paper)
    return found[1] if found else None


def first_stage_file(results_root, paper: str, committed: bool = True) -> tuple[Path, dict] | None:
    """``first_stage``'s report as (its path, its contents); ``committed=False``: under the results root only."""
    for root in report_roots(results_root) if committed else [Path(results_root)]:
        for path in report_files(root, version(), paper):
            data = json.loads(path.read_text())
            if any(c.get("paper") == paper for c in data.get("claims", [])):
                return path, data
    return None
