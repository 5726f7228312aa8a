"""``fedrepro bench``: executor throughput, the centralized limit, the auto choice and batched runs
(``benchmark.perf.bench``)."""
from __future__ import annotations

import json
import math
import os
import sys

from benchmark.perf.bench import PRESETS, run_bench, table


def _write(path: str | None, text: str) -> None:
    """``--out``: the result's JSON (``text``) to ``path``, its folder made, said on stderr."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        print(f"wrote {path}", file=sys.stderr)


def cmd_bench(a) -> int:
    log = None if a.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if a.profile_claims:
        return _profile_claims(a, log)
    if a.vs_pfl:
        return _vs_pfl(a, log)
    if a.counts:
        return _counts(a, log)
    if a.tf32_cell:
        return _tf32_cell(a, log)
    if a.compile:
        return _compile(a, log)
    models = tuple(m.strip() for m in a.model.split(",") if m.strip()) if a.model else None
    # a BenchError or a ValueError (e.g. a model that does not fit the preset's inputs) is a bad input (cli.errors)
    result = run_bench(a.preset, models, a.device, a.clients, a.batch_size, a.local_steps, a.repeats, a.warmup,
                       a.threads, a.seed, a.quick, a.runs, a.profile, log, tf32=a.tf32)
    text = json.dumps(result, indent=1)
    _write(a.out, text)
    print(text if a.json else table(result))
    ok = all(math.isfinite(s["vectorized_over_sequential"]) for s in result["configs"])
    return 0 if ok else 1


def claims_cells(papers: list[str] | None = None, rounds: int | None = None) -> list[tuple[str, object, int]]:
    """One cell of each paper's deciding scale (its first CPU scale, the scales of the 0.3.0 claims report): the
    first comparison of its first claim, the measured arm, seed 0, at the scale's settings, at most ``rounds``
    rounds, evaluating as the claims do (``theory.empirical.run.evaluating``); with the scale's rounds."""
    import dataclasses

    from theory.empirical import paper, papers as all_papers
    from theory.empirical.run import claims_at, evaluating
    from theory.empirical.scale import paper_scales

    out = []
    for m in ([paper(p) for p in papers] if papers else all_papers()):
        sc = paper_scales(m, "cpu")[0]
        comp = m.CLAIMS[0].comparisons[0]
        base = sc.base(comp.setting, m.ARMS[comp.a])
        short = dataclasses.replace(base, rounds=min(base.rounds, rounds or base.rounds))
        out.append((f"{m.PAPER} {sc.name} ({comp.setting}, {comp.a})", evaluating(short, claims_at(sc, m.CLAIMS)),
                    base.rounds))
    return out


def _profile_claims(a, log) -> int:
    from benchmark.perf import claims_profile

    papers = [p.strip() for p in a.papers.split(",") if p.strip()] if a.papers else None
    result = claims_profile.profile_cells(claims_cells(papers, a.profile_rounds or None), a.threads or 1, log)
    md = claims_profile.markdown(result)
    _write(a.out, json.dumps(result, indent=1))
    if a.out:
        _write(os.path.splitext(a.out)[0] + ".md", md)
    print(json.dumps(result, indent=1) if a.json else md)
    return 0


def _vs_pfl(a, log) -> int:
    from benchmark.perf.pfl import compare

    result = compare.compare(repeats=a.repeats or 3, threads=a.threads or 1, log=log)
    text = json.dumps(result, indent=1)
    _write(a.out, text)
    if "skipped" in result:
        print(f"fedrepro bench --vs-pfl: skipped: {result['skipped']}", file=sys.stderr)
        return 0
    print(text if a.json else f"{result['work']}: fedrepro {result['best']['fedrepro']['cpu']:.3f} CPU-s "
          f"({result['best']['fedrepro']['wall']:.3f} s wall), pfl {result['best']['pfl']['cpu']:.3f} CPU-s "
          f"({result['best']['pfl']['wall']:.3f} s wall), each side's best: fedrepro "
          f"{result['fedrepro_over_pfl_cpu']:.2f}x pfl in CPU time, {result['fedrepro_over_pfl_wall']:.2f}x in wall time")
    return 0


def _tf32_cell(a, log) -> int:
    from benchmark.perf import tf32_cell

    [(label, exp, _)] = claims_cells(["fedbat"], a.profile_rounds or None)
    if log:
        log(f"{label}: {exp.rounds} rounds with TF32 off, then on")
    result = tf32_cell.compare_tf32(exp, a.device, log)
    _write(a.out, json.dumps(result, indent=1))
    print(json.dumps(result, indent=1) if a.json else tf32_cell.summary(result))
    return 0


def _compile(a, log) -> int:
    from benchmark.perf import compile_bench

    models = tuple(m.strip() for m in a.model.split(",") if m.strip()) if a.model else None
    result = compile_bench.run_compile_bench(a.preset, models, a.device, a.clients, a.batch_size, a.local_steps,
                                             a.repeats, a.threads, a.seed, a.quick, log, graph=a.compile == "graph",
                                             tf32=a.tf32)
    text = json.dumps(result, indent=1)
    _write(a.out, text)
    print(text if a.json else compile_bench.markdown(result))
    return 0


def _counts(a, log) -> int:
    from benchmark.perf import step_counts as perf

    def names(text):
        return tuple(x.strip() for x in text.split(",") if x.strip())

    algs = names(a.algorithms or "fedavg,fedbat,gradma")
    executors = names(a.executors or "sequential,vectorized")
    wanted = names(a.settings or "clean,padded")
    settings = [s for s in perf.table1_settings(clients=a.clients, batch=a.batch_size) if s.name in wanted]
    if len(settings) != len(wanted):
        raise ValueError(f"--settings {a.settings!r}: choose among clean, padded")
    compiled = tuple((s.name, alg, e) for s in settings for alg in algs for e in executors
                     if a.compile and e != "sequential")  # the sequential executor is never compiled
    result = perf.count_table(algs, executors, settings, compiled, log=log)
    text = json.dumps(result, indent=1) if a.json else perf.markdown(result, per_op=a.per_op)
    _write(a.out, text)
    print(text)
    return 0 if all(r["per_step"]["syncs"] == 0 for r in result["rows"]) else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="throughput: vectorized vs sequential executor, and the centralized limit",
        description="Measures, in one process and on the same work, one FedAvg round of the sequential and "
                    "the vectorized executor and centralized training on the same samples (the limit), and "
                    "prints throughputs and ratios. Presets: "
                    + "; ".join(f"{k}: {v.about} (local steps {v.local_steps}, --quick {v.quick_local_steps})"
                                for k, v in PRESETS.items()) + ".")
    p.add_argument("--preset", choices=[*PRESETS, "all"], default="fmnist_cnn",
                   help="configuration(s) to measure (default fmnist_cnn)")
    p.add_argument("--model", help="model name(s), comma-separated, replacing the preset's models "
                                    "(default: fmnist_cnn -> fedbat_cnn; digits -> logreg,mlp)")
    p.add_argument("--device", default="auto", help="cpu | cuda | auto (default auto)")
    p.add_argument("--clients", type=int, default=10, help="clients per round (default 10)")
    p.add_argument("--batch-size", type=int, default=64, help="local batch size (default 64)")
    p.add_argument("--local-steps", type=int, help="local steps per round (default: the preset's)")
    p.add_argument("--repeats", type=int, help="timed repeats, median reported (default 5; --quick 3)")
    p.add_argument("--warmup", type=int, help="untimed warm-up rounds per method (default 1)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and model (default 0)")
    p.add_argument("--quick", action="store_true", help="fewer local steps and repeats (under a minute on a "
                                                       "2-core CPU)")
    p.add_argument("--runs", type=int, default=6, help="cells in the batched-runs measurement (3 seeds x 2 "
                                                        "learning rates for 6; default 6; 0 skips it)")
    p.add_argument("--profile", metavar="FILE", help="also write torch.profiler tables (one vectorized round, one "
                                                      "limit round, one batched job per model) to FILE")
    p.add_argument("--counts", action="store_true", help="instead of timing: count kernels, host syncs, unfused "
                   "bytes and FLOPs per local step (FedBAT Table 1's shapes, clean and padded; --clients and "
                   "--batch-size change them) and the bound they imply on an H100 (benchmark.perf.step_counts); exit 1 if a "
                   "step syncs")
    p.add_argument("--algorithms", help="with --counts: comma-separated (default fedavg,fedbat,gradma)")
    p.add_argument("--executors", help="with --counts: comma-separated among sequential, vectorized, batched "
                                       "(default sequential,vectorized)")
    p.add_argument("--settings", help="with --counts: clean, padded or both (default clean,padded)")
    p.add_argument("--compile", nargs="?", const=True, default=False, choices=["graph"], metavar="graph",
                   help="time the vectorized round compiled (torch.compile) "
                   "against uncompiled and sequential, interleaved in one process, compile time apart "
                   "(benchmark.perf.compile_bench); `--compile graph`: also the step compiled whole and replayed as "
                   "a CUDA graph (on a CPU: the compiled code again); with --counts: also count each "
                   "vectorized/batched step compiled (inductor's kernels counted with torch.profiler)")
    p.add_argument("--tf32", action="store_true", help="measure with TF32 on (CUDA matmuls and cuDNN convolutions; "
                   "never the runs' default; recorded in the result's numerics): with the executors' timing or "
                   "--compile")
    p.add_argument("--tf32-cell", action="store_true", help="instead of timing: FedBAT's deciding claims cell (at "
                   "most --profile-rounds rounds) run with TF32 off, then on, from the same seed: seconds and final "
                   "accuracy of each (benchmark.perf.tf32_cell; on a CPU TF32 changes nothing)")
    p.add_argument("--per-op", action="store_true", help="with --counts: also a table of the bytes and kernels "
                   "per step of each ATen operator (where a step's memory traffic goes)")
    p.add_argument("--profile-claims", action="store_true", help="instead of timing: where the CPU time of one cell "
                   "of each paper's deciding claims scale goes (local steps, evaluation, aggregation, data movement, "
                   "overhead per round, client and job; benchmark.perf.claims_profile); --out FILE.json also writes FILE.md")
    p.add_argument("--vs-pfl", action="store_true", help="instead of timing: fedrepro against pfl-research on issue "
                   "45's small FedAvg work, each in its own process, best of --repeats (default 3); pfl is installed in "
                   "its own venv ($FEDREPRO_PFL_VENV, default ~/.cache/fedrepro/pfl-venv), skipped where it cannot be")
    p.add_argument("--papers", help="with --profile-claims: comma-separated papers (default: all)")
    p.add_argument("--profile-rounds", type=int, default=40, help="with --profile-claims or --tf32-cell: at most this "
                   "many rounds per cell, shares per round (default 40; 0: the scale's rounds)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", help="also write the JSON object to this file")
    p.set_defaults(func=cmd_bench)
