"""``fedrepro status``: how far along a results folder is (done, running and by whom, failed, pending, time left)."""
from __future__ import annotations

import json
import os
import sys
import time

from benchmark.campaign import status, suite
from . import args


def add_parser(sub) -> None:
    s = sub.add_parser("status", help="how far along a results folder is: done / running (by which runner) / "
                                      "pending / failed / diverged cells, and the time left",
                       description="For every results folder under FOLDER (default ./runs), FOLDER itself included "
                                   "(a suite's --out folder) and its sub-folders (<suite>/<version>/): the cells "
                                   "done, running (and by which runner), stalled (their runner is gone), failed (with "
                                   "the last error), pending, and the time left from the cost model. Reads only: it "
                                   "writes, moves and claims nothing.")
    s.add_argument("folder", nargs="?", help="the folder to read: a results root (default ./runs, or --results) or "
                                             "a suite's --out folder")
    s.add_argument("--suite", help="only this suite (a shipped suite's name or a suite file), with its pending cells")
    s.add_argument("--results", metavar="DIR", help="the results root to read, as FOLDER (default ./runs)")
    s.add_argument("--publish", action="store_true", help="read the repository's committed results/ folder")
    s.add_argument("--device", help="the device of the time estimate: auto | cpu | cuda (default auto)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")
    s.add_argument("--watch", nargs="?", type=float, const=5.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 5) until Ctrl-C")
    s.set_defaults(func=cmd_status)


def cmd_status(a) -> int:
    if a.folder and (a.results or a.publish):
        raise ValueError("give the results root as FOLDER or --results/--publish, not both")
    if a.watch is not None and not a.watch > 0:
        raise ValueError(f"--watch takes a refresh period in seconds > 0, got {a.watch:g}")
    root = a.folder or args.results_root(a)
    if not os.path.isdir(root) and not a.suite:  # a typo, or nothing has run here yet: not "no results", exit 0
        raise FileNotFoundError(f"no folder {root}: nothing has run into it (`fedrepro run` writes under ./runs, or "
                                "where --results/--out say); give the folder that holds the records")
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
