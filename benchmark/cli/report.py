"""``fedrepro report``: a suite's leaderboard, CSV and plots (``benchmark.reports.leaderboard``), the same from a folder of run
records alone, the comparison of two versions (``benchmark.reports.compare``), or the paper pages (``theory.pages``).

One handler per form (``FORMS``, tried in order: the first whose flag is given runs); a new form is a flag in
``add_parser`` and a handler here."""
from __future__ import annotations

import sys
from pathlib import Path

from benchmark.reports import compare, leaderboard as report
from benchmark.campaign import runner, status, suite
from benchmark.runs import store
from . import args


def report_compare(a) -> int:
    """``--compare OLD NEW``: the committed results/ by default (``--results`` to compare elsewhere)."""
    old, new = a.compare
    root = Path(a.results) if a.results else report.committed_results() or Path("results")
    missing = [v for v in (old, new) if not any((d / v).is_dir() for d in root.glob("*"))]
    if missing:
        raise ValueError(f"no results for version(s) {', '.join(missing)} under {root}/<suite>/")
    md = compare.markdown(compare.compare(root, old, new))
    print(md)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(md)
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def report_paper(a) -> int:
    """``--paper NAME|all``: the paper pages, from the committed results (``--results DIR``: from DIR), written to
    ``--out``, else ``<root>/papers`` (./runs/papers by default; ``--publish``: the committed results/papers)."""
    from theory import pages

    source = Path(a.results) if a.results else report.committed_results()
    if source is None:
        raise ValueError("the paper pages are generated from the committed results/ of a source checkout; give "
                         "--results DIR with its theory/ and claims/ reports instead")
    out = Path(a.out) if a.out else Path(args.results_root(a)) / "papers"
    paths = pages.write_pages(a.paper, source, out)
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def report_folder(a) -> int:
    """``fedrepro report FOLDER``: every folder of run records in FOLDER and below it (``runs/``: each suite's
    ``<suite>/<version>/``, the single runs, ``--out`` folders), each reported with its suite where the folder
    names one (its mark, or a shipped suite's place) and from its records alone otherwise."""
    # a folder whose *.json files are none of them run records (bench results, asv) is not a folder of records
    folders = [f for f in store.record_folders(Path(a.folder)) if store.holds_a_record(f)]
    if not folders:
        raise ValueError(f"no run records (*.json) in {a.folder} or in its folders ({', '.join(store.NOT_WALKED)} "
                         "are not searched: they have reports of their own)")
    for i, folder in enumerate(folders):
        s = status.suite_of(folder)
        _written(report.write_report(s, folder) if s is not None else report.write_records_report(folder))
        if i < len(folders) - 1:
            print()
    return 0


def report_suite(a) -> int:
    """``--suite NAME``: the suite's records under the results root (a suite run from a file: by its name too,
    through the mark its folder keeps)."""
    root = args.results_root(a)
    try:
        s = suite.load_suite(a.suite)
    except suite.SuiteError:
        folder = runner.results_dir(root, a.suite, a.version)
        s = suite.load_folder_suite(folder)
        if s is None:
            if folder.is_dir():
                raise suite.SuiteError(f"unknown suite {a.suite!r}, and its suite file is gone; {folder} holds its "
                                       f"records: `fedrepro report {folder}` reports them from the records alone") \
                    from None
            raise
    folder = runner.results_dir(root, s.name, a.version)
    if not folder.is_dir():
        raise FileNotFoundError(f"no results in {folder}; run `fedrepro run --suite {a.suite}` first"
                                + ("" if a.publish else " (the committed reports' records: add --publish)"))
    return _written(report.write_report(s, folder))


def _written(paths: dict) -> int:
    print(paths["markdown"].read_text())
    print(f"wrote {paths['markdown']}, {paths['csv']}" + "".join(f", {p}" for p in paths["plots"]), file=sys.stderr)
    return 0


FORMS = (("paper", report_paper), ("compare", report_compare), ("folder", report_folder), ("suite", report_suite))


def cmd_report(a) -> int:
    for flag, handler in FORMS:
        if getattr(a, flag, None):
            return handler(a)
    raise ValueError("report needs --suite NAME (a suite's leaderboard), a FOLDER of run records, --compare OLD NEW "
                     "or --paper NAME|all")


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="write a leaderboard, CSV and plots (a suite, or a folder of records), "
                                      "compare two versions, or write the paper pages",
                       description="Read <results>/<suite>/<version>/*.json (or the run records in FOLDER) and write "
                                   "leaderboard.md, runs.csv and PNG plots beside them; or, with --compare OLD NEW, "
                                   "list the leaderboard cells that moved beyond their seed spread and the theory and "
                                   "empirical-claim verdicts that changed between two versions (each changed claim "
                                   "with both versions' protocols and tunings side by side), and every tuning choice "
                                   "that changed, with its lead over the runner-up; or, with --paper NAME|all, "
                                   "write one page per paper from the committed results.")
    p.add_argument("folder", nargs="?", metavar="FOLDER",
                   help="a folder of run records (e.g. a `fedrepro run --out` folder, or runs/<suite>/<version>): its "
                        "leaderboard from the records alone, no suite file needed")
    p.add_argument("--suite", help="suite name or path (see `fedrepro list suites`)")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"),
                   help="compare two versions' results (default: the committed results/)")
    args.results_flags(p, "the suite's records are read from DIR/<suite>/<version>/ and its reports written there")
    p.add_argument("--version", help="package version folder (default: the installed version)")
    p.add_argument("--paper", help="write the paper's page, <paper>.md (bherd, fedbat, fedswa, gradma, lfl, or all): "
                                   "its claims, theory and empirical verdicts, deviations, leaderboards and the GPU "
                                   "commands, from the committed results (or those under --results DIR); into "
                                   "<root>/papers (--publish: the committed results/papers)")
    p.add_argument("--out", help="with --compare: also write the comparison to this markdown file; with --paper: the "
                                 "folder of the pages")
    p.set_defaults(func=cmd_report)
