"""``fedrepro report``: a suite's leaderboard, CSV and plots (``benchmark.report``), the comparison of two
versions (``benchmark.compare``), or the paper pages (``theory.pages``)."""
from __future__ import annotations

import sys
from pathlib import Path

from .. import compare, report, runner


def cmd_report(a) -> int:
    if a.paper:
        from theory import pages

        try:
            paths = pages.write_pages(a.paper, a.results, a.out)
        except ValueError as e:
            print(f"fedrepro: {e}", file=sys.stderr)
            return 2
        print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
        return 0
    if a.compare:
        old, new = a.compare
        missing = [v for v in (old, new) if not any((d / v).is_dir() for d in Path(a.results).glob("*"))]
        if missing:
            print(f"fedrepro: no results for version(s) {', '.join(missing)} under {a.results}/<suite>/", file=sys.stderr)
            return 2
        c = compare.compare(Path(a.results), old, new)
        md = compare.markdown(c)
        print(md)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(md)
            print(f"wrote {a.out}", file=sys.stderr)
        return 0
    if not a.suite:
        print("fedrepro: report needs --suite NAME (a leaderboard), --compare OLD NEW or --paper NAME|all",
              file=sys.stderr)
        return 2
    try:
        suite = runner.load_suite(a.suite)
    except runner.SuiteError as e:
        print(f"fedrepro: {e}", file=sys.stderr)
        return 2
    folder = runner.results_dir(a.results, suite.name, a.version)
    if not folder.is_dir():
        print(f"fedrepro: no results in {folder}; run `fedrepro run --suite {suite.name}` first", file=sys.stderr)
        return 2
    paths = report.write_report(suite, folder)
    print(paths["markdown"].read_text())
    print(f"wrote {paths['markdown']}, {paths['csv']}" + "".join(f", {p}" for p in paths["plots"]),
          file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="write a suite's leaderboard, CSV and plots, or compare two versions",
                       description="Read results/<suite>/<version>/*.json and write leaderboard.md, runs.csv and "
                                   "PNG plots beside them; or, with --compare OLD NEW, list the leaderboard cells "
                                   "that moved beyond their seed spread and the theory and empirical-claim verdicts "
                                   "that changed between two versions.")
    p.add_argument("--suite", help="suite name (see `fedrepro list suites`)")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two versions' committed results")
    p.add_argument("--results", default="results", help="results root (default ./results)")
    p.add_argument("--version", help="package version folder (default: the installed version)")
    p.add_argument("--paper", help="write the paper's page, results/papers/<paper>.md (bherd, fedbat, fedswa, gradma, "
                                   "lfl, or all): its claims, theory and empirical verdicts, deviations, leaderboards "
                                   "and the GPU commands, from the committed results")
    p.add_argument("--out", help="with --compare: also write the comparison to this markdown file; with --paper: the "
                                 "folder of the pages (default <results>/papers)")
    p.set_defaults(func=cmd_report)
