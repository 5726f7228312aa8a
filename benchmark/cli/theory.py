"""``fedrepro theory``: run the papers' claims and write a versioned report (``benchmark.reports.theory_report``)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmark.runs.record import code_version
from benchmark.reports.theory_report import counts_line, summary_counts, write_report
from . import args
from .errors import resume_hint


def theory_folder(a) -> Path:
    """Where the report goes: --out, else <results>/theory/<version>; quick mode in quick/ (never over the full
    report), a subset (--paper, --claim, --kind) in partial/ below it. Both are git-ignored."""
    if a.out:
        folder = Path(a.out)
    else:
        folder = Path(args.results_root(a)) / "theory" / code_version()["package"]
        folder = folder / "quick" if a.quick else folder
    return folder / "partial" if (a.paper or a.claim or a.kind) else folder


def cmd_theory(a) -> int:
    from theory import provenance
    from theory.claims import CheckContext, all_claims

    claims = all_claims(a.paper, a.claim)
    if a.kind:
        claims = [c for c in claims if c.kind == a.kind]
        if not claims:
            raise ValueError(f"no {a.kind} claim matches paper={a.paper!r} claim={a.claim!r}")
    folder = theory_folder(a)
    ctx = CheckContext(seed=a.seed, quick=a.quick)
    results = []
    resume_hint(a, lambda: f"after {len(results)} of {len(claims)} claims; nothing written")
    from tqdm.auto import tqdm

    for c in tqdm(claims, desc="claims", unit="claim", disable=None):
        results.append(c.run(ctx))
    files = provenance.file_hashes()
    paths = write_report(results, folder, {"code_hash": provenance.code_hash(files), "hashed_files": files})
    if a.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "series"} for r in results], indent=1, default=str))
    else:
        from tabulate import tabulate

        print(tabulate([[r["id"], r["kind"], r["source"], r["verdict"], r["key_number"]] for r in results],
                       headers=["claim", "kind", "source", "verdict", "key number"], tablefmt="github"))
        print(f"{len(results)} claims. {counts_line(summary_counts(results))}")
    print(f"wrote {paths['markdown']} and {paths['json']}", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("theory", help="check the papers' theorems numerically and write the theory report",
                       description="Run the claims (statements from the papers, and statements derived from them, "
                                   "with checks that can fail: HOLDS; VIOLATED when the conclusion fails with every "
                                   "hypothesis verified in the run; PREMISE FAILS when an assumption the algorithm "
                                   "cannot meet fails; NOT REPRODUCED for an empirical figure not reproduced at the "
                                   "stated setting; INCONCLUSIVE; or UNINFORMATIVE when an algorithm that never "
                                   "moves would pass too) and write "
                                   "<results>/theory/<version>/report.md and report.json (with the hash of the code "
                                   "they were generated on); --publish regenerates the committed report in "
                                   "results/. The full report takes about 5 to 20 minutes on 2 CPU cores; --quick "
                                   "goes to a quick/ folder, a subset (--paper, --claim, --kind) to a partial/ "
                                   "folder (both git-ignored).")
    p.add_argument("--paper", help="only this paper's claims (e.g. lfl, fedbat, qsgd)")
    p.add_argument("--claim", help="only this claim id (or id prefix), e.g. gradma.cor1")
    p.add_argument("--kind", choices=("paper", "derived"), help="only the paper's own claims, or derived statements")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes (about 1-2 minutes for every claim; some verdicts need the full sizes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Monte-Carlo experiments (default 0)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args.results_flags(p, "the report goes to DIR/theory/<version>/")
    p.add_argument("--out", help="write the report into this folder instead")
    p.set_defaults(func=cmd_theory)
