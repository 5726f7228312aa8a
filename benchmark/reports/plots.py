"""A suite's curves: the headline metric against rounds and against cumulative uplink bits, one panel per
leaderboard column, the mean over seeds of each method's runs that finished ``ok``.

Every method keeps one style (``benchmark.reports.style``) in every panel and every figure of the report,
and each figure has one legend listing every method it draws. A panel says which methods it lacks because
their runs diverged or failed, and which curves lie on top of another method's (``coinciding``). With more
than ``MAX_LINES`` methods the headline figures draw a selection (FedAvg, the suite's paper's own methods, then
the best others by mean final metric over the columns) and say so in their title; ``*_all.png`` then shows every method as small multiples: one row per group of at
most ``MAX_LINES`` methods (FedAvg repeated in each as the reference), one column per leaderboard column.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmark.reports import style as report_style
from benchmark.reports.columns import column_keys, column_label, column_of, column_sort_key, method_label

MAX_LINES = 10  # methods besides FedAvg in one panel; more: a selection, and small multiples of every method
COINCIDE = 0.005  # two curves whose gap stays under this fraction of the panel's y span are drawn as one line
KINDS = {"rounds": ("accuracy_vs_rounds", "round"), "uplink_bits": ("accuracy_vs_uplink_bits", "cumulative uplink bits")}


def _mean_curve(recs: list[dict], metric: str) -> dict | None:
    """The mean over seeds of the runs' curves (truncated to the shortest), against rounds and bits."""
    curves = []
    for r in recs:
        h = [e for e in r["history"] if e.get(metric) is not None]
        cum = np.cumsum([e["bits_up"] for e in r["history"]])
        curves.append(([e["round"] for e in h], [float(cum[e["round"] - 1]) for e in h], [100 * e[metric] for e in h]))
    length = min((len(c[2]) for c in curves), default=0)
    if length == 0:
        return None
    return {"rounds": curves[0][0][:length], "uplink_bits": curves[0][1][:length],
            "y": list(np.mean([c[2][:length] for c in curves], axis=0)), "seeds": len(curves)}


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


def headline_figure(kind: str, cols, names, data, absent, methods, styles, metric, note: str = ""):
    """One panel per column, the ``methods`` in their styles, one legend listing every method drawn."""
    plt = _pyplot()
    ncol = min(len(cols), 3)
    nrow = math.ceil(len(cols) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.4 * nrow + 0.8), squeeze=False, layout="constrained")
    for ax, col in zip(axes.flat, cols):
        _panel(ax, kind, data.get(col, {}), methods, styles, column_label(col, names), metric, absent.get(col, {}))
    for ax in list(axes.flat)[len(cols):]:
        ax.axis("off")
    drawn = _drawn(cols, data, methods)
    fig.legend(handles=report_style.legend_handles(styles, drawn), loc="outside lower center",
               ncol=legend_columns(drawn, fig.get_figwidth()), fontsize=8)
    if note:
        fig.suptitle(note, fontsize=9)
    return fig


def multiples_figure(kind: str, cols, names, data, absent, styles, metric, shown):
    """Every method: one row per MAX_LINES methods in style order (``report_style.slots``: the headline's first;
    FedAvg in each row), one column per column; each row's legend lists the methods drawn in that row."""
    plt = _pyplot()
    methods = report_style.order(styles)
    base = [m for m in methods if report_style.is_baseline(m)]
    others = report_style.slots(methods, shown)
    rows = [base + others[i:i + MAX_LINES] for i in range(0, len(others), MAX_LINES)]
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.6 * len(cols) + 1.6, 2.7 * len(rows)), squeeze=False,
                             layout="constrained")
    for i, group in enumerate(rows):
        for j, col in enumerate(cols):
            _panel(axes[i, j], kind, data.get(col, {}), group, styles, column_label(col, names), metric,
                   absent.get(col, {}), others_in="in the other rows")
        axes[i, -1].legend(handles=report_style.legend_handles(styles, _drawn(cols, data, group)), fontsize=7,
                           loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"every method ({len(methods)}): FedAvg and up to {MAX_LINES} others per row, the headline figure's "
                 "first", fontsize=10)
    return fig


def curve_figures(records: list[dict], metric: str = "test_accuracy", paper: str | None = None) -> dict:
    """{file name: matplotlib Figure} for the records (nothing is written)."""
    names, cols, data, absent = mean_curves(records, metric)
    if not data:
        return {}
    every = {m for by_m in data.values() for m in by_m} | {m for by_m in absent.values() for m in by_m}
    shown = select_methods(data, paper)
    styles = report_style.method_styles(every, first=shown)
    many = len(shown) < len({m for by_m in data.values() for m in by_m})
    figs = {}
    for kind, (stem, _) in KINDS.items():
        note = (f"{len(shown)} of {len(every)} methods: FedAvg, the paper's methods and the best others by mean final "
                f"{metric.replace('_', ' ')}; every method in {stem}_all.png") if many else ""
        figs[f"{stem}.png"] = headline_figure(kind, cols, names, data, absent, shown, styles, metric, note)
        if many:
            figs[f"{stem}_all.png"] = multiples_figure(kind, cols, names, data, absent, styles, metric, shown)
    return figs


def plot_curves(records: list[dict], folder: Path, metric: str = "test_accuracy", paper: str | None = None) -> list[Path]:
    """Write the figures of ``curve_figures`` into ``folder`` as PNG; return their paths."""
    plt = _pyplot()
    paths = []
    for name, fig in curve_figures(records, metric, paper).items():
        p = Path(folder) / name
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)
    return paths
