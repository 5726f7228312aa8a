"""``fedrepro claims``: parse the flags, run the papers' empirical claims (``theory.empirical.run.run_claims``,
which writes the versioned report through ``theory.empirical.report``) and print the verdicts. Bad input,
Ctrl-C and dead workers end as every command's do (``cli.errors.run_command``)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import args
from .errors import resume_hint


def _looks(a) -> tuple | None:
    """``--looks`` checked before any work: whole numbers, strictly increasing, at least 2
    (``sequential.check_looks``, the check every design goes through), and only where they are used."""
    from theory.empirical.run import design_looks
    from theory.stats.sequential import check_looks

    if a.looks is None:
        return None
    parts = [v.strip() for v in a.looks.split(",")]
    try:
        looks = check_looks([int(v) for v in parts], "--looks")
    except ValueError as e:
        if any(not v.lstrip("-").isdigit() for v in parts):
            raise ValueError(f"--looks must be whole numbers of paired seeds separated by commas, e.g. 5,10,20,40; "
                             f"got {a.looks!r}") from None
        raise e from None
    for flag, what in ((a.rerender, "--rerender rewrites a report as it was judged"),
                       (a.tuning_noise, "--tuning-noise runs tuning cells only, no looks")):
        if flag:
            raise ValueError(f"{what}; --looks does not apply there: drop --looks")
    return design_looks("quick" if a.quick else a.scale, looks)


def show_plan(a) -> int:
    """``--dry-run``: each paper's budget, scales, looks and cost plan at the measured costs; nothing runs."""
    from theory.empirical.family import shares_line
    from theory.empirical.run import plan_claims
    from theory.empirical.progress import MEASURED_AT_LEAST, finished_report, measured_before_line, progress_lines
    from theory.empirical.scale import plan_lines

    plan = plan_claims(a.paper, a.scale, _looks(a), root=args.results_root(a))
    if a.json:
        print(json.dumps(plan, indent=1, default=str))
        return 0
    finished = {p["paper"]: finished_report(args.results_root(a), p["paper"]) for p in plan} if a.scale == "cpu" else {}
    for p in plan:
        b = p["budget"]
        print(f"{p['paper']}: budget {b['cpu_minutes']:g} CPU-min, looks {b['looks']} ({b['reason']})")
        print(f"  {shares_line(p['family'])}")
        if finished.get(p["paper"]):
            print(f"  finished: {finished[p['paper']]} judged every claim (each decided, or INCONCLUSIVE with its "
                  "budget spent); the looks it did not need are never run")
        for sc in p["scales"]:
            seeds = f"seeds {sc['seeds'][0]}-{sc['seeds'][1]}, " if a.scale == "replication" else ""
            which = "those the first stage leaves INCONCLUSIVE among " if sc.get("inconclusive_only") else ""
            print(f"  scale {sc['scale']}: {seeds}looks {sc['looks']}, claims {which}{', '.join(sc['claims'])}")
            print("\n".join(f"    {line}" for line in plan_lines(sc["plan"])))
            if sc.get("measured_before"):
                print(f"    {measured_before_line(sc['measured_before'])}")
            if sc["recorded"]["done"]:
                print("\n".join(f"    {line}" for line in progress_lines(sc["recorded"],
                                                                        bool(finished.get(p["paper"])))))
    total = sum(p["cpu_minutes"] for p in plan)
    print(f"planned: {total:.0f} CPU-min at the declared costs, about {total / 60 / 2:.1f} h on 2 cores with "
          f"--backend process --jobs 2 (budgets: {sum(p['budget']['cpu_minutes'] for p in plan):g} CPU-min); the "
          f"looks stop early where a claim is decided")
    before = [sc["measured_before"] for p in plan for sc in p["scales"] if sc.get("measured_before")]
    if before:
        versions = sorted({m["version"] for m in before})
        at = sum(m["cpu_minutes"] for m in before) + sum(
            p["cpu_minutes"] for p in plan for sc in p["scales"] if not sc.get("measured_before"))
        print(f"at the newest earlier version's recorded costs ({', '.join(versions)}; the same protocol run by "
              f"that version's code, so an upper bound where this version is faster): {at:.0f} CPU-min at the "
              f"worst, about {at / 60 / 2:.1f} h on 2 cores")
    done = sum(sc["recorded"]["done_minutes"] for p in plan for sc in p["scales"])
    if done:
        left = sum(sc["recorded"]["left_minutes"] for p in plan for sc in p["scales"] if not finished.get(p["paper"]))
        print(f"recorded so far under {args.results_root(a)}: {done:.0f} CPU-min; left at the worst: {left:.0f} CPU-min "
              f"(about {left / 60 / 2:.1f} h on 2 cores), at this version's measured costs where an arm has "
              f"{MEASURED_AT_LEAST} or more records, else the planned ones")
    if a.scale == "cpu" and not a.paper:
        whole = plan + plan_claims(None, "replication")
        print(f"the whole protocol (first stage + the replications declared for what it leaves INCONCLUSIVE): "
              f"{sum(p['cpu_minutes'] for p in whole):.0f} CPU-min planned at the worst, budgets "
              f"{sum(p['budget']['cpu_minutes'] for p in whole):g} CPU-min (--scale replication --dry-run: the "
              "replications); at today's costs per run, as 0.3.0's records measured them (faster runs lower it)")
    return 0


def rerender(a, scale: str) -> int:
    """``--rerender``: rewrite a written report from its own report.json (``theory.empirical.report.rerender``)."""
    from theory.empirical import papers
    from theory.empirical.report import rerender as rewrite
    from theory.empirical.paths import before_report, report_folder

    papers(a.paper)  # an unknown paper is named as such, not as a missing report
    root = args.results_root(a)
    folder = report_folder(root, scale, a.paper, a.out)
    if not (folder / "report.json").is_file():
        raise FileNotFoundError(f"no claims report to re-render at {folder}/report.json: write one first with the "
                                "same flags without --rerender")
    before = json.loads((folder / "report.json").read_text()).get("before")
    paths = rewrite(folder, before_report(root, before) if before else None)
    print(f"re-rendered {paths['markdown']}, {paths['json']} and the plots from {folder}/report.json (no run)",
          file=sys.stderr)
    return 0


def own_claims(a) -> None:
    """``--claims FILE``: load the user's claims file and make it the paper this command runs."""
    from theory.empirical import load_claims, paper

    name = load_claims(a.claims)
    if a.paper and a.paper != name:
        raise ValueError(f"--paper {a.paper} and --claims {a.claims} (PAPER {name!r}) name two things to run; give "
                         "one")
    if a.publish:
        raise ValueError("--publish writes the five papers' committed reports; the claims of your own file go under "
                         "--results (default ./runs), in claims/<version>/own/" + name)
    if a.scale == "full" and not hasattr(paper(name), "FULL"):
        raise ValueError(f"--scale full judges a paper suite's cells; claims file {a.claims} declares no FULL scale "
                         "(theory.empirical.FullScale)")
    a.paper = name


def tuning_noise(a) -> int:
    """``--tuning-noise SEED ...``: the claims' tuning cells again on more tuning seeds, tabulated against the claims
    report's one-seed choice (``theory.empirical.tuning_noise``; no final runs, no verdict)."""
    from pathlib import Path

    from benchmark.runs.record import code_version
    from benchmark.reports.leaderboard import committed_results
    from theory.empirical import is_own, papers
    from theory.empirical import tuning_noise as tn
    from theory.empirical.paths import report_folder

    if a.quick or a.scale != "cpu" or a.rerender:
        raise ValueError("--tuning-noise measures the tuning of the CPU scales (the default --scale cpu); not with "
                         "--quick, --rerender or another --scale")
    own = bool(a.paper) and is_own(a.paper)
    tn.check_seeds(a.tuning_noise)
    pairs = tn.scales(papers(a.paper), a.tuning_scales)
    root, version = args.results_root(a), code_version()["package"]
    page_dir = report_folder(root, "cpu", a.paper, a.out)
    runs = (page_dir if own or a.out else Path(root) / "claims" / version) / "tuning-noise" / "runs"
    where = [page_dir / "report.json", Path(root) / "claims" / version / "report.json"]
    if not own and committed_results() is not None:
        where.append(Path(committed_results()) / "claims" / version / "report.json")
    found = next((w for w in where if w.is_file()), None)
    if found is None:
        raise FileNotFoundError(f"--tuning-noise compares with a claims report's tuning (seed 1000), and there is none "
                                f"at {', '.join(map(str, where))}: run `fedrepro claims` with the same flags first")
    resume_hint(a, f"finished tuning runs are kept in {runs}; run the same command again to resume")
    report = json.loads(found.read_text())
    rows, spent = tn.measure(pairs, a.tuning_noise, runs, report, a.backend, a.jobs, progress=not a.no_progress,
                             run=not a.no_run)
    n = {len(r["seeds"]) for r in rows}
    flags = [f"--tuning-noise {' '.join(map(str, a.tuning_noise))}"] + (
        [f"--tuning-scales {' '.join(a.tuning_scales)}"] if a.tuning_scales else []) + (
        [f"--paper {a.paper}"] if a.paper and not own else []) + ([f"--claims {a.claims}"] if own else [])
    meta = {"version": version, "commit": code_version().get("git_commit"), "args": " ".join(flags),
            "cpu_minutes": spent / 60, "n_seeds": n.pop() if len(n) == 1 else "several", "note": a.note or "",
            "report": report}
    page_dir.mkdir(parents=True, exist_ok=True)
    path = page_dir / "tuning-noise.md"
    path.write_text(tn.markdown(rows, meta))
    changed = sum(r["first"] != r["mean_choice"] for r in rows)
    print(f"{changed} of {len(rows)} tunings would choose another point with the mean of the tuning seeds; "
          f"wrote {path} (seed 1000's scores from {found})", file=sys.stderr)
    return 0


def restore_archived(a) -> None:
    """Before a plan or a run that reads the papers' records (not --quick, --rerender or --claims): with --publish
    the repository's archives of this version's records (``theory.empirical.archive``) are unpacked into
    results/claims/<version> where a record is missing, so a fresh clone resumes from them instead of running
    them again (--no-archive: not); into another root nothing is unpacked, and a line says what --publish would
    reuse."""
    from benchmark.reports.leaderboard import committed_results
    from theory.empirical import archive
    from theory.empirical.paths import version

    if a.quick or a.rerender or a.claims or a.no_archive:
        return
    committed, root = committed_results(), args.results_root(a)
    if committed is None:
        return
    if Path(root).resolve() != committed.resolve():
        found = archive.archives(committed, version())
        if found and not (Path(root) / "claims" / version()).exists():
            print(f"fedrepro: {root}/claims/{version()} is empty: its cells run anew; the repository archives this "
                  f"version's finished records ({', '.join(str(f.relative_to(committed.parent)) for f in found)}), "
                  "which --publish resumes from", file=sys.stderr)
        return
    for arc, wrote, kept in archive.restore(root, version()):
        if wrote:
            print(f"fedrepro: {wrote} archived records restored from {arc.relative_to(committed.parent)} into "
                  f"{Path(root).relative_to(committed.parent)}/claims/{version()} ({kept} already there): those "
                  "cells are not run again", file=sys.stderr)


def judged_version(a) -> str | None:
    """``--version V``: an earlier claims version whose records this code judges again (with --no-run) or whose
    report it re-renders (--rerender), never runs (its records were made by that version's code: resuming them
    here would mix two codes' numbers in one report); checked before anything is read. None: this code's own."""
    from benchmark.runs.record import code_version
    from theory.empirical import PROTOCOL_VERSIONS, PROTOCOLS, archive
    from theory.empirical.paths import report_files, report_roots

    own = code_version()["package"]
    if a.version in (None, own):
        return None
    roots = report_roots(args.results_root(a))
    known = sorted({d.name for r in roots if (r / "claims").is_dir() for d in (r / "claims").iterdir()
                    if report_files(r, d.name) or archive.archives(r, d.name)} | {own})
    if a.version not in known:
        raise ValueError(f"no claims version {a.version!r} under {' or '.join(map(str, roots))}/claims; versions "
                         f"there: {', '.join(known)}")
    bad = [f for f, on in (("--quick", a.quick), ("--dry-run", a.dry_run), ("--tuning-noise", a.tuning_noise),
                           ("--scale full", a.scale == "full")) if on]
    commit = next((json.loads(f.read_text())["code_version"].get("git_commit")
                   for r in roots for f in report_files(r, a.version)), None)
    at = f" (its report names commit {commit[:12]}: git checkout {commit[:12]})" if commit else ""
    if a.no_run and not a.rerender and a.version not in PROTOCOL_VERSIONS:
        raise ValueError(f"--version {a.version}: claims {a.version} ran another protocol than this code declares "
                         f"({', '.join(f'{v}: protocol {p}' for v, p in PROTOCOLS.items())}), so its records "
                         f"would read as cells never run; its report can be re-rendered (--rerender), and its "
                         f"records judged again by its own code{at}")
    if bad or not (a.no_run or a.rerender):
        raise ValueError(f"--version {a.version}: this code is {own}; it judges {a.version}'s archived records "
                         f"again (--no-run) or re-renders its report (--rerender), "
                         + (f"not {', '.join(bad)}; " if bad else "")
                         + f"running or resuming {a.version}'s cells takes the code that ran them{at}; drop "
                         f"--version to run this version's claims")
    return a.version


def cmd_claims(a) -> int:
    from theory.empirical.paths import judging

    with judging(judged_version(a)):
        return claims(a)


def claims(a) -> int:
    from theory.empirical.report import key_number

    looks = _looks(a)  # before anything runs
    if a.claims:
        own_claims(a)
    restore_archived(a)
    if a.tuning_scales and not a.tuning_noise:
        raise ValueError("--tuning-scales chooses the scales of --tuning-noise SEED ...; give the extra tuning seeds too")
    if a.tuning_noise:
        return tuning_noise(a)
    if a.dry_run:
        return show_plan(a)
    if a.rerender:
        return rerender(a, "quick" if a.quick else a.scale)
    from theory.empirical.run import run_claims

    scale = "quick" if a.quick else a.scale
    resume_hint(a, "finished cells are kept; run the same command again to resume (the finished looks replay "
                   "from their records)")
    out = run_claims(a.paper, scale, args.results_root(a), a.out, a.backend, a.jobs, progress=not a.no_progress,
                     run_missing=not a.no_run, looks=looks, note=a.note or "",
                     before=None if a.before == "none" else a.before, replace=a.replace)
    claims = [c for p in out["papers"] for c in p["claims"]]
    if a.json:
        print(json.dumps(out["papers"], indent=1, default=str))
    else:
        from tabulate import tabulate

        print(tabulate([[c["id"], c["verdict"], c["seeds"], c["stopped"], key_number(c)] for c in claims],
                       headers=["claim", "verdict", "seeds", "stopped", "key number"], tablefmt="github"))
    busy = [p for p in out["papers"] if p.get("under_way")]
    for p in busy:
        print(f"{p['paper']} ({p['scale']['scale']} scale): under way, not judged ({p['under_way']}); run the "
              "same command without --no-run to go on", file=sys.stderr)
    if busy and a.version is None and scale != "quick":
        from theory.empirical.paths import before_report, report_files

        root = args.results_root(a)
        prev = before_report(root, "previous")
        if prev:  # --publish where that report is the repository's (its records are restored from its archives)
            publish = a.publish or not report_files(root, prev[0])
            print(f"fedrepro: the newest claims report before this version is {prev[0]}'s: `fedrepro claims "
                  f"--version {prev[0]} --no-run{' --publish' if publish else ''}"
                  f"{' --paper ' + a.paper if a.paper else ''}` judges its records again", file=sys.stderr)
    if scale == "quick":
        print("quick mode: one look of a few seeds, a smoke test; these are not verdicts", file=sys.stderr)
    print(f"wrote {out['paths']['markdown']}, {out['paths']['json']} and {len(claims)} plots", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("claims", help="test the papers' empirical claims on paired runs and write the claims report",
                       description="Run each paper's empirical claims (theory/empirical): tune every method with the "
                                   "same budget on a validation split, then add paired seeds in looks (the paper's "
                                   "budget: 5, then 10, up to each scale's max_seeds) at each of its scales until "
                                   "each claim is SUPPORTED, CONTRADICTED or "
                                   "NEGLIGIBLE, or its budget of seeds or CPU time is spent (INCONCLUSIVE, with the "
                                   "closest decision). --dry-run prints the plan and its CPU time. Writes "
                                   "<root>/claims/<version>/report.md, report.json and one "
                                   "plot per claim (--publish: the committed results/claims). Cells are run records "
                                   "under <root>/claims/<version>/runs: run the same command again to resume (in "
                                   "pieces, in the background).")
    p.add_argument("--paper", help="only this paper's claims (bherd, fedbat, fedswa, gradma, lfl); written to "
                                   "<folder>/partial/<paper>")
    p.add_argument("--claims", metavar="FILE.py",
                   help="claims of your own: a file declaring PAPER, ARMS, CLAIMS, BUDGET and CPU like a paper's "
                        "module (examples/my_claims.py; theory/empirical/own.py says what each is), run and judged "
                        "like the papers' -> <root>/claims/<version>/own/<PAPER>/; algorithms of your own need "
                        "--plugin too")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test of every paper's first scale in minutes (2 rounds, <= 20 samples per client, 2 "
                        "grid values, one look of 3 seeds) for CI, never a verdict; written to <folder>/quick")
    p.add_argument("--scale", choices=["cpu", "replication", "full"], default="cpu",
                   help="cpu: each paper's CPU scales in turn, sharing its budget (default; the paper's own setting "
                        "where a CPU affords it, else a stated reduction, and the main claim again at 4x the "
                        "compute); replication: the claims a scale left INCONCLUSIVE, again on fresh seeds with "
                        "their own declared looks and budget, written to <folder>/replication; full: the paper "
                        "suites' cells (GPU), written to <folder>/full")
    p.add_argument("--looks", help="replace the papers' looks (cumulative paired seeds, strictly increasing, at "
                                   "least 2), e.g. 5 (one fixed look of 5 paired seeds) or 5,10,20; with --dry-run, "
                                   "the plan of those looks; not with --quick, --scale replication or full")
    p.add_argument("--replace", action="store_true",
                   help="replace a written report of another design (other --looks) in the same folder; without "
                        "it such a report is never replaced (give --out DIR to write beside it)")
    p.add_argument("--before", default="previous",
                   help="the claims report version whose spreads (sd of each comparison) are shown beside the new "
                        "ones: previous (default: the newest older version under the results root, else under the "
                        "committed results), a version (the committed one first), or none")
    p.add_argument("--version", metavar="V",
                   help="an earlier claims version (e.g. 0.4.0) whose archived records this code judges again "
                        "(with --no-run; with --publish they are restored first) or whose report it re-renders "
                        "(--rerender), into <root>/claims/V; never runs them, which takes the code that ran them "
                        "(default: this code's version)")
    p.add_argument("--dry-run", action="store_true",
                   help="print each paper's budget, scales, looks and planned CPU time (the measured cost per run "
                        "times the tuning cells and the most paired seeds), and, where the results root has records, what each row "
                        "has recorded and what is left at this version's measured costs; run nothing")
    p.add_argument("--no-run", action="store_true",
                   help="judge existing records only, run nothing: with --scale full the suite's records; on a CPU "
                        "scale, a paper whose next runs are not all recorded is listed as under way, not judged")
    p.add_argument("--rerender", action="store_true",
                   help="rewrite the report written for these flags (report.md, plots, report.json's derived text) "
                        "from its own report.json, with no run records and no run: after a change to the report's "
                        "wording or plots; verdicts and numbers stay as judged, and the header names the code that "
                        "judged them (the spreads beside them: the version the report already names)")
    p.add_argument("--tuning-noise", nargs="+", type=int, metavar="SEED",
                   help="instead of verdicts: run the claims' tuning cells again on these extra tuning seeds (e.g. "
                        "1001 1002; no final runs) and write tuning-noise.md beside the claims report: how often the "
                        "report's one tuning seed picks another grid point than the mean of several would, and which "
                        "choices are an end of their grid; --no-run tabulates the recorded runs")
    p.add_argument("--tuning-scales", nargs="+", metavar="PAPER:SCALE",
                   help="with --tuning-noise: these scales only, e.g. lfl:cpu fedswa:cpu4x (default: every CPU scale "
                        "of --paper, or of every paper)")
    p.add_argument("--no-archive", action="store_true",
                   help="with --publish: do not unpack the repository's archived records of this version "
                        "(results/in-progress/claims-<version>-*.tar.gz, results/claims/<version>/records*.tar.gz) "
                        "where a record is missing; by default they are, so a fresh clone resumes from them")
    p.add_argument("--backend", choices=["local", "process", "ray"], default="local", help="how cells run")
    p.add_argument("--jobs", type=int, default=None, help="parallel workers for --backend process")
    args.results_flags(p, "the report goes to <root>/claims/<version>, its cells' records to .../runs")
    p.add_argument("--out", help="write the report into this folder instead")
    p.add_argument("--note", help="a sentence added to the report's header (e.g. the machine's state)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_claims)
