"""A suite's curves: the headline metric against rounds and against cumulative uplink bits, one panel per
leaderboard column: each method's mean over the seeds of its runs that finished ``ok``, with the range over those
seeds as a band (min to max; one seed: no band), and the legend saying so.

Every method keeps one style (``benchmark.reports.style``: keyed by its name, the same in every report) in every
panel and every figure, and each figure has one legend listing every method it draws. A figure's title names the
suite, the datasets, models and seeds per cell; a panel's title its column and, where they differ between panels,
its dataset, model and seeds; the panels of a figure share one y range, so that their heights compare. A panel
says which methods it lacks because their runs diverged or failed, and which curves lie on top of another
method's (``coinciding``). No panel draws more than 8 methods: with more than ``MAX_LINES`` methods besides FedAvg
the headline figures draw a selection (FedAvg, the suite's paper's own methods, then the best others by mean final
metric over the columns) and say so in their title; ``*_all.png`` then shows every method as small multiples: one
row per group of at most ``MAX_LINES`` methods (FedAvg repeated in each as the reference), one column per
leaderboard column.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmark.reports import style as report_style
from benchmark.reports.columns import column_keys, column_label, column_of, column_sort_key, method_label

MAX_LINES = 7  # methods besides FedAvg in one panel (8 lines at most); more: a selection, and small multiples
COINCIDE = 0.005  # two curves whose gap stays under this fraction of the panel's y span are drawn as one line
KINDS = {"rounds": ("accuracy_vs_rounds", "communication round"),
         "uplink_bits": ("accuracy_vs_uplink_bits", "cumulative uplink bits (log scale)\nsummed over the clients "
                                                    "sampled each round")}


def _mean_curve(recs: list[dict], metric: str) -> dict | None:
    """The mean over seeds of the runs' curves (truncated to the shortest), against rounds and bits, with the
    range over seeds (``lo``, ``hi``)."""
    curves = []
    for r in recs:
        h = [e for e in r["history"] if e.get(metric) is not None]
        cum = np.cumsum([e["bits_up"] for e in r["history"]])
        curves.append(([e["round"] for e in h], [float(cum[e["round"] - 1]) for e in h], [100 * e[metric] for e in h]))
    length = min((len(c[2]) for c in curves), default=0)
    if length == 0:
        return None
    ys = np.array([c[2][:length] for c in curves])
    return {"rounds": curves[0][0][:length], "uplink_bits": curves[0][1][:length], "y": list(ys.mean(axis=0)),
            "lo": list(ys.min(axis=0)), "hi": list(ys.max(axis=0)), "seeds": len(curves)}


def _words(values) -> str:
    return ", ".join(str(v) for v in sorted({str(v) for v in values}))


def _seeds_text(counts) -> str:
    lo, hi = min(counts), max(counts)
    return f"{lo} seed{'s' if hi > 1 else ''}" if lo == hi else f"{lo} to {hi} seeds"


def describe(records: list[dict]) -> dict:
    """What the figures' titles say: {"all": "datasets, models, seeds per method" of every record, and per column
    what differs between the columns and its label does not say (nothing when no part differs)}."""
    names = column_keys(records)
    by_col: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        by_col[column_of(r["config"], names)].append(r)

    def parts(recs) -> dict:
        cells = defaultdict(set)
        for r in recs:
            cells[(column_of(r["config"], names), method_label(r["config"]), r["config"].get("rounds"))].add(
                r["config"].get("seed"))
        return {"dataset": _words(r["config"].get("dataset") for r in recs),
                "model": _words(r["config"].get("model") for r in recs),
                "seeds": f"{_seeds_text([len(v) for v in cells.values()])} per method"}

    out = {"all": ", ".join(parts(records).values())}
    per = {col: parts(recs) for col, recs in by_col.items()}
    differ = [k for k in ("dataset", "model", "seeds") if k not in names and len({p[k] for p in per.values()}) > 1]
    if differ:
        out.update({col: ", ".join(p[k] for k in differ) for col, p in per.items()})
    return out


def mean_curves(records: list[dict], metric: str) -> tuple[tuple, list, dict, dict]:
    """(column fields, columns, {column: {method: curve}}, {column: {method: why it is not drawn}})."""
    names = column_keys(records)
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[column_of(r["config"], names)][method_label(r["config"])].append(r)
    data: dict[tuple, dict] = defaultdict(dict)
    not_drawn: dict[tuple, dict] = defaultdict(dict)
    for col, by_method in groups.items():
        for m, recs in by_method.items():
            curve = _mean_curve([r for r in recs if r["status"] == "ok" and r["history"]], metric)
            if curve is None:
                not_drawn[col][m] = ", ".join(sorted({r["status"] for r in recs}))
            else:
                data[col][m] = curve
    return names, sorted(groups, key=column_sort_key), data, not_drawn


def paper_methods(methods, paper: str | None) -> list[str]:
    """The methods of ``paper``: their algorithm's registry name starts with the paper's (gradma, gradma_w, ...)."""
    return [m for m in methods if paper and m.split("(")[0].startswith(paper)]


def select_methods(data: dict, paper: str | None, limit: int = MAX_LINES) -> list[str]:
    """FedAvg and at most ``limit`` others: the paper's methods, then the others by their mean final metric over
    the columns (the mean of each column's seed mean), best first."""
    methods = report_style.order({m for by_m in data.values() for m in by_m})
    base = [m for m in methods if report_style.is_baseline(m)]
    if len(methods) - len(base) <= limit:
        return methods
    finals = defaultdict(list)
    for by_m in data.values():
        for m, c in by_m.items():
            finals[m].append(c["y"][-1])
    chosen = [m for m in paper_methods(methods, paper) if m not in base]
    rest = sorted((m for m in methods if m not in chosen and m not in base), key=lambda m: (-float(np.mean(finals[m])), m))
    return report_style.order(base + (chosen + rest)[:max(limit, len(chosen))])


def _pyplot():
    import matplotlib  # lazy: matplotlib adds 0.1 s CPU, pyplot 0.4 s, to every fedrepro start (measured)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def coinciding(curves: dict, methods: list, kind: str) -> list[tuple[str, str, float]]:
    """(method, earlier method, largest gap in points) for each curve of ``methods`` that lies on an earlier one
    (legend order) in a panel: the same x values and a gap under ``COINCIDE`` of the panel's y span at every point,
    so that one line hides the other (fedavgm and fedproxm in gradma_reduced; fedavg and fednova when every
    client takes the same number of steps)."""
    drawn = [m for m in report_style.order(methods) if m in curves]
    ys = [y for m in drawn for y in curves[m]["y"]]
    span = max(ys) - min(ys) if ys else 0.0
    out = []
    for i, m in enumerate(drawn):
        for first in drawn[:i]:
            a, b = curves[first], curves[m]
            if list(a[kind]) == list(b[kind]) and len(a["y"]) == len(b["y"]):
                gap = float(np.max(np.abs(np.subtract(a["y"], b["y"])))) if len(a["y"]) else 0.0
                if gap <= COINCIDE * span:
                    out.append((m, first, gap))
                    break
    return out


def _panel(ax, kind: str, curves: dict, methods: list, styles: dict, title: str, metric: str, absent: dict,
           others_in: str = "see the _all figure"):
    for m in report_style.order(methods):
        if m in curves:
            c = curves[m]
            ax.plot(c[kind], c["y"], label=m, **report_style.plot_kwargs(styles[m], len(c["y"])))
            if c["seeds"] > 1:  # the range over seeds, in the method's colour (no label: not a method)
                ax.fill_between(c[kind], c["lo"], c["hi"], color=styles[m]["color"], alpha=0.12, linewidth=0)
    hidden = [f"{m} lies on {first} (gap \u2264 {gap:.2f} points)" for m, first, gap in coinciding(curves, methods, kind)]
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(KINDS[kind][1], fontsize=8)
    ax.set_ylabel(f"{metric.replace('_', ' ')} (%)", fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    if kind == "uplink_bits" and ax.get_lines():  # an empty panel keeps plain axes
        log_x(ax)
    ax.grid(alpha=0.3)
    gone = [f"{m} ({why})" for m, why in sorted(absent.items()) if m in methods]
    notes = (["not drawn: " + "; ".join(gone)] if gone else []) + hidden
    if not any(m in curves for m in methods) and not gone:  # an empty panel says why it is empty
        ax.text(0.5, 0.5, f"none of these {len(methods)} methods ran in this cell"
                + (f"\n({len(curves)} others did: {others_in})" if curves else ""),
                transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.3")
    if notes:
        ax.text(0.98, 0.02, "\n".join(notes), transform=ax.transAxes, ha="right", va="bottom", fontsize=6,
                color="0.3", wrap=True)


def _panel_title(col, names, about: dict) -> str:
    return column_label(col, names) + (f"\n{about[col]}" if col in about else "")


def legend_title(data: dict, cols) -> str:
    """What a line and a band are, for the legend: the mean over seeds, and their range where there are several."""
    many = any(c["seeds"] > 1 for col in cols for c in data.get(col, {}).values())
    return "line: mean over seeds; band: min to max over seeds" if many else "one seed per method: no spread to show"


def log_x(ax) -> None:
    """A log x scale whose labels never crowd: the powers of ten, and where the data span at most 1.5 decades
    (too few powers to read the axis) also the 2 and 5 multiples (every digit under half a decade).
    matplotlib's default labels up to six minor ticks per decade there (3 x 10^7 and 4 x 10^7 overlapped in
    the matrix's bits panels)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    axis = ax.xaxis
    lo, hi = sorted(ax.get_xlim())
    if not (lo > 0 and math.log10(hi / lo) <= 1.5):
        axis.set_minor_formatter(NullFormatter())
        return

    subs = (2, 5) if math.log10(hi / lo) > 0.5 else tuple(range(2, 10))  # a third of a decade: every digit

    def label(x, _pos):
        exp = math.floor(math.log10(x) + 1e-9)
        mant = round(x / 10 ** exp)
        return f"${mant}\\times10^{{{exp}}}$" if mant in subs and abs(x / 10 ** exp - mant) < 1e-6 else ""

    axis.set_minor_locator(LogLocator(subs=[float(m) for m in subs]))
    axis.set_minor_formatter(FuncFormatter(label))


def _drawn(cols, data, methods) -> list[str]:
    return report_style.order({m for col in cols for m in data.get(col, {}) if m in methods})


def legend_columns(names: list[str], width_in: float, most: int = 6) -> int:
    """Legend columns that fit a figure ``width_in`` inches wide at fontsize 8: an entry takes about 0.8 inch of
    handle and padding plus 0.07 inch per character of its name (a one-panel figure with seven methods in six
    columns was wider than the figure, and the saved PNG cut names off at both ends)."""
    per = 0.8 + 0.07 * max((len(n) for n in names), default=1)
    return max(1, min(len(names), most, int(width_in / per)))


def headline_figure(kind: str, cols, names, data, absent, methods, styles, metric, note: str = "", about=None):
    """One panel per column (one y range), the ``methods`` in their styles, one legend listing every method drawn."""
    plt = _pyplot()
    about = about or {}
    ncol = min(len(cols), 3)
    nrow = math.ceil(len(cols) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.4 * nrow + 1.2), squeeze=False, layout="constrained",
                             sharey=True)
    for ax, col in zip(axes.flat, cols):
        _panel(ax, kind, data.get(col, {}), methods, styles, _panel_title(col, names, about), metric,
               absent.get(col, {}))
    for ax in list(axes.flat)[len(cols):]:
        ax.axis("off")
    drawn = _drawn(cols, data, methods)
    fig.legend(handles=report_style.legend_handles(styles, drawn), loc="outside lower center",
               ncol=legend_columns(drawn, fig.get_figwidth()), fontsize=8, title=legend_title(data, cols),
               title_fontsize=8)
    fig.suptitle("\n".join(x for x in (about.get("title", ""), note) if x), fontsize=9)
    return fig


def multiples_figure(kind: str, cols, names, data, absent, styles, metric, shown, about=None):
    """Every method: one row per MAX_LINES methods (the headline's first, then the others by name; FedAvg in each
    row), one column per column, one y range; each row's legend lists the methods drawn in that row."""
    plt = _pyplot()
    about = about or {}
    methods = report_style.order(styles)
    base = [m for m in methods if report_style.is_baseline(m)]
    lead = sorted(m for m in shown if m not in base)
    others = lead + [m for m in methods if m not in base and m not in lead]
    rows = [base + others[i:i + MAX_LINES] for i in range(0, len(others), MAX_LINES)]
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.6 * len(cols) + 1.8, 2.7 * len(rows) + 0.6),
                             squeeze=False, layout="constrained", sharey=True)
    for i, group in enumerate(rows):
        for j, col in enumerate(cols):
            _panel(axes[i, j], kind, data.get(col, {}), group, styles, _panel_title(col, names, about), metric,
                   absent.get(col, {}), others_in="in the other rows")
        axes[i, -1].legend(handles=report_style.legend_handles(styles, _drawn(cols, data, group)), fontsize=7,
                           loc="upper left", bbox_to_anchor=(1.02, 1.0),
                           title=legend_title(data, cols).replace("; ", "\n"), title_fontsize=6)
    fig.suptitle(f"{about.get('title', '')}\nevery method ({len(methods)}): FedAvg and up to {MAX_LINES} others per "
                 "row, the headline figure's first", fontsize=10)
    return fig


def curve_figures(records: list[dict], metric: str = "test_accuracy", paper: str | None = None,
                  title: str = "") -> dict:
    """{file name: matplotlib Figure} for the records (nothing is written); ``title``: the report's (the suite)."""
    names, cols, data, absent = mean_curves(records, metric)
    if not data:
        return {}
    every = {m for by_m in data.values() for m in by_m} | {m for by_m in absent.values() for m in by_m}
    shown = select_methods(data, paper)
    styles = report_style.method_styles(every)
    many = len(shown) < len({m for by_m in data.values() for m in by_m})
    about = describe(records)
    figs = {}
    for kind, (stem, _) in KINDS.items():
        head = {**about, "title": f"{title + ': ' if title else ''}{metric.replace('_', ' ')} by "
                                  f"{KINDS[kind][1].split(' (')[0]}; {about['all']}"}
        note = (f"{len(shown)} of {len(every)} methods: FedAvg, the paper's methods and the best others by mean final "
                f"{metric.replace('_', ' ')}; every method in {stem}_all.png") if many else ""
        figs[f"{stem}.png"] = headline_figure(kind, cols, names, data, absent, shown, styles, metric, note, head)
        if many:
            figs[f"{stem}_all.png"] = multiples_figure(kind, cols, names, data, absent, styles, metric, shown, head)
    return figs


def plot_curves(records: list[dict], folder: Path, metric: str = "test_accuracy", paper: str | None = None,
                title: str = "") -> list[Path]:
    """Write the figures of ``curve_figures`` into ``folder`` as PNG; return their paths."""
    plt = _pyplot()
    paths = []
    for name, fig in curve_figures(records, metric, paper, title).items():
        p = Path(folder) / name
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)
    return paths
