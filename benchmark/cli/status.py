"""``fedrepro status``: how far along a results folder is (done, running and by whom, failed, pending, time left)."""
from __future__ import annotations

import json
import sys
import time

from benchmark.campaign import status, suite
from . import args


def add_parser(sub) -> None:
    s = sub.add_parser("status", help="how far along a results folder is: done / running (by which runner) / "
                                      "pending / failed / diverged cells, and the time left",
                       description="Per suite and version under the results root (default ./runs): the cells done, "
                                   "running (and by which runner), stalled (their runner is gone), failed (with the "
                                   "last error), pending, and the time left from the cost model. Reads only.")
    s.add_argument("folder", nargs="?", help="results root (default: --results, else ./runs)")
    s.add_argument("--suite", help="only this suite (a shipped suite's name or a suite file), with its pending cells")
    args.results_flags(s, "where the suites' folders are")
    s.add_argument("--device", help="the device of the time estimate: auto | cpu | cuda (default auto)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")
    s.add_argument("--watch", nargs="?", type=float, const=5.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 5) until Ctrl-C")
    s.set_defaults(func=cmd_status)


def cmd_status(a) -> int:
    if a.folder and (a.results or a.publish):
        raise ValueError("give the results root as FOLDER or --results/--publish, not both")
    root = a.folder or args.results_root(a)
    st = suite.load_suite(a.suite) if a.suite else None
    while True:
        out = status.status(root, st, a.device)
        text = json.dumps(out, indent=1, default=str) if a.json else status.render(out)
        if a.watch is None:
            print(text)
            return 0
        if sys.stdout.isatty():
            print("\033[2J\033[H", end="")
        print(f"{time.strftime('%H:%M:%S')} (every {a.watch:g} s; Ctrl-C to stop)\n{text}\n", flush=True)
        time.sleep(a.watch)
