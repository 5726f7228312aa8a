"""How much does one tuning seed decide? The claims' tuning cells again on more tuning seeds (a pilot, no verdict).

Made for claims 0.3.0, whose arms were tuned on one tuning seed (0.4.0 tunes on three and its report shows every
point's spread over them, so a 0.4.0 scale is refused here). Every arm of those claims was tuned on seed 1000
(``CpuScale.tune_seeds = (1000,)``): each grid point
trains once on seed 1000 with a validation split held out of the training data, and the point with the best
validation accuracy is the arm's (``benchmark.campaign.tuning.select``). When two grid points' scores differ by less than
their seed-to-seed spread, that choice is a draw, and the comparison that follows compares arms tuned by chance.

This module measures it for a scale: it runs the scale's tuning cells on more tuning seeds (the same cells, seeds
and validation split otherwise; no final runs, no test set) and tabulates, per (setting, arm), each grid point's
validation accuracy on every seed, the point seed 1000 chose (the report's choice; its scores are read from the
claims report, so seed 1000 is not run again) and the point the mean over all the seeds would choose. It decides
nothing about any claim: the claims' verdicts stand as judged, with their one-seed tuning declared in the report.
What it informs is the design of a later version (how many tuning seeds a scale needs).

``fedrepro claims --tuning-noise 1001 1002`` (``--tuning-scales lfl:cpu fedbat:cpu`` to choose scales; default
every CPU scale of ``--paper`` or of all papers, or of ``--claims FILE``) runs the cells under
``<root>/claims/<version>/tuning-noise/runs`` (resumable; Ctrl-C keeps the finished runs) and writes
``<root>/claims/<version>/tuning-noise.md`` (``--publish``: the committed results/).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

from benchmark.campaign import runner, tuning
from benchmark.runs import store

from . import paper as paper_module
from .run import cell_seconds, claims_at, needed
from .scale import paper_scales

FIRST = 1000  # the claims' tuning seed


def scale_of(spec: str):
    """``paper:scale`` -> (paper module, its CpuScale of that name)."""
    name, _, scale = spec.partition(":")
    mod = paper_module(name)
    for sc in paper_scales(mod):
        if sc.name == (scale or "cpu"):
            return mod, sc
    raise ValueError(f"{name} has no CPU scale {scale!r}; its scales: {', '.join(s.name for s in paper_scales(mod))}")


def extra_cells(mod, scale, seeds) -> dict:
    """{(setting, arm): (grid points, [(grid index, seed, experiment)])}: the scale's tuning cells on ``seeds``
    (the claims' own cells but for the seed)."""
    more = dataclasses.replace(scale, tune_seeds=tuple(int(s) for s in seeds))
    return {(s, a): (more.plan(a).points(), tuning.tuning_cells(more.base(s, mod.ARMS[a]), more.plan(a)))
            for s, a in needed(claims_at(more, mod.CLAIMS))}


def first_scores(report: dict, paper: str, scale: str) -> dict:
    """{"setting / arm": [seed-1000 validation accuracy per grid point]} from a claims report.json."""
    for p in report["papers"]:
        if p["paper"] == paper and p["scale"]["scale"] == scale:
            return {k: [(pt.get("validation_accuracy") or {}).get(str(FIRST)) for pt in t["points"]]
                    for k, t in p["tuning"].items()}
    raise KeyError(f"the claims report has no tuning of {paper} at scale {scale}")


def best(scores: list) -> int | None:
    """The index of the best score (ties to the earlier point, None scores lose), as ``tuning.select``."""
    finite = [(-math.inf if v is None else v) for v in scores]
    if all(math.isinf(v) for v in finite):
        return None
    return max(range(len(finite)), key=lambda i: (round(finite[i], 12), -i))


def summarize(points: list, per_seed: dict) -> dict:
    """One (setting, arm): ``per_seed`` {seed: [score per point]} with seed 1000 first. Returns the two choices,
    each point's mean and sd over the seeds, the mean-score gap between the choices (what the one-seed choice
    loses on average), and the seeds' own choices. A point that failed on any seed has no mean (as in
    ``tuning.select``)."""
    seeds = list(per_seed)
    cols = list(zip(*[per_seed[s] for s in seeds]))
    means = [None if any(v is None for v in c) else statistics.fmean(c) for c in cols]
    sds = [None if any(v is None for v in c) or len(c) < 2 else statistics.stdev(c) for c in cols]
    one, many = best(per_seed[seeds[0]]), best(means)
    lost = None if one is None or many is None or means[one] is None else means[many] - means[one]
    return {"points": points, "seeds": seeds, "first": one, "mean_choice": many, "means": means, "sds": sds,
            "lost": lost, "each": [best(per_seed[s]) for s in seeds],
            "edge": tuning.grid_end(points, many) is not None}  # the best may lie beyond the grid


def at_edges(report: dict) -> list[dict]:
    """Per paper and scale of a claims report: its (setting, arm) tunings whose choice (seed 1000's) is an end of
    a one-key grid of three or more values, where the best point may lie beyond the grid."""
    out = []
    for p in report["papers"]:
        out.append({"paper": p["paper"], "scale": p["scale"]["scale"], "n": len(p["tuning"]),
                    "edge": tuning.chosen_at_end(p["tuning"])})
    return out


def edge_lines(report: dict) -> list[str]:
    found = at_edges(report)
    lines = ["## Choices at an end of the grid, every scale of the claims report (seed 1000)", "",
             f"**{sum(len(f['edge']) for f in found)} of {sum(f['n'] for f in found)}** tunings of the claims report "
             "chose an end of a one-key grid of three values: the best point may lie beyond the grid, where the "
             "declared tuning budget (the same for every arm) did not reach. Each comparison is still between arms "
             "tuned alike; how much an arm would gain beyond its grid is not measured.", "",
             "| paper | scale | at an end / tunings | which (setting / arm: chosen point) |", "|---|---|---|---|"]
    for f in found:
        which = "; ".join(f"{k}: {tuning.point_label(pt)}" for k, pt in f["edge"]) or "-"
        lines.append(f"| {f['paper']} | {f['scale']} | {len(f['edge'])} / {f['n']} | {which} |")
    return lines + [""]


def _label(points, i) -> str:
    return "-" if i is None else tuning.point_label(points[i])


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Tuning noise: one tuning seed against {meta['n_seeds']} ({meta['version']})", "",
             f"Code {meta['commit']}; the runs: `fedrepro claims {meta['args']} --backend process --jobs 2` "
             f"(resumable). The new tuning runs took {meta['cpu_minutes']:.0f} CPU-min (summed as recorded, a batched "
             "run counting its share).", "",
             __doc__.split("\n\n")[1].replace("\n", " ").replace("``", "`"), "",
             "A pilot, not a verdict: the claims report's verdicts stand as judged. Seed 1000's scores are the "
             "report's own (`results/claims/<version>/report.json`); the other seeds are new runs of the same cells.",
             ""]
    changed = [r for r in rows if r["first"] != r["mean_choice"]]
    split = [r for r in rows if len(set(r["each"])) > 1]
    lines += [f"**{len(changed)} of {len(rows)}** (setting, arm) pairs would tune to another point with the mean of "
              f"{meta['n_seeds']} tuning seeds than with seed {FIRST} alone; in **{len(split)} of {len(rows)}** the "
              "seeds do not all choose the same point. With a few seeds the mean's choice is an estimate too: a "
              "disagreement shows that one seed's choice is not stable, an agreement is weak evidence that it is. "
              "The last column is the mean validation accuracy of the mean's choice less that of seed 1000's, over "
              "the same seeds (seed 1000's own score among them, which favours its choice).", "",
              f"In **{sum(r['edge'] for r in rows)} of {len(rows)}** the mean's choice is an end of its grid (one "
              "key, three or more values): the best point may lie beyond the grid, which the tuning budget did not "
              "reach.", ""]
    for scale in dict.fromkeys(r["scale"] for r in rows):
        lines += [f"## {scale}", "",
                  "| setting / arm | grid point: mean validation accuracy % +- sd over the seeds (seed 1000's "
                  "choice **bold**, the mean's *italic*) | each seed's choice | same? | the mean lost by seed "
                  "1000's choice |", "|---|---|---|---|---|"]
        for r in [r for r in rows if r["scale"] == scale]:
            cells_ = []
            for i, p in enumerate(r["points"]):
                m, sd = r["means"][i], r["sds"][i]
                txt = f"{tuning.point_label(p)}: " + ("failed on a seed" if m is None else f"{100 * m:.1f}" +
                                                       ("" if sd is None else f" +- {100 * sd:.1f}"))
                if i == r["first"]:
                    txt = f"**{txt}**"
                if i == r["mean_choice"]:
                    txt = f"*{txt}*"
                cells_.append(txt)
            each = ", ".join(f"{s}: {_label(r['points'], c)}" for s, c in zip(r["seeds"], r["each"]))
            lost = "-" if r["lost"] is None else f"{100 * r['lost']:.1f} points"
            lines.append(f"| {r['key']} | {' / '.join(cells_)} | {each} | "
                         f"{'yes' if r['first'] == r['mean_choice'] else '**no**'} | {lost} |")
        lines.append("")
    lines += [f"Note: {meta['note']}", ""] if meta.get("note") else []
    lines += edge_lines(meta["report"]) if meta.get("report") else []
    return "\n".join(lines)


def scales(mods: list, names: list[str] | None = None) -> list:
    """(paper module, CpuScale) pairs: each of ``mods``' CPU scales, or those ``names`` give as ``paper:scale``."""
    if names:
        return [scale_of(n) for n in names]
    return [(m, sc) for m in mods for sc in paper_scales(m)]


def check_seeds(seeds) -> list[int]:
    """The extra tuning seeds as integers; seed 1000 (the report's own) is refused."""
    seeds = [int(s) for s in seeds]
    if FIRST in seeds:
        raise ValueError(f"seed {FIRST} is the claims' own tuning seed: its scores come from the claims report")
    return seeds


def measure(pairs: list, seeds, folder: Path, report: dict, backend: str = "local", jobs=None, progress: bool = True,
            run: bool = True) -> tuple[list[dict], float]:
    """Run the tuning cells of ``pairs`` (paper module, scale) on ``seeds`` into ``folder`` (unless ``run`` is
    False) and tabulate them against ``report``'s seed-1000 scores: the page's rows and the runs' CPU seconds as
    recorded. A seed not finished for a (setting, arm) is left out of its row."""
    seeds = check_seeds(seeds)
    for mod, sc in pairs:
        if tuple(sc.tune_seeds) != (FIRST,):
            raise ValueError(f"{mod.PAPER} scale {sc.name} tunes on seeds {list(sc.tune_seeds)}: the comparison is "
                             f"with a report tuned on seed {FIRST} alone (claims 0.3.0); a report tuned on several "
                             "seeds shows every point's spread over them in its own tuning table")
    todo = {(mod.PAPER, sc.name): extra_cells(mod, sc, seeds) for mod, sc in pairs}
    firsts = {k: first_scores(report, *k) for k in todo}  # a scale the report lacks fails before any run
    cells = [(sd, e) for c in todo.values() for _, cl in c.values() for _, sd, e in cl]
    if run:  # seed by seed: an interrupted run leaves whole seeds rather than a little of every seed
        order = [e for s in seeds for sd, e in cells if sd == s]
        runner.run_experiments(order, folder, backend, jobs, progress=progress, desc="tuning noise")
    recs = {r["config_hash"]: r for r in store.read_records(folder)} if folder.is_dir() else {}
    spent = cell_seconds(recs, [e for _, e in cells])
    rows = []
    for (paper, scale), pairs_ in todo.items():
        for (s, arm), (points, cl) in pairs_.items():
            key = f"{s} / {arm}"
            per_seed = {FIRST: firsts[(paper, scale)][key]}
            for seed in seeds:
                hits = [recs.get(e.config_hash()) for _, sd, e in cl if sd == seed]
                if any(h is None for h in hits):
                    continue  # a seed not finished for this pair: left out (the table says which seeds it has)
                per_seed[seed] = [None if math.isinf(v := tuning.score(h)) else v for h in hits]
            rows.append({"scale": f"{paper} {scale}", "key": key, **summarize(points, per_seed)})
    return rows, spent
